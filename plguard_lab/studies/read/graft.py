"""Graft a fit's content heads onto a bundle's shipped heads, with the content threshold.

``python -m plguard_lab.studies.read.graft --policy detailed --dir DIR`` keeps every head
of the bundle's shipped file and replaces its content predicates' (those an
``unsafe_content_*`` rule reads) with the alone heads of ``DIR/heads-<policy>.json``;
writes ``DIR/heads-<policy>-content.json`` and, with the content threshold of
``DIR/thresholds-<policy>.json``, ``DIR/calibration-<policy>-content.json``.

Why a graft: a content head's threshold is fitted on cross-fitted dev scores of that head
alone, whatever the request heads are, while the unsafe threshold of new request heads can
be fitted only where every predicate an unsafe rule reads has an alone head (not so in
detailed). Grafting ships what dev can calibrate and keeps the rest as it was.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plguard_lab.studies.read.corpus import READ_SOURCES


def graft(policy: Any, shipped: dict[str, Any], fitted: dict[str, Any],
          content_sources: dict[str, int]) -> dict[str, Any]:
    """The shipped heads document with the fit's content heads in place of its own."""
    from plguard_lab.training.fit import content_predicates

    content = sorted(n for n in content_predicates(policy)
                     if fitted["predicates"].get(n, {}).get("readout") == "alone")
    if not content:
        raise SystemExit(f"{policy.name}: the fit has no alone content head to graft")
    preds = dict(shipped["predicates"])
    for n in content:
        preds[n] = fitted["predicates"][n]
    layers = {int(h["layer"]) for h in preds.values()}
    from plguard_lab.training.corpus import LICENCES

    return {**shipped, "policy": policy.id, "layers": sorted(layers), "predicates": preds,
            "zero_shot": sorted(s.name for s in policy.predicates if s.name not in preds),
            "alone": fitted["alone"],
            "kept_from": {"file": f"embedded-{policy.name}.json",
                          "predicates": sorted(n for n in preds if n not in content)},
            "training": {**shipped.get("training", {}),
                         "content_heads": {
                             "predicates": content, "split": "dev",
                             "sources": sorted(content_sources), "items": content_sources,
                             "licences": {s: LICENCES.get(s, "?")
                                          for s in sorted(content_sources)},
                             "fit": "plguard_lab.studies.read.fit (answer windows alone)"}}}


def main(argv: Sequence[str] | None = None) -> int:
    """Write the grafted heads file and its calibration."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.graft",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--sources", default=",".join(READ_SOURCES),
                    help="the fit's corpus sources (comma list)")
    args = ap.parse_args(argv)
    from plguard.heads.artefact import load_heads, shipped_heads
    from plguard.policy import load_policy
    from plguard_lab.studies.read.corpus import read_corpus
    from plguard_lab.studies.read.thresholds import write_calibration

    d = Path(args.dir)
    policy = load_policy(args.policy)
    path = shipped_heads(policy.name)
    if path is None:
        raise SystemExit(f"{policy.name}: no shipped heads to graft onto")
    sources: dict[str, int] = {}
    for it in read_corpus(args.sources.split(","), "dev"):
        if it.response is not None:  # what a content head is fitted on
            sources[it.source] = sources.get(it.source, 0) + 1
    doc = graft(policy, json.loads(Path(path).read_text()),
                json.loads((d / f"heads-{policy.name}.json").read_text()), sources)
    out = d / f"heads-{policy.name}-content.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    load_heads(out)  # a malformed graft fails here, not in the product
    th = json.loads((d / f"thresholds-{policy.name}.json").read_text())
    write_calibration(policy, out, {"content": th["content"]},
                      d / f"calibration-{policy.name}-content.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
