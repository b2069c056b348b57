"""Heads vs zero-shot on the guard-labelled test subset (plguard_lab.studies.heads.report).

    python scripts/results/heads_report.py --out DIR --pairs N \
        --run "NAME=POLICY" --run "NAME=POLICY:HEADS.json" ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from plguard.backends import load_backend
from plguard.config import GuardConfig
from plguard.heads.artefact import load_heads
from plguard_lab.config import eval_settings
from plguard_lab.studies.heads.report import heads_report, render, write


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--run", action="append", required=True)
    a = ap.parse_args()
    cfg = GuardConfig.from_dict({"generator": {"path": a.model}})
    backend = load_backend(cfg.grounder_model)
    runs = {}
    for r in a.run:
        name, _, spec = r.partition("=")
        policy, _, heads = spec.partition(":")
        runs[name] = (policy, load_heads(heads) if heads else None)
    ev = eval_settings(cfg)
    doc = heads_report(backend, runs, a.pairs, ev.seed, cfg.grounding, ev.bootstrap)
    write(doc, Path(a.out))
    print(render(doc))


if __name__ == "__main__":
    main()
