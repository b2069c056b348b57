"""Heads files read source by source on the dev corpus (plguard_lab.training.measure).

    python scripts/results/heads_by_source.py --policy minimal \
        --heads shipped=plguard/heads/shipped/embedded-minimal.json \
        --heads transfer=eval/results/heads-transfer-embedded/heads-minimal.json \
        --drafts-file eval/results/heads-transfer-embedded/drafts.jsonl \
        --out eval/results/heads-transfer-embedded/by-source-minimal.json

The items are what ``scripts/results/heads_transfer.sh fit`` trains on (200 per source,
the drafts; no rewrites), their states read from the feature store (forwarded where
missing). A file's figure on a source it was trained on is in-distribution: the table marks
it with ``*``. The transfer heads' own figures are leave-one-source-out (their ``.md``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ALL = "xstest,ailuminate,coconot,coconot_plain,coconot_hazards,plguard_s14,hh_harmless"


def main() -> None:
    """Read each ``--heads`` file source by source; write ``--out`` (.json and .md)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", required=True)
    ap.add_argument("--heads", action="append", required=True, metavar="NAME=FILE.json")
    ap.add_argument("--sources", default=ALL)
    ap.add_argument("--limit-per-source", type=int, default=200)
    ap.add_argument("--drafts-file", default=None)
    ap.add_argument("--drafts", type=int, default=150)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    from plguard.backends import load_backend
    from plguard.config import GuardConfig
    from plguard.heads.artefact import load_heads
    from plguard.policy import load_policy
    from plguard_lab.labels.gold import load_gold
    from plguard_lab.training.corpus import load_corpus
    from plguard_lab.training.drafts import load_drafts
    from plguard_lab.training.features import Extractor, FeatureStore, default_store_path
    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.measure import scores_by_source

    sources = a.sources.split(",")
    cfg = GuardConfig.from_dict({"policy": a.policy})
    policy = load_policy(a.policy)
    items = load_corpus(sources, "dev", a.limit_per_source)
    if a.drafts_file:
        items += load_drafts(a.drafts_file, a.drafts, sources).items
    files = {}
    for spec in a.heads:
        name, _, path = spec.partition("=")
        files[name] = load_heads(path)
    backend = load_backend(cfg.grounder_model)
    store = FeatureStore(default_store_path(backend))
    layers = next(iter(files.values())).layers
    readouts = {h.readout for hf in files.values() for h in hf.heads.values()}
    ex = Extractor(backend, policy.predicates, cfg.grounding, store, layers,
                   questions=("response",) if "question" in readouts else False,
                   pairs="pair_prefix" in readouts, pool="pool" in readouts)
    forwarded = ex.run(items, progress=True)
    labels = labels_for(policy, items)
    pairwise = set(load_gold(policy).pairwise)
    doc: dict[str, Any] = {"policy": policy.id, "items": {s: sum(it.source == s for it in items)
                                          for s in sorted({it.source for it in items})},
           "forwarded": forwarded, "files": {}}
    for name, hf in files.items():
        trained = hf.training
        doc["files"][name] = {
            "path": hf.path, "sha256_12": hf.digest,
            "trained_on": trained.get("sources", []) + (["drafts"] if "drafts" in trained
                                                         else []),
            "readouts": {n: f"{h.readout}@{h.layer}" for n, h in hf.heads.items()},
            "by_source": scores_by_source(policy, ex, items, hf, labels, pairwise)}
    store.close()
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    Path(a.out).with_suffix(".md").write_text(render(doc))
    print(render(doc))


def render(doc: dict[str, Any]) -> str:
    """A Markdown table per predicate: file rows, source columns (``*``: trained on it)."""
    lines = [f"# Heads by source, {doc['policy']} (dev items: {doc['items']})", ""]
    preds = sorted({p for f in doc["files"].values() for p in f["by_source"]})
    for p in preds:
        srcs = sorted({s for f in doc["files"].values() for s in f["by_source"].get(p, {})})
        lines += [f"## {p}", "", "| file | readout | " + " | ".join(srcs) + " |",
                  "|---|---|" + "---|" * len(srcs)]
        for name, f in doc["files"].items():
            m = f["by_source"].get(p)
            if m is None:
                continue
            cells = [("-" if m.get(s) is None or m[s] != m[s] else f"{m[s]:.3f}")
                     + ("*" if s in f["trained_on"] else "") for s in srcs]
            lines.append(f"| {name} | {f['readouts'][p]} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
