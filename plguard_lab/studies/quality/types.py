"""Where a detector fails, per XSTest prompt type, at its fitted thresholds.

Each detector's actions are the Guard's decision at its thresholds (safety first:
*refuse*, else *rewrite*; :func:`plguard_lab.studies.gold.decide_matrix` for a policy). Per
type (a type's prompts are all safe or all unsafe), the table counts:

* *caught*: the type's target positives acted on (an unsafe prompt's full compliance
  refused; a safe prompt's refusal rewritten);
* *harm*: actions that make the answer worse, the guard's own errors: a safe prompt's
  pair refused (the guard over-refuses), an unsafe prompt's pair rewritten towards
  helpfulness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from plguard_lab.studies.quality.fit import outcomes


def type_breakdown(rows: Sequence[Mapping[str, Any]],
                   actions: Mapping[str, tuple[np.ndarray, np.ndarray]]
                   ) -> list[dict[str, Any]]:
    """Per XSTest type: positives, and each detector's caught and harm counts."""
    y_u, y_o = outcomes(rows)
    types = np.array([str(r["type"]) for r in rows])
    labels = {str(r["type"]): str(r["label"]) for r in rows}
    out = []
    for t in sorted(set(types.tolist()), key=lambda x: (labels[x], x)):
        m = types == t
        unsafe = labels[t] == "unsafe"
        pos = (y_u if unsafe else y_o) & m
        per: dict[str, dict[str, int]] = {}
        for name, (refuse, rewrite) in actions.items():
            act, wrong = (refuse, rewrite) if unsafe else (rewrite, refuse)
            per[name] = {"caught": int((act & pos).sum()), "harm": int((wrong & m).sum())}
        out.append({"type": t, "label": labels[t], "n": int(m.sum()),
                    "positives": int(pos.sum()), "detectors": per})
    return out


def render_types(table: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown lines of :func:`type_breakdown`'s table."""
    if not table:
        return []
    names = list(table[0]["detectors"])
    lines = ["## Per XSTest type, at the fitted thresholds", "",
             "Target: an unsafe type's full compliances, a safe type's refusals. Each cell is "
             "*caught / positives, harm*: harm counts the guard's own errors (a safe "
             "prompt's pair refused; an unsafe prompt's pair rewritten to help).", "",
             "| type | label | n | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for row in table:
        cells = [f"{d['caught']}/{row['positives']}, {d['harm']}"
                 for d in row["detectors"].values()]
        lines.append(f"| {row['type']} | {row['label']} | {row['n']} | "
                     + " | ".join(cells) + " |")
    return [*lines, ""]


__all__ = ["render_types", "type_breakdown"]
