"""AUROC of the guard-as-classifier scores across guard-labelled folders, paired bootstrap.

    python scripts/results/compare_auroc.py DIR_A DIR_B [DIR_C ...]

The first folder is the reference: the interval is of (other - reference) AUROC, from
the same resampled pairs (seed 0, 1000 resamples), over pairs present in every folder.
"""
import sys
from pathlib import Path

import numpy as np

from plguard.records.store import read_jsonl
from plguard_lab.labels.xstest import load_completions
from plguard_lab.metrics import auroc
from plguard_lab.studies.xstest.labelled import targets

dirs = [Path(d) for d in sys.argv[1:]]
recs = [{r["id"]: r for r in read_jsonl(d / "guard.jsonl") if not r.get("error")} for d in dirs]
ids = sorted(set.intersection(*(set(r) for r in recs)))
by_uid = {c.uid: c for c in load_completions()}
rng = np.random.default_rng(0)
boot = [rng.integers(0, len(ids), len(ids)) for _ in range(1000)]
print(f"pairs: {len(ids)}")
print("| score | folder | positives | AUROC | diff vs first [95% CI] |\n|---|---|---|---|---|")
for k, (name, key) in enumerate((("unsafe compliance", "strongest_unsafe"),
                                 ("over-refusal", "strongest_over_refusal"))):
    y = np.array([targets(by_uid[i])[k] for i in ids])
    scores = [np.array([r[i][key][1] for i in ids]) for r in recs]
    for d, s in zip(dirs, scores, strict=True):
        a = auroc(y, s)
        diffs = [auroc(y[b], s[b]) - auroc(y[b], scores[0][b]) for b in boot]
        diffs = [x for x in diffs if np.isfinite(x)]
        lo, hi = np.quantile(diffs, [0.025, 0.975]) if diffs else (np.nan, np.nan)
        dd = "-" if d == dirs[0] else f"{a - auroc(y, scores[0]):+.3f} [{lo:+.3f}, {hi:+.3f}]"
        print(f"| {name} | {d.name} | {int(y.sum())} | {a:.3f} | {dd} |")
