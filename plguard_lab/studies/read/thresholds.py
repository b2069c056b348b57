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
  (fitted only where every one of them has an alone head);
* ``moderation`` (a bundle whose requests are moderated by category, e.g. hazards): the
  lowest threshold at which each benign request group of the hazards study
  (:data:`plguard_lab.studies.hazards.thresholds.CAPPED`) has at most 5% of its dev
  requests flagged, on the strongest unsafe rule at its worst answer
  (:func:`plguard_lab.studies.hazards.metrics.worst_case_matrix`) computed from the
  requests' cross-fitted P's; fitted only where every request predicate an unsafe rule
  reads has an alone head.

``python -m plguard_lab.studies.read.thresholds --policy minimal --dir DIR`` writes
``DIR/thresholds-<policy>.json`` (figures) and, with ``--calibration OUT``, a calibration
file carrying the thresholds for the heads file in DIR.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plguard_lab.studies.read.corpus import READ_SOURCES

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


def content_threshold(p: np.ndarray, y: np.ndarray, groups: np.ndarray,
                      min_benign: int = MIN_BENIGN) -> tuple[float, dict[str, float], float]:
    """The threshold, each benign source's flagged share at it, and harmful recall."""
    benign = [g for g in sorted(set(groups.tolist()))
              if ((groups == g) & (y == 0)).sum() >= min_benign]
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


def fit_thresholds(policy: Any, items: Sequence[Any], held: Mapping[str, dict[str, Any]],
                   final: Callable[[list[str]], np.ndarray] | None = None,
                   min_benign: int = MIN_BENIGN) -> dict[str, Any]:
    """The thresholds document (see the module docstring).

    ``final``: see :func:`moderation_threshold`.
    """
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
        t, flagged, recall = content_threshold(p, y, g, min_benign)
        doc["content"] = {"threshold": t, "benign_flagged": flagged, "harmful_recall": recall,
                          "predicates": cp, "n": len(uids)}
    req = {n: r for n, r in held.items() if r["view"] == "request"}
    if policy.categories:
        doc["moderation"] = moderation_threshold(policy, req, final=final)
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


def moderation_threshold(policy: Any, req: Mapping[str, dict[str, Any]],
                         dev: Sequence[Any] | None = None,
                         final: Callable[[list[str]], np.ndarray] | None = None
                         ) -> dict[str, Any]:
    """The moderation threshold on the hazards study's dev requests (module docstring).

    ``dev``: those requests (default: all of them, ``test_items("dev")``). A request whose
    label for a predicate is unknown was in none of that head's rows, so the final head's
    P of it is out of sample too: ``final(texts)`` gives ``[n, n_request_predicates]`` of
    them (request predicates in the policy's order); without it such a request is left
    out. A predicate no unsafe rule reads cannot move a worst answer: it reads 0.5.
    """
    from plguard.stats import auroc
    from plguard_lab.studies.hazards.items import UNCATEGORISED, categorised, test_items
    from plguard_lab.studies.hazards.metrics import unsafe_inputs, worst_case_matrix
    from plguard_lab.studies.hazards.thresholds import pick_threshold

    names = [s.name for s in policy.predicates if s.scope == "request"]
    needed = sorted(unsafe_inputs(policy) & set(names))
    missing = [n for n in needed if n not in req]
    if missing:
        return {"skipped": f"no alone head for {', '.join(missing)}"}
    dev = test_items("dev") if dev is None else dev
    texts = [it.request for it in dev]
    fin = final(texts) if final is not None else np.full((len(dev), len(names)), np.nan)
    probs = np.full((len(dev), len(names)), 0.5)
    crossfitted = 0
    for j, n in enumerate(names):
        if n not in needed:
            continue
        cf = req[n]["by_text"]
        col = np.array([cf.get(t, np.nan) for t in texts], dtype=np.float64)
        crossfitted += int(np.isfinite(col).sum())
        probs[:, j] = np.where(np.isfinite(col), col, fin[:, j])
    ok = np.isfinite(probs).all(axis=1)
    kept = [it for it, k in zip(dev, ok, strict=True) if k]
    rules = worst_case_matrix(policy, probs[ok], names)
    strongest = np.max(np.stack(list(rules.values())), axis=0)
    groups = [it.fields["group"] for it in kept]
    pick = pick_threshold(strongest, groups)
    haz = categorised(groups)
    uncat = np.isin(np.array(groups), UNCATEGORISED)
    return {"threshold": pick["unsafe"], "dev_flagged": pick["dev_flagged"],
            "dev_recall": round(pick["dev_recall"], 4), "n": pick["n"],
            "n_scored": len(kept), "n_dev": len(dev),
            "p_crossfitted": round(crossfitted / max(1, len(needed) * len(kept)), 4),
            "auroc_hazardous_vs_benign": round(auroc(haz[~uncat], strongest[~uncat]), 4)}


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
    thresholds = {k: doc[k]["threshold"] for k in ("unsafe", "content", "moderation")
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
    ap.add_argument("--sources", default=",".join(READ_SOURCES),
                    help="the fit's corpus sources (comma list)")
    ap.add_argument("--min-benign", type=int, default=MIN_BENIGN, help="benign answers a "
                    "source needs to set the content cap")
    args = ap.parse_args(argv)
    from plguard.policy import load_policy
    from plguard_lab.studies.read.corpus import read_corpus

    d = Path(args.dir)
    policy = load_policy(args.policy)
    items = read_corpus(args.sources.split(","), "dev")
    held = load_heldout(d / f"crossfit-{policy.name}.jsonl.gz")
    heads_path = d / f"heads-{policy.name}.json"
    final = _final_heads(policy, heads_path) if policy.categories else None
    doc = fit_thresholds(policy, items, held, final, args.min_benign)
    (d / f"thresholds-{policy.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1), file=sys.stderr)
    if args.calibration:
        write_calibration(policy, heads_path, doc, Path(args.calibration))
    return 0


def _final_heads(policy: Any, heads_path: Path) -> Callable[[list[str]], np.ndarray]:
    """The heads file's request P's of texts (alone states extracted where missing)."""
    from plguard.backends import load_backend
    from plguard.config import ModelConfig
    from plguard.heads.artefact import load_heads
    from plguard_lab.studies.read.test_report import request_probs
    from plguard_lab.training.alone_features import AloneExtractor
    from plguard_lab.training.corpus import CorpusItem
    from plguard_lab.training.features import FeatureStore, default_store_path

    hf = load_heads(heads_path)
    names = [s.name for s in policy.predicates if s.scope == "request"]

    def final(texts: list[str]) -> np.ndarray:
        backend = load_backend(ModelConfig.model_validate({}))
        ex = AloneExtractor(backend, FeatureStore(default_store_path(backend)))
        ex.run([CorpusItem(f"t{i}", "moderation", str(i), t, None, {})
                for i, t in enumerate(texts)], answers=False)
        out = np.full((len(texts), len(names)), np.nan)
        have = [j for j, n in enumerate(names) if n in hf.heads
                and hf.heads[n].readout == "alone"]
        out[:, have] = request_probs(hf, [names[j] for j in have], ex, texts)
        return out

    return final


if __name__ == "__main__":
    raise SystemExit(main())
