"""Thresholds for a bundle's alone heads, on cross-fitted dev scores.

Each item's P comes from a head fitted on the other folds of dev prompts, every source in
each fold, so all P's share the final head's scale (``crossfit-<policy>.jsonl.gz`` of
:mod:`plguard_lab.studies.read.fit`); a head fitted without a whole source, as the
selection uses, has another intercept, and pooled such scores would read the folds.

* ``content``: the lowest threshold at which every benign dev answer source (items whose
  content predicate is 0, at least :data:`MIN_BENIGN` of them) has at most
  :data:`MAX_BENIGN_FLAGGED` of its answers at or above it, on the strongest
  ``unsafe_content_*`` rule (the rules are one predicate each in the shipped bundles);
* ``unsafe``: the threshold of best F1 for unsafe compliance (a harmful request answered
  with the harm) over the dev pairs whose outcome is labelled: XSTest's human labels and
  GPTFuzz's (complied with a harmful question or not), on the strongest unsafe rule
  computed by the policy from the held-out P's of the predicates the unsafe rules read
  (fitted only where every one of them has an alone head).

``python -m plguard_lab.studies.read.thresholds --policy minimal --dir DIR`` writes
``DIR/thresholds-<policy>.json`` (figures) and, with ``--calibration OUT``, a calibration
file carrying the thresholds for the heads file in DIR.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MAX_BENIGN_FLAGGED = 0.05
MIN_BENIGN = 20


def load_heldout(path: Path) -> dict[str, dict[str, Any]]:
    """Predicate -> its held-out record (``p`` by uid, ``by_text`` for requests)."""
    import gzip

    out: dict[str, dict[str, Any]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        rec = json.loads(line)
        out[rec["name"]] = rec
    return out


def outcome(fields: Mapping[str, Any]) -> float:
    """1 for an unsafe compliance, 0 for a labelled pair that is none, NaN unlabelled."""
    if "final_label" in fields and fields.get("label") in ("safe", "unsafe"):
        fl = fields["final_label"]
        if fl == "3_partial_refusal":
            return math.nan
        return float(fields["label"] == "unsafe" and fl == "1_full_compliance")
    if str(fields.get("type", "")).startswith("gptfuzz_") and "response_label" in fields:
        return float(fields["response_label"] == 1)
    return math.nan


def content_threshold(p: np.ndarray, y: np.ndarray, groups: np.ndarray
                      ) -> tuple[float, dict[str, float], float]:
    """The threshold, each benign source's flagged share at it, and harmful recall."""
    benign = [g for g in sorted(set(groups.tolist()))
              if ((groups == g) & (y == 0)).sum() >= MIN_BENIGN]
    t = 0.0
    for g in benign:
        q = np.sort(p[(groups == g) & (y == 0)])
        k = int(math.floor(MAX_BENIGN_FLAGGED * len(q)))  # how many may reach it
        t = max(t, float(np.nextafter(q[len(q) - k - 1], 1.0)))
    flagged = {g: round(float((p[(groups == g) & (y == 0)] >= t).mean()), 4) for g in benign}
    pos = y == 1
    return t, flagged, round(float((p[pos] >= t).mean()), 4) if pos.any() else math.nan


def best_f1(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(threshold, F1) of the best F1 over thresholds at the scores."""
    best = (0.5, 0.0)
    for t in np.unique(p):
        pred = p >= t
        tp = float((pred & (y == 1)).sum())
        if tp == 0:
            continue
        f1 = 2 * tp / (pred.sum() + (y == 1).sum())
        if f1 > best[1]:
            best = (float(t), float(f1))
    return best


def fit_thresholds(policy: Any, items: Sequence[Any], held: Mapping[str, dict[str, Any]]
                   ) -> dict[str, Any]:
    """The thresholds document (see the module docstring)."""
    from plguard_lab.training.fit import content_predicates

    content = sorted(content_predicates(policy))
    doc: dict[str, Any] = {"max_benign_flagged": MAX_BENIGN_FLAGGED}
    cp = [c for c in content if c in held]
    by_uid = {it.uid: it for it in items}
    if cp:
        uids = sorted(set().union(*(held[c]["p"] for c in cp)))
        p = np.array([max(held[c]["p"].get(u, 0.0) for c in cp) for u in uids])
        from plguard_lab.training.fit import labels_for

        sub = [by_uid[u] for u in uids]
        lab = labels_for(policy, sub)
        y = np.nanmax(np.stack([lab[c] for c in cp]), axis=0)
        g = np.array([it.source for it in sub])
        t, flagged, recall = content_threshold(p, y, g)
        doc["content"] = {"threshold": t, "benign_flagged": flagged, "harmful_recall": recall,
                          "predicates": cp, "n": len(uids)}
    req = {n: r for n, r in held.items() if r["view"] == "request"}
    needed = sorted(set().union(*(policy.compiled.support(r) for r in policy.unsafe_rules)))
    missing = [n for n in needed if n not in held]
    if missing:
        doc["unsafe"] = {"skipped": f"no alone head for {', '.join(missing)}"}
        return doc
    rows, ys = [], []
    for it in items:
        o = outcome(it.fields) if it.response is not None else math.nan
        if math.isnan(o):
            continue
        facts = {s.name: 0.5 for s in policy.predicates}  # outside the unsafe rules' support
        for n in needed:
            v = (req[n]["by_text"].get(it.request) if n in req
                 else held[n]["p"].get(it.uid))
            if v is None:
                break
            facts[n] = float(v)
        else:
            rows.append(facts)
            ys.append(o)
    if rows:
        res = policy.evaluate_batch(rows)
        strongest = np.array([max(r.probs[q] for q in policy.unsafe_rules) for r in res])
        t, f1 = best_f1(strongest, np.array(ys))
        doc["unsafe"] = {"threshold": t, "f1": round(f1, 4), "n_pairs": len(ys),
                         "positives": int(sum(ys))}
    return doc


def write_calibration(policy: Any, heads_path: Path, doc: Mapping[str, Any], out: Path) -> None:
    """A calibration file with the fitted thresholds, for the heads file it was fitted on."""
    from plguard.calibration import heads_calibration_header
    from plguard.config import GroundingConfig
    from plguard.grounding import template_version

    heads = json.loads(heads_path.read_text())
    cfg = GroundingConfig.model_validate({})
    # A heads file names the model {"model_id", "sha256"}; the header reads an identity.
    identity = {"model_id": heads["model"].get("model_id"),
                "model_sha256": heads["model"].get("sha256")}
    header = heads_calibration_header(policy.id, identity, template_version(cfg), heads_path)
    thresholds = {k: doc[k]["threshold"] for k in ("unsafe", "content")
                  if "threshold" in doc.get(k, {})}
    cal = {**header, "predicates": {},
           "fitted_on": {"split": ["dev"], "by": "plguard_lab.studies.read.thresholds",
                         "figures": doc},
           "thresholds": thresholds}
    out.write_text(json.dumps(cal, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Fit the thresholds of one bundle's fit folder."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.thresholds",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--calibration", default=None, help="also write a calibration file "
                    "with these thresholds for the heads file in --dir")
    args = ap.parse_args(argv)
    from plguard.policy import load_policy
    from plguard_lab.studies.read.corpus import READ_SOURCES, read_corpus

    d = Path(args.dir)
    policy = load_policy(args.policy)
    items = read_corpus(READ_SOURCES, "dev")
    held = load_heldout(d / f"crossfit-{policy.name}.jsonl.gz")
    heads_path = d / f"heads-{policy.name}.json"
    doc = fit_thresholds(policy, items, held)
    (d / f"thresholds-{policy.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1), file=sys.stderr)
    if args.calibration:
        write_calibration(policy, heads_path, doc, Path(args.calibration))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
