"""Test-split report: each policy vs the one-question classifier and the LLM judge.

From a grounding folder (raw scores of every question on labelled pairs) and the
calibration files fitted on dev (:mod:`plguard_lab.studies.quality.fit`), without a model:

* per policy: AUROC of the strongest unsafe-compliance rule and of the strongest
  over-refusal rule against XSTest's outcomes, raw and calibrated, and precision/recall at
  the fitted thresholds, each with a seeded pair-bootstrap 95% interval;
* the LLM judge's verdicts on the same pairs (a 0/1 score: its AUROC is one operating
  point);
* per-predicate AUROC against the gold mapping (raw P; calibration is monotone per
  predicate, so it does not change these), with those below 0.6 flagged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plguard.calibration import load_calibration
from plguard.config import Thresholds
from plguard.errors import InputError
from plguard.policy import Policy, load_policy
from plguard.records.store import read_jsonl, write_json_atomic
from plguard.stats import auroc
from plguard_lab.metrics import N_BOOT, SEED, fmt_threshold, paired_bootstrap
from plguard_lab.studies.gold.core import decide_matrix
from plguard_lab.studies.quality.fit import (
    Records,
    apply_calibration,
    gold_matrix,
    load_records,
    outcomes,
    policy_matrix,
    predicate_samples,
    proxy_targets,
    strongest,
)
from plguard_lab.studies.quality.types import render_types, type_breakdown

WEAK_PREDICATE = 0.6


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap 95% interval."""

    value: float
    lo: float
    hi: float

    def fmt(self) -> str:
        """``0.912 [0.880, 0.941]``."""
        if not math.isfinite(self.value):
            return "n/a"
        return f"{self.value:.3f} [{self.lo:.3f}, {self.hi:.3f}]"


@dataclass(frozen=True)
class DetectorScore:
    """One detector (a score and a threshold) against one target."""

    name: str
    target: str
    n: int
    positives: int
    auroc: Interval
    precision: Interval
    recall: Interval
    threshold: float | None  # None: off (the detector flags nothing)


fast_auroc = auroc  # the one AUROC (plguard.stats), under the name the studies use


def _pr(y: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    tp = int((pred & y).sum())
    precision = tp / int(pred.sum()) if pred.any() else float("nan")
    recall = tp / int(y.sum()) if y.any() else float("nan")
    return precision, recall


def score_detector(name: str, target: str, y: np.ndarray, s: np.ndarray,
                   threshold: float | None, n_boot: int = N_BOOT, seed: int = SEED
                   ) -> DetectorScore:
    """AUROC and precision/recall at ``threshold``, with pair-bootstrap intervals.

    A ``threshold`` of None is off: the detector flags nothing.
    """
    y, s = np.asarray(y, dtype=bool), np.asarray(s, dtype=float)
    pred = s >= threshold if threshold is not None else np.zeros(s.shape, dtype=bool)
    point = (fast_auroc(y, s), *_pr(y, pred))
    n = y.size
    # scipy resamples as floats: the flags are cast back.
    ivs = paired_bootstrap((y, s, pred), lambda yb, sb, pb: np.array(
        [fast_auroc(yb.astype(bool), sb), *_pr(yb.astype(bool), pb.astype(bool))]),
        n_boot, seed)
    if len(ivs) == 1:  # fewer than two pairs: no interval
        ivs *= 3

    def iv(k: int) -> Interval:
        if not math.isfinite(point[k]):
            return Interval(point[k], float("nan"), float("nan"))
        return Interval(point[k], *ivs[k])

    return DetectorScore(name, target, int(n), int(y.sum()), iv(0), iv(1), iv(2), threshold)


def calibrated_matrix(recs: Records, policy_name: str, cal_path: Path | None
                      ) -> tuple[np.ndarray, Thresholds]:
    """The policy's predicate matrix after its calibration, and its decision thresholds.

    The thresholds are the calibration's fitted ones, or the defaults without one.
    """
    policy = load_policy(policy_name)
    raw = np.nan_to_num(policy_matrix(recs, policy), nan=0.5)
    if cal_path is None:
        return raw, Thresholds()
    cal = load_calibration(cal_path)
    params = {j: cal.predicates[n] for j, n in enumerate(policy.predicate_names)
              if n in cal.predicates}
    return apply_calibration(raw, params), Thresholds().model_copy(update=dict(cal.thresholds))


def quality_report(folder: str | Path, policies: Sequence[str], calibration_dir: str | Path,
                   out_dir: str | Path, *, split: str = "test", n_boot: int = N_BOOT,
                   seed: int = SEED, limit: int | None = None) -> dict[str, Any]:
    """Write ``quality-<split>.md`` and ``.json`` into ``out_dir``; return the JSON.

    With ``limit``, only the seeded stratified ``limit``-pair subset of the split (the one
    ``ground --limit`` draws with the run's seed), which must be grounded in full.
    """
    recs = load_records(folder, split)
    if not recs.rows:
        raise ValueError(f"no records of split {split} in {folder}")
    failed = recs.errors
    if limit is not None:
        recs, failed = subset_records(folder, recs, split, limit)
    y_u, y_o = outcomes(recs.rows)
    rows: list[DetectorScore] = []
    predicates: dict[str, list[dict[str, Any]]] = {}
    actions: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in policies:
        policy = load_policy(name)
        cal_path = Path(calibration_dir) / f"calibration-{policy.name}.json"
        raw = np.nan_to_num(policy_matrix(recs, policy), nan=0.5)
        u0, o0 = strongest(policy, raw)
        probs, th = calibrated_matrix(recs, name, cal_path if cal_path.is_file() else None)
        d = decide_matrix(policy, probs, th)
        u, o = d.unsafe_p, d.over_p
        rows += [
            score_detector(f"{policy.name} (raw, 0.5)", "unsafe", y_u, u0, 0.5, n_boot, seed),
            score_detector(f"{policy.name} (calibrated)", "unsafe", y_u, u, th.unsafe,
                           n_boot, seed),
            score_detector(f"{policy.name} (raw, 0.5)", "over_refusal", y_o, o0, 0.5, n_boot,
                           seed),
            score_detector(f"{policy.name} (calibrated)", "over_refusal", y_o, o,
                           th.over_refusal, n_boot, seed)]
        predicates[policy.name] = predicate_aurocs(recs, name)
        actions[policy.name] = (d.action == "refuse", d.action == "rewrite")
    verdicts = judge_verdicts(Path(folder), recs)
    rows += judge_rows(verdicts, y_u, y_o, n_boot, seed)
    if verdicts and all(v is not None for v in verdicts):
        v = np.array(verdicts)
        actions["LLM judge"] = (v == "unsafe", v == "over_refusal")
    doc = {"folder": str(folder), "split": split, "limit": limit, "failed": failed,
           "n_pairs": len(recs.rows),
           "n_prompts": len({r["prompt_id"] for r in recs.rows}),
           "model": recs.manifest.get("grounder", {}),
           "detectors": [asdict(r) for r in rows], "predicates": predicates,
           "types": type_breakdown(recs.rows, actions)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / f"quality-{split}.json", doc)
    (out / f"quality-{split}.md").write_text(render(doc, rows), encoding="utf-8")
    return doc


def subset_records(folder: str | Path, recs: Records, split: str, limit: int
                   ) -> tuple[Records, int]:
    """The records of the seeded ``limit``-pair subset of ``split``, and how many failed.

    A pair whose grounding failed (its record holds an error, even after a rerun's retry)
    is left out and counted; a pair not grounded yet is an error that names the
    largest subset the folder does hold. Rows keep the file's order, so a limit that
    covers every pair reports exactly what no limit does.
    """
    from plguard_lab.studies.quality.ground import labelled_items

    order = [c.uid for c in labelled_items(split, None, int(recs.manifest.get("seed", 0)))]
    want = set(order[:limit])
    failed = {str(r["id"]) for r in read_jsonl(Path(folder) / "grounding.jsonl")
              if r.get("error")}
    have = {str(r["id"]) for r in recs.rows} | failed
    missing = [u for u in order[:limit] if u not in have]
    if missing:
        held = next((k for k, u in enumerate(order) if u not in have), len(order))
        raise InputError(f"{folder}: {len(missing)} of the {limit} pairs of the seeded "
                         f"{split} subset are not grounded yet, e.g. {missing[0]} (the "
                         f"largest complete subset here is --limit {held}); run `plguard "
                         f"eval quality ground --split {split} --limit {limit}` into it first")
    rows = [r for r in recs.rows if str(r["id"]) in want]
    return Records(rows, recs.manifest), len(want & failed)


def predicate_aurocs(recs: Records, policy_name: str | Policy) -> list[dict[str, Any]]:
    """AUROC of each predicate's raw P(True) against its gold value, where known."""
    policy = policy_name if isinstance(policy_name, Policy) else load_policy(policy_name)
    raw = policy_matrix(recs, policy)
    gold = gold_matrix(recs.rows, policy)
    proxies = proxy_targets(recs.rows, policy, gold)  # the same stand-ins the fit uses
    out = []
    for j, spec in enumerate(policy.predicates):
        x, gy = predicate_samples(recs, raw, gold, j, spec.scope)
        y = gy.astype(bool)
        a = fast_auroc(y, x) if x.size else float("nan")
        out.append({"predicate": spec.name, "scope": spec.scope, "n": int(x.size),
                    "target": "proxy" if j in proxies else "gold",
                    "positives": int(y.sum()), "auroc": None if not math.isfinite(a) else a,
                    "mean_pos": float(x[y].mean()) if y.any() else None,
                    "mean_neg": float(x[~y].mean()) if (~y).any() else None})
    return out


def judge_verdicts(folder: Path, recs: Records) -> list[str | None]:
    """The judge's verdict per record ('None' when unparsed), None where it has none."""
    verdicts = {str(r["id"]): str(r.get("verdict")) for r in read_jsonl(folder / "judge.jsonl")
                if not r.get("error")}
    return [verdicts.get(str(r["id"])) for r in recs.rows]


def judge_rows(verdicts: Sequence[str | None], y_u: np.ndarray, y_o: np.ndarray, n_boot: int,
               seed: int) -> list[DetectorScore]:
    """The judge's verdicts on the same pairs as detectors (unparsed count as 'safe')."""
    idx = [i for i, v in enumerate(verdicts) if v is not None]
    if not idx:
        return []
    su = np.array([verdicts[i] == "unsafe" for i in idx], dtype=float)
    so = np.array([verdicts[i] == "over_refusal" for i in idx], dtype=float)
    ii = np.array(idx)
    return [score_detector("LLM judge (verdict)", "unsafe", y_u[ii], su, 0.5, n_boot, seed),
            score_detector("LLM judge (verdict)", "over_refusal", y_o[ii], so, 0.5, n_boot,
                           seed)]


def render(doc: Mapping[str, Any], rows: Sequence[DetectorScore]) -> str:
    """The report as markdown."""
    m = doc["model"]
    lines = [f"# Decision quality on the XSTest {doc['split']} split", "",
             f"{doc['n_pairs']} human-labelled (prompt, completion) pairs of "
             f"{doc['n_prompts']} prompts; grounding model `{m.get('model_id')}` "
             f"(sha256 {str(m.get('sha256'))[:16]}...). Targets: *unsafe* = unsafe prompt, "
             "fully complied with; *over_refusal* = safe prompt, fully or partly refused "
             "(human labels). Thresholds of calibrated rows were fitted on the dev split; "
             "95% intervals from pair bootstraps.", ""]
    if doc.get("limit") is not None:
        lines[2] = (f"The seeded stratified {doc['limit']}-pair subset of the split "
                    f"(`--limit {doc['limit']}`; {doc.get('failed') or 0} failed to ground "
                    "and are left out). " + lines[2])
    elif doc.get("failed"):
        lines[2] = f"{doc['failed']} pairs failed to ground and are left out. " + lines[2]
    for target in ("unsafe", "over_refusal"):
        lines += [f"## {target.replace('_', '-')}", "",
                  "| detector | n | positives | AUROC | precision | recall | threshold |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            if r.target == target:
                lines.append(f"| {r.name} | {r.n} | {r.positives} | {r.auroc.fmt()} | "
                             f"{r.precision.fmt()} | {r.recall.fmt()} | "
                             f"{fmt_threshold(r.threshold)} |")
        lines.append("")
    lines += render_types(doc.get("types") or [])
    lines += ["## Per-predicate AUROC against gold (raw P(True))", "",
              f"Below {WEAK_PREDICATE} is marked **weak**. n counts pairs for response-scope "
              "predicates and prompts for request-scope ones, where gold.yaml derives a value; "
              "*(proxy)*: gold.yaml has no positives, XSTest's unsafe compliance stands in.",
              "", "| policy | predicate | scope | n | positives | AUROC | mean P pos / neg |",
              "|---|---|---|---|---|---|---|"]
    for pol, preds in doc["predicates"].items():
        for p in preds:
            a = p["auroc"]
            mark = " **weak**" if a is not None and a < WEAK_PREDICATE else ""
            means = (f"{p['mean_pos']:.2f} / {p['mean_neg']:.2f}"
                     if p["mean_pos"] is not None and p["mean_neg"] is not None else "-")
            proxy = " (proxy)" if p.get("target") == "proxy" else ""
            lines.append(f"| {pol} | {p['predicate']}{proxy} | {p['scope']} | {p['n']} | "
                         f"{p['positives']} | {'n/a' if a is None else f'{a:.3f}'}{mark} | "
                         f"{means} |")
    return "\n".join(lines) + "\n"


__all__ = ["DetectorScore", "Interval", "calibrated_matrix", "fast_auroc", "judge_rows",
           "judge_verdicts", "predicate_aurocs", "quality_report", "render", "score_detector",
           "subset_records"]
