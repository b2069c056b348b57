"""Two fits of one predicate, held out by source, compared on what each figure reads.

``python -m plguard_lab.studies.read.compare BEFORE/fits-P.jsonl AFTER/fits-P.jsonl
--predicate NAME --changed plguard_passages``

A refit that adds items to a source changes two things in the held-out tables: the heads
(fitted on the new items) and the items some figures are read on. A one-class source's
figure is the mean of its cells against the other class of each other source, each read
by a head fitted without both; a cell against a changed source is read by the same head in
both fits (neither fit trained on either source) on other items, so its difference is the
items', not the refit's. This prints every figure and cell of both fits with its
difference and says which kind each is:

* ``refit``: the items are the same and the heads differ (what a ship condition is about);
* ``items``: the same head on other items (a changed source is read);
* ``both``: the source itself changed.

The ship conditions of ``scripts/results/read_passages_refit.sh`` up to the 360-passage
refit were written on the sources' figures, which mix the kinds (docs/quality.md, *120
more benign answers*); a condition written on the ``refit`` rows is what this is for.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any


def load_fit(path: Path, predicate: str) -> dict[str, Any]:
    """The record of ``predicate`` in a ``fits-*.jsonl`` file."""
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("name") == predicate:
            return rec
    raise SystemExit(f"{path}: no fit of {predicate!r} (is it the predicate's fits file?)")


def rows(before: Mapping[str, Any], after: Mapping[str, Any],
         changed: Collection[str]) -> list[tuple[str, str, float, float, str]]:
    """(source, against, before, after, kind) for every figure and cell both fits have.

    ``against`` is empty for a source's own figure; kind as in the module docstring.
    """
    out: list[tuple[str, str, float, float, str]] = []
    mb, ma = before.get("matrix") or {}, after.get("matrix") or {}
    for s in sorted(set(before["heldout"]) & set(after["heldout"])):
        if s in changed:
            kind = "both"
        elif s in mb and s in ma:  # one class: the mean of its cells
            kind = "items" if set(mb[s]) & set(changed) else "refit"
        else:
            kind = "refit"
        out.append((s, "", before["heldout"][s], after["heldout"][s], kind))
        for t in sorted(set(mb.get(s, {})) & set(ma.get(s, {}))):
            out.append((s, t, mb[s][t], ma[s][t], "items" if t in changed else "refit"))
    return out


def worst_refit_drop(table: Sequence[tuple[str, str, float, float, str]],
                     skip: Collection[str] = ()) -> tuple[float, str]:
    """The largest fall from before to after among ``refit`` rows (sources in ``skip`` aside).

    A source's own figure counts only where it is a ``refit`` row; a one-class source's
    ``refit`` cells count one by one.
    """
    worst, where = 0.0, ""
    for s, t, b, a, kind in table:
        if kind == "refit" and s not in skip and b - a > worst:
            worst, where = b - a, f"{s} against {t}" if t else s
    return round(worst, 4), where


def render(table: Sequence[tuple[str, str, float, float, str]]) -> str:
    """A markdown table of :func:`rows`."""
    lines = ["| held-out source | against | before | after | difference | what differs |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {s} | {t or '(its figure)'} | {b:.3f} | {a:.3f} | {a - b:+.3f} | {k} |"
              for s, t, b, a, k in table]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the comparison and the largest fall on ``refit`` rows."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.compare",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--predicate", required=True)
    ap.add_argument("--changed", default="", help="sources whose items differ, comma-separated")
    ap.add_argument("--skip", default="hh_harmless", help="sources left out of the worst "
                    "fall (default hh_harmless: its labels are pair judgements)")
    a = ap.parse_args(argv)
    changed = {x for x in a.changed.split(",") if x}
    table = rows(load_fit(a.before, a.predicate), load_fit(a.after, a.predicate), changed)
    print(render(table), end="")
    drop, where = worst_refit_drop(table, {x for x in a.skip.split(",") if x})
    print(f"\nlargest fall on refit rows: {drop:.3f}" + (f" ({where})" if where else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
