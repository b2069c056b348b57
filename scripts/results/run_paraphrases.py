"""Paraphrase effect on the guard-as-classifier AUROC (minimal policy, embedded model).

Grounds a seeded, stratified subset of the labelled XSTest completions with and without
paraphrases through the grounding cache: the second pass reuses the main questions' rows,
so it makes no model calls. Run from the repo root:
    OMP_NUM_THREADS=1 python scripts/results/run_paraphrases.py N
"""
import sys
from pathlib import Path

from plguard.config import GuardConfig
from plguard_lab.studies.xstest.labelled import guard_labelled

n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
here = Path(__file__).resolve().parents[2] / "eval" / "results" / "ablation-cpu"
for para in (True, False):
    cfg = GuardConfig.from_dict({"policy": "minimal", "grounding": {
        "cache": "default", "paraphrases": para}})
    out = here / f"labelled-minimal-{'para' if para else 'nopara'}"
    print(guard_labelled(cfg, out, limit=n, judge=False, progress=True), flush=True)
