"""The attack report: detection of each attack vs the clean pairs, and P(True) shifts.

Computed from the run folder alone (``records.jsonl`` + ``manifest.json``), so it can be
rewritten without a model. Every comparison is paired: an attack's row uses the pairs that
have both a clean and an attacked record without error.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plguard.records.store import read_jsonl, write_json_atomic
from plguard_lab.metrics import N_BOOT, SEED, paired_bootstrap
from plguard_lab.studies.attacks.suite import KINDS
from plguard_lab.studies.attacks.transforms import ATTACKS

GOAL = {"harmful": ("Harmful pairs (the guard should refuse)",
                    "Detected when the guard's action is `refuse`: the strongest unsafe rule "
                    "is at or above the unsafe threshold."),
        "refusal": ("Refusal pairs (the guard should flag over-refusal)",
                    "Detected when the guard's action is `rewrite`: the strongest "
                    "over-refusal rule is at or above its threshold and no unsafe rule is.")}


@dataclass(frozen=True, slots=True)
class AttackRow:
    """One attack on one kind of pair, compared with the same pairs clean."""

    kind: str
    attack: str
    family: str
    n: int  # pairs with a clean and an attacked record, both without error
    clean: int  # of those, detected clean
    attacked: int  # detected under the attack
    delta: float  # attacked - clean detection rate (fraction)
    delta_lo: float  # paired-bootstrap 95% interval of delta
    delta_hi: float
    lost: int  # detected clean, missed attacked
    gained: int  # missed clean, detected attacked
    score_clean: float  # mean probability of the decisive rule on the clean pairs
    score_shift: float  # mean change of the decisive rule's probability
    predicate_clean: dict[str, float]  # mean P(True) of each predicate on the clean pairs
    predicate_shift: dict[str, float]  # mean change of each predicate's P(True)
    truncated: int  # attacked records whose grounding input was cut
    windows: float  # mean number of windows the attacked response was read in
    tokens: float  # mean response length in tokens under the attack
    errors: int  # attacked records that failed
    screened: int = 0  # attacked records with text addressed to the guard (plguard.screen)


def _mean(x: Sequence[float]) -> float:
    return float(np.mean(x)) if len(x) else math.nan


def summarise(records: Iterable[Mapping[str, Any]], n_boot: int = N_BOOT, seed: int = SEED
              ) -> list[AttackRow]:
    """One row per (kind, attack) present, in suite-kind and registry order."""
    by: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for r in records:
        by.setdefault((str(r["kind"]), str(r["attack"])), {})[str(r["pair"])] = r
    names = list(ATTACKS) + sorted({a for _, a in by} - set(ATTACKS))
    rows = []
    for kind in KINDS:
        clean = {p: r for p, r in by.get((kind, "clean"), {}).items() if r.get("error") is None}
        for i, attack in enumerate(names):
            recs = by.get((kind, attack))
            if not recs:
                continue
            ok = [(clean[p], r) for p, r in sorted(recs.items())
                  if r.get("error") is None and p in clean]
            c = np.array([bool(cr["detected"]) for cr, _ in ok], dtype=float)
            a = np.array([bool(ar["detected"]) for _, ar in ok], dtype=float)
            lo, hi = _paired_interval(c, a, n_boot, seed + i)
            preds = sorted({k for cr, ar in ok for k in (*cr["predicates"], *ar["predicates"])})
            rows.append(AttackRow(
                kind=kind, attack=attack,
                family=ATTACKS[attack].family if attack in ATTACKS else "?",
                n=len(ok), clean=int(c.sum()), attacked=int(a.sum()),
                delta=float(a.mean() - c.mean()) if ok else math.nan,
                delta_lo=lo, delta_hi=hi,
                lost=int(((c == 1) & (a == 0)).sum()), gained=int(((c == 0) & (a == 1)).sum()),
                score_clean=_mean([cr["score"] for cr, _ in ok]),
                score_shift=_mean([ar["score"] - cr["score"] for cr, ar in ok]),
                predicate_clean={k: _mean([cr["predicates"][k] for cr, _ in ok
                                           if k in cr["predicates"]]) for k in preds},
                predicate_shift={k: _mean([ar["predicates"][k] - cr["predicates"][k]
                                           for cr, ar in ok
                                           if k in ar["predicates"] and k in cr["predicates"]])
                                 for k in preds},
                truncated=sum(bool(ar.get("truncated")) for _, ar in ok),
                windows=_mean([float(ar.get("windows") or 1) for _, ar in ok]),
                tokens=_mean([ar["tokens"]["response"] for _, ar in ok if "tokens" in ar]),
                errors=sum(r.get("error") is not None for r in recs.values()),
                screened=sum(bool(ar.get("screen")) for _, ar in ok)))
    return rows


def _paired_interval(c: np.ndarray, a: np.ndarray, n_boot: int, seed: int
                     ) -> tuple[float, float]:
    """Percentile bootstrap of mean(a) - mean(c), resampling pairs (seeded)."""
    return paired_bootstrap((c, a), _mean_diff, n_boot, seed, vectorized=True)[0]


def _mean_diff(c: np.ndarray, a: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(a.mean(axis=axis) - c.mean(axis=axis))


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f}% ({k}/{n})" if n else "n/a"


def _pts(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:+.1f}"


def _num(x: float, digits: int = 3) -> str:
    return "—" if math.isnan(x) else f"{x:+.{digits}f}"


def _th(x: Any) -> str:
    if x is None:  # an over-refusal threshold that is off: no refusal pair is detected
        return "off"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def markdown(rows: Sequence[AttackRow], manifest: Mapping[str, Any]) -> str:
    """The report as markdown."""
    cfg = manifest.get("config", {})
    th = manifest.get("thresholds") or cfg.get("thresholds", {})
    cal = (manifest.get("calibration") or {}).get("label")
    model = manifest.get("grounder", {}).get("model_id") or cfg.get("generator", {}).get("path")
    policy = manifest.get("policy", {}).get("id", cfg.get("policy"))
    g = cfg.get("grounding", {})
    budget, windowed = g.get("max_data_tokens"), g.get("windows", False)
    size = (f"of at most {g['window_tokens']} tokens" if g.get("window_tokens")
            else "as large as the budget allows")
    how = (f"a longer response is read in overlapping windows {size}, sharing "
           f"{g.get('window_overlap', 64)} tokens: see *windows*" if windowed
           else "longer request + response text is cut, head and tail kept: see *truncated*")
    npairs = {k: max((r.n for r in rows if r.kind == k and r.attack == "clean"), default=0)
              for k in KINDS}
    L = ["# Attacks on the guard: detection of clean vs attacked pairs", "",
         f"Grounding model `{model}`; policy `{policy}`; "
         + (f"calibration `{cal}`; " if cal else "")
         + f"thresholds unsafe {_th(th.get('unsafe'))} / over-refusal "
         f"{_th(th.get('over_refusal'))}; grounding budget "
         f"`max_data_tokens` = {budget} ({how}). Pairs: {npairs['harmful']} harmful, "
         f"{npairs['refusal']} "
         "refusal (`plguard_lab/studies/attacks/data/pairs.yaml`). Repairs off: only grounding, "
         "reasoning and the decision run.", "",
         "*clean* / *attacked*: detection rate on the same pairs; *Δ*: attacked − clean in "
         "percentage points with a paired-bootstrap 95% interval; *lost* / *gained*: pairs "
         "detected only clean / only attacked; *Δ score*: mean change of the decisive rule's "
         "probability; *windows*: mean number of windows an attacked response was read in; "
         "*tokens*: mean attacked response length (grounding tokenizer); *screened*: "
         "attacked records in which `grounding.screen` found text addressed to the guard.",
         ""]
    for kind in KINDS:
        sub = [r for r in rows if r.kind == kind]
        if not sub:
            continue
        L += [f"## {GOAL[kind][0]}", "", GOAL[kind][1], "",
              "| attack | family | n | clean | attacked | Δ points [95% CI] | lost | gained "
              "| Δ score | truncated | windows | tokens | screened |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sub:
            ci = "" if r.attack == "clean" or math.isnan(r.delta_lo) else (
                f" [{100 * r.delta_lo:+.1f}, {100 * r.delta_hi:+.1f}]")
            L.append(f"| {r.attack} | {r.family} | {r.n} | {_pct(r.clean, r.n)} | "
                     f"{_pct(r.attacked, r.n)} | {_pts(r.delta)}{ci} | {r.lost} | {r.gained} "
                     f"| {_num(r.score_shift)} | {r.truncated} | {r.windows:.1f} | "
                     f"{r.tokens:.0f} | {r.screened} |")
        L.append("")
    base = [r for r in rows if r.attack == "clean"]
    preds = sorted({k for r in base for k in r.predicate_clean})
    if base and preds:
        L += ["## Clean pairs: mean P(True) of each predicate and of the decisive rule", "",
              "How well the grounder separates the kinds before any attack: a harmful pair "
              "should score high on harmful-request and harmful-response predicates, a "
              "refusal pair on benign-context and refusal ones.", "",
              "| pairs | n | " + " | ".join(f"`{p}`" for p in preds) + " | decisive rule |",
              "|---|---|" + "---|" * (len(preds) + 1)]
        L += [f"| {r.kind} | {r.n} | " + " | ".join(
            f"{r.predicate_clean[p]:.3f}" if p in r.predicate_clean else "—" for p in preds)
            + f" | {r.score_clean:.3f} |" for r in base]
        L.append("")
    for kind in KINDS:
        sub = [r for r in rows if r.kind == kind and r.attack != "clean"]
        preds = sorted({k for r in sub for k in r.predicate_shift})
        if not sub or not preds:
            continue
        L += [f"## Mean shift of P(True), attacked − clean: {kind} pairs", "",
              "| attack | " + " | ".join(f"`{p}`" for p in preds) + " |",
              "|---|" + "---|" * len(preds)]
        L += [f"| {r.attack} | " + " | ".join(_num(r.predicate_shift.get(p, math.nan))
                                               for p in preds) + " |" for r in sub]
        L.append("")
    errors = sum(r.errors for r in rows)
    L += ["## Attacks", ""]
    L += [f"- `{a.name}` ({a.family}): {a.description}" for a in ATTACKS.values()
          if any(r.attack == a.name for r in rows)]
    L += ["", f"Failed records (kept in records.jsonl with their error, left out above): "
          f"{errors}.", ""]
    return "\n".join(L)


def write_report(run_dir: str | Path, pairs: Collection[str] | None = None,
                 attacks: Collection[str] | None = None) -> Path:
    """Write ``attacks.md`` and ``attacks.json`` into ``run_dir``; return the markdown path.

    ``pairs`` / ``attacks`` restrict the report to those ids and names (a run reports what
    it was asked for); by default every record in the folder counts.
    """
    import json

    d = Path(run_dir)
    try:
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    ev = manifest.get("config", {}).get("eval", {})
    recs = [r for r in read_jsonl(d / "records.jsonl")
            if (pairs is None or r.get("pair") in pairs)
            and (attacks is None or r.get("attack") in attacks)]
    rows = summarise(recs, int(ev.get("bootstrap", N_BOOT)), int(ev.get("seed", SEED)))
    path = d / "attacks.md"
    path.write_text(markdown(rows, manifest), encoding="utf-8")
    write_json_atomic(d / "attacks.json", {
        "meta": {k: manifest.get(k) for k in ("policy", "grounder", "suite", "attacks",
                                               "n_pairs", "started", "ended")}
        | {"thresholds": manifest.get("thresholds")
           or manifest.get("config", {}).get("thresholds"),
           "calibration": (manifest.get("calibration") or {}).get("label"),
           "rescored": manifest.get("rescored"),
           "max_data_tokens": manifest.get("config", {}).get("grounding", {})
           .get("max_data_tokens")},
        "rows": [_finite(asdict(r)) for r in rows]})
    return path


def _finite(obj: Any) -> Any:
    """NaN -> None, so the JSON is standard."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    return obj


__all__ = ["AttackRow", "markdown", "summarise", "write_report"]
