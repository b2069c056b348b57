"""``plguard batch``: guard a dataset, locally or on a Ray cluster, resumably.

Rows are cut into shards of ``generator.batch_size`` in input order; a shard is one
``Guard.batch`` call, whether it runs here or in a Ray actor, so both paths give the
same traces. A shard that raises is redone row by row, and a row that still fails is
written with its error (counted, never dropped), so one bad row costs only itself.
Skipping done rows, retrying failed ones and writing each finished shard is the shared
loop's (:func:`~plguard.records.loop.unfinished`, :func:`~plguard.records.loop.append_shards`)
over the :class:`~plguard.batchjob.io.TraceSink`, as for every study.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plguard.batchjob.io import Row, TraceSink, read_rows
from plguard.config import GuardConfig
from plguard.records.loop import MapCounts, append_shards, run_safely, unfinished
from plguard.records.store import exclusive, is_error
from plguard.scale import RayOptions, run_shards_local, run_shards_ray
from plguard.types import GuardResult

FACTORY = "plguard.batchjob.job:make_worker"


@dataclass
class BatchSummary:
    """What one ``plguard batch`` invocation did."""

    output: Path
    rows: int = 0
    skipped: int = 0
    retried: int = 0  # rows a previous run wrote with an error, guarded again
    written: int = 0
    errors: int = 0
    actions: dict[str, int] = field(default_factory=dict)


def trace_record(row: Row, result: GuardResult) -> dict[str, Any]:
    """One output row: the headline fields flat, the full trace nested."""
    d = result.decision
    return {
        "id": row.id, "prompt": row.prompt, "response_given": row.response is not None,
        "draft": result.draft, "final": result.final, "action": d.action,
        "reason": d.reason, "repaired": result.repaired,
        "fallback_used": result.fallback_used,
        "unsafe_rule": d.strongest_unsafe[0], "p_unsafe": d.strongest_unsafe[1],
        "over_refusal_rule": d.strongest_over_refusal[0],
        "p_over_refusal": d.strongest_over_refusal[1],
        "categories": list(d.categories), "category_scores": dict(d.category_scores),
        "llama_guard": d.llama_guard, "predicates": result.grounding.probs,
        "rules": dict(result.policy.probs),
        "timings_s": dict(result.timings_s), "model": result.grounding.model,
        "policy": result.policy.policy, "error": None,
        "trace": dataclasses.asdict(result),
    }


def error_record(row: Row, exc: BaseException) -> dict[str, Any]:
    """The output row of a row that could not be guarded."""
    return {"id": row.id, "prompt": row.prompt, "response_given": row.response is not None,
            "draft": None, "final": None, "action": None, "reason": None,
            "repaired": None, "fallback_used": None, "unsafe_rule": None, "p_unsafe": None,
            "over_refusal_rule": None, "p_over_refusal": None, "categories": None,
            "category_scores": None, "llama_guard": None, "predicates": None,
            "rules": None, "timings_s": None, "model": None, "policy": None,
            "error": f"{row.where}: {type(exc).__name__}: {exc}"[:2000], "trace": None}


def make_worker(config: GuardConfig) -> Any:
    """The per-process worker: one Guard; a shard payload is a list of row dicts."""
    from plguard.guard import Guard

    guard = Guard(config)

    def work(payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows = [Row(**r) for r in payload]
        outs = run_safely(lambda rs: guard.batch([r.prompt for r in rs],
                                                 [r.response for r in rs]), rows)
        return [trace_record(r, o) if isinstance(o, GuardResult) else error_record(r, o)
                for r, o in zip(rows, outs, strict=True)]

    return work


def run_batch(config: GuardConfig, input_path: str | Path, output_path: str | Path, *,
              prompt_column: str = "prompt", response_column: str | None = None,
              id_column: str | None = None, ray: RayOptions | None = None,
              limit: int | None = None, progress: bool = True) -> BatchSummary:
    """Guard every row of ``input_path`` not yet in ``output_path``; see the module doc."""
    rows = read_rows(input_path, prompt_column=prompt_column,
                     response_column=response_column, id_column=id_column)
    if limit is not None:
        rows = rows[:limit]
    out = Path(output_path)
    with exclusive(out.with_name(f".{out.name}.lock"), out, "choose another output"):
        sink = TraceSink(out)
        todo, counts = unfinished(sink, rows, lambda r: r.id)
        summary = BatchSummary(out, rows=len(rows), skipped=counts.skipped,
                               retried=counts.retried)
        if todo:
            _guard_rows(config, todo, sink, summary, counts, ray, progress)
        sink.finish()
        return summary


def _guard_rows(config: GuardConfig, todo: list[Row], sink: TraceSink, summary: BatchSummary,
                counts: MapCounts, ray: RayOptions | None, progress: bool) -> None:
    from plguard.policy import load_policy

    load_policy(config.policy)  # a policy error surfaces before any model or actor starts
    bs = config.generator.batch_size
    shards = [[dataclasses.asdict(r) for r in todo[i:i + bs]] for i in range(0, len(todo), bs)]
    results: Iterator[list[dict[str, Any]]] = (
        run_shards_ray(FACTORY, config, shards, ray) if ray is not None
        else run_shards_local(FACTORY, config, shards))

    def tally(rec: dict[str, Any]) -> None:
        if not is_error(rec):
            a = str(rec["action"])
            summary.actions[a] = summary.actions.get(a, 0) + 1

    append_shards(results, {"": sink}, lambda _: "", {"": counts}, total=len(todo),
                  desc="batch", unit="row", progress=progress, on_append=tally)
    summary.written, summary.errors = counts.written, counts.errors


__all__ = ["BatchSummary", "error_record", "make_worker", "run_batch", "trace_record"]
