"""Does reading the mean at every depth at once separate harm from look-alikes? (dev).

    PYTHONPATH=. python scripts/results/read_readouts_probe.py 240|160|360 [--heldout-only]

minimal's content predicate on the read study's dev sources plus ``plguard_passages``
(``160``: its first 40 harmful passages and first 120 benign answers, as the shipped heads
were fitted; ``240``: all 120 harmful passages, the same benign answers; ``360``: all), from the
feature store (run the read study's ``extract`` first). Each readout is a ridge head
(strength 1 unless named) on the stored alone states of answer windows: one depth
(``mean@L``), or several concatenated. Two kinds of figure:

* cross-fitted (5 folds of prompts, every source in each fold, as the thresholds are
  fitted): AUROC within plguard_passages, and at the threshold that caps our benign
  answers at 5% (the study's rule, ``thresholds.content_threshold``), the harmful answers
  caught and benign ones flagged per source;
* held out by source (``HELDOUT`` lines, :func:`plguard_lab.training.alone_fit.heldout`,
  as the read study reports heads): each source read by a head fitted without it.

Printed, not written: the runs of 2026-12-07 are in
``eval/results/read-passages-240/readouts-{160,240}.txt``.
"""

from __future__ import annotations

import sys

import numpy as np

from plguard.backends import load_backend
from plguard.config import ModelConfig
from plguard.policy import load_policy
from plguard.stats import auroc
from plguard_lab.studies.read.corpus import READ_SOURCES, read_corpus
from plguard_lab.studies.read.thresholds import content_threshold
from plguard_lab.training.alone_features import AloneExtractor
from plguard_lab.training.alone_fit import RidgeFolds, build_rows, crossfit, heldout, item_scores
from plguard_lab.training.features import FeatureStore, default_store_path
from plguard_lab.training.fit import labels_for, pairs_of

PREDICATE = "response_provides_harmful_instructions"
# The last harmful (d) and benign (e) passage of each version of plguard_passages.
PASSAGES = {"160": {"d": 40, "e": 120}, "240": {"d": 120, "e": 120},
            "360": {"d": 120, "e": 240}}


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "240"
    backend = load_backend(ModelConfig.model_validate({"path": "embedded"}))
    ex = AloneExtractor(backend, FeatureStore(default_store_path(backend)))
    last_id = PASSAGES[which]
    items = [it for it in read_corpus([*READ_SOURCES, "plguard_passages"], "dev")
             if it.source != "plguard_passages"
             or int(it.prompt_id[1:]) <= last_id[it.prompt_id[0]]]
    y = labels_for(load_policy("minimal"), items)[PREDICATE]
    rows = build_rows("answer", ex, items, y, pairs_of(items))
    layers = list(ex.layers)
    print("layers", ex.layers, {k: v.shape for k, v in rows.states.items()}, flush=True)
    m, last = rows.states["mean"], rows.states["last"]
    at = {lay: m[:, layers.index(lay), :] for lay in layers}

    def report(tag: str, X: np.ndarray, strength: float = 1.0) -> None:
        s = item_scores(rows, crossfit(rows, X, strength, None, frozenset()))
        g, yy = rows.groups, rows.y
        ours = g == "plguard_passages"
        t = content_threshold(s[ours], yy[ours], g[ours])[0]
        caught = {src: round(float(np.mean(s[(g == src) & (yy == 1)] >= t)), 3)
                  for src in ("xstest", "gptfuzz", "plguard_passages")}
        flagged = {src: round(float(np.mean(s[(g == src) & (yy == 0)] >= t)), 3)
                   for src in ("xstest", "coconot", "gptfuzz", "diasafety")}
        print(f"{tag:<24} within {auroc(yy[ours], s[ours]):.3f}  caught {caught}  "
              f"flagged {flagged}", flush=True)

    every = m.reshape(len(m), -1)
    three = np.concatenate([at[9], at[15], at[21]], 1)
    if "--heldout-only" not in sys.argv:
        for lay in layers:
            report(f"mean@{lay}", at[lay])
        report("mean@15 s=10", at[15], 10.0)
        report("mean@every depth", every)
        report("mean@every depth s=10", every, 10.0)
        report("mean+last@15", np.concatenate([at[15], last[:, layers.index(15), :]], 1))
        report("mean@9,15,21", three)
    else:
        report("mean@15", at[15])
        report("mean@every depth", every)
    for tag, X in (("mean@15", at[15]), ("mean@every depth", every), ("mean@9,15,21", three)):
        h = heldout(rows, RidgeFolds(X.astype(np.float64), rows).fitter(1.0))
        judged = {k: v for k, v in h.metrics.items() if k != "hh_harmless"}
        print(f"HELDOUT {which} {tag:<16}", {k: round(v, 3) for k, v in sorted(h.metrics.items())},
              f"worst (hh_harmless aside) {min(judged.values()):.3f}",
              f"mean {float(np.mean(list(h.metrics.values()))):.3f}", flush=True)
        for s, row in sorted(h.matrix.items()):
            print(f"   {s}: {row}", flush=True)


if __name__ == "__main__":
    main()
