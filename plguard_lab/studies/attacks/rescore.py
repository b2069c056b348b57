"""Re-decide a finished attack run under a changed policy or thresholds, without a model.

A record holds every predicate's calibrated P(True) for its (pair, attack), and how its text
was read (text addressed to the guard, a middle never read). Rules and the decision are pure
functions of those (:func:`plguard.decide.decide_for`, as the Guard decides), so when a
policy's *rules* change (not its questions) and the calibration's predicate maps are the ones
the run applied, re-deciding the records gives exactly what a fresh run would, in seconds
instead of an hour of grounding. Anything else (a changed question, other maps, another
model) needs a new run and is refused here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plguard.calibration import Calibration, check_applies, load_calibration
from plguard.config import GuardConfig, Thresholds
from plguard.decide import Reading, ReadRules, decide_for
from plguard.errors import ConfigError, InputError
from plguard.policy import Policy, load_policy
from plguard.records.store import git_commit, now_iso, read_jsonl, write_json_atomic
from plguard_lab.studies.attacks.runner import calibration_record, decision_fields


def run_calibration(manifest: Mapping[str, Any], run_dir: Path) -> dict[str, Any] | None:
    """The calibration the run applied, as :func:`calibration_record` writes it.

    Recorded in the manifest; for a run made before that was, read from the file its config
    names (which must not have been refitted since, or the comparison refuses).
    """
    if "calibration" in manifest:
        return manifest["calibration"]
    path = manifest.get("config", {}).get("grounding", {}).get("calibration")
    if not path:
        return None
    try:
        return calibration_record(load_calibration(path))
    except ConfigError as exc:
        raise ConfigError(f"{run_dir}/manifest.json: the run's calibration {path} cannot be "
                          f"read to compare with ({exc}); rerun the attacks instead") from exc


def _load_manifest(src: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((src / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"--rescore {src}: not an attack run folder ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("benchmark") != "attacks":
        raise InputError(f"--rescore {src}: not an attack run folder (its manifest is not an "
                         "attack run's)")
    return manifest


def _check(manifest: Mapping[str, Any], src: Path, policy: Policy, config: GuardConfig,
           cal: Calibration | None) -> dict[str, Any] | None:
    """Refuse unless the run's stored P(True) are what this config would have produced."""
    from plguard.grounding import question_digest

    where = f"--rescore {src}"
    asked = {p.name: question_digest(p, config.grounding) for p in policy.predicates}
    if cal is not None:
        g = manifest.get("grounder", {})
        check_applies(cal, model_sha256=g.get("sha256"), model_id=g.get("model_id", ""),
                      template_version=manifest.get("grounding_template", ""),
                      policy_name=policy.name, question_digests=asked)
    new, old = calibration_record(cal), run_calibration(manifest, src)
    if {k: (new or {}).get(k) for k in ("predicates", "questions")} != {
            k: (old or {}).get(k) for k in ("predicates", "questions")}:
        raise ConfigError(f"{where}: the calibration's predicate maps or questions differ from "
                          "those the run applied, so its stored P(True) would be wrong; rerun "
                          "the attacks")
    run_asked = manifest.get("questions") or {}
    changed = sorted(n for n, d in asked.items() if n in run_asked and run_asked[n] != d)
    if changed:
        raise ConfigError(f"{where}: {', '.join(changed)} asked differently than in the run; "
                          "rerun the attacks")
    return new


def rescore_run(run_dir: str | Path, out_dir: str | Path, config: GuardConfig) -> Path:
    """Re-decide ``run_dir`` into ``out_dir`` (records, manifest, report); return the report.

    Uses ``config``'s policy, and its thresholds or its calibration's fitted ones.
    """
    from plguard.guard import effective_thresholds
    from plguard_lab.studies.attacks.report import write_report

    src, out = Path(run_dir), Path(out_dir)
    if src.resolve() == out.resolve():
        raise InputError(f"--rescore {src}: write the rescored run to another --out folder")
    manifest = _load_manifest(src)
    policy = load_policy(config.policy)
    cal_path = config.grounding.calibration
    if cal_path is None and config.grounding.heads == "auto":
        # The run applied its bundle's shipped thresholds (heads auto, no calibration of
        # its own), as the Guard does: re-decide with the same file.
        from plguard.heads.artefact import shipped_calibration

        shipped = shipped_calibration(policy.name)
        ran = (manifest.get("calibration") or {}).get("path")
        if shipped is not None and ran and Path(ran).resolve() == shipped.resolve():
            cal_path = str(shipped)
    cal = load_calibration(cal_path) if cal_path else None
    cal_record = _check(manifest, src, policy, config, cal)
    th = effective_thresholds(config, cal)
    rules = ReadRules.of(config.grounding)
    # Records written before `unseen` was: with windowing off, a cut is the response's
    # unread middle (a request cut alone is rare; it then counts as one too).
    windowed = manifest.get("config", {}).get("grounding", {}).get("windows", True)
    recs = [r if r.get("error") is not None
            else _redecide(r, policy, th, rules, src, unseen=not windowed)
            for r in read_jsonl(src / "records.jsonl")]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "records.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
    tmp.replace(out / "records.jsonl")
    new = dict(manifest)
    new.update(policy={"name": policy.name, "id": policy.id},
               thresholds=th.model_dump(mode="json"), calibration=cal_record,
               rescored={"from": str(src), "from_policy": manifest.get("policy"),
                         "from_thresholds": manifest.get("thresholds"),
                         "from_git": manifest.get("git"), "at": now_iso(), "git": git_commit()})
    write_json_atomic(out / "manifest.json", new)
    return write_report(out)


def _redecide(rec: dict[str, Any], policy: Policy, th: Thresholds, rules: ReadRules, src: Path,
              *, unseen: bool) -> dict[str, Any]:
    probs = rec.get("predicates") or {}
    missing = [p for p in policy.predicate_names if p not in probs]
    if missing:
        raise InputError(f"--rescore {src}: record {rec.get('id')} has no P(True) for "
                         f"{', '.join(missing)}: the policy asks what the run did not; rerun "
                         "the attacks")
    d = decide_for(policy, policy.evaluate(probs), th, reading=record_reading(rec, unseen=unseen),
                   rules=rules)
    return rec | decision_fields(str(rec.get("kind", "")), d)


def record_reading(rec: dict[str, Any], *, unseen: bool = False) -> Reading:
    """How a record's text was read (its screen findings, its unread middle).

    ``unseen``: whether a cut (``truncated``) record written before the ``unseen`` field
    counts as one whose middle was not read.
    """
    kinds = dict.fromkeys(str(f.get("kind")) for f in rec.get("screen") or [])
    cut = rec["unseen"] if "unseen" in rec else unseen and bool(rec.get("truncated"))
    return Reading(tuple(kinds), bool(cut))


__all__ = ["record_reading", "rescore_run", "run_calibration"]
