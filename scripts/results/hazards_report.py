"""The hazards study on the test parts (plguard_lab.studies.hazards.report).

    python scripts/results/hazards_report.py --model embedded --out DIR \
        --run "zero-shot" --run "heads=HEADS.json" [--zs-limit N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from plguard.backends import load_backend
from plguard.calibration import load_calibration
from plguard.config import GuardConfig
from plguard.heads.artefact import load_heads
from plguard_lab.config import eval_settings
from plguard_lab.studies.hazards.report import hazards_report, render, write


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", action="append", required=True,
                    help="NAME (zero-shot) or NAME=HEADS.json")
    ap.add_argument("--zs-limit", type=int, default=10,
                    help="zero-shot: a seeded sample of N prompts per group (0: all)")
    ap.add_argument("--calibration", action="append", default=[], metavar="NAME=FILE.json",
                    help="flag run NAME at the moderation threshold of this calibration file "
                         "(`plguard eval quality fit-heads`, fitted on dev for its heads), "
                         "its zero-shot predicates read through the file's moderation maps")
    ap.add_argument("--heads-limit", type=int, default=0,
                    help="heads: a seeded sample of N prompts per group (0: all)")
    a = ap.parse_args()
    cfg = GuardConfig.from_dict({"generator": {"path": a.model}, "policy": "hazards"})
    backend = load_backend(cfg.grounder_model)
    runs = {}
    for r in a.run:
        name, _, heads = r.partition("=")
        runs[name] = load_heads(heads) if heads else None
    fitted, maps = {}, {}
    for c in a.calibration:
        name, _, path = c.partition("=")
        cal = load_calibration(path)
        th = cal.thresholds
        maps[name] = dict(cal.moderation)  # zero-shot categories' moderation maps, if any
        # Files fitted before thresholds.moderation existed carry it as the unsafe one.
        t = th.get("moderation", th.get("unsafe"))
        if name not in runs or t is None:
            ap.error(f"--calibration {c}: no run {name!r}, or no moderation threshold in "
                     f"{path}")
        fitted[name] = t
    doc = hazards_report(backend, runs, cfg.grounding, zs_limit=a.zs_limit or None,
                         heads_limit=a.heads_limit or None,
                         threshold=cfg.thresholds.moderation_at, thresholds=fitted, maps=maps,
                         n_boot=eval_settings(cfg).bootstrap,
                         seed=eval_settings(cfg).seed)
    write(doc, Path(a.out))
    print(render(doc))


if __name__ == "__main__":
    main()
