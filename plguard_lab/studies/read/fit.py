"""Fit a bundle's heads that read the evidence alone, with their source matrices.

``python -m plguard_lab.studies.read.fit --policy minimal --out DIR`` reads the dev split
of the read corpus, extracts what is missing, and for every request predicate (the
request alone) and content predicate (each answer window alone) chooses and fits a head
by leave-one-source-out beside the lexical baseline (:mod:`plguard_lab.training.alone_fit`).
Pair predicates (refusal, over-refusal: they need the request and the answer together)
keep the heads of ``--pair-heads`` (default: the shipped file of the bundle) or zero-shot.

Writes ``DIR/heads-<policy>.json`` (a heads file), ``DIR/fits-<policy>.jsonl`` (one
record per predicate, flushed as each is done: a rerun skips predicates already there),
``DIR/crossfit-<policy>.jsonl.gz`` (each dev item's cross-fitted P, for thresholds) and
``DIR/heads-<policy>.md`` (the tables).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plguard_lab.studies.read.corpus import CAP, READ_SOURCES, read_corpus

# Held out of request heads (figures only), chosen on dev (mixes.md): statements and
# tweets are not requests (hatecheck, davidson, answer_texts), XSafety's labels are its
# scenario's, not its items' (its quizzes name the harm they ask to spot), and MultiJail's
# nine other languages lowered the English harmful-vs-scary cells.
UNTRAINED_REQUEST = ("xsafety", "multijail", "hatecheck", "davidson", "answer_texts")
# Reported but not choosing a request head's readout: their labels are not of requests.
UNJUDGED_REQUEST = ("xsafety", "hatecheck", "davidson", "answer_texts")
# Content heads: every held-out answer source judges. Left out of the judgement
# (``--unjudged-answer hh_harmless``: its labels are preferences between two replies to one
# ask, a judgement of the pair more than of the content), the search picks mean+mil@21
# (worst judged 0.821 against the prior's 0.751), which stopped 10 of 48 unseen harmful
# answers where the prior stops 30 and refused 5 of 24 benign ones
# (eval/results/read-embedded/alt-minimal-content-mil21): five answer sources do not
# choose a readout that transfers, so the prior's rule stays.
UNJUDGED_ANSWER: tuple[str, ...] = ()
# Which predicates' readouts are searched by default: the request heads'. A content head
# stays at the prior (mean at half depth) unless asked: twice the search picked a readout
# that won on the worst dev source and lost on the unseen passages (mean+mil@21 above;
# with plguard_passages in dev, mean+mil@18 strength 10: worst 0.604 against the prior's
# 0.569, plguard_passages itself 0.809 against 0.854, on the set's first version; on the
# unseen passages 44 of 48 harmful answers stopped but 5 of 24 benign refused, against the
# prior's 38 and 0, eval/results/read-embedded/alt-minimal-content-mil18; neither shipped:
# eval/results/read-passages-refit). Five answer sources and our own 80 passages do not
# choose a content readout that transfers.
SEARCH = "requests"


def predicate_views(policy: Any) -> dict[str, str]:
    """Predicate -> the view its head reads: request, answer (content) or pair."""
    from plguard_lab.training.fit import content_predicates

    content = content_predicates(policy)
    return {s.name: ("request" if s.scope == "request"
                     else "answer" if s.name in content else "pair")
            for s in policy.predicates}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fit."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.fit",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--sources", default=",".join(READ_SOURCES))
    ap.add_argument("--search", default=SEARCH, help="predicates whose readout, layer "
                    "and strength are searched (comma list, 'requests', 'all' or 'none'); "
                    "the others fit the prior. Default: request predicates only (SEARCH)")
    ap.add_argument("--pair-heads", default="shipped", help="heads file whose pair "
                    "predicates' heads are kept ('shipped', a path, or 'none')")
    ap.add_argument("--untrained-request", default=",".join(UNTRAINED_REQUEST),
                    help="sources request heads are never fitted on, only judged by")
    ap.add_argument("--unjudged-request", default=",".join(UNJUDGED_REQUEST),
                    help="sources whose figures do not choose a request head's readout")
    ap.add_argument("--unjudged-answer", default=",".join(UNJUDGED_ANSWER),
                    help="sources whose figures do not choose a content head's readout")
    ap.add_argument("--untrained-answer", default="",
                    help="sources content heads are never fitted on, only judged by")
    ap.add_argument("--no-lexical", action="store_true")
    ap.add_argument("--cap", type=int, default=CAP, help="dev items per source (a smaller "
                    "cap: a subset of the default's, to compare grounders at less cost)")
    ap.add_argument("--only", default="", help="fit only these predicates (comma list)")
    args = ap.parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """The fit of :func:`main`'s arguments."""
    from plguard.backends import load_backend
    from plguard.config import ModelConfig
    from plguard.grounding import backend_identity
    from plguard.heads.artefact import encode_vector
    from plguard.policy import load_policy
    from plguard_lab.training.alone_features import AloneExtractor
    from plguard_lab.training.alone_fit import build_rows, fit_alone, heldout
    from plguard_lab.training.features import FeatureStore, default_store_path
    from plguard_lab.training.fit import labels_for, pairs_of
    from plguard_lab.training.lexical import lexical_fitter

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policy = load_policy(args.policy)
    backend = load_backend(ModelConfig.model_validate({"path": args.model,
                                                       "dtype": args.dtype}))
    store = FeatureStore(default_store_path(backend))
    ex = AloneExtractor(backend, store)
    sources = [s for s in args.sources.split(",") if s]
    items = read_corpus(sources, "dev", args.cap)
    views = predicate_views(policy)
    only = [x for x in args.only.split(",") if x]
    print(f"{len(items)} dev items; extracting what is missing", file=sys.stderr, flush=True)
    # Answer windows only where a content predicate is fitted (they are most of the cost).
    ex.run(items, answers=any(v == "answer" for n, v in views.items()
                              if not only or n in only))
    labels = labels_for(policy, items)
    pairs = pairs_of(items)
    named = {"all": set(views), "none": set(),
             "requests": {n for n, v in views.items() if v == "request"}}
    search = named.get(args.search, set(args.search.split(",")))
    log = out / f"fits-{policy.name}.jsonl"
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            done[rec["name"]] = rec
    with log.open("a", encoding="utf-8") as fh:
        for spec in policy.predicates:
            view = views[spec.name]
            if view == "pair" or spec.name in done or (only and spec.name not in only):
                continue
            y = labels[spec.name]
            rows = build_rows(view, ex, items, y, pairs if view == "answer" else ())
            if len(set(rows.y[~_isnan(rows.y)].tolist())) < 2:
                rec = {"name": spec.name, "view": view, "skipped": "one class in dev"}
            else:
                untrained = frozenset(x for x in (args.untrained_request if view == "request"
                                                  else args.untrained_answer).split(",") if x)
                unjudged = frozenset(x for x in (args.unjudged_request if view == "request"
                                                 else args.unjudged_answer).split(",") if x)
                lex = (None if args.no_lexical
                       else heldout(rows, lexical_fitter(rows), untrained))
                fit = fit_alone(spec.name, rows, ex.layers, ex.depth,
                                lexical=lex, search=spec.name in search,
                                untrained=untrained, unjudged=unjudged,
                                encode=encode_vector)
                rec = {"name": spec.name, "view": view, "n_items": fit.n_items,
                       "positives": fit.positives, "choice": list(fit.choice),
                       "heldout": fit.heldout.metrics, "matrix": fit.heldout.matrix,
                       "prior_heldout": fit.prior,
                       "lexical_heldout": lex.metrics if lex else {},
                       "lexical_matrix": lex.matrix if lex else {},
                       "candidates": fit.candidates, "untrained": sorted(untrained),
                       "unjudged": sorted(unjudged),
                       "why": fit.why, "head": fit.head}
            if "head" in rec:
                _write_heldout(out / f"crossfit-{policy.name}.jsonl.gz", spec.name, rows,
                               fit.crossfit, rec["head"]["platt"])
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            done[spec.name] = rec
            print(f"{spec.name}: {_summary(rec)}", file=sys.stderr, flush=True)
    doc = heads_document(policy, done, ex, backend_identity(backend), items, args.pair_heads)
    (out / f"heads-{policy.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    from plguard_lab.studies.read.report import render_fits

    (out / f"heads-{policy.name}.md").write_text(render_fits(policy.name, done, doc))
    return 0


def _write_heldout(path: Path, name: str, rows: Any, row_scores: Any,
                   platt: dict[str, float]) -> None:
    """Each item's cross-fitted P (its prompt unseen by the head that scored it)."""
    import numpy as np

    from plguard_lab.training.alone_fit import item_scores

    z = item_scores(rows, row_scores)
    p = 1.0 / (1.0 + np.exp(-(platt["a"] * z + platt["b"])))
    rec = {"name": name, "view": rows.view,
           "p": {u: round(float(x), 6) for u, x in zip(rows.uids, p, strict=True)
                 if np.isfinite(x)}}
    if rows.view == "request":  # a pair's request is found by its text
        rec["by_text"] = {t: round(float(x), 6) for t, x in zip(rows.texts, p, strict=True)
                          if np.isfinite(x)}
    import gzip

    with gzip.open(path, "at", encoding="utf-8") as fh:  # one gzip member per predicate
        fh.write(json.dumps(rec) + "\n")


def _isnan(a: Any) -> Any:
    import numpy as np

    return np.isnan(a)


def _summary(rec: dict[str, Any]) -> str:
    if "skipped" in rec:
        return rec["skipped"]
    from plguard_lab.training.alone_fit import judged
    from plguard_lab.training.select import worst

    un = rec.get("unjudged") or ()
    w, _ = worst(judged(rec["heldout"], un))
    lw, _ = worst(judged(rec["lexical_heldout"], un))
    return f"worst judged held-out {w:.3f} (lexical {lw:.3f}), {rec['why']}"


def heads_document(policy: Any, fits: dict[str, dict[str, Any]], ex: Any,
                   identity: dict[str, Any], items: Sequence[Any], pair_heads: str
                   ) -> dict[str, Any]:
    """The heads file: alone heads, the pair heads kept, provenance and licences."""
    import hashlib

    from plguard.grounding import ANSWER_WORDS, question_block, template_version
    from plguard.grounding.alone import ALONE_VERSION
    from plguard.heads.artefact import FORMAT, load_heads, shipped_heads
    from plguard_lab.training.corpus import LICENCES

    cfg = _grounding_cfg()
    preds: dict[str, Any] = {}
    for spec in policy.predicates:
        rec = fits.get(spec.name)
        if rec and rec.get("head"):
            block = question_block(spec, spec.question, ANSWER_WORDS[cfg.answer_words],
                                   cfg.examples)
            preds[spec.name] = {**rec["head"],
                                "question_sha256": hashlib.sha256(block.encode()).hexdigest()}
    kept: list[str] = []
    path = (shipped_heads(policy.name) if pair_heads == "shipped"
            else None if pair_heads == "none" else Path(pair_heads))
    layers = set(ex.layers)
    kept_nc: set[str] = set()  # the kept heads' non-commercial sources travel with them
    if path is not None and Path(path).is_file():
        raw = json.loads(Path(path).read_text())
        load_heads(path)  # refuses a malformed file here, not in the product
        for name, h in raw["predicates"].items():
            if name not in preds and h["readout"] != "alone":
                preds[name] = h
                kept.append(name)
                layers.add(int(h["layer"]))
        if kept:
            kept_nc = set((raw.get("training") or {}).get("non_commercial") or ())
    # The items that trained this file's alone heads: a request head reads the request-only
    # items, a content head the answers; a source untrained for every head of a view is
    # not one (its licence does not travel with the file).
    untrained: dict[str, set[str]] = {}
    for rec in fits.values():
        if rec.get("head"):
            u = set(rec.get("untrained") or ())
            untrained[rec["view"]] = untrained.get(rec["view"], u) & u
    counts: dict[str, int] = {}
    for it in items:
        view = "request" if it.response is None else "answer"
        if view in untrained and it.source not in untrained[view]:
            counts[it.source] = counts.get(it.source, 0) + 1
    return {"format": FORMAT,
            "model": {"sha256": identity.get("model_sha256"),
                      "model_id": identity.get("model_id")},
            "template_version": template_version(cfg), "policy": policy.id,
            "layers": sorted(layers), "predicates": preds,
            "zero_shot": sorted(s.name for s in policy.predicates if s.name not in preds),
            "alone": {"version": ALONE_VERSION, "window_tokens": ex.window_tokens,
                      "window_overlap": ex.window_overlap},
            "kept_from": {"file": str(Path(path).name) if path else None,
                          "predicates": sorted(kept)},
            "training": {"sources": sorted(counts), "split": "dev", "items": counts,
                         "labels": "each bundle's gold.yaml rules over the corpus fields "
                                   "(docs/label-map.md)",
                         "licences": {s: LICENCES.get(s, "?") for s in sorted(counts)},
                         "non_commercial": sorted(kept_nc | {
                             s for s in counts
                             if "non-commercial" in LICENCES.get(s, "").lower()
                             or "research" in LICENCES.get(s, "").lower()})}}


def _grounding_cfg() -> Any:
    from plguard.config import GroundingConfig

    return GroundingConfig.model_validate({})


if __name__ == "__main__":
    raise SystemExit(main())
