"""``fit_heads``: features (cached, resumable), one head per predicate, file and report."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plguard.backends.base import capabilities_of
from plguard.config import GuardConfig
from plguard.errors import ConfigError
from plguard_lab.training.corpus import SOURCES, CorpusItem, load_corpus
from plguard_lab.training.features import Extractor, FeatureStore, default_store_path, parse_layers
from plguard_lab.training.fit import (
    COST_MARGIN,
    PROMPT_READOUTS,
    PredicateFit,
    fit_policy_heads,
    heads_document,
    labels_for,
)
from plguard_lab.training.joint import category_predicates, fit_joint_heads


@dataclass(frozen=True)
class FitOptions:
    """What ``plguard heads fit`` trains on and how."""

    sources: tuple[str, ...] = SOURCES
    limit_per_source: int | None = None  # a seeded subset of each source (None: all dev)
    readouts: tuple[str, ...] = PROMPT_READOUTS
    cost_margin: float = COST_MARGIN  # see fit_policy_heads
    lodo: bool = True
    progress: bool = True
    scopes: tuple[str, ...] = ("request", "response")  # predicates fitted (others zero-shot)
    # The category rules' request predicates share one multinomial (plguard_lab.training.joint)
    # instead of one-vs-rest heads; prefix or pool readout, chosen with the layer.
    joint_categories: bool = False
    # Layers whose states are extracted and tried (``--layers``: numbers, ranges or
    # "all"); None: default_layers, a spread from a third of the depth to the top.
    layers: str | None = None
    # The generator's own answers to this many dev prompts, labelled without the guard
    # (plguard_lab.training.drafts), join the response heads' training pairs; 0: none.
    drafts: int = 0
    drafts_file: str | None = None  # None: <heads file stem>.drafts.jsonl beside it
    # Readouts without the question read no zero-shot P(True); the questions are then asked
    # of this many items per source (seeded), the floor a head must beat on its worst
    # held-out source (plguard_lab.training.select). 0: chance is the floor.
    zero_shot_limit: int = 40
    # Phrasing augmentation (plguard_lab.training.augment): up to this many variants per request.
    augment: int = 0
    # The scopes whose questions are forwarded when ``question`` is among the readouts
    # (``--question-scope``): a pair's question state may carry what its one forward does
    # not, while the augmented requests would multiply the question forwards.
    question_scopes: tuple[str, ...] = ("request", "response")


@dataclass
class FitSummary:
    """What one fit did."""

    path: Path
    report: Path
    fits: list[PredicateFit]
    seconds: dict[str, float]
    drafts: dict[str, Any] | None = None  # the heads file's training.drafts, if any


def fit_heads(config: GuardConfig, out: str | Path, options: FitOptions | None = None,
              *, backend: Any = None) -> FitSummary:
    """Fit heads for ``config.policy`` on the grounder model; write ``out`` (+ ``.md``)."""
    from plguard.backends import load_backend
    from plguard.grounding import backend_identity
    from plguard.policy import load_policy

    opts = options or FitOptions()
    if opts.drafts and "response" not in opts.scopes:
        raise ConfigError("drafts train the response heads: fit the response scope too "
                          "(--scope response or both), or leave --drafts out")
    t0 = time.perf_counter()
    gb: Any = backend or load_backend(config.grounder_model)
    if not capabilities_of(gb).hidden_states:
        raise ConfigError(f"the grounder backend '{config.grounder_model.backend}' cannot "
                          "return hidden states; fit heads with backend transformers")
    policy = load_policy(config.policy)
    joint = _joint_names(policy, opts)
    items = load_corpus(opts.sources, "dev", opts.limit_per_source)
    if opts.augment and "request" in opts.scopes:
        # Requests only: what the benchmarks plguard meets vary is how a request is put;
        # a pair's response heads read the answer (and a pair costs a long forward).
        from plguard_lab.training.augment import augment_corpus

        reqs = [it for it in items if it.response is None]
        items += augment_corpus(reqs, per_item=opts.augment, include_originals=False)
    if "response" not in opts.scopes:  # pairs label response predicates only
        items = [it for it in items if it.response is None]
    drafts = None
    if opts.drafts > 0:
        from plguard_lab.training.drafts import default_drafts_path, make_drafts

        same = config.generator == config.grounder_model
        drafts = make_drafts(config, opts.drafts, opts.drafts_file or default_drafts_path(out),
                             sources=opts.sources, progress=opts.progress,
                             generator=gb if same else None, grounder=gb)
        items = [*items, *drafts.items]
    store = FeatureStore(default_store_path(gb))
    # Only the readouts asked for are extracted: prefix heads need no question forwarded.
    ex = Extractor(gb, policy.predicates, config.grounding, store,
                   parse_layers(opts.layers, gb.n_layers),
                   questions=opts.question_scopes if "question" in opts.readouts else False,
                   pairs="pair_prefix" in opts.readouts, pool="pool" in opts.readouts)
    t1 = time.perf_counter()
    forwarded = ex.run(items, progress=opts.progress)
    zero_shot = None
    unasked = [s for s in opts.scopes if not ex.asks(s)]
    if unasked and opts.zero_shot_limit > 0:
        zero_shot, n_zs = _zero_shot_logits(gb, policy, config, store, ex.layers, items,
                                            opts.zero_shot_limit, opts.progress, unasked)
        forwarded += n_zs
    t2 = time.perf_counter()
    labels = labels_for(policy, items)  # gold.yaml over the corpus, once for both fits
    fits = fit_policy_heads(policy, ex, items, readouts=opts.readouts, lodo=opts.lodo,
                            cost_margin=opts.cost_margin, scopes=opts.scopes, skip=joint,
                            labels=labels, zero_shot=zero_shot)
    summary: dict[str, Any] | None = None
    if joint:
        jfits, summary = fit_joint_heads(policy, ex, items, labels, joint,
                                         readouts=[r for r in opts.readouts
                                                   if r in ("prefix", "pool")],
                                         zero_shot=zero_shot)
        by_name = {f.name: f for f in jfits}
        fits = [by_name.get(f.name, f) for f in fits]
    t3 = time.perf_counter()
    counts: dict[str, int] = {}
    for it in items:
        counts[it.source] = counts.get(it.source, 0) + 1
    training = {"sources": list(opts.sources), "split": "dev", "items": counts,
                "limit_per_source": opts.limit_per_source, "features": str(store.path),
                **({"augmentation": _augment_note(opts.augment)} if opts.augment else {}),
                "readouts": list(opts.readouts), "scopes": list(opts.scopes),
                **({"question_scopes": sorted(ex.question_scopes)}
                   if "question" in opts.readouts else {}),
                "labels": "each bundle's gold.yaml rules over the corpus fields "
                          "(plguard_lab.training.corpus)",
                **({"joint": summary} if summary else {}),
                **({"drafts": drafts.summary()} if drafts is not None else {})}
    doc = heads_document(policy, fits, ex, backend_identity(gb), training)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    t_drafts = drafts.seconds if drafts is not None else 0.0
    secs = {"load": round(t1 - t0 - t_drafts, 1),
            **({"drafts": t_drafts} if drafts is not None else {}),
            "features": round(t2 - t1, 1),
            "fit": round(t3 - t2, 1), "forwarded_items": float(forwarded)}
    matrices = {f.name: {"matrix": f.matrix, "choice": f.choice, "why": f.why, "seen": f.seen,
                         "own_drafts": f.own_drafts,
                         "worst_source": f.worst_source, "n_pos": f.n_pos, "n_neg": f.n_neg,
                         "n_pairs": f.n_pairs} for f in fits if f.matrix}
    (path.with_suffix(".sources.json")).write_text(json.dumps(
        {"metric": "held-out AUROC (pairwise accuracy for preference pairs); rows: the "
                   "training source, 'others' = every source but the column's, 'chosen "
                   "by CV (before)' = what pooled cross-validation picks, held out the same "
                   "way, 'zero-shot' = no head (plguard_lab.training.select)",
         "items": counts, "predicates": matrices}, indent=1, default=_nan_none) + "\n")
    report = path.with_suffix(".md")
    report.write_text(format_report(policy.id, str(gb.model_id), fits, training, secs))
    (path.with_suffix(".fits.json")).write_text(json.dumps(
        [{k: v for k, v in asdict(f).items() if k != "head"} for f in fits], indent=1,
        default=_nan_none) + "\n")
    store.close()
    return FitSummary(path, report, fits, secs, drafts.summary() if drafts else None)


def _zero_shot_logits(gb: Any, policy: Any, config: GuardConfig, store: FeatureStore,
                      layers: Sequence[int], items: Sequence[CorpusItem], per_source: int,
                      progress: bool, scopes: Sequence[str] = ("request", "response"),
                      ) -> tuple[dict[str, np.ndarray], int]:
    """Zero-shot logits (``lT - lF`` of each predicate's question) of a seeded subset.

    ``per_source`` items of each source (a pair's replies together; no rewrites), asked
    every question of their scope once, for the items of ``scopes`` (those whose questions
    the fit's features do not hold); NaN for the other items. Returns the logits and the
    number of items forwarded.
    """
    import hashlib

    def key(it: CorpusItem) -> bytes:
        return hashlib.sha256(f"zs:{it.fields.get('pair', it.uid)}".encode()).digest()

    chosen: list[int] = []
    for src in sorted({it.source for it in items}):
        # Rewrites are never scored (plguard_lab.training.select), so never asked either.
        rows = sorted((i for i, it in enumerate(items)
                       if it.source == src and "augmented" not in it.fields
                       and it.scope in scopes),
                      key=lambda i: key(items[i]))
        groups = list(dict.fromkeys(items[i].fields.get("pair", items[i].uid) for i in rows))
        keep = set(groups[:per_source])
        chosen += [i for i in rows if items[i].fields.get("pair", items[i].uid) in keep]
    exq = Extractor(gb, policy.predicates, config.grounding, store, layers, questions=True,
                    pairs=False, pool=False)
    sub = [items[i] for i in chosen]
    n = exq.run(sub, progress=progress)
    out = {s.name: np.full(len(items), np.nan) for s in policy.predicates}
    feats = store.get([k for it in sub for k in exq.keys(it)])
    for i, it in zip(chosen, sub, strict=True):
        ks = exq.keys(it)
        qs = exq.questions(it.scope)
        for spec in policy.predicates:
            if spec.scope != it.scope:
                continue
            f = feats.get(ks[1 + qs.index(exq.grounder.question_block(spec, spec.question))])
            if f is not None:
                out[spec.name][i] = f.logprob_true - f.logprob_false
    return out, n


def _augment_note(per_item: int) -> str:
    from plguard_lab.training.augment import describe

    return describe(per_item=per_item)


def _joint_names(policy: Any, opts: FitOptions) -> list[str]:
    """The predicates fitted jointly: the category rules' request predicates, if asked."""
    if not opts.joint_categories:
        return []
    if "request" not in opts.scopes or not {"prefix", "pool"} & set(opts.readouts):
        raise ConfigError("joint category heads read the request prompt's prefix or pool "
                          "state: fit the request scope with the prefix or pool readout")
    names = list(category_predicates(policy))
    if not names:
        raise ConfigError(f"policy {policy.id} tags no unsafe rule with a hazard category "
                          "(categories.yaml), so there is nothing to fit jointly")
    return names


def _nan_none(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else str(x)


def _f(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def format_report(policy: str, model: str, fits: Sequence[PredicateFit],
                  training: dict[str, Any], secs: dict[str, float]) -> str:
    """The fit's Markdown report: per predicate, the choice, its held-out sources, matrix."""
    lines = [f"# Heads for {policy} on {model}", "",
             f"Trained on the dev split of {', '.join(training['sources'])} "
             f"({', '.join(f'{k} {v}' for k, v in training['items'].items())} items); "
             f"labels: {training['labels']}. Times (s): {secs}.", "",
             "Chosen by leave-one-source-out (plguard_lab.training.select): each source scored "
             "by a head fitted on the others; AUROC within a source with both classes, against "
             "the other class of the other sources for a one-class source, pairwise accuracy "
             "for preference pairs. A choice is judged by its worst held-out source and may "
             "not fall below zero-shot there. Zero-shot figures are on the subset it was "
             "read on.", "",
             "| predicate | scope | pos / neg / pairs | choice | readout@layer | worst held-out "
             "| zero-shot (training items) | why |", "|---|---|---|---|---|---|---|---|"]
    j = training.get("joint")
    if j and j["classes"]:
        lines[6:6] = [f"Category predicates fitted jointly (one multinomial over "
                      f"{len(j['classes'])} categories and none, plguard_lab.training.joint): "
                      f"{j.get('readout', 'prefix')}@{j['layer']}, C {j['C']}, chosen by "
                      f"the mean over categories of each one's worst held-out source "
                      f"({j.get('mean_worst_heldout', '-')}; {j.get('selected_by', '')}); "
                      f"out of fold: log-loss {j['cv_log_loss']}, own category first "
                      f"for {j['cv_top1']:.1%} of the single-category hazardous requests.",
                      ""]
    # After the joint note: it is placed by index too.
    d = training.get("drafts")
    if d:
        lines[4:4] = [f"Drafts: the generator answered {d['n']} dev prompts ({d['file']}); "
                      f"{d['kept']} kept as pairs of source drafts, "
                      f"{d['dropped_disagreements']} dropped where the two refusal readings "
                      f"disagreed, {d['failed']} failed. Labels: {d['labels']}.", ""]
    for f in fits:
        counts = f"{f.n_pos} / {f.n_neg} / {f.n_pairs}"
        if f.head is None and not f.heldout:
            lines.append(f"| {f.name} | {f.scope} | {counts} | zero-shot | | | "
                         f"{_f(f.zero_shot_auroc)} | {f.why or f.skipped} |")
            continue
        lines.append(f"| {f.name} | {f.scope} | {counts} | {f.choice or 'head'} | "
                     f"{f.readout}@{f.layer} | {_f(f.cv_auroc)} ({f.worst_source or '-'}) | "
                     f"{_f(f.zero_shot_auroc)} | {f.why} |")
    own = [f for f in fits if f.own_drafts]
    if own:
        lines += ["", "Own drafts (source `drafts`): held out (a head that saw none of them) "
                  "and cross-fitted (5 folds of drafts, the other folds training beside every "
                  "other source): "
                  + "; ".join(f"{f.name} {_f(f.own_drafts['held_out'])} -> "
                              f"{_f(f.own_drafts['cross_fitted'])}" for f in own) + "."]
    with_matrix = [f for f in fits if f.matrix]
    if with_matrix:
        lines += ["", "## Source x source", "",
                  "Rows: the training source (`others`: every source but the column's; "
                  "`zero-shot`: no head), columns: the source scored. The same file as JSON: "
                  "`*.sources.json`."]
    for f in with_matrix:
        cols = sorted({c for row in f.matrix.values() for c in row})
        lines += ["", f"### {f.name}", "", "| train \\ test | " + " | ".join(cols) + " |",
                  "|---" * (len(cols) + 1) + "|"]
        for row, vals in f.matrix.items():
            lines.append(f"| {row} | " + " | ".join(_f(vals.get(c, math.nan)) for c in cols)
                         + " |")
    return "\n".join(lines) + "\n"


__all__ = ["FitOptions", "FitSummary", "fit_heads", "format_report"]
