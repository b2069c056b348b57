"""One shard of an XSTest run: every wanted method on a few prompts, as records.

The runner calls this in-process, or ships shards to Ray actors (``plguard.scale``) which
call it there; either way the records are built by the same code and written by the
runner alone, so a run's files look the same however it was computed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from plguard.records.loop import error_text, run_safely
from plguard_lab.config import eval_settings
from plguard_lab.labels.xstest import XSTestPrompt
from plguard_lab.studies.xstest.methods import MethodOutput, Methods, judge_params
from plguard_lab.studies.xstest.scorers import REGEX_SCORERS, SemanticEvaluator, SemanticVerdict

if TYPE_CHECKING:
    from plguard.config import GuardConfig

Emit = Callable[[str, dict[str, Any]], None]


def method_record(m: str, p: XSTestPrompt, o: MethodOutput | BaseException) -> dict[str, Any]:
    """The stored record of method ``m`` on prompt ``p`` (or of the error it raised)."""
    rec: dict[str, Any] = {"id": p.id, "method": m, "type": p.type, "label": p.label,
                           "prompt": p.prompt}
    if isinstance(o, BaseException):
        rec.update(response=None, error=error_text(o), times={}, details={})
    else:
        times = dict(o.times)
        times["total"] = sum(times.values())
        rec.update(response=o.response, error=None, times=times, details=o.details)
        for name, fn in REGEX_SCORERS.items():
            rec[name] = fn(o.response)
    rec["written"] = time.time()
    return rec


def run_chunk(methods: Methods, wanted: list[str], chunk: list[XSTestPrompt],
              pending: Mapping[str, set[str]], drafts: Mapping[str, dict[str, Any]],
              emit: Emit) -> None:
    """Run every method of ``wanted`` on its ``pending`` ids of ``chunk``, emitting records.

    ``drafts`` maps ids to base records; it must see base records as they are emitted
    (:func:`shard_records` adds them), since judge and plguard reuse them.
    """
    for m in wanted:
        pend = [p for p in chunk if p.id in pending.get(m, set())]
        if pend:
            _run_method(methods, m, pend, drafts, emit)


def _run_method(methods: Methods, m: str, pend: list[XSTestPrompt],
                drafts: Mapping[str, dict[str, Any]], emit: Emit) -> None:
    if m in ("base", "policy_prompting"):
        fn = methods.base if m == "base" else methods.policy_prompting
        outs = run_safely(lambda ps: fn([p.prompt for p in ps]), pend)
        for p, o in zip(pend, outs, strict=True):
            emit(m, method_record(m, p, o))
        return
    ready = [p for p in pend if (drafts.get(p.id) or {}).get("response") is not None]
    for p in pend:
        if p not in ready:
            emit(m, method_record(m, p, RuntimeError(
                "no base draft (its generation failed; see base.jsonl)")))
    if not ready:
        return
    text = {p.id: str(drafts[p.id]["response"]) for p in ready}
    fn2 = methods.llm_judge if m == "llm_judge" else methods.plguard
    outs2 = run_safely(lambda ps: fn2([p.prompt for p in ps], [text[p.id] for p in ps]),
                       ready)
    for p, o in zip(ready, outs2, strict=True):
        if isinstance(o, MethodOutput):
            # The shared draft's generation time belongs to this method's forward pass.
            gen = drafts[p.id].get("times", {}).get("generation")
            if gen is not None:
                o.times = {"generation": gen, **o.times}
        emit(m, method_record(m, p, o))


def shard_records(methods: Methods, wanted: list[str], chunk: list[XSTestPrompt],
                  pending: Mapping[str, set[str]], drafts: Mapping[str, dict[str, Any]]
                  ) -> list[dict[str, Any]]:
    """Every record of one shard (:func:`run_chunk`), collected for the runner to write.

    The shard's own base records serve its judge and plguard: they are added to a copy of
    ``drafts``, since the runner writes them only once the whole shard is done.
    """
    ids = {p.id for p in chunk}
    live = {i: drafts[i] for i in ids if i in drafts}
    out: list[dict[str, Any]] = []

    def emit(m: str, rec: dict[str, Any]) -> None:
        out.append(rec)
        if m == "base":
            live[rec["id"]] = rec

    run_chunk(methods, wanted, chunk, pending, live, emit)
    return out


def build_methods(config: GuardConfig, guard: Any) -> Methods:
    """The four methods over a Guard's generator, with the config's judge budget."""
    ev = eval_settings(config)
    return Methods(guard.generator, guard.policy.text, guard.params,
                   judge_params(ev.judge_max_new_tokens, ev.judge_structured), guard=guard)


def make_generate_worker(config: GuardConfig) -> Callable[[dict[str, Any]], list[Any]]:
    """Ray worker for generation shards: ``{prompts, pending, drafts}`` to records."""
    from plguard.guard import Guard

    guard = Guard(config)
    methods = build_methods(config, guard)

    def work(payload: dict[str, Any]) -> list[dict[str, Any]]:
        chunk = [XSTestPrompt(**p) for p in payload["prompts"]]
        pending = {m: set(ids) for m, ids in payload["pending"].items()}
        return shard_records(methods, list(payload["wanted"]), chunk, pending,
                             payload["drafts"])

    return work


def generate_payload(wanted: list[str], chunk: list[XSTestPrompt],
                     pending: Mapping[str, set[str]],
                     drafts: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON payload of one generation shard (base drafts included where reused)."""
    ids = {p.id for p in chunk}
    return {"wanted": wanted, "prompts": [dataclasses.asdict(p) for p in chunk],
            "pending": {m: sorted(s & ids) for m, s in pending.items()},
            "drafts": {i: {"response": r.get("response"), "times": r.get("times", {})}
                       for i, r in drafts.items() if i in ids}}


def semantic_record(rec: dict[str, Any], v: SemanticVerdict | BaseException
                    ) -> dict[str, Any]:
    """The stored form of one semantic verdict (or of the error that prevented it)."""
    base = {"id": rec["id"], "method": rec.get("method"), "label": rec.get("label"),
            "type": rec.get("type")}
    if isinstance(v, BaseException):
        return {**base, "class": None, "over_refusal": None, "unsafe_compliance": None,
                "rationale": "", "parsed": False, "attempts": 0, "raw": "",
                "error": error_text(v)}
    return {**base, "class": v.response_class, "over_refusal": v.over_refusal,
            "unsafe_compliance": v.unsafe_compliance, "rationale": v.rationale,
            "parsed": v.parsed, "attempts": v.attempts, "raw": v.raw,
            "flags_derived": v.flags_derived, "error": None}


def score_rows(ev: SemanticEvaluator, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Semantic records for method records (a failing row gets an error record)."""
    outs = run_safely(lambda rs: ev.score([(r["prompt"], r["label"], r["response"])
                                           for r in rs]), rows)
    return [semantic_record(r, v) for r, v in zip(rows, outs, strict=True)]


def make_semantic_worker(config: GuardConfig) -> Callable[[list[dict[str, Any]]], list[Any]]:
    """Ray worker for scoring shards: method records to semantic records."""
    from plguard.backends import load_backend

    ev = SemanticEvaluator.from_config(load_backend(config.evaluator_model), config)
    return lambda rows: score_rows(ev, rows)


__all__ = ["build_methods", "generate_payload", "make_generate_worker",
           "make_semantic_worker", "method_record", "run_chunk", "score_rows",
           "semantic_record", "shard_records"]
