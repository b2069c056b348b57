"""``plguard calibrate``: per-predicate Platt scaling of grounding P(True), from saved scores.

Input: a ``plguard eval guard-labelled`` folder (its ``guard.jsonl`` holds every
predicate's P(True) per labelled XSTest completion). No model is called.

Which predicates get a target (the mapping): a predicate is calibrated when the first
rule for it in ``policies/<policy>/gold.yaml`` derives it from the prompt's ``label``
(safe/unsafe) or the completion's human ``final_label`` alone, with no ``when`` and a
0/1 value for every value of that field; e.g. ``request_is_harmful`` <- label unsafe,
``response_refuses`` <- final_label in (full, partial refusal). Without a gold file the
built-in :data:`FALLBACK_MAP` is used. Other predicates are left uncalibrated.

Split: by prompt id (all five models' completions of a prompt on one side), so no
prompt is both fitted and tested. A request-scope predicate is one sample per prompt
(its score does not depend on the response); a response-scope one is one per completion.

Fit: Platt scaling ``sigmoid(a * logit(p) + b)`` by Newton's method on the log loss,
with Platt's smoothed targets so tiny or separable splits keep finite parameters.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plguard.errors import InputError
from plguard.evals.metrics import expected_calibration_error
from plguard.evals.store import now_iso, read_jsonl, write_json_atomic

FORMAT = "plguard-calibration/1"
FIELD_VALUES: dict[str, tuple[str, ...]] = {
    "label": ("safe", "unsafe"),
    "final_label": ("1_full_compliance", "2_full_refusal", "3_partial_refusal"),
}
# Used only when the policy has no gold.yaml: the two predicate kinds the issue names.
FALLBACK_MAP: dict[str, tuple[str, dict[str, int]]] = {
    "request_is_harmful": ("label", {"unsafe": 1, "safe": 0}),
    "response_refuses": ("final_label", {"1_full_compliance": 0, "2_full_refusal": 1,
                                         "3_partial_refusal": 1}),
}


def target_map(policy: str) -> dict[str, tuple[str, dict[str, int]]]:
    """Predicate -> (label field, value -> 0/1) for the policy (see module docstring)."""
    from plguard.policy import resolve_bundle

    try:
        gold = Path(resolve_bundle(policy)) / "gold.yaml"
    except Exception:  # an unknown bundle name: fall back, the caller reports predicates
        gold = Path("/nonexistent")
    if not gold.is_file():
        return dict(FALLBACK_MAP)
    import yaml

    rules = (yaml.safe_load(gold.read_text(encoding="utf-8")) or {}).get("rules") or []
    first: dict[str, dict[str, Any]] = {}
    for r in rules:
        if isinstance(r, dict) and "predicate" in r:
            first.setdefault(str(r["predicate"]), r)
    out: dict[str, tuple[str, dict[str, int]]] = {}
    for name, r in first.items():
        field, m = r.get("from"), r.get("map") or {}
        if field not in FIELD_VALUES or r.get("when"):
            continue
        vals = FIELD_VALUES[str(field)]
        if all(v in m and m[v] in (0, 1) for v in vals):
            out[name] = (str(field), {v: int(m[v]) for v in vals})
    return out


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return np.log(q) - np.log1p(-q)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # stable for large |z|


def fit_platt(p: Sequence[float] | np.ndarray, y: Sequence[int] | np.ndarray,
              iters: int = 100) -> tuple[float, float]:
    """Platt ``(a, b)`` for raw probabilities ``p`` and 0/1 targets ``y``."""
    x = _logit(np.asarray(p, dtype=float))
    yy = np.asarray(y, dtype=float)
    n_pos, n_neg = yy.sum(), (1 - yy).sum()
    t = np.where(yy > 0.5, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    a, b = 1.0, 0.0
    for _ in range(iters):
        q = _sigmoid(a * x + b)
        g = np.array([((q - t) * x).sum(), (q - t).sum()])
        w = q * (1 - q)
        h = np.array([[(w * x * x).sum(), (w * x).sum()], [(w * x).sum(), w.sum()]])
        h += 1e-9 * np.eye(2)  # a single-valued x makes the Hessian singular
        step = np.linalg.solve(h, g)
        a, b = a - step[0], b - step[1]
        if np.abs(step).max() < 1e-10:
            break
    return float(a), float(b)


def apply_platt(p: Sequence[float] | np.ndarray, a: float, b: float) -> np.ndarray:
    """``sigmoid(a * logit(p) + b)`` elementwise."""
    return _sigmoid(a * _logit(np.asarray(p, dtype=float)) + b)


def ece(p: Sequence[float] | np.ndarray, y: Sequence[int] | np.ndarray, bins: int = 10
        ) -> float:
    """Expected calibration error of ``p`` against 0/1 ``y`` (see metrics)."""
    return expected_calibration_error(y, p, bins)


def brier(p: Sequence[float] | np.ndarray, y: Sequence[int] | np.ndarray) -> float:
    """Mean squared error of ``p`` against 0/1 targets (NaN when empty)."""
    pp, yy = np.asarray(p, dtype=float), np.asarray(y, dtype=float)
    return float(((pp - yy) ** 2).mean()) if pp.size else float("nan")


@dataclass(frozen=True)
class Sample:
    """One calibration sample of one predicate."""

    prompt_id: str
    p: float
    y: int


def samples(records: Sequence[Mapping[str, Any]], policy: str, scopes: Mapping[str, str]
            ) -> dict[str, list[Sample]]:
    """Per mapped predicate, its (prompt id, raw P, target) samples."""
    from plguard.evals.data import load_completions

    by_uid = {c.uid: c for c in load_completions()}
    mapping = target_map(policy)
    out: dict[str, list[Sample]] = {}
    seen: set[tuple[str, str]] = set()
    for r in records:
        c = by_uid.get(str(r.get("id")))
        if c is None or r.get("error"):
            continue
        for name, (field, m) in mapping.items():
            p = (r.get("predicates") or {}).get(name)
            if p is None or not math.isfinite(float(p)):
                continue
            if scopes.get(name) == "request":
                if (name, c.id) in seen:  # one sample per prompt: P does not see the response
                    continue
                seen.add((name, c.id))
            y = m[c.label if field == "label" else c.final_label]
            out.setdefault(name, []).append(Sample(c.id, float(p), y))
    return out


def split_ids(ids: Sequence[str], test_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """(train, test) prompt ids: a seeded shuffle of the distinct ids, cut at the fraction."""
    uniq = sorted(set(ids), key=lambda s: (len(s), s))
    random.Random(seed).shuffle(uniq)
    k = max(1, round(len(uniq) * test_fraction)) if len(uniq) > 1 else 0
    return set(uniq[k:]), set(uniq[:k])


def calibrate(folder: str | Path, out: str | Path, *, test_fraction: float = 0.5,
              seed: int = 0, policy: str | None = None) -> dict[str, Any]:
    """Fit per-predicate Platt scaling on a guard-labelled folder; write the JSON file."""
    from plguard.policy import load_policy

    f = Path(folder)
    gpath = f / "guard.jsonl"
    if not gpath.is_file():
        raise InputError(f"{f}: no guard.jsonl; run `plguard eval guard-labelled` first")
    meta: dict[str, Any] = {}
    try:
        meta = json.loads((f / "guard-labelled.json").read_text())["meta"]
    except (OSError, ValueError, KeyError):
        pass
    policy = policy or str(meta.get("policy", "minimal")).split("@")[0]
    pol = load_policy(policy)
    scopes = {p.name: p.scope for p in pol.predicates}
    by_pred = samples(read_jsonl(gpath), policy, scopes)
    if not by_pred:
        raise InputError(f"{gpath}: no predicate of policy {policy} has a label mapping "
                         f"and a score; mapped: {', '.join(target_map(policy)) or 'none'}")
    all_ids = [s.prompt_id for v in by_pred.values() for s in v]
    train, test = split_ids(all_ids, test_fraction, seed)
    preds: dict[str, Any] = {}
    for name, ss in sorted(by_pred.items()):
        tr = [s for s in ss if s.prompt_id in train]
        te = [s for s in ss if s.prompt_id in test]
        if len({s.y for s in tr}) < 2:
            continue  # one class only: Platt scaling would push every P to 0 or 1
        a, b = fit_platt([s.p for s in tr], [s.y for s in tr])
        p_te, y_te = np.array([s.p for s in te]), np.array([s.y for s in te])
        cal = apply_platt(p_te, a, b)
        field, m = target_map(policy)[name]
        preds[name] = {
            "a": a, "b": b, "method": "platt", "question": pol.predicate(name).question,
            "target": {"field": field, "positive": sorted(k for k, v in m.items() if v)},
            "n_train": len(tr), "n_test": len(te),
            "before": {"ece": ece(p_te, y_te), "brier": brier(p_te, y_te)},
            "after": {"ece": ece(cal, y_te), "brier": brier(cal, y_te)}}
    if not preds:
        raise InputError(f"{gpath}: every mapped predicate has a single class in the "
                         "training split; use more pairs")
    doc = {"format": FORMAT, "created": now_iso(), "policy": pol.id,
           "model": meta.get("model"), "source": str(gpath),
           "split": {"by": "prompt id", "seed": seed, "test_fraction": test_fraction,
                     "n_train_prompts": len(train), "n_test_prompts": len(test)},
           "predicates": preds}
    write_json_atomic(Path(out), doc)
    return doc


def format_report(doc: Mapping[str, Any]) -> str:
    """A markdown table of ECE and Brier before/after per predicate (held-out split)."""
    sp = doc["split"]
    lines = [f"Calibration of `{doc['policy']}` on `{doc.get('model')}`: Platt scaling fitted "
             f"on {sp['n_train_prompts']} prompts, tested on {sp['n_test_prompts']} held-out "
             f"prompts (split by prompt id, seed {sp['seed']}).", "",
             "| predicate | target | a | b | n train | n test | ECE before | ECE after "
             "| Brier before | Brier after |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in doc["predicates"].items():
        t = v["target"]
        lines.append(
            f"| {name} | {t['field']} in {'/'.join(t['positive'])} | {v['a']:.3f} | "
            f"{v['b']:.3f} | {v['n_train']} | {v['n_test']} | {v['before']['ece']:.3f} | "
            f"{v['after']['ece']:.3f} | {v['before']['brier']:.3f} | "
            f"{v['after']['brier']:.3f} |")
    return "\n".join(lines)


__all__ = ["FALLBACK_MAP", "apply_platt", "brier", "calibrate", "ece", "fit_platt",
           "format_report", "samples", "split_ids", "target_map"]
