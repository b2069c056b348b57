"""The shipped alone heads on the test split: per source, at the shipped thresholds.

``python -m plguard_lab.studies.read.test_report --policy minimal --heads FILE
[--calibration FILE] --out DIR`` scores every test item of the read corpus with the heads
file's alone heads (the product's own :class:`~plguard.heads.artefact.Head` over the stored
states of the product's views) and writes ``DIR/test-<policy>.md`` and ``.json``:

* per predicate and source: AUROC within a source of both classes; for a source of one
  class, its items against the other class of each other source (same head: the final
  one, which saw neither's test items);
* for content predicates at the calibration's content threshold: the share of each
  source's benign answers flagged and of harmful answers caught;
* for a bundle with categories (hazards) and a moderation threshold: moderation of the
  hazards study's test texts (:func:`plguard_lab.studies.hazards.items.test_items`), each
  text's strongest unsafe rule at its worst answer, flagged shares per group.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plguard.stats import auroc
from plguard_lab.studies.read.corpus import READ_SOURCES


def _f(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"


def score_items(hf: Any, name: str, view: str, ex: Any, items: Sequence[Any]
                ) -> tuple[list[int], np.ndarray]:
    """Indices of the items read and each one's P (an answer's: its best window)."""
    if view == "request":
        idx = [i for i, it in enumerate(items) if it.response is None]
        return idx, request_probs(hf, [name], ex, [items[i].request for i in idx])[:, 0]
    h = hf.heads[name]
    j = list(ex.layers).index(h.layer)
    idx = [i for i, it in enumerate(items) if it.response is not None]
    st, owner = ex.window_states([items[i].response or "" for i in idx])
    zr = st[:, j, :].astype(np.float64) @ h.weights + h.bias
    z = np.full(len(idx), -np.inf)
    np.maximum.at(z, owner, zr)
    a, b = h.platt
    return idx, 1.0 / (1.0 + np.exp(-(a * z + b)))


def predicate_table(p: np.ndarray, y: np.ndarray, g: np.ndarray) -> dict[str, Any]:
    """Per source: AUROC within it, or against each other source's other class."""
    out: dict[str, Any] = {}
    for s in sorted(set(g.tolist())):
        m = (g == s) & ~np.isnan(y)
        cls = set(y[m].tolist())
        if len(cls) == 2 and min((y[m] == 0).sum(), (y[m] == 1).sum()) >= 10:
            out[s] = {"auroc": round(auroc(y[m], p[m]), 4), "n": int(m.sum())}
        elif len(cls) == 1:
            c = next(iter(cls))
            row = {}
            for t in sorted(set(g.tolist()) - {s}):
                o = (g == t) & (y == 1 - c)
                if o.sum() >= 10:
                    yy = np.r_[np.full(m.sum(), c), np.full(o.sum(), 1 - c)]
                    row[t] = round(auroc(yy, np.r_[p[m], p[o]]), 4)
            if row:
                out[s] = {"auroc": round(float(np.mean(list(row.values()))), 4),
                          "against": row, "n": int(m.sum())}
    return out


def request_probs(hf: Any, names: Sequence[str], ex: Any, texts: Sequence[str]
                  ) -> np.ndarray:
    """``[n, len(names)]``: each text's P of each request predicate (its alone head)."""
    st = ex.request_states(list(texts))
    cols = []
    for n in names:
        h = hf.heads[n]
        z = st[:, list(ex.layers).index(h.layer), :].astype(np.float64) @ h.weights + h.bias
        a, b = h.platt
        cols.append(1.0 / (1.0 + np.exp(-(a * z + b))))
    return np.stack(cols, axis=1)


def moderation_table(policy: Any, hf: Any, ex: Any, threshold: float) -> dict[str, Any]:
    """Moderation of the hazards study's test texts at ``threshold`` (module docstring)."""
    from plguard_lab.studies.hazards.items import BENIGN, UNCATEGORISED, categorised, test_items
    from plguard_lab.studies.hazards.metrics import worst_case_matrix

    names = [s.name for s in policy.predicates if s.scope == "request"]
    items = test_items("test")
    ex.run(items, answers=False)
    rules = worst_case_matrix(policy, request_probs(hf, names, ex, [it.request for it in items]),
                              names)
    strongest = np.max(np.stack(list(rules.values())), axis=0)
    g = np.array([it.fields["group"] for it in items])
    flagged = strongest >= threshold
    haz = categorised(g)
    benign = np.isin(g, BENIGN)
    return {"threshold": threshold, "n": len(items),
            "flagged": {str(k): round(float(flagged[g == k].mean()), 4)
                        for k in (*BENIGN, *UNCATEGORISED) if (g == k).any()},
            "benign_flagged": round(float(flagged[benign].mean()), 4),
            "hazardous_flagged": round(float(flagged[haz].mean()), 4),
            "auroc_hazardous_vs_benign": round(auroc(haz[haz | benign],
                                                     strongest[haz | benign]), 4)}


def main(argv: Sequence[str] | None = None) -> int:
    """Write the test-split report."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.test_report",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--heads", required=True)
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sources", default=",".join(READ_SOURCES), help="test sources (comma "
                    "list); e.g. the answer sources alone for content heads")
    ap.add_argument("--only", default="", help="report only these predicates (comma list)")
    args = ap.parse_args(argv)
    from plguard.backends import load_backend
    from plguard.config import ModelConfig
    from plguard.heads.artefact import load_heads
    from plguard.policy import load_policy
    from plguard_lab.studies.read.corpus import read_corpus
    from plguard_lab.studies.read.fit import predicate_views
    from plguard_lab.training.alone_features import AloneExtractor
    from plguard_lab.training.features import FeatureStore, default_store_path
    from plguard_lab.training.fit import labels_for

    policy = load_policy(args.policy)
    hf = load_heads(args.heads)
    thresholds = (json.loads(Path(args.calibration).read_text()).get("thresholds", {})
                  if args.calibration else {})
    backend = load_backend(ModelConfig.model_validate({}))
    ex = AloneExtractor(backend, FeatureStore(default_store_path(backend)))
    sources = args.sources.split(",")
    only = {x for x in args.only.split(",") if x}
    items = read_corpus(sources, "test")
    ex.run(items)
    labels = labels_for(policy, items)
    views = predicate_views(policy)
    doc: dict[str, Any] = {"policy": policy.id, "heads": hf.label, "split": "test",
                           "thresholds": thresholds, "predicates": {}}
    lines = [f"# `{policy.name}`: alone heads on the test split", "",
             f"Heads `{hf.label}`; items: the read corpus's test split (never fitted on, "
             "never used to choose). Figures per source; a one-class source is ranked "
             "against the other class of each other source.", ""]
    if sources != list(READ_SOURCES) or only:
        lines += [f"Sources: {', '.join(sources)}; predicates: "
                  f"{', '.join(sorted(only)) if only else 'all alone heads'}.", ""]
    doc["sources"], doc["only"] = sources, sorted(only)
    for spec in policy.predicates:
        h = hf.heads.get(spec.name)
        if h is None or h.readout != "alone" or (only and spec.name not in only):
            continue
        idx, p = score_items(hf, spec.name, views[spec.name], ex, items)
        y = labels[spec.name][idx]
        g = np.array([items[i].source for i in idx])
        table = predicate_table(p, y, g)
        rec: dict[str, Any] = {"view": views[spec.name], "sources": table}
        lines += [f"## {spec.name} ({views[spec.name]})", "", "| source | AUROC | n |",
                  "|---|---|---|"]
        lines += [f"| {s} | {_f(v['auroc'])} | {v['n']} |" for s, v in table.items()]
        t = thresholds.get("content")
        if views[spec.name] == "answer" and t is not None:
            flagged = {s: round(float((p[(g == s) & (y == 0)] >= t).mean()), 4)
                       for s in sorted(set(g.tolist())) if ((g == s) & (y == 0)).sum() >= 20}
            caught = {s: round(float((p[(g == s) & (y == 1)] >= t).mean()), 4)
                      for s in sorted(set(g.tolist())) if ((g == s) & (y == 1)).sum() >= 5}
            rec["at_content_threshold"] = {"threshold": t, "benign_flagged": flagged,
                                           "harmful_caught": caught}
            lines += ["", f"At the content threshold {t:.3f}: benign answers flagged "
                      + ", ".join(f"{s} {v:.1%}" for s, v in flagged.items())
                      + "; harmful answers caught "
                      + ", ".join(f"{s} {v:.1%}" for s, v in caught.items()) + "."]
        doc["predicates"][spec.name] = rec
        lines.append("")
    if policy.categories and thresholds.get("moderation") is not None:
        mod = moderation_table(policy, hf, ex, float(thresholds["moderation"]))
        doc["moderation"] = mod
        lines += [f"## Moderation at {mod['threshold']:.3f} ({mod['n']} test texts)", "",
                  f"Benign texts flagged {mod['benign_flagged']:.1%}, hazardous (of a "
                  f"category) {mod['hazardous_flagged']:.1%}; AUROC hazardous vs benign "
                  f"{mod['auroc_hazardous_vs_benign']:.3f}.", "", "| group | flagged |",
                  "|---|---|", *(f"| {k} | {v:.1%} |" for k, v in mod["flagged"].items()), ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"test-{policy.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"test-{policy.name}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
