"""Ground labelled (prompt, response) pairs once for several policies, and judge them.

Every policy is a set of questions about the same pair, so the questions of all policies
are asked together: one grounding prompt prefix per pair (request and response), forwarded
once for all of them, and questions worded identically in two bundles asked once. The
records keep each question's raw P(True) and log-probabilities, so calibration, rules,
thresholds and metrics are all computed afterwards without a model
(:mod:`plguard_lab.studies.quality.fit`, :mod:`plguard_lab.studies.quality.report`).

Run folder::

    manifest.json      config, model identity, template, policies, split, sessions
    grounding.jsonl    one record per pair: raw scores of every question
    judge.jsonl        the LLM judge's verdict per pair (optional)

Both files are written per batch (flush + fsync per record) and a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plguard.config import GuardConfig
from plguard.errors import ConfigError
from plguard.policy import Policy, load_policy
from plguard.records.loop import MapCounts, error_text, map_into
from plguard.records.store import (
    JsonlStore,
    check_scoped_configs,
    exclusive,
    git_commit,
    now_iso,
    package_versions,
    read_manifest,
    write_json_atomic,
)
from plguard.types import GenerationParams, PredicateSpec
from plguard_lab.config import eval_settings, lab_dump
from plguard_lab.labels.splits import check_split, in_split, load_split
from plguard_lab.labels.xstest import LabelledCompletion, load_completions, seeded_order

QUESTIONS_PER_CALL = 256
PART_KEYS: dict[str, tuple[str, ...]] = {
    "grounding": ("generator", "grounder", "grounding"),
    "judge": ("generator", "generation", "policy", "eval.judge_max_new_tokens",
              "eval.judge_structured"),
}


@dataclass(frozen=True)
class UnionPlan:
    """The distinct questions of several policies and where each policy finds its own."""

    specs: tuple[PredicateSpec, ...]  # named by key: "<first policy>.<predicate>"
    keys: dict[str, dict[str, str]]  # policy name -> predicate name -> key


def union_plan(policies: Sequence[Policy]) -> UnionPlan:
    """One spec per distinct way of asking (scope, question, paraphrases, examples, windows)."""
    seen: dict[tuple[Any, ...], str] = {}
    specs: list[PredicateSpec] = []
    keys: dict[str, dict[str, str]] = {}
    for pol in policies:
        keys[pol.name] = {}
        for s in pol.predicates:
            sig = (s.scope, s.question, s.paraphrases, s.examples, s.windows)
            if sig not in seen:
                seen[sig] = f"{pol.name}.{s.name}"
                specs.append(dataclasses.replace(s, name=seen[sig]))
            keys[pol.name][s.name] = seen[sig]
    return UnionPlan(tuple(specs), keys)


def labelled_items(split: str, limit: int | None, seed: int) -> list[LabelledCompletion]:
    """The labelled completions of ``split``, a seeded stratified subset when ``limit``.

    In seeded order (:func:`seeded_order`), the order they are grounded in, so a run
    stopped after k pairs holds exactly the k-pair subset and can be reported as one.
    """
    table = load_split()
    items = [c for c in load_completions() if in_split(c.id, check_split(split), table)]
    order = seeded_order(items, seed)
    return [items[i] for i in (order if limit is None else order[:limit])]


@dataclass
class GroundSummary:
    """What one invocation did."""

    out_dir: Path
    n: int
    grounded: int
    judged: int
    errors: int


def ground_labelled(config: GuardConfig, out_dir: str | Path, *, policies: Sequence[str],
                    split: str = "dev", limit: int | None = None, judge: bool = True,
                    progress: bool = True, grounder: Any = None,
                    generator: Any = None) -> GroundSummary:
    """Ground (and judge) the labelled pairs of ``split`` for ``policies``; resumable.

    ``grounder``/``generator`` replace the configured models (tests pass loaded ones).
    Calibration is never applied here: records hold raw scores.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    job = _Job(tuple(policies), split, limit, judge, progress, grounder, generator)
    with exclusive(out / ".run.lock", out, "use another --out folder"):
        return _run(config, out, job)


@dataclass(frozen=True)
class _Job:
    """What one ``ground_labelled`` call asks for (its keyword arguments, once)."""

    policies: tuple[str, ...]
    split: str
    limit: int | None
    judge: bool
    progress: bool
    grounder: Any  # a loaded backend replacing the configured grounder, or None
    generator: Any  # likewise for the generator (the judge)


def _run(config: GuardConfig, out: Path, job: _Job) -> GroundSummary:
    from plguard.backends import load_backend
    from plguard.grounding import Grounder
    from plguard_lab.studies.xstest.runner import model_identity

    gcfg = config.grounding.model_copy(update={"calibration": None})
    cfg_json = lab_dump(config)
    cfg_json["grounding"]["calibration"] = None
    policies = [load_policy(p) for p in job.policies]
    plan = union_plan(policies)
    ev = eval_settings(config)  # checked before any work
    items = labelled_items(job.split, job.limit, ev.seed)
    mpath = out / "manifest.json"
    previous = read_manifest(mpath)
    gstore, jstore = JsonlStore(out / "grounding.jsonl"), JsonlStore(out / "judge.jsonl")
    recorded = [k for k, s in (("grounding", gstore), ("judge", jstore)) if len(s)]
    parts = check_scoped_configs(mpath, previous, cfg_json, PART_KEYS, recorded)
    had = (previous or {}).get("policies") or []
    missing = sorted({p.id for p in policies} - set(had))
    if len(gstore) and missing:
        raise ConfigError(f"{out} holds groundings for {', '.join(had)}, not for "
                          f"{', '.join(missing)} (or their questions changed); ground those "
                          "into another --out folder")
    shared = config.grounder in (None, config.generator)
    jtodo = [c for c in items if c.uid not in jstore] if job.judge else []
    # The generator is loaded only when it is needed: now if it also grounds, else only
    # after grounding and only to judge (a vLLM engine held idle through hours of
    # grounding would take memory every other job on the machine needs).
    gen = job.generator or (load_backend(config.generator) if shared else None)
    gb = job.grounder or (gen if shared else load_backend(config.grounder_model))
    assert gb is not None  # shared implies gen was loaded
    grounder = Grounder(gb, plan.specs, gcfg)
    session = {"session": uuid.uuid4().hex[:12], "started": now_iso(), "ended": None,
               "argv": sys.argv[1:], "split": job.split, "limit": job.limit}
    prev = dict(previous or {})
    sessions = [*prev.get("sessions", []), session]
    manifest = {
        "study": "labelled pairs grounded for several policies (plguard_lab.studies.quality)",
        "config": cfg_json, "part_configs": parts,
        "policies": sorted({*(prev.get("policies") or []), *(p.id for p in policies)}),
        "keys": {**(prev.get("keys") or {}), **plan.keys},
        "split": job.split, "n_pairs": max(int(prev.get("n_pairs", 0)), len(items)),
        "seed": ev.seed, "template_version": grounder.template_version,
        "grounder": model_identity(gb, config.grounder_model.path),
        "generator": (model_identity(gen, config.generator.path) if gen is not None
                      else prev.get("generator")),
        "versions": package_versions(), "git": git_commit(), "sessions": sessions}
    write_json_atomic(mpath, manifest)
    # Pairs per grounding call, flushed after each. A call asks every question of each pair
    # (59 for the five quality bundles: a minute a pair for a 1.5B model on 2 cores), so
    # calls are sized by questions, about 256 (plenty for a batching backend), not by the
    # generation batch: a stopped run then loses minutes, not a quarter of an hour.
    bs = max(1, min(config.grounder_model.batch_size, QUESTIONS_PER_CALL // len(plan.specs)))
    g = _ground_pairs(grounder, gstore, items, bs, job.split, job.progress)
    summary = GroundSummary(out, len(items), g.written - g.errors, 0, g.errors)
    if jtodo:
        if gen is None:
            gen = load_backend(config.generator)
            manifest["generator"] = model_identity(gen, config.generator.path)
            write_json_atomic(mpath, manifest)
        jc = _judge_pairs(config, gen, jstore, jtodo, job.split, job.progress)
        summary.judged = jc.written - jc.errors
    session.update(ended=now_iso(), grounded=summary.grounded, judged=summary.judged,
                   errors=summary.errors)
    write_json_atomic(mpath, manifest)
    return summary


def _ground_pairs(grounder: Any, store: JsonlStore, items: Sequence[LabelledCompletion],
                  chunk: int, split: str, progress: bool) -> MapCounts:
    """Raw scores of every question on the pairs ``store`` lacks (or holds failed)."""
    def record(c: LabelledCompletion, g: Any) -> dict[str, Any]:
        rec = _record(c, split)
        if isinstance(g, BaseException):
            rec["error"] = error_text(g)
        else:
            rec["scores"] = {s.name: {"p": s.p_true, "lt": s.logprob_true,
                                      "lf": s.logprob_false, "cut": s.truncated}
                             for s in g.scores}
        return rec

    return map_into(store, items, lambda c: c.uid,
                    lambda cs: grounder.ground([(c.prompt, c.completion) for c in cs]),
                    record, chunk=chunk, desc="ground", unit="pair", progress=progress)


def _judge_pairs(config: GuardConfig, gen: Any, store: JsonlStore,
                 items: Sequence[LabelledCompletion], split: str, progress: bool
                 ) -> MapCounts:
    """The LLM judge's verdict on each of ``items`` (the baseline of the report)."""
    from plguard_lab.studies.xstest.methods import Methods, judge_params

    gc, ev = config.generation, eval_settings(config)
    methods = Methods(gen, load_policy(config.policy).text,
                      GenerationParams(max_new_tokens=gc.max_new_tokens,
                                       temperature=gc.temperature),
                      judge_params(ev.judge_max_new_tokens, ev.judge_structured))

    def record(c: LabelledCompletion, j: Any) -> dict[str, Any]:
        rec = _record(c, split)
        if isinstance(j, BaseException):
            rec["error"] = error_text(j)
        else:
            rec.update(verdict=j.verdict, parsed=j.parsed, rationale=j.rationale, raw=j.raw,
                       constrained=j.constrained, parse=j.parse)
        return rec

    return map_into(store, items, lambda c: c.uid,
                    lambda cs: methods.judge([c.prompt for c in cs],
                                             [c.completion for c in cs])[0],
                    record, chunk=config.generator.batch_size, desc="judge", unit="pair",
                    progress=progress)


def _record(c: LabelledCompletion, split: str) -> dict[str, Any]:
    return {"id": c.uid, "prompt_id": c.id, "split": split, "model": c.model, "type": c.type,
            "label": c.label, "final_label": c.final_label, "error": None}


__all__ = ["GroundSummary", "UnionPlan", "ground_labelled", "labelled_items", "union_plan"]
