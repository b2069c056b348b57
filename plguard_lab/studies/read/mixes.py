"""Which sources a request head should be fitted on: harmful-vs-scary cells by training mix.

``python -m plguard_lab.studies.read.mixes --out DIR`` fits the prior request head of
minimal's ``request_is_harmful`` (mean at half depth) on several mixes of dev sources and
ranks, for each cell (a harmful source against a benign source), the cell's two sources by
a head fitted without *both*: the closest dev reading of "harmful requests of a benchmark
nobody trained on against safe requests that sound dangerous". Writes ``DIR/mixes.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

CORE = ("xstest", "ailuminate", "coconot", "coconot_plain", "coconot_hazards", "plguard_s14",
        "catqa", "aart", "gptfuzz", "alpaca")
MIXES: dict[str, tuple[str, ...]] = {
    "core": CORE,
    "core + multijail": (*CORE, "multijail"),
    "core + xsafety": (*CORE, "xsafety"),
    "core + statements (hatecheck, davidson)": (*CORE, "hatecheck", "davidson"),
    "core + answer_texts": (*CORE, "answer_texts"),
    "core - alpaca": tuple(s for s in CORE if s != "alpaca"),
    "every source": ("*",),
}
CELLS = (("catqa", "xstest"), ("aart", "xstest"), ("ailuminate", "xstest"),
         ("gptfuzz", "xstest"), ("catqa", "coconot"), ("ailuminate", "coconot"),
         ("catqa", "alpaca"))


def main(argv: Sequence[str] | None = None) -> int:
    """Write the table."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.mixes",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from plguard.backends import load_backend
    from plguard.config import ModelConfig
    from plguard.policy import load_policy
    from plguard.stats import auroc
    from plguard_lab.studies.read.corpus import READ_SOURCES, read_corpus
    from plguard_lab.training.alone_features import AloneExtractor
    from plguard_lab.training.alone_fit import PRIOR, RidgeFolds, build_rows
    from plguard_lab.training.features import FeatureStore, default_store_path
    from plguard_lab.training.fit import labels_for

    backend = load_backend(ModelConfig.model_validate({}))
    ex = AloneExtractor(backend, FeatureStore(default_store_path(backend)))
    items = read_corpus(READ_SOURCES, "dev")
    y = labels_for(load_policy("minimal"), items)["request_is_harmful"]
    rows = build_rows("request", ex, items, y)
    layer = min(ex.layers, key=lambda x: abs(x - PRIOR[1] * ex.depth))
    X = rows.states["mean"][:, ex.layers.index(layer), :].astype(np.float64)
    rf = RidgeFolds(X, rows)
    every = set(rows.groups.tolist())
    lines = ["# Request heads by training mix (dev, `request_is_harmful`, mean@"
             f"{layer})", "", "Each cell: a harmful source against a benign one, both left "
             "out of the fit.", "",
             "| mix | " + " | ".join(f"{s} / {t}" for s, t in CELLS) + " | mean |",
             "|---|" + "---|" * (len(CELLS) + 1)]
    for name, mix in MIXES.items():
        keep = every if mix == ("*",) else set(mix)
        vals = []
        for s, t in CELLS:
            w, b = rf.head(frozenset((every - keep) | {s, t}), PRIOR[2])
            sc = X @ w + b
            ms, mt = (rows.groups == s) & (rows.y == 1), (rows.groups == t) & (rows.y == 0)
            vals.append(auroc(np.r_[np.ones(ms.sum()), np.zeros(mt.sum())],
                              np.r_[sc[ms], sc[mt]]))
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals)
                     + f" | {np.mean(vals):.3f} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mixes.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
