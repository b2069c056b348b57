"""Fitting heads: per predicate, a regularised logistic regression on one hidden state.

For every predicate of a policy, labels come from the bundle's ``gold.yaml`` rules applied
to each corpus item's fields (plguard.heads.corpus); items whose value no rule derives are
left out of that head, and a predicate with fewer than :data:`MIN_CLASS` items of either
class keeps its zero-shot reading. Candidates are each (readout, layer) the features hold,
ranked by the cross-validated AUROC of an L2 logistic regression on standardised features
at one moderate strength; the winner's strength is then chosen by stratified k-fold
cross-validation on the training data only (scikit-learn ``LogisticRegressionCV``,
AUROC). The winner is tried once more with the zero-shot logit as an extra feature
(``mode: both``), kept only if that raises the cross-validated AUROC. The head's Platt
map is fitted on its out-of-fold scores, so its probabilities are not in-sample ones.

A leave-one-source-out report (each source scored by a head fitted on the others) shows
shortcut features of one data set.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plguard.heads.artefact import FORMAT, READOUTS, encode_vector
from plguard.heads.corpus import LICENCES, CorpusItem
from plguard.heads.features import Extractor
from plguard.types import PredicateSpec

MIN_CLASS = 8
FOLDS = 5
COST_MARGIN = 0.01  # CV AUROC a question-asking readout must gain over a one-forward one
CS = 8  # regularisation strengths tried per candidate (log-spaced, scikit-learn's grid)
FPR = 0.05
QUICK_C = 0.05  # the strength candidates are ranked at (standardised features)


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
    lodo: dict[str, dict[str, float]] = field(default_factory=dict)
    head: dict[str, Any] | None = None
    skipped: str = ""


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    """AUROC, NaN when only one class is present."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else math.nan


def _model(cv: int) -> Any:
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegressionCV(
        Cs=CS, cv=StratifiedKFold(cv, shuffle=True, random_state=0), scoring="roc_auc",
        max_iter=2000, tol=1e-3))


def _cv_score(X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(best mean cross-validated AUROC over the C grid, that C)."""
    import warnings

    with warnings.catch_warnings():  # scikit-learn 1.9 announces 1.10's attribute changes
        warnings.simplefilter("ignore", FutureWarning)
        m = _model(FOLDS).fit(X, y)
    lr = m[-1]
    scores = np.asarray(lr.scores_[1]).mean(axis=0)
    return float(scores.max()), float(lr.Cs_[int(scores.argmax())])


def _quick_score(X: np.ndarray, y: np.ndarray) -> float:
    """Cross-validated AUROC at one moderate strength: ranks candidates cheaply.

    Choosing the strength per candidate costs a grid of fits each; the readout and layer
    are chosen at :data:`QUICK_C` and only the winner gets its strength chosen.
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    z = cross_val_predict(fixed_model(QUICK_C), X, y, method="decision_function",
                          cv=StratifiedKFold(FOLDS, shuffle=True, random_state=0))
    return auroc(y, z)


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
    from plguard.labels.gold import Sample, load_gold

    gold = load_gold(policy)
    rows = [gold.values(Sample(it.uid, it.prompt_id, it.fields, it.request,
                               it.response or "")) for it in items]
    return {n: np.array([r[n] for r in rows], dtype=np.float64)
            for n in policy.predicate_names}


def fit_policy_heads(policy: Any, extractor: Extractor, items: Sequence[CorpusItem],
                     *, readouts: Sequence[str] = READOUTS, lodo: bool = True,
                     cost_margin: float = COST_MARGIN,
                     scopes: Sequence[str] = ("request", "response"),
                     skip: Collection[str] = (),
                     labels: Mapping[str, np.ndarray] | None = None) -> list[PredicateFit]:
    """Fit a head for each predicate of ``policy`` on stored features of ``items``.

    Readout and layer go by cross-validated AUROC, except that one riding on the pair's
    single forward (``pair_prefix`` for request predicates, ``prefix`` or ``pool`` for
    response ones)
    is kept when within ``cost_margin`` of the best: a question costs its tokens on every
    request, a difference that small is within the folds' noise. Predicates outside
    ``scopes`` keep their zero-shot reading; those in ``skip`` are left to the caller
    (plguard.heads.joint fits them together) and come back unfitted. An extractor without
    questions allows the question-free readouts only (and no zero-shot feature: ``mode`` is
    always ``head``). ``labels``: :func:`labels_for` of ``items``, where the caller has them.
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
        out.append(_fit_one(spec, extractor, items, labels[spec.name], readouts, lodo,
                            cost_margin))
    return out


def _cheap(readout: str, scope: str) -> bool:
    """Whether a readout rides on the pair's one forward (no question, no other prompt)."""
    return readout in (("prefix", "pool") if scope == "response" else ("pair_prefix",))


def _fit_one(spec: PredicateSpec, ex: Extractor, items: Sequence[CorpusItem],
             y_all: np.ndarray, readouts: Sequence[str], lodo: bool,
             cost_margin: float) -> PredicateFit:
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    want_resp = spec.scope == "response"
    idx = [i for i, it in enumerate(items)
           if (it.response is not None) == want_resp and not math.isnan(y_all[i])]
    sub = [items[i] for i in idx]
    y = y_all[idx].astype(int)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    asked = ex.with_questions
    if asked:
        block = ex.grounder.question_block(spec, spec.question)
        qs = ex.questions(spec.scope)
        if block not in qs:
            raise ValueError(f"features of {spec.name}'s question are not extracted")
        qpos = 1 + qs.index(block)
    if want_resp:  # the pair read exists for request predicates only
        readouts = [r for r in readouts if r != "pair_prefix"]
    if not readouts:
        raise ValueError(f"no readout left for {spec.name} ({spec.scope} scope)")
    # Each row: prefix state, question state (the prefix again when none is asked), then
    # the pair read (request scope) and the pool state, where asked for.
    keys = [[(k := ex.keys(it))[0], k[qpos] if asked else k[0]]
            + ([ex.pair_key(it)] if "pair_prefix" in readouts else [])
            + ([ex.pool_key(it)] if "pool" in readouts else []) for it in sub]
    slots = {"prefix": 0, "question": 1}
    for r in ("pair_prefix", "pool"):
        if r in readouts:
            slots[r] = len(slots)
    feats = ex.store.get([k for row in keys for k in row])
    missing = sum(1 for row in keys if any(k not in feats for k in row))
    if missing:
        raise ValueError(f"{missing} items lack stored features; run the extraction first")
    logit = np.array([feats[row[1]].logprob_true - feats[row[1]].logprob_false
                      for row in keys])
    res = PredicateFit(spec.name, spec.scope, n_pos, n_neg,
                       auroc(y, logit) if len(y) and asked else math.nan)
    if min(n_pos, n_neg) < MIN_CLASS:
        res.skipped = (f"{n_pos} positive / {n_neg} negative training items (< {MIN_CLASS}): "
                       "zero-shot kept")
        return res
    layers = ex.layers

    def X_of(readout: str, layer: int) -> np.ndarray:
        j = layers.index(layer)
        return np.stack([feats[row[slots[readout]]].states[j] for row in keys])

    quick: dict[tuple[str, int], float] = {}
    for r in readouts:
        for layer in layers:
            quick[r, layer] = _quick_score(X_of(r, layer), y)
            res.candidates[f"{r}@{layer}"] = round(quick[r, layer], 4)
    r, layer = max(quick, key=lambda k: quick[k])
    # A readout that costs no question and no extra forward wins within the margin.
    cheap = [k for k in quick if _cheap(k[0], spec.scope)]
    if cheap:
        c = max(cheap, key=lambda k: quick[k])
        if quick[c] >= quick[r, layer] - cost_margin:
            r, layer = c
    X = X_of(r, layer)
    auc, C = _cv_score(X, y)
    mode = "head"
    if asked:
        Xb = np.column_stack([X, logit])
        auc_b, C_b = _cv_score(Xb, y)
        res.candidates[f"{r}@{layer}+zeroshot"] = round(auc_b, 4)
        # The zero-shot feature needs the question asked: on a cheap readout, only by the
        # margin.
        if auc_b > auc + (cost_margin if _cheap(r, spec.scope) else 0.0):
            X, auc, C, mode = Xb, auc_b, C_b, "both"
    res.cv_auroc, res.readout, res.layer, res.mode, res.C = auc, r, layer, mode, C
    model = fixed_model(C)
    oof = cross_val_predict(model, X, y, method="decision_function",
                            cv=StratifiedKFold(FOLDS, shuffle=True, random_state=0))
    from sklearn.linear_model import LogisticRegression

    platt = LogisticRegression(C=1e4, max_iter=1000).fit(oof.reshape(-1, 1), y)
    model.fit(X, y)
    scaler, lr = model[0], model[-1]
    w = lr.coef_[0] / scaler.scale_
    b = float(lr.intercept_[0] - np.dot(lr.coef_[0], scaler.mean_ / scaler.scale_))
    res.head = {"readout": r, "layer": layer, "mode": mode, "weights": encode_vector(w),
                "bias": b, "platt": {"a": float(platt.coef_[0][0]),
                                     "b": float(platt.intercept_[0])},
                "info": {"cv_auroc": round(auc, 4), "C": C, "n_pos": n_pos, "n_neg": n_neg,
                         "zero_shot_auroc": None if math.isnan(res.zero_shot_auroc)
                         else round(res.zero_shot_auroc, 4)}}
    if lodo:
        res.lodo = _lodo(X, y, [it.source for it in sub], C)
    return res


def _lodo(X: np.ndarray, y: np.ndarray, sources: Sequence[str], C: float
          ) -> dict[str, dict[str, float]]:
    """Per source: AUROC and TPR at 5% FPR of a head fitted on the other sources.

    The threshold for TPR is set on the training negatives' scores (the held-out source
    may have no negatives: AILuminate is all hazardous), so it is the operating point a
    user would have; AUROC needs both classes in the source and is NaN otherwise.
    """
    src = np.array(sources)
    out: dict[str, dict[str, float]] = {}
    for s in sorted(set(sources)):
        test, train = src == s, src != s
        yt, ytr = y[test], y[train]
        if not 0 < ytr.sum() < len(ytr):
            continue
        m = fixed_model(C).fit(X[train], ytr)
        st = m.decision_function(X[test])
        thr = float(np.quantile(m.decision_function(X[train][ytr == 0]), 1 - FPR))
        pos = st[yt == 1]
        out[s] = {"n": int(test.sum()), "n_pos": int(yt.sum()),
                  "auroc": round(auroc(yt, st), 4),
                  "tpr_at_5fpr": round(float((pos > thr).mean()), 4) if len(pos) else math.nan,
                  "fpr": round(float((st[yt == 0] > thr).mean()), 4)
                  if (yt == 0).any() else math.nan}
    return out


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
            "training": {**training, "licences": {s: LICENCES[s]
                                                  for s in training.get("sources", [])}}}


__all__ = ["CS", "FOLDS", "MIN_CLASS", "PredicateFit", "auroc", "fit_policy_heads",
           "fixed_model", "fold_head", "heads_document", "labels_for"]
