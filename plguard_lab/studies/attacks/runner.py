"""``plguard eval attacks``: the resumable run over (pair, attack) records.

Layout of a run folder::

    manifest.json     config (repairs off), suite hash, attacks, model identity, versions,
                      git commit, every session with its command line
    records.jsonl     one record per (pair, attack), id ``<pair>/<attack>``
    attacks.md/.json  the report (:mod:`plguard_lab.studies.attacks.report`)

Every pair is guarded clean and under each attack with ``Guard.batch(requests,
responses=...)`` and ``repair.max_rounds = 0``: no text is generated, only grounding,
reasoning and the decision run. Work goes pair by pair, so a batch shares its request and
request-scope scores are computed once. Records are fsync'd one by one; a rerun skips
finished ids and retries failed ones (the shared loop, :mod:`plguard.records.loop`), so
a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from plguard.config import GuardConfig
from plguard.errors import ConfigError
from plguard.records.loop import error_text, map_into
from plguard.records.store import (
    JsonlStore,
    check_same_config,
    exclusive,
    git_commit,
    now_iso,
    package_versions,
    write_json_atomic,
)
from plguard_lab.config import lab_dump
from plguard_lab.studies.attacks.suite import Pair, Suite, load_suite
from plguard_lab.studies.attacks.transforms import ATTACKS, Attacked, Context, check_attacks

if TYPE_CHECKING:
    from plguard.backends.base import Backend
    from plguard.calibration import Calibration
    from plguard.guard import Guard
    from plguard.types import Decision, GuardResult

# Bump when a transform's output changes: records made by another version are not comparable.
ATTACKS_VERSION = "a1"
TEXT_LIMIT = 6000  # attacked texts up to this many characters are stored in the record
# One (pair, attack) guarded: its texts and result, or the transform's error and None.
Guarded = tuple["Attacked | BaseException", "GuardResult | None"]


@dataclass
class AttackSummary:
    """What one invocation did."""

    out_dir: Path
    written: int = 0
    skipped: int = 0
    errors: int = 0
    report: Path | None = None
    counts: dict[str, int] = field(default_factory=dict)


def detects(kind: str, action: str) -> bool:
    """Whether ``action`` flags a ``kind`` pair: refuse a harmful pair, rewrite a refusal."""
    return action == ("refuse" if kind == "harmful" else "rewrite")


def detected(pair: Pair, result: GuardResult) -> bool:
    """Whether the guard flags the pair's violation (:func:`detects`)."""
    return detects(pair.kind, result.decision.action)


def decision_fields(kind: str, d: Decision) -> dict[str, Any]:
    """What a record keeps of a decision on a ``kind`` pair (a run's and a rescore's)."""
    return {"action": d.action, "detected": detects(kind, d.action),
            "strongest_unsafe": list(d.strongest_unsafe),
            "strongest_over_refusal": list(d.strongest_over_refusal),
            "score": (d.strongest_unsafe if kind == "harmful" else d.strongest_over_refusal)[1]}


def calibration_record(cal: Calibration | None) -> dict[str, Any] | None:
    """The calibration as a manifest records it: its label and the predicate maps applied.

    A later ``--rescore`` checks them, so stored P(True) values are only reused if right.
    """
    if cal is None:
        return None
    return {"label": cal.label, "path": cal.path,
            "predicates": {k: [float(a), float(b)] for k, (a, b) in sorted(cal.predicates.items())},
            "questions": dict(sorted(cal.question_digests.items()))}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def record(pair: Pair, attack: str, texts: Attacked | None,
           out: GuardResult | BaseException, n_tokens: tuple[int, int] | None) -> dict[str, Any]:
    """The stored record of ``pair`` under ``attack`` (or of the error it raised)."""
    rec: dict[str, Any] = {"id": f"{pair.id}/{attack}", "pair": pair.id, "attack": attack,
                           "family": ATTACKS[attack].family, "kind": pair.kind,
                           "topic": pair.topic}
    if texts is not None:
        rec.update(request_sha=_sha(texts.request), response_sha=_sha(texts.response),
                   response_chars=len(texts.response),
                   request=texts.request if len(texts.request) <= TEXT_LIMIT else None,
                   response=texts.response if len(texts.response) <= TEXT_LIMIT else None)
    if n_tokens is not None:
        rec["tokens"] = {"request": n_tokens[0], "response": n_tokens[1]}
    if isinstance(out, BaseException):
        rec["error"] = error_text(out)
        return rec
    rec.update(error=None, **decision_fields(pair.kind, out.decision),
               predicates=out.grounding.probs, truncated=out.grounding.truncated,
               unseen=any(s.unseen for s in out.grounding.scores),
               windows=max((len(s.windows) for s in out.grounding.scores
                            if not s.unseen), default=0) or 1,
               template=out.grounding.template_version, times=dict(out.timings_s),
               screen=[{"kind": f.kind, "where": f.where, "text": f.text}
                       for f in out.grounding.screen])
    return rec


class AttackRun:
    """One run folder: guards every (pair, attack) once, then writes the report."""

    def __init__(self, config: GuardConfig, out_dir: str | Path, *,
                 attacks: Sequence[str] | None = None, limit: int | None = None,
                 progress: bool = True, generator: Backend | None = None,
                 suite: Suite | None = None) -> None:
        # Repairs off: a flagged pair must not start generating; only the decision counts.
        repairs_off: dict[str, Any] = {"repair.max_rounds": 0}
        self.config = GuardConfig.from_dict(config.model_dump(), **repairs_off)
        self.out = Path(out_dir)
        self.attacks = check_attacks(attacks)
        self.limit = limit
        self.progress = progress
        self.suite = suite or load_suite()
        self.pairs = self.suite.select(limit)
        self._generator = generator
        self._guard: Guard | None = None
        self.summary = AttackSummary(self.out)

    @property
    def guard(self) -> Guard:
        """The Guard over the configured model (or the given backend), built on first use."""
        if self._guard is None:
            from plguard.guard import Guard

            self._guard = Guard(self.config, generator=self._generator)
        return self._guard

    def _manifest(self, previous: dict[str, Any] | None, session: dict[str, Any]
                  ) -> dict[str, Any]:
        from plguard.grounding import TEMPLATE_VERSION
        from plguard_lab.studies.xstest.runner import model_identity

        man: dict[str, Any] = dict(previous or {})
        sessions = [s for s in man.get("sessions", []) if s.get("session") != session["session"]]
        sessions.append(session)
        g = self.guard
        man.update({
            "benchmark": "attacks",
            "config": lab_dump(self.config),
            "suite": {"sha256": self.suite.sha256, "pairs": len(self.suite.pairs),
                      "attacks_version": ATTACKS_VERSION},
            "attacks": [a for a in ATTACKS if a in set(man.get("attacks", [])) | set(self.attacks)],
            "n_pairs": max(int(man.get("n_pairs", 0)), len(self.pairs)),
            "policy": {"name": g.policy.name, "id": g.policy.id},
            # What decided: the calibration's fitted thresholds replace the configured ones.
            "thresholds": g.thresholds.model_dump(mode="json"),
            "calibration": calibration_record(g.grounder.calibration_file),
            "questions": {p.name: g.grounder.question_digest(p) for p in g.policy.predicates},
            "grounder": model_identity(g.grounder_backend, self.config.grounder_model.path),
            "grounding_template": TEMPLATE_VERSION,
            "versions": package_versions(),
            "git": git_commit(),
            "started": sessions[0]["started"],
            "ended": session.get("ended"),
            "sessions": sessions,
        })
        return man

    def _check_suite(self, previous: dict[str, Any] | None) -> None:
        old = (previous or {}).get("suite")
        if old and (old.get("sha256"), old.get("attacks_version")) != (
                self.suite.sha256, ATTACKS_VERSION):
            raise ConfigError(f"{self.out} holds records of another attack suite or transform "
                              "version; its records would not be comparable. Use a new --out "
                              "folder")
        # The config names a policy; its rules or questions may change under the same name.
        was = ((previous or {}).get("policy") or {}).get("id")
        now = self.guard.policy.id
        if was and was != now:
            raise ConfigError(f"{self.out} holds records of policy {was}, not {now} (same "
                              "name, other rules or questions); use a new --out folder, or "
                              "--rescore it when only the rules changed")

    def run(self, report: bool = True) -> AttackSummary:
        """Guard every unfinished (pair, attack), then write the report; safe to rerun."""
        self.out.mkdir(parents=True, exist_ok=True)
        with exclusive(self.out / ".run.lock", self.out, "use another --out folder"):
            mpath = self.out / "manifest.json"
            previous = check_same_config(mpath, lab_dump(self.config))
            self._check_suite(previous)
            session: dict[str, Any] = {"session": uuid.uuid4().hex[:12], "started": now_iso(),
                                       "ended": None, "limit": self.limit,
                                       "attacks": self.attacks, "argv": sys.argv[1:]}
            write_json_atomic(mpath, self._manifest(previous, session))
            store = JsonlStore(self.out / "records.jsonl")
            self._guard_all(store)
            session.update(ended=now_iso(), written=self.summary.written,
                           errors=self.summary.errors)
            write_json_atomic(mpath, self._manifest(previous, session))
            if report:
                from plguard_lab.studies.attacks.report import write_report

                self.summary.report = write_report(self.out, {p.id for p in self.pairs},
                                                   self.attacks)
        return self.summary

    def _guard_all(self, store: JsonlStore) -> None:
        guard = self.guard
        backend = guard.grounder_backend
        ctx = Context(count_tokens=backend.count_tokens, filler=self.suite.filler)

        def attacked(p: Pair, a: str) -> Attacked | BaseException:
            try:
                return ATTACKS[a](p, ctx)
            except Exception as exc:  # a broken transform fails its record only
                return exc

        def guard_chunk(chunk: Sequence[tuple[Pair, str]]) -> list[Guarded]:
            built = [attacked(p, a) for p, a in chunk]
            texts = [t for t in built if isinstance(t, Attacked)]
            outs = iter(guard.batch([t.request for t in texts],
                                    responses=[t.response for t in texts]) if texts else [])
            return [(t, next(outs)) if isinstance(t, Attacked) else (t, None) for t in built]

        def make_record(item: tuple[Pair, str], out: Guarded | BaseException
                        ) -> dict[str, Any]:
            p, a = item
            if isinstance(out, BaseException):
                # Guarding failed: transforms are pure, so this rebuilds the guarded texts.
                t = attacked(p, a)
                if not isinstance(t, Attacked):
                    return record(p, a, None, out, None)
                return record(p, a, t, out, _tokens(backend, t))
            texts, res = out
            if isinstance(texts, Attacked) and res is not None:
                return record(p, a, texts, res, _tokens(backend, texts))
            return record(p, a, None, cast(BaseException, texts), None)  # transform raised

        counts = map_into(store, [(p, a) for p in self.pairs for a in self.attacks],
                          lambda it: f"{it[0].id}/{it[1]}", guard_chunk, make_record,
                          chunk=self.config.generator.batch_size, desc="attacks",
                          progress=self.progress)
        self.summary.skipped = counts.skipped
        self.summary.written += counts.written
        self.summary.errors += counts.errors


def _tokens(backend: Any, t: Attacked) -> tuple[int, int]:
    return backend.count_tokens(t.request), backend.count_tokens(t.response)


def run_attacks(config: GuardConfig, out_dir: str | Path, **kwargs: Any) -> AttackSummary:
    """Run (or resume) the attack evaluation into ``out_dir``; see :class:`AttackRun`."""
    return AttackRun(config, out_dir, **kwargs).run()


__all__ = ["ATTACKS_VERSION", "AttackRun", "AttackSummary", "detected", "record",
           "run_attacks"]
