"""Datasets in and traces out for ``plguard batch``: JSONL, CSV or Parquet.

Input problems (an unknown format, a missing column, a duplicate id, a prompt that is
not text or messages) are named with file and line before any model loads. Output is
written as the run goes: a JSONL output *is* the journal (one fsync'd line per row); a
Parquet output cannot be appended to, so its rows go to ``OUTPUT.partial.jsonl`` first
and the Parquet file is written (atomically) when the run completes. Either way a
rerun skips the rows already written, except rows written with an error: those are
retried, and the retry replaces the failed row (the finished file holds each id once).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plguard.errors import InputError, did_you_mean
from plguard.records.store import JsonlStore, is_error

INPUT_FORMATS = (".jsonl", ".ndjson", ".csv", ".parquet")
OUTPUT_FORMATS = (".jsonl", ".parquet")
# Nested fields are JSON text in Parquet, so every trace has one flat, stable schema.
_NESTED = ("prompt", "categories", "category_scores", "predicates", "rules", "timings_s",
           "trace")


@dataclass(frozen=True)
class Row:
    """One input row: its id, where it came from, the request and an optional response."""

    id: str
    where: str
    prompt: Any  # a string or a list of {role, content} messages
    response: str | None


def _fmt(path: Path, allowed: tuple[str, ...], what: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in allowed:
        raise InputError(f"{path}: unsupported {what} format '{suffix or '(none)'}'; "
                         f"use one of {', '.join(allowed)}")
    return suffix


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, record) for every row of a JSONL, CSV or Parquet file."""
    fmt = _fmt(path, INPUT_FORMATS, "input")
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    if fmt == ".csv":
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            for rec in reader:
                yield f"{path}:{reader.line_num}", dict(rec)
    elif fmt == ".parquet":
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        except ImportError:
            raise InputError(f"{path}: reading Parquet needs pyarrow "
                             "(pip install pyarrow)") from None
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise InputError(f"{path}: not a readable Parquet file: {exc}") from None
        for i, rec in enumerate(table.to_pylist()):
            yield f"{path}:row {i + 1}", rec
    else:
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise InputError(f"{path}:{n}: not valid JSON: {exc}") from None
                if not isinstance(rec, dict):
                    raise InputError(f"{path}:{n}: expected a JSON object per line, got "
                                     f"{type(rec).__name__}")
                yield f"{path}:{n}", rec


def read_rows(path: str | Path, *, prompt_column: str = "prompt",
              response_column: str | None = None, id_column: str | None = None) -> list[Row]:
    """The rows of ``path``, validated.

    ``response_column``/``id_column`` None use the columns named ``response``/``id``
    when present; an empty response cell means: draft one.
    """
    p = Path(path)
    rows: list[Row] = []
    seen: dict[str, str] = {}
    for where, rec in _records(p):
        cols = list(rec)
        if prompt_column not in rec:
            raise InputError(f"{where}: no prompt column '{prompt_column}'"
                             f"{did_you_mean(prompt_column, cols)}; columns: "
                             f"{', '.join(cols) or '(none)'} (choose with --prompt-column)")
        for opt, flag in ((response_column, "--response-column"), (id_column, "--id-column")):
            if opt is not None and opt not in rec:
                raise InputError(f"{where}: no column '{opt}'{did_you_mean(opt, cols)} "
                                 f"(given by {flag}); columns: {', '.join(cols)}")
        prompt = rec[prompt_column]
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt)):
            raise InputError(f"{where}: column '{prompt_column}' must hold text or a list of "
                             f"messages, got {type(prompt).__name__}")
        resp = rec.get(response_column or "response")
        if resp is not None and not isinstance(resp, str):
            raise InputError(f"{where}: column '{response_column or 'response'}' must hold "
                             f"text, got {type(resp).__name__}")
        rid_raw = rec.get(id_column or "id")
        rid = str(rid_raw) if rid_raw not in (None, "") else f"row-{len(rows) + 1}"
        if rid in seen:
            raise InputError(f"{where}: duplicate id '{rid}' (first at {seen[rid]}); ids "
                             "must be unique for a run to resume")
        seen[rid] = where
        rows.append(Row(rid, where, prompt, resp if resp else None))
    if not rows:
        raise InputError(f"{p}: no rows")
    return rows


class TraceSink:
    """The output file: which ids are done, durable appends, and the final Parquet write."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.format = _fmt(self.path, OUTPUT_FORMATS, "output")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.previous: list[dict[str, Any]] = []
        if self.format == ".jsonl":
            self.journal = JsonlStore(self.path)
        else:
            if self.path.exists():
                self.previous = _read_parquet(self.path)
            self.journal = JsonlStore(self.path.with_name(self.path.name + ".partial.jsonl"))
        self.done = ({str(r["id"]) for r in self.previous if not is_error(r)}
                     | {rid for rid in self.journal.records if rid in self.journal})
        # Rows that failed before: a rerun retries them.
        self.failed = ({str(r["id"]) for r in self.previous if is_error(r)}
                       | set(self.journal.failed)) - self.done

    def __contains__(self, rid: object) -> bool:
        return rid in self.done

    def append(self, record: dict[str, Any]) -> None:
        """Write one trace record durably (a repeat of a done id is ignored)."""
        rid = str(record["id"])
        if rid in self.done:
            return
        self.journal.append(record)
        if not is_error(record):
            self.done.add(rid)

    def finish(self) -> None:
        """Write the Parquet file (previous rows + this run's) and drop the journal.

        A retried row replaces its failed one; a JSONL output drops the failed lines.
        """
        if self.format != ".parquet":
            self.journal.compact()
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = ([r for r in self.previous if str(r["id"]) not in self.journal.records]
                + [to_flat(r) for r in self.journal])
        tmp = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, self.path)
        self.journal.path.unlink(missing_ok=True)


def to_flat(rec: dict[str, Any]) -> dict[str, Any]:
    """A trace record with its nested fields as JSON text (the Parquet row)."""
    return {k: (json.dumps(v, ensure_ascii=False)
                if k in _NESTED and not isinstance(v, str) and v is not None else v)
            for k, v in rec.items()}


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_table(path).to_pylist())
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputError(f"{path}: the existing output is not a readable Parquet file "
                         f"({exc}); move it away or choose another output") from None


__all__ = ["INPUT_FORMATS", "OUTPUT_FORMATS", "Row", "TraceSink", "read_rows", "to_flat"]
