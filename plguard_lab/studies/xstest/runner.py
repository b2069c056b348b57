"""The resumable XSTest runner: four methods, one JSONL per method, then offline scoring.

Layout of a run folder::

    manifest.json              config, versions, model identity + file hash, git, sessions
    base.jsonl ...             one record per prompt and method (response, times, details)
    semantic/<method>.jsonl    the semantic evaluator's verdict per record

Prompts are processed in batches of ``generator.batch_size``; for each batch every method
runs on its unfinished ids and the batch's records are fsync'd once it is done. The base
drafts live in ``base.jsonl`` and are reused by ``llm_judge`` and ``plguard``, also across
reruns. An exception on a batch is retried example by example; an example that still
fails is recorded with its error and counted, and the run goes on (a rerun retries it).
The loop is the shared one (:mod:`plguard.records.loop`), whether shards run here or on
Ray actors.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plguard.config import GuardConfig
from plguard.errors import ConfigError, did_you_mean
from plguard.records.loop import MapCounts, append_shards, error_text, unfinished
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
from plguard_lab.config import eval_settings, lab_dump
from plguard_lab.labels.xstest import XSTestPrompt, data_dir, load_prompts
from plguard_lab.studies.xstest.methods import METHODS
from plguard_lab.studies.xstest.scorers import SemanticEvaluator
from plguard_lab.studies.xstest.shards import (
    build_methods,
    generate_payload,
    score_rows,
    shard_records,
)

if TYPE_CHECKING:
    from plguard.backends.base import Backend
    from plguard.config import ModelConfig
    from plguard.guard import Guard
    from plguard.scale import RayOptions

SCORERS: tuple[str, ...] = ("regex", "regex_extended", "semantic")
# The config keys each part of a run depends on. A resumed run must keep the values of a
# part that already has records; the others may change (new thresholds or a calibration
# for plguard after the drafts exist, without regenerating them).
_GEN = ("generator", "generation")
PART_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "base": _GEN,
    # policy_id: the config names a policy, whose text may change under the same name.
    "policy_prompting": (*_GEN, "policy", "policy_id"),
    "llm_judge": (*_GEN, "policy", "policy_id", "eval.judge_max_new_tokens",
                  "eval.judge_structured"),
    # calibration_id: likewise the calibration file (name@digest), refit under the same path.
    "plguard": (*_GEN, "grounder", "policy", "policy_id", "calibration_id", "thresholds",
                "grounding", "repair"),
    **{f"semantic/{m}": ("generator", "evaluator", "eval.evaluator_max_new_tokens",
                         "eval.evaluator_structured") for m in METHODS},
}
GENERATE_FACTORY = "plguard_lab.studies.xstest.shards:make_generate_worker"
SEMANTIC_FACTORY = "plguard_lab.studies.xstest.shards:make_semantic_worker"


@dataclass
class RunSummary:
    """What one invocation did."""

    out_dir: Path
    written: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    scored: dict[str, int] = field(default_factory=dict)
    unparsed: dict[str, int] = field(default_factory=dict)


def check_methods(methods: Sequence[str]) -> list[str]:
    """Validated method names in canonical order; judge/plguard imply the shared base."""
    for m in methods:
        if m not in METHODS:
            raise ConfigError(f"unknown method '{m}'{did_you_mean(m, METHODS)}; "
                              f"known methods: {', '.join(METHODS)}")
    wanted = set(methods)
    if wanted & {"llm_judge", "plguard"}:
        wanted.add("base")  # their drafts are the base answers, stored in base.jsonl
    return [m for m in METHODS if m in wanted]


def model_identity(backend: Any, path: str, cfg: ModelConfig | None = None) -> dict[str, Any]:
    """The model's id, resolved folder and content hash (errors recorded, not raised).

    A converted GGUF file is identified by the GGUF file's sha256 (the conversion is a
    function of it); other folders by the hash of their weight files. A model behind a
    server (backend ``openai``) is identified by the server instead: its URL, the served
    model's name and what its ``/v1/models`` says (from the loaded backend, or only from
    ``cfg`` where none is loaded here, as on a Ray driver).
    """
    out: dict[str, Any] = {"model_id": getattr(backend, "model_id", None), "path": path}
    remote = getattr(backend, "remote_identity", None)
    if callable(remote) or (cfg is not None and cfg.backend == "openai"):
        out["remote"] = (remote() if callable(remote) else
                         {"base_url": cfg.base_url, "served_model": cfg.served_model,
                          "logprobs_mode": cfg.logprobs_mode} if cfg is not None else None)
        out["sha256"] = None
        out["hash_error"] = "the weights live on the server (see remote)"
        return out
    try:
        from plguard.models import model_source, resolve_model_path

        local = resolve_model_path(path, download=False)
        out["resolved_path"] = local
        out.update(model_source(local))
    except Exception as exc:  # a scripted or remote backend has no local weights
        out["sha256"] = None
        out["hash_error"] = error_text(exc)
    return out


class XSTestRun:
    """One run folder: builds the methods lazily, writes records, scores them."""

    def __init__(self, config: GuardConfig, out_dir: str | Path, *,
                 methods: Sequence[str] = METHODS, scorers: Sequence[str] = SCORERS,
                 limit: int | None = None, split: str = "all", progress: bool = True,
                 guard: Guard | None = None, evaluator: Backend | None = None,
                 prompts: Sequence[XSTestPrompt] | None = None,
                 ray: RayOptions | None = None) -> None:
        for s in scorers:
            if s not in SCORERS:
                raise ConfigError(f"unknown scorer '{s}'{did_you_mean(s, SCORERS)}; "
                                  f"known scorers: {', '.join(SCORERS)}")
        self.config = config
        self.out = Path(out_dir)
        self.methods = check_methods(methods)
        self.scorers = list(scorers)
        self.limit = limit
        self.progress = progress
        self._guard = guard
        self._evaluator = evaluator
        self.ray = ray
        if prompts is None:
            from plguard_lab.labels.splits import check_split, in_split, load_split

            table = load_split() if check_split(split) != "all" else {}
            prompts = [p for p in load_prompts() if in_split(p.id, split, table)][:limit]
        self.prompts = list(prompts)
        self.split = split
        self.summary = RunSummary(self.out)
        self._part_configs: dict[str, dict[str, Any]] = {}

    # -- models -----------------------------------------------------------------------------
    @property
    def guard(self) -> Guard:
        """The Guard (its generator serves every method), built on first use."""
        if self._guard is None:
            from plguard.guard import Guard

            self._guard = Guard(self.config)
        return self._guard

    def evaluator_backend(self) -> Backend:
        """The semantic evaluator's model: the generator's backend unless configured."""
        if self._evaluator is None:
            if self.config.evaluator is None or self.config.evaluator == self.config.generator:
                self._evaluator = self.guard.generator
            else:
                from plguard.backends import load_backend

                self._evaluator = load_backend(self.config.evaluator_model)
        return self._evaluator

    # -- manifest ---------------------------------------------------------------------------
    def _manifest(self, previous: dict[str, Any] | None, session: dict[str, Any]
                  ) -> dict[str, Any]:
        # On Ray the models live in the actors: the driver loads none, so the generator's
        # identity here is its file (path and hash), not a loaded backend's id.
        g = self.guard if self.ray is None else self._guard
        man: dict[str, Any] = dict(previous or {})
        sessions = list(man.get("sessions", []))
        if sessions and sessions[-1].get("session") == session["session"]:
            sessions[-1] = session
        else:
            sessions.append(session)
        from plguard.policy import load_policy
        from plguard_lab.studies.xstest.methods import TEMPLATE_VERSION
        from plguard_lab.studies.xstest.scorers import EVALUATOR_TEMPLATE_VERSION

        policy = g.policy if g is not None else load_policy(self.config.policy)

        if g is not None and "plguard" in self.methods:
            # What decided, not what the config asked for: a calibration's fitted
            # thresholds replace the configured ones, and its file may be refit later.
            cal = g.grounder.calibration_file
            man["plguard_decided_with"] = {"thresholds": g.thresholds.model_dump(mode="json"),
                                           "calibration": cal.label if cal else None}
        prompts_csv = data_dir() / "xstest_prompts.csv"
        man.update({
            "benchmark": "xstest",
            "config": lab_dump(self.config),
            "part_configs": self._part_configs,
            "methods": sorted(set(man.get("methods", [])) | set(self.methods),
                              key=METHODS.index),
            "scorers": sorted(set(man.get("scorers", [])) | set(self.scorers),
                              key=SCORERS.index),
            "policy": {"name": policy.name, "id": policy.id},
            "n_prompts": max(int(man.get("n_prompts", 0)), len(self.prompts)),
            "dataset": {"prompts": str(prompts_csv), "sha256": _sha256(prompts_csv)},
            "generator": model_identity(g.generator if g is not None else None,
                                        self.config.generator.path, self.config.generator),
            "evaluator": (model_identity(self._evaluator, self.config.evaluator_model.path,
                                         self.config.evaluator_model)
                          if self._evaluator is not None else man.get("evaluator")),
            "templates": {"methods": TEMPLATE_VERSION, "evaluator": EVALUATOR_TEMPLATE_VERSION},
            "versions": package_versions(),
            "git": git_commit(),
            "started": sessions[0]["started"],
            "ended": session.get("ended"),
            "sessions": sessions,
        })
        return man

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """Generate every unfinished record, then score; safe to rerun after a kill."""
        self.out.mkdir(parents=True, exist_ok=True)
        with exclusive(self.out / ".run.lock", self.out, "use another --out folder"):
            return self._run_locked()

    def _run_locked(self) -> RunSummary:
        mpath = self.out / "manifest.json"
        previous = read_manifest(mpath)
        recorded = [m for m in METHODS if _has_records(self.out / f"{m}.jsonl")]
        recorded += [f"semantic/{m}" for m in METHODS
                     if _has_records(self.out / "semantic" / f"{m}.jsonl")]
        from plguard.policy import load_policy

        # The policy the guard was given, else the config's (read before any model loads).
        policy_id = (self._guard.policy if self._guard is not None
                     else load_policy(self.config.policy)).id
        self._part_configs = check_scoped_configs(
            mpath, previous, {**lab_dump(self.config), "policy_id": policy_id,
                              "calibration_id": self._calibration_id()},
            PART_CONFIG_KEYS, recorded)
        session: dict[str, Any] = {"session": uuid.uuid4().hex[:12], "started": now_iso(),
                                   "ended": None,
                                   "limit": self.limit, "split": self.split,
                                   "argv": sys.argv[1:],
                                   "executor": ("local" if self.ray is None else
                                                {"ray": self.ray.address or "local",
                                                 "workers": self.ray.workers})}
        write_json_atomic(mpath, self._manifest(previous, session))
        stores = {m: JsonlStore(self.out / f"{m}.jsonl") for m in self.methods}
        self._generate(stores)
        if "semantic" in self.scorers:
            self._score_semantic(stores)
            session["evaluator_unparsed"] = dict(self.summary.unparsed)
        session.update(ended=now_iso(), written=self.summary.written,
                       errors=self.summary.errors, scored=self.summary.scored)
        write_json_atomic(mpath, self._manifest(json_or_none(mpath), session))
        return self.summary

    def _calibration_id(self) -> str | None:
        """The label (name@digest) of the calibration file plguard decides with, if any."""
        if self._guard is not None:
            cal = self._guard.grounder.calibration_file
            return cal.label if cal else None
        path = self.config.grounding.calibration
        if not path:
            return None
        from plguard.calibration import load_calibration

        try:
            return load_calibration(path).label
        except ConfigError:
            if "plguard" in self.methods:
                raise
            return None  # plguard is not run now: its file need not be readable here

    def _generate(self, stores: dict[str, JsonlStore]) -> None:
        pending: dict[str, set[str]] = {}
        counts: dict[str, MapCounts] = {}
        for m in self.methods:
            todo, counts[m] = unfinished(stores[m], self.prompts, lambda p: p.id)
            pending[m] = {p.id for p in todo}
        total = sum(len(v) for v in pending.values())
        bs = self.config.generator.batch_size
        # Batches are cut from the unfinished prompts only, so a resumed run still fills
        # whole batches; the type-interleaved order keeps a partial run a balanced sample.
        order = [p for p in interleave_by_type(self.prompts)
                 if any(p.id in pending[m] for m in self.methods)]
        chunks = [order[i:i + bs] for i in range(0, len(order), bs)]
        drafts = stores["base"].records if "base" in stores else {}
        shards: Iterable[Sequence[dict[str, Any]]]
        if not chunks:
            shards = ()
        elif self.ray is not None:
            from plguard.scale import run_shards_ray

            payloads = [generate_payload(self.methods, c, pending, drafts) for c in chunks]
            shards = run_shards_ray(GENERATE_FACTORY, self.config, payloads, self.ray)
        else:
            methods = build_methods(self.config, self.guard)
            # A generator: each shard sees the base drafts of the shards written before it.
            shards = (shard_records(methods, self.methods, c, pending, drafts) for c in chunks)
        append_shards(shards, stores, lambda r: str(r["method"]), counts, total=total,
                      desc="xstest", progress=self.progress)
        for m, c in counts.items():
            self.summary.skipped[m] = c.skipped
            self.summary.written[m] = self.summary.written.get(m, 0) + c.written
            self.summary.errors[m] = self.summary.errors.get(m, 0) + c.errors

    # -- semantic scoring -------------------------------------------------------------------
    def _score_semantic(self, stores: dict[str, JsonlStore]) -> None:
        sem = {m: JsonlStore(self.out / "semantic" / f"{m}.jsonl") for m in self.methods}
        ids = {p.id for p in self.prompts}
        todo: dict[str, list[dict[str, Any]]] = {}
        counts: dict[str, MapCounts] = {}
        for m in self.methods:
            rows = [r for r in stores[m] if r["id"] in ids and r.get("response") is not None]
            todo[m], counts[m] = unfinished(sem[m], rows, lambda r: str(r["id"]))
            self.summary.scored.setdefault(m, 0)
            self.summary.unparsed[m] = sum(1 for r in sem[m] if not r.get("parsed"))
        bs = eval_settings(self.config).evaluator_batch_size
        chunks = [todo[m][i:i + bs] for m in self.methods for i in range(0, len(todo[m]), bs)]
        shards: Iterable[Sequence[dict[str, Any]]]
        if not chunks:
            shards = ()
        elif self.ray is not None:
            from plguard.scale import run_shards_ray

            payloads = [[{k: r[k] for k in ("id", "method", "type", "label", "prompt",
                                            "response")} for r in c] for c in chunks]
            shards = run_shards_ray(SEMANTIC_FACTORY, self.config, payloads, self.ray)
        else:
            ev = SemanticEvaluator.from_config(self.evaluator_backend(), self.config)
            shards = (score_rows(ev, c) for c in chunks)

        def on_append(v: dict[str, Any]) -> None:
            m = str(v["method"])
            self.summary.scored[m] += 1
            if not v.get("parsed"):
                self.summary.unparsed[m] += 1

        append_shards(shards, sem, lambda r: str(r["method"]), counts,
                      total=sum(len(v) for v in todo.values()), desc="semantic",
                      progress=self.progress, on_append=on_append)


def interleave_by_type(prompts: Sequence[XSTestPrompt]) -> list[XSTestPrompt]:
    """Round-robin over XSTest types (first-seen type order), keeping order within a type.

    XSTest lists its prompts type by type, safe types first; in that order an interrupted
    run would hold no unsafe prompt at all.
    """
    by_type: dict[str, list[XSTestPrompt]] = {}
    for p in prompts:
        by_type.setdefault(p.type, []).append(p)
    out: list[XSTestPrompt] = []
    for i in range(max((len(v) for v in by_type.values()), default=0)):
        out += [v[i] for v in by_type.values() if i < len(v)]
    return out


def _has_records(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def json_or_none(path: Path) -> dict[str, Any] | None:
    """A JSON file's object, or None when missing or unreadable."""
    import json

    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def _sha256(path: Path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def run_xstest(config: GuardConfig, out_dir: str | Path, **kwargs: Any) -> RunSummary:
    """Run (or resume) the XSTest evaluation into ``out_dir``; see :class:`XSTestRun`."""
    return XSTestRun(config, out_dir, **kwargs).run()


__all__ = ["SCORERS", "RunSummary", "XSTestRun", "check_methods", "interleave_by_type",
           "model_identity", "run_xstest"]
