"""Compare grounding runs that differ by one lever (answer words, wording, examples).

Each run is an ``eval quality ground`` folder on the same split. On the pairs every run
holds (so the comparison is paired), it reports per policy the AUROC of the strongest
unsafe and over-refusal rule on *raw* P(True) (calibration is fitted afterwards, so a
lever is judged by how well it ranks), with a paired-bootstrap 95% interval of the
difference to the first run, and each predicate's AUROC against its gold value.

A variant bundle is a folder named ``<policy>-<tag>`` (``detailed-ex``): it is compared
with ``<policy>`` of the other runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plguard.errors import InputError
from plguard.policy import Policy, load_policy
from plguard_lab.metrics import N_BOOT, paired_bootstrap
from plguard_lab.studies.quality.fit import (
    Records,
    finite_or_none,
    load_records,
    outcomes,
    policy_matrix,
    strongest,
)
from plguard_lab.studies.quality.report import fast_auroc, predicate_aurocs


def family(policy_name: str) -> str:
    """``detailed`` for ``detailed`` and for a variant folder ``detailed-ex``."""
    return policy_name.split("-", 1)[0]


def _bundles(recs: Records, policy_dirs: Sequence[str]) -> dict[str, Policy]:
    """The policies a run holds scores for, by family; variant folders from ``policy_dirs``."""
    out: dict[str, Policy] = {}
    by_name = {Path(d).name: d for d in policy_dirs}
    for name in (recs.manifest.get("keys") or {}):
        out[family(name)] = load_policy(by_name.get(name, name))
    return out


def _paired_ci(y: np.ndarray, a: np.ndarray, b: np.ndarray, n_boot: int,
               seed: int) -> tuple[float, float]:
    """95% interval of AUROC(b) - AUROC(a) over resampled pairs (one-class ones left out)."""
    return paired_bootstrap(
        (y, a, b), lambda yy, aa, bb: fast_auroc(yy, bb) - fast_auroc(yy, aa), n_boot, seed)[0]


def compare_runs(runs: Sequence[str | Path], *, split: str = "dev",
                 policy_dirs: Sequence[str] = (), n_boot: int = N_BOOT,
                 seed: int = 0) -> dict[str, Any]:
    """Rule and predicate AUROCs of each run on the pairs all of them hold."""
    if len(runs) < 1:
        raise InputError("compare needs at least one grounding run folder")
    loaded = [load_records(r, split) for r in runs]
    common = set.intersection(*({str(x["id"]) for x in rec.rows} for rec in loaded))
    if not common:
        raise InputError("the runs share no error-free pair of the split; ground the same "
                         "--split/--limit in each")
    subsets = [Records([x for x in rec.rows if str(x["id"]) in common], rec.manifest)
               for rec in loaded]
    for s in subsets:
        s.rows.sort(key=lambda x: str(x["id"]))
    y_u, y_o = outcomes(subsets[0].rows)
    bundles = [_bundles(s, policy_dirs) for s in subsets]
    rules: list[dict[str, Any]] = []
    preds: list[dict[str, Any]] = []
    for fam in sorted(set().union(*bundles)):
        base: tuple[np.ndarray, np.ndarray] | None = None
        for run, s, b in zip(runs, subsets, bundles, strict=True):
            if fam not in b:
                continue
            pol = b[fam]
            u, o = strongest(pol, np.nan_to_num(policy_matrix(s, pol), nan=0.5))
            row: dict[str, Any] = {"policy": fam, "bundle": pol.name, "run": str(run),
                                   "unsafe": finite_or_none(fast_auroc(y_u, u)),
                                   "over_refusal": finite_or_none(fast_auroc(y_o, o))}
            if base is None:
                base = (u, o)
            else:
                for key, y, ref, new in (("unsafe", y_u, base[0], u),
                                         ("over_refusal", y_o, base[1], o)):
                    if row[key] is not None:
                        row[f"{key}_diff_ci"] = _paired_ci(y, ref, new, n_boot, seed)
            rules.append(row)
            for p in predicate_aurocs(s, pol):
                preds.append({"policy": fam, "run": str(run), **p})
    return {"split": split, "n_pairs": len(common), "n_unsafe": int(y_u.sum()),
            "n_over_refusal": int(y_o.sum()), "runs": [str(r) for r in runs],
            "rules": rules, "predicates": preds}


def render_compare(doc: dict[str, Any]) -> str:
    """The comparison as markdown: rules, then predicates side by side."""
    runs = doc["runs"]
    names = {r: Path(r).name for r in runs}
    lines = [f"# Grounding levers on the {doc['split']} split", "",
             f"{doc['n_pairs']} pairs held by every run ({doc['n_unsafe']} unsafe "
             f"compliances, {doc['n_over_refusal']} over-refusals). Raw P(True); intervals "
             f"are paired-bootstrap 95% intervals of the difference to `{names[runs[0]]}`.",
             "", "## Strongest rule AUROC against XSTest outcomes", "",
             "| policy | run | unsafe | Δ vs first [95%] | over-refusal | Δ vs first [95%] |",
             "|---|---|---|---|---|---|"]
    first: dict[str, dict[str, Any]] = {}
    for r in doc["rules"]:
        f = first.setdefault(r["policy"], r)

        def diff(key: str, r: dict[str, Any] = r, f: dict[str, Any] = f) -> str:
            ci = r.get(f"{key}_diff_ci")
            if ci is None or f[key] is None:
                return "-"
            return f"{r[key] - f[key]:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"

        def val(x: float | None) -> str:
            return "n/a (one class)" if x is None else f"{x:.3f}"

        lines.append(f"| {r['policy']} | {names[r['run']]} | {val(r['unsafe'])} | "
                     f"{diff('unsafe')} | {val(r['over_refusal'])} | {diff('over_refusal')} |")
    lines += ["", "## Predicate AUROC against gold", "",
              "| policy | predicate | n | " + " | ".join(names[r] for r in runs) + " |",
              "|---|---|---|" + "---|" * len(runs)]
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for p in doc["predicates"]:
        name = p["predicate"] + (" (proxy)" if p.get("target") == "proxy" else "")
        cell = table.setdefault((p["policy"], name), {"n": p["n"]})
        cell[p["run"]] = p["auroc"]
    for (pol, pred), cell in table.items():
        vals = [cell.get(r, "absent") for r in runs]
        txt = ["-" if v == "absent" else ("n/a" if v is None else f"{v:.3f}") for v in vals]
        lines.append(f"| {pol} | {pred} | {cell['n']} | " + " | ".join(txt) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["compare_runs", "family", "render_compare"]
