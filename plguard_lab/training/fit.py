"""Fitting heads: per predicate, a regularised logistic regression on one hidden state.

For every predicate of a policy, labels come from the bundle's ``gold.yaml`` rules applied
to each corpus item's fields (plguard_lab.training.corpus); items whose value no rule derives are
left out of that head, and a predicate with fewer than :data:`MIN_CLASS` items of either
class keeps its zero-shot reading. Response predicates the bundle lists under
``pairwise:`` also learn from preference pairs (a pairwise loss, plguard_lab.training.select).

Every choice is made for transfer, by **leave-one-source-out** (plguard_lab.training.select):
the (readout, layer) with the best *worst* held-out source at one moderate strength, then
the strength there the same way; then head, zero-shot or a blend of the two (``mode:
both``), never one that falls below zero-shot on its own worst held-out source. The head's
Platt map is fitted on its held-out scores. Each fit records its held-out metric per
source, the train-source x test-source matrix, and which choice won and why.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from plguard.heads.artefact import FORMAT, READOUTS, encode_vector
from plguard.stats import auroc
from plguard.types import PredicateSpec
from plguard_lab.training.corpus import LICENCES, CorpusItem
from plguard_lab.training.features import Extractor
from plguard_lab.training.select import (
    BLEND_WEIGHTS,
    C_GRID,
    QUICK_C,
    WORST_TOLERANCE,
    Data,
    Linear,
    Scored,
    best_choice,
    blend,
    fit_linear,
    heldout_metrics,
    loso_scores,
    rank_key,
    source_matrix,
    spread,
    within_source,
    worst,
)

# The readouts of the grounding prompt this fit serves; `alone` heads (the evidence read
# alone) are fitted by plguard_lab.training.alone_fit.
PROMPT_READOUTS: tuple[str, ...] = tuple(r for r in READOUTS if r != "alone")
MIN_CLASS = 8
FOLDS = 5
COST_MARGIN = 0.01  # held-out AUROC a question-asking readout must gain over a one-forward one
# A predicate an unsafe_content_* rule reads judges an answer alone, often one window of a
# long answer whose harmful passage sits among benign text. A state that summarises the text
# without asking (``pool``: the mean over its tokens; ``prefix``: its last token) carries a
# passage diluted by, or long past, its surroundings; the question's answer position attends
# to the whole text for what is asked. Measured on tests/test_content_leak.py's answer with
# the embedded model: a pool@30 head chosen by held-out source read the harmful window at
# 0.15 and the benign ones at 0.07-0.13; the question@30 head 0.97 vs 0.11-0.28.
CONTENT_READOUTS = ("question",)


@dataclass
class PredicateFit:
    """What fitting one predicate found (the report's row)."""

    name: str
    scope: str
    n_pos: int
    n_neg: int
    zero_shot_auroc: float
    cv_auroc: float = math.nan
    readout: str = ""
    layer: int = -1
    mode: str = ""
    C: float = math.nan
    candidates: dict[str, float] = field(default_factory=dict)
    n_pairs: int = 0  # preference pairs the head was also trained on
    heldout: dict[str, float] = field(default_factory=dict)  # source -> held-out metric
    zero_shot_heldout: dict[str, float] = field(default_factory=dict)
    worst_source: str = ""
    not_held_out: list[str] = field(default_factory=list)
    blends: dict[str, float] = field(default_factory=dict)  # head weight -> worst source
    matrix: dict[str, dict[str, float]] = field(default_factory=dict)  # train -> test
    choice: str = ""  # head, zero-shot, or a blend
    why: str = ""
    why_groups: str = ""  # set when folds stood in for sources
    seen: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> counts
    # Own drafts: held out (no draft trains: before) and cross-fitted (the others do: after).
    own_drafts: dict[str, float] = field(default_factory=dict)
    # The candidate pooled cross-validation (the old rule) picks, and its held-out sources.
    by_cv: dict[str, Any] = field(default_factory=dict)
    head: dict[str, Any] | None = None
    skipped: str = ""


def fixed_model(C: float) -> Any:
    """Standardise, then an L2 logistic regression at strength ``C`` (unfitted)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, tol=1e-4))


def fold_head(X: np.ndarray, y: np.ndarray, C: float) -> Any:
    """A fitted (model, Platt) pair: the heads fit's recipe at a fixed strength."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    model = fixed_model(C)
    inner = min(FOLDS, int(y.sum()), int(len(y) - y.sum()))
    oof = cross_val_predict(model, X, y, method="decision_function",
                            cv=StratifiedKFold(inner, shuffle=True, random_state=0))
    platt = LogisticRegression(C=1e4, max_iter=1000).fit(oof.reshape(-1, 1), y)
    return model.fit(X, y), platt


def labels_for(policy: Any, items: Sequence[CorpusItem]) -> dict[str, np.ndarray]:
    """Predicate -> gold value per item (NaN: unknown), from the bundle's gold.yaml."""
    from plguard_lab.labels.gold import Sample, load_gold

    gold = load_gold(policy)
    rows = [gold.values(Sample(it.uid, it.prompt_id, it.fields, it.request,
                               it.response or "")) for it in items]
    return {n: np.array([r[n] for r in rows], dtype=np.float64)
            for n in policy.predicate_names}


def fit_policy_heads(policy: Any, extractor: Extractor, items: Sequence[CorpusItem],
                     *, readouts: Sequence[str] = PROMPT_READOUTS, lodo: bool = True,
                     cost_margin: float = COST_MARGIN,
                     scopes: Sequence[str] = ("request", "response"),
                     skip: Collection[str] = (),
                     labels: Mapping[str, np.ndarray] | None = None,
                     zero_shot: Mapping[str, np.ndarray] | None = None,
                     pairwise: Collection[str] = ()) -> list[PredicateFit]:
    """Fit a head for each predicate of ``policy`` on stored features of ``items``.

    Readout and layer go by cross-validated AUROC, except that one riding on the pair's
    single forward (``pair_prefix`` for request predicates, ``prefix`` or ``pool`` for
    response ones)
    is kept when within ``cost_margin`` of the best: a question costs its tokens on every
    request, a difference that small is within the folds' noise. Predicates outside
    ``scopes`` keep their zero-shot reading; those in ``skip`` are left to the caller
    (plguard_lab.training.joint fits them together) and come back unfitted. An extractor without
    questions allows the question-free readouts only (and no zero-shot feature: ``mode`` is
    always ``head``). ``labels``: :func:`labels_for` of ``items``, where the caller has them.
    ``zero_shot``: predicate -> zero-shot logit per item (NaN: not read), for features
    without questions; ``pairwise``: the predicates the corpus's preference pairs train
    (default: the bundle's ``gold.yaml`` ``pairwise:`` list).
    """
    if not extractor.with_questions:
        readouts = [r for r in readouts if r != "question"]
        if not readouts:
            raise ValueError("features without questions serve the prefix, pair_prefix "
                             "and pool readouts only; ask for one of them")
    if not extractor.with_pairs and "pair_prefix" in readouts:
        raise ValueError("pair_prefix needs the pair reads, which this extraction skips")
    if not extractor.with_pool and "pool" in readouts:
        raise ValueError("pool needs the pool states, which this extraction skips")
    if labels is None:
        labels = labels_for(policy, items)
    if not pairwise:
        from plguard_lab.labels.gold import load_gold

        pairwise = set(load_gold(policy).pairwise)
    content = content_predicates(policy)
    out = []
    for spec in policy.predicates:
        if spec.name in skip:
            out.append(PredicateFit(spec.name, spec.scope, 0, 0, math.nan,
                                    skipped="fitted jointly"))
            continue
        if spec.scope not in scopes:
            out.append(PredicateFit(spec.name, spec.scope, 0, 0, math.nan,
                                    skipped=f"{spec.scope} scope not fitted: zero-shot kept"))
            continue
        mine, note = list(readouts), ""
        if spec.name in content:
            allowed = [r for r in readouts if r in CONTENT_READOUTS]
            if allowed and extractor.asks(spec.scope):
                mine = allowed
                note = (f"read by {', '.join(content[spec.name])} (the answer alone): "
                        f"{', '.join(allowed)} readout only")
            else:
                note = (f"read by {', '.join(content[spec.name])}, but no "
                        f"{'/'.join(CONTENT_READOUTS)} readout is extracted: a summary state "
                        "may miss a passage inside a long answer")
        fit = _fit_one(spec, extractor, items, labels[spec.name], mine, lodo,
                       cost_margin, (zero_shot or {}).get(spec.name), spec.name in pairwise)
        if note:
            fit.why = f"{fit.why}; {note}" if fit.why else note
            if fit.head is not None:
                fit.head["info"]["why"] = fit.why
        out.append(fit)
    return out


def content_predicates(policy: Any) -> dict[str, list[str]]:
    """Predicate -> the ``unsafe_content_*`` rules that depend on it (see CONTENT_READOUTS)."""
    out: dict[str, list[str]] = {}
    for rule in policy.content_rules:
        for name in sorted(policy.compiled.support(rule)):
            out.setdefault(name, []).append(rule)
    return out


def _cheap(readout: str, scope: str) -> bool:
    """Whether a readout rides on the pair's one forward (no question, no other prompt)."""
    return readout in (("prefix", "pool") if scope == "response" else ("pair_prefix",))


def pairs_of(items: Sequence[CorpusItem]) -> list[tuple[int, int]]:
    """``(more harmful, less harmful)`` item indices of the corpus's preference pairs."""
    by_pair: dict[str, dict[str, int]] = {}
    for i, it in enumerate(items):
        if "pair" in it.fields:
            by_pair.setdefault(str(it.fields["pair"]), {})[str(it.fields["pair_role"])] = i
    return [(p["rejected"], p["chosen"]) for _, p in sorted(by_pair.items())
            if {"rejected", "chosen"} <= set(p)]


def _fit_one(spec: PredicateSpec, ex: Extractor, items: Sequence[CorpusItem],
             y_all: np.ndarray, readouts: Sequence[str], lodo: bool,
             cost_margin: float, zero_shot: np.ndarray | None = None,
             pairwise: bool = False) -> PredicateFit:
    """One predicate's head, chosen by its worst held-out source (plguard_lab.training.select)."""
    want_resp = spec.scope == "response"
    idx = [i for i, it in enumerate(items)
           if (it.response is not None) == want_resp and not math.isnan(y_all[i])]
    pairs = pairs_of(items) if pairwise and want_resp else []
    y = y_all[idx].astype(int)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    asked = ex.asks(spec.scope)
    if asked:
        block = ex.grounder.question_block(spec, spec.question)
        qs = ex.questions(spec.scope)
        if block not in qs:
            raise ValueError(f"features of {spec.name}'s question are not extracted")
        qpos = 1 + qs.index(block)
    if want_resp:  # the pair read exists for request predicates only
        readouts = [r for r in readouts if r != "pair_prefix"]
    if not asked:  # this scope's questions were not forwarded (Extractor questions=)
        readouts = [r for r in readouts if r != "question"]
    if not readouts:
        raise ValueError(f"no readout left for {spec.name} ({spec.scope} scope)")
    slots = {"prefix": 0, "question": 1}
    for r in ("pair_prefix", "pool"):
        if r in readouts:
            slots[r] = len(slots)

    def key_row(it: CorpusItem) -> list[str]:
        k = ex.keys(it)
        return ([k[0], k[qpos] if asked else k[0]]
                + ([ex.pair_key(it)] if "pair_prefix" in readouts else [])
                + ([ex.pool_key(it)] if "pool" in readouts else []))

    used = sorted({*idx, *(i for p in pairs for i in p)})
    keys = {i: key_row(items[i]) for i in used}
    feats = ex.store.get([k for row in keys.values() for k in row])
    missing = sum(1 for row in keys.values() if any(k not in feats for k in row))
    if missing:
        raise ValueError(f"{missing} items lack stored features; run the extraction first")

    def zs_of(rows: Sequence[int]) -> np.ndarray:
        if asked:
            return np.array([feats[keys[i][1]].logprob_true - feats[keys[i][1]].logprob_false
                             for i in rows], dtype=np.float64)
        if zero_shot is not None:
            return np.asarray(zero_shot[list(rows)], dtype=np.float64)
        return np.full(len(rows), np.nan)

    ia, ib = [p[0] for p in pairs], [p[1] for p in pairs]
    zs = Scored(zs_of(idx), zs_of(ia), zs_of(ib))
    known = np.isfinite(zs.s)
    has_zs = bool(known.any())
    res = PredicateFit(spec.name, spec.scope, n_pos, n_neg,
                       auroc(y[known], zs.s[known]) if has_zs else math.nan,
                       n_pairs=len(pairs))
    if min(n_pos, n_neg) < MIN_CLASS:
        res.skipped = (f"{n_pos} positive / {n_neg} negative training items (< {MIN_CLASS}): "
                       "zero-shot kept")
        res.choice, res.why = "zero-shot", res.skipped
        return res
    layers = ex.layers
    groups = np.array([items[i].source for i in idx])
    pgroups = np.array([items[i].source for i in ia])
    scored = np.array(["augmented" not in items[i].fields for i in idx], dtype=bool)
    for src in sorted({*groups.tolist(), *pgroups.tolist()}):
        at = groups == src
        res.seen[src] = {"pos": int(y[at].sum()), "neg": int((1 - y[at]).sum()),
                         "pairs": int((pgroups == src).sum()),
                         "augmented": sum(1 for i in np.flatnonzero(at)
                                          if "augmented" in items[idx[i]].fields)}

    def data_of(readout: str, layer: int) -> Data:
        j = layers.index(layer)
        width = len(feats[keys[used[0]][0]].states[j])

        def X(rows: Sequence[int]) -> np.ndarray:
            if not rows:
                return np.zeros((0, width))
            return np.stack([feats[keys[i][slots[readout]]].states[j] for i in rows])

        return Data(X(idx), y, groups, X(ia), X(ib), pgroups, scored)

    pooled: dict[tuple[str, int], float] = {}  # what cross-validation alone would pick
    folds = _folds(y)

    def rank_candidates() -> dict[tuple[str, int], dict[str, float]]:
        out: dict[tuple[str, int], dict[str, float]] = {}
        for r in readouts:
            for layer in layers:
                d = data_of(r, layer)
                out[r, layer] = heldout_metrics(d, loso_scores(d, partial(_fit_at, C=QUICK_C)))
                res.candidates[f"{r}@{layer}"] = round(worst(out[r, layer])[0], 4)
                if (r, layer) not in pooled:
                    cv = Data(d.X, d.y, folds, d.X[:0], d.X[:0], np.array([], dtype=str),
                              d.scored)
                    pooled[r, layer] = auroc(y, loso_scores(cv, partial(_fit_at, C=QUICK_C)).s)
        return out

    one_source = len({*groups.tolist(), *pgroups.tolist()}) < 2
    quick = {} if one_source else rank_candidates()
    if one_source or all(math.isnan(worst(m)[0]) for m in quick.values()):
        # Nothing to hold out (one source), or no source could be held out and measured
        # (one source holds every item of a class): seeded stratified folds stand in for
        # sources (an in-distribution check), and the report says so.
        groups = folds
        pgroups = np.array([f"fold{i % FOLDS + 1}" for i in range(len(ia))])
        res.why_groups = ("one training source" if one_source else
                          "no source could be held out with both classes left") + \
            f": {FOLDS} stratified folds stand in for sources"
        quick = rank_candidates()
    by_cv = max(pooled, key=lambda k: pooled[k])
    res.by_cv = {"readout": by_cv[0], "layer": by_cv[1], "cv_auroc": round(pooled[by_cv], 4),
                 "heldout": {k: round(v, 4) for k, v in quick[by_cv].items()}}
    r, layer = best_choice(quick)
    # A readout that costs no question and no extra forward wins within the margin.
    cheap = [k for k in quick if _cheap(k[0], spec.scope)]
    if cheap:
        c = best_choice({k: quick[k] for k in cheap})
        if rank_key(quick[c])[0] >= rank_key(quick[r, layer])[0] - cost_margin:
            r, layer = c
    d = data_of(r, layer)
    by_C: dict[float, tuple[dict[str, float], Scored]] = {}
    for C in C_GRID:
        sc = loso_scores(d, partial(_fit_at, C=C))
        by_C[C] = (heldout_metrics(d, sc), sc)
    C = best_choice({c: by_C[c][0] for c in C_GRID})
    metrics, sc = by_C[C]
    res.heldout = {k: round(v, 4) for k, v in metrics.items()}
    res.not_held_out = sc.not_held_out
    res.readout, res.layer, res.C = r, layer, C
    res.cv_auroc, res.worst_source = worst(metrics)
    if has_zs:
        res.zero_shot_heldout = {k: round(v, 4) for k, v in heldout_metrics(d, zs).items()}
    w, res.choice, res.why = _choose_blend(d, sc, zs, has_zs, res)
    if res.why_groups:
        res.why += f" ({res.why_groups})"
    if "drafts" in d.sources:  # the guarded model's own answers, seen in training
        res.own_drafts = {"held_out": round(metrics.get("drafts", math.nan), 4),
                          "cross_fitted": round(within_source(d, "drafts",
                                                              partial(_fit_at, C=C)), 4)}
    if lodo:
        res.matrix = source_matrix(d, partial(_fit_at, C=C), metrics)
        res.matrix["chosen by CV (before)"] = res.by_cv["heldout"]
        if has_zs:
            res.matrix["zero-shot"] = res.zero_shot_heldout
    if w == 0.0:
        return res
    head = fit_linear(d, C)
    final = blend(sc, zs, w) if w < 1.0 else sc
    ok = np.isfinite(final.s)
    from sklearn.linear_model import LogisticRegression

    # Platt map on held-out scores: probabilities as a new source would see them.
    if not 0 < y[ok].sum() < ok.sum():  # one class held out: fold scores map instead
        fs = loso_scores(Data(d.X, d.y, _folds(y), d.Xa, d.Xb, d.pair_groups, d.scored),
                         partial(_fit_at, C=C))
        final = blend(fs, zs, w) if w < 1.0 else fs
        ok = np.isfinite(final.s)
    platt = LogisticRegression(C=1e4, max_iter=1000).fit(final.s[ok].reshape(-1, 1), y[ok])
    if w < 1.0:
        h0, z0 = spread(sc), spread(zs)
        weights = np.concatenate([w * head.w / h0, [(1 - w) / z0]])
        bias, mode = w * head.b / h0, "both"
    else:
        weights, bias, mode = head.w, head.b, "head"
    res.mode = mode
    res.head = {"readout": r, "layer": layer, "mode": mode, "weights": encode_vector(weights),
                "bias": float(bias), "platt": {"a": float(platt.coef_[0][0]),
                                               "b": float(platt.intercept_[0])},
                "info": {"worst_heldout": round(res.cv_auroc, 4),
                         "worst_source": res.worst_source, "heldout": res.heldout,
                         "C": C, "n_pos": n_pos, "n_neg": n_neg, "n_pairs": len(pairs),
                         "seen": res.seen, "own_drafts": res.own_drafts,
                         "blend_weight": w, "choice": res.choice, "why": res.why,
                         "zero_shot_auroc": None if math.isnan(res.zero_shot_auroc)
                         else round(res.zero_shot_auroc, 4)}}
    return res


def _folds(y: np.ndarray) -> np.ndarray:
    """Seeded stratified fold names of labels ``y``."""
    from sklearn.model_selection import StratifiedKFold

    out = np.empty(len(y), dtype=object)
    k = max(2, min(FOLDS, int(y.sum()), int(len(y) - y.sum())))
    for i, (_, test) in enumerate(StratifiedKFold(k, shuffle=True, random_state=0)
                                  .split(np.zeros(len(y)), y)):
        out[test] = f"fold{i + 1}"
    return out.astype(str)


def _fit_at(d: Data, C: float) -> Linear:
    return fit_linear(d, C)


def _choose_blend(d: Data, sc: Scored, zs: Scored, has_zs: bool, res: PredicateFit
                  ) -> tuple[float, str, str]:
    """(head weight, choice, why): the head, else the best of zero-shot and the blends.

    The head ships unless its worst held-out source reads below zero-shot's reading of
    that source by more than :data:`~plguard_lab.training.select.WORST_TOLERANCE` (zero-shot is
    read on a few dozen items a source: closer is noise; a blend asks the question on
    every request, so it is no alternative to a head that holds). Otherwise the blends
    that do not fall below zero-shot on their own worst source, and zero-shot itself (which
    never does), compete by their worst held-out source, all on the items zero-shot was
    read on. Without zero-shot readings the floor
    is chance.
    """
    if not has_zs:
        if res.cv_auroc < 0.5:
            return 0.0, "zero-shot", (f"the head's worst held-out source, {res.worst_source}, "
                                      f"reads {res.cv_auroc:.3f}: below chance")
        return 1.0, "head", (f"worst held-out source {res.worst_source} "
                             f"{res.cv_auroc:.3f} >= chance (zero-shot not read)")
    zsm = heldout_metrics(d, zs)
    tried: dict[float, dict[str, float]] = {}
    passing = []
    for w in BLEND_WEIGHTS:  # every weight is scored (the report shows them), 1 included
        m = heldout_metrics(d, blend(sc, zs, w)) if w > 0 else zsm
        tried[w] = m
        v, src = worst(m)
        floor = zsm.get(src, math.nan)
        if w == 0.0 or math.isnan(v) or math.isnan(floor) or v >= floor:
            passing.append(w)
    res.blends = {str(w): round(worst(m)[0], 4) for w, m in tried.items()}
    hv, hs = res.cv_auroc, res.worst_source
    floor = zsm.get(hs, math.nan)
    # Holds its worst source against zero-shot, within the noise that ties sources.
    if math.isnan(floor) or hv >= floor - WORST_TOLERANCE:
        return 1.0, "head", (f"worst held-out source {hs} {hv:.3f} vs zero-shot there "
                             f"{floor:.3f}")
    best = best_choice({w: tried[w] for w in passing})
    v, src = worst(tried[best])
    if best == 0.0:
        return 0.0, "zero-shot", (f"the head's worst held-out source {hs} reads {hv:.3f}, "
                                  f"below zero-shot's {zsm.get(hs, math.nan):.3f} there, and "
                                  f"no blend beats zero-shot's worst ({v:.3f}, {src})")
    return best, f"blend {best:g} head / {1 - best:g} zero-shot", (
        f"the head's worst held-out source {hs} reads {hv:.3f}, below zero-shot's "
        f"{zsm.get(hs, math.nan):.3f} there; the blend's worst is {v:.3f} ({src})")


def heads_document(policy: Any, fits: Sequence[PredicateFit], ex: Extractor,
                   identity: Mapping[str, Any], training: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON of a heads file for ``policy`` from its fits."""
    import hashlib

    preds: dict[str, Any] = {}
    for f in fits:
        if f.head is None:
            continue
        spec = next(s for s in policy.predicates if s.name == f.name)
        block = ex.grounder.question_block(spec, spec.question)
        preds[f.name] = {**f.head, "question_sha256": hashlib.sha256(block.encode()).hexdigest()}
    return {"format": FORMAT,
            "model": {"sha256": identity.get("model_sha256"),
                      "model_id": identity.get("model_id")},
            "template_version": ex.grounder.template_version, "policy": policy.id,
            "layers": list(ex.layers), "predicates": preds,
            "zero_shot": sorted(f.name for f in fits if f.head is None),
            # Which won for each predicate and why (plguard_lab.training.select).
            "selection": {f.name: {"choice": f.choice or ("zero-shot" if f.head is None
                                                          else "head"),
                                   "why": f.why or f.skipped,
                                   "worst_source": f.worst_source,
                                   "heldout": f.heldout,
                                   "zero_shot_heldout": f.zero_shot_heldout}
                          for f in fits},
            "training": {**training, "licences": {s: LICENCES[s]
                                                  for s in training.get("sources", [])}}}


__all__ = ["FOLDS", "MIN_CLASS", "PredicateFit", "auroc", "fit_policy_heads",
           "fixed_model", "fold_head", "heads_document", "labels_for"]
