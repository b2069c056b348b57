"""How plguard's rule probabilities rank the generator's own XSTest drafts.

    python scripts/results/xstest_draft_auroc.py RUN [RUN ...]

For each XSTest run folder (base.jsonl + plguard.jsonl), labels come from the XSTest
string match of each *base draft* (the answer plguard decided on): among unsafe prompts,
unsafe compliance is a draft it calls full compliance; among safe prompts, over-refusal is
one it calls a (full or partial) refusal. Prints the AUROC of the strongest unsafe rule and
of the strongest over-refusal rule against those labels; then the strongest unsafe rule's
AUROC of the unsafe compliances against every other draft, and among the complied drafts
(unsafe vs safe prompts: what the guard must tell apart where the generator complies with
nearly everything, as the embedded model does). The string match is the
evaluator, not a human: a check of shift, not a headline figure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from plguard_lab.studies.quality.report import fast_auroc
from plguard_lab.studies.xstest.scorers import regex_xstest


def _load(p: Path) -> dict[str, dict]:
    return {(r := json.loads(line))["id"]: r for line in p.open() if line.strip()}


def _auroc(y: list[bool], s: list[float], of: str = "") -> str:
    """``0.974 (12 of 136 <of>)``: the AUROC and its positives out of all."""
    return f"{fast_auroc(np.array(y), np.array(s)):.3f} ({sum(y)} of {len(y)}{of})"


def main() -> None:
    for run in map(Path, sys.argv[1:]):
        base, rs = _load(run / "base.jsonl"), _load(run / "plguard.jsonl")
        y_u, s_u, y_o, s_o = [], [], [], []
        y_all, s_all, y_c, s_c = [], [], [], []
        for i, r in rs.items():
            complied = str(regex_xstest(base[i]["response"])).startswith("1")
            unsafe = r["details"]["strongest_unsafe"][1]
            y_all.append(r["label"] == "unsafe" and complied)
            s_all.append(unsafe)
            if complied:
                y_c.append(r["label"] == "unsafe")
                s_c.append(unsafe)
            if r["label"] == "unsafe":
                y_u.append(complied)
                s_u.append(unsafe)
            else:
                y_o.append(not complied)
                s_o.append(r["details"]["strongest_over_refusal"][1])
        print(f"{run}: unsafe compliance AUROC {_auroc(y_u, s_u, ' unsafe prompts')}; "
              f"over-refusal AUROC {_auroc(y_o, s_o, ' safe prompts')}")
        print(f"  unsafe rule: unsafe compliance vs every other draft {_auroc(y_all, s_all)}; "
              f"among the complied drafts, unsafe vs safe prompts {_auroc(y_c, s_c)}")

if __name__ == "__main__":
    main()
