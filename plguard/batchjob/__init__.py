"""``plguard batch``: guard a dataset of requests (and optional responses) into traces."""

from plguard.batchjob.io import Row, TraceSink, read_rows
from plguard.batchjob.job import BatchSummary, run_batch

__all__ = ["BatchSummary", "Row", "TraceSink", "read_rows", "run_batch"]
