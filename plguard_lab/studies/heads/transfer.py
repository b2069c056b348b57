"""Tables of a heads-transfer run (scripts/results/heads_transfer.sh): choices, ablations.

    python scripts/results/heads_transfer_table.py eval/results/heads-transfer-embedded

Reads the ``*.fits.json`` records ``plguard heads fit`` writes beside each heads file (the
shipped recipe in the folder, the ablations in ``ablations/``) and prints Markdown:

* per policy and predicate, the choice, its worst held-out source and every source's
  held-out metric (AUROC; pairwise accuracy for hh-harmless), zero-shot beside it;
* the ablations on dev (those run so far): the worst held-out source over the sources
  every variant holds out
  (own drafts excluded, since a variant without drafts has none to hold out), the mean,
  and the own drafts held out (before) and cross-fitted (after) where drafts trained.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

# The shipped recipe may read a pair's question state; "one forward" is the same recipe
# without it, and the three after it drop augmentation, drafts or both from that one.
VARIANTS = (("shipped recipe", ""), ("one forward (no question)", "-one-forward"),
            ("one forward, no augmentation", "-no-augment"),
            ("one forward, no drafts", "-no-drafts"), ("one forward, neither", "-neither"))


def _f(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _fits(path: Path) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in json.loads(path.read_text())} if path.is_file() else {}


def choices(folder: Path) -> list[str]:
    """Per policy and predicate: the choice, its worst held-out source, every source."""
    out = []
    for path in sorted(folder.glob("heads-*.fits.json")):
        policy = path.name[len("heads-"):-len(".fits.json")]
        fits = _fits(path)
        srcs = sorted({s for f in fits.values() for s in f.get("heldout") or {}})
        out += ["", f"### {policy}", "",
                "| predicate | choice | readout@layer | worst held-out | chosen by CV (before): "
                "readout@layer, worst held-out | "
                + " | ".join(srcs) + " | own drafts held out -> cross-fitted |",
                "|---" * (len(srcs) + 6) + "|"]
        for name, f in fits.items():
            h, z = f.get("heldout") or {}, f.get("zero_shot_heldout") or {}
            cells = [f"{_f(h.get(s))} ({_f(z.get(s))})" if s in h else "-" for s in srcs]
            od = f.get("own_drafts") or {}
            own = f"{_f(od.get('held_out'))} -> {_f(od.get('cross_fitted'))}" if od else "-"
            at = f"{f['readout']}@{f['layer']}" if f.get("readout") else "-"
            worst = f"{_f(f.get('cv_auroc'))} ({f.get('worst_source') or '-'})" \
                if h else "-"
            cv = f.get("by_cv") or {}
            before = (f"{cv['readout']}@{cv['layer']}, "
                      f"{_f(min((v for v in cv['heldout'].values() if v == v), default=None))}"
                      if cv else "-")
            out.append(f"| {name} | {f.get('choice') or 'zero-shot'} | {at} | {worst} | "
                       f"{before} | " + " | ".join(cells) + f" | {own} |")
    return out


def ablations(folder: Path) -> list[str]:
    """The ablations of ``ablations/`` beside the shipped recipe, on dev."""
    out = ["", "| policy | predicate | variant | worst held-out (common sources) | mean | "
           "own drafts held out -> cross-fitted |", "|---|---|---|---|---|---|"]
    for policy in ("minimal", "detailed"):
        runs = {v: _fits(folder / f"heads-{policy}.fits.json" if not suf else
                         folder / "ablations" / f"{policy}{suf}.fits.json")
                for v, suf in VARIANTS}
        runs = {v: r for v, r in runs.items() if r}  # variants not run yet are left out
        if len(runs) < 2 or "shipped recipe" not in runs:
            continue
        for name in runs["shipped recipe"]:
            common = set.intersection(*(set(r[name].get("heldout") or {}) for r in
                                        runs.values())) - {"drafts"}
            for v, r in runs.items():
                h = r[name].get("heldout") or {}
                vals = [h[s] for s in sorted(common) if h.get(s) is not None]
                if not vals:
                    continue
                lo = min(vals)
                src = min((s for s in common if h.get(s) is not None), key=lambda s: h[s])
                od = r[name].get("own_drafts") or {}
                own = (f"{_f(od.get('held_out'))} -> {_f(od.get('cross_fitted'))}"
                       if od else "-")
                out.append(f"| {policy} | {name} | {v} | {_f(lo)} ({src}) | "
                           f"{_f(sum(vals) / len(vals))} | {own} |")
    return out


def tables(folder: Path) -> str:
    """The Markdown of ``tables.md`` for a heads-transfer results folder."""
    lines = [f"# Heads chosen for transfer: {folder.name}", "",
             "Made by `scripts/results/heads_transfer.sh`; this file by "
             f"`python scripts/results/heads_transfer_table.py {folder}`. Held-out metric "
             "per source (zero-shot on its read subset in brackets): AUROC, pairwise "
             "accuracy for hh_harmless (plguard_lab.training.select)."]
    lines += choices(folder)
    if (folder / "ablations").is_dir():
        lines += ["", "## Ablations (dev)"] + ablations(folder)
    return "\n".join(lines)


def main() -> None:
    """``python scripts/results/heads_transfer_table.py FOLDER``: print its tables."""
    print(tables(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
