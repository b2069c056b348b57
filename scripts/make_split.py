"""Write eval/data/xstest/split.json: the seeded, stratified XSTest dev/test split.

    python scripts/make_split.py          # (re)writes the committed file
The file is committed; tests check it equals make_split() of the vendored prompts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from plguard.evals.data import load_prompts
from plguard.evals.quality.splits import DEV_FRACTION, SEED, make_split

OUT = Path(__file__).resolve().parents[1] / "eval" / "data" / "xstest" / "split.json"


def main() -> None:
    prompts = load_prompts()
    ids = make_split(prompts)
    counts = Counter((ids[p.id], p.label) for p in prompts)
    doc = {"about": "XSTest prompt ids split into dev (choices are made here) and test "
                    "(figures are reported here); labelled completions follow their prompt. "
                    "Made by scripts/make_split.py.",
           "fraction_dev": DEV_FRACTION, "seed": SEED, "stratified_by": ["type", "label"],
           "counts": {f"{s}/{lab}": n for (s, lab), n in sorted(counts.items())},
           "ids": {p.id: ids[p.id] for p in prompts}}
    OUT.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    main()
