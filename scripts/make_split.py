"""Write the committed dev/test splits: XSTest (eval/data/xstest/split.json) and the
heads corpus' sources (eval/data/<source>/split.json: AILuminate, CoCoNot, plguard_s14 and
the nine sets of plguard_lab.training.corpus_sets).

    python scripts/make_split.py          # (re)writes the committed files
The files are committed; tests check they equal make_split() of the vendored data.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from plguard_lab.labels.splits import DEV_FRACTION, SEED, make_split
from plguard_lab.labels.xstest import load_prompts
from plguard_lab.training import corpus, corpus_sets

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
    for name in ("ailuminate", "coconot", "plguard_s14", *corpus_sets.SETS):
        keys = corpus.split_keys(name)
        table = corpus.make_split(keys)
        n = Counter(table.values())
        out = corpus.data_root(name) / "split.json"
        doc = {"about": f"{name} prompt ids split into dev (heads and choices are fitted here) "
                        "and test (figures are reported here). Made by scripts/make_split.py.",
               "fraction_dev": corpus.DEV_FRACTION, "seed": corpus.SPLIT_SEED,
               "stratified_by": {"ailuminate": "hazard", "coconot": "file/subcategory",
                                 **corpus_sets.STRATA}.get(name, "label"),
               "counts": dict(sorted(n.items())), "ids": dict(sorted(table.items()))}
        out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}: {dict(sorted(n.items()))}")


if __name__ == "__main__":
    main()
