"""Category heads fitted jointly: one multinomial regression over a bundle's hazard categories.

One-vs-rest heads (plguard_lab.training.fit) learn each category against the items whose value
is known, and a bundle's gold rules leave the overlaps of hazards unknown (a violent-crimes
prompt may also seek a weapon), so no head ever learns to tell its category from its
neighbours: each scores the others' prompts high, and the right category comes first for
too few hazardous prompts. Fitted jointly, the request predicates of the category rules
(``categories.yaml``) share one multinomial logistic regression on the request prompt's
prefix or pool state (chosen with the layer), with one class per category and a ``none``
class for requests known to seek none: every labelled hazardous request is one of its
category's class (an item with several positives counts once in each, weighted 1/k), so
the classes compete.

Each category's head is stored in the ordinary heads format: its logit against ``none``,
``z_k = (W_k - W_none) . h + (c_k - c_none)``, so a request that seeks nothing scores low
on every category, and the category with the highest ``z_k`` is the multinomial's own
argmax among the categories. Its probability is a Platt map on out-of-fold logits, as for
every head, but one map shared by the categories (fitted on their pooled logits against
each predicate's known labels), so probabilities keep the multinomial's order.

Readout and layer, then strength, are chosen for transfer as every head is
(plguard_lab.training.select): each source's requests are scored by a multinomial fitted on the
other sources, each category is judged by its worst held-out source (AUROC within a source
with both classes, against the other class of the other sources for a one-class source),
and a candidate by the mean over categories of those worst sources. A category whose
positives all come from one source is not measured there (no other source teaches it).
Where fewer than two sources can be held out, seeded folds by item stand in. A category
whose worst held-out source reads more than ``WORST_TOLERANCE`` below zero-shot there
keeps its zero-shot reading. The shipped Platt map is fitted on item-fold logits (the
multinomial it maps saw every source).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from plguard.heads.artefact import encode_vector
from plguard.policy.syntax import atoms
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Extractor
from plguard_lab.training.fit import FOLDS, MIN_CLASS, PredicateFit, auroc
from plguard_lab.training.select import WORST_TOLERANCE, Data, Scored, heldout_metrics, worst

CS_JOINT = (0.003, 0.01, 0.03, 0.1, 0.3)  # strengths tried (standardised features)


def category_predicates(policy: Any) -> dict[str, str]:
    """Request predicate -> its category code, for every rule ``categories.yaml`` tags.

    The request-scope predicates named in a tagged rule's body are what the request seeks
    in that category; one that several categories' rules name is left out (it cannot be
    one class of a joint fit).
    """
    scope = {p.name: p.scope for p in policy.predicates}
    defs = policy.program.definitions()
    seen: dict[str, set[str]] = {}
    for rule, codes in policy.categories.items():
        for clause in defs.get(rule, ()):
            for a in atoms(clause.body):
                if scope.get(a.name) == "request":
                    seen.setdefault(a.name, set()).update(codes[:1])
    return {n: next(iter(c)) for n, c in seen.items() if len(c) == 1}


def _classes(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the multinomial: (item index, class, weight); class 0 is ``none``.

    An item known to be 0 on every category is ``none``; one positive on some is one row
    per positive; one with no positive and some unknown (a hazard of unknown category) is
    left out.
    """
    rows, cls, wts = [], [], []
    for i, y in enumerate(Y):
        pos = np.flatnonzero(y == 1)
        if len(pos):
            rows += [i] * len(pos)
            cls += list(pos + 1)
            wts += [1.0 / len(pos)] * len(pos)
        elif not np.isnan(y).any():
            rows.append(i)
            cls.append(0)
            wts.append(1.0)
    return np.array(rows, dtype=int), np.array(cls, dtype=int), np.array(wts)


def _multinomial(C: float) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=3000, tol=1e-4))


def item_folds(rows: np.ndarray, cls: np.ndarray) -> Any:
    """The joint fit's folds over multinomial rows: by item, stratified by class, seeded."""
    from sklearn.model_selection import StratifiedGroupKFold

    return StratifiedGroupKFold(FOLDS, shuffle=True, random_state=0).split(
        rows, cls, groups=rows)


_ABSENT = -1e9  # the logit of a class its fold's training rows lack (never predicted)


def source_folds(rows: np.ndarray, cls: np.ndarray, groups: np.ndarray
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Leave-one-source-out splits of the multinomial rows.

    One split per source that can be held out: the other sources keep the ``none`` class
    and at least one category. Empty when fewer than two can (the caller then uses
    :func:`item_folds`).
    """
    src = groups[rows]
    out = []
    for s in sorted(set(src.tolist())):
        tr = src != s
        if (cls[tr] == 0).any() and (cls[tr] > 0).any():
            out.append((np.flatnonzero(tr), np.flatnonzero(~tr)))
    return out if len(out) >= 2 else []


def _oof_logits(X: np.ndarray, rows: np.ndarray, cls: np.ndarray, wts: np.ndarray,
                C: float, n_items: int,
                folds: Sequence[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """Out-of-fold class logits ``[n_items, n_classes]`` (NaN: unscored).

    ``folds``: splits of the rows (:func:`source_folds`); default by item. An item's
    duplicate rows stay in one fold, so no item is scored by a model that saw it. A class
    a fold's training rows lack gets a logit of ``_ABSENT``.
    """
    n_cls = int(cls.max()) + 1
    out = np.full((n_items, n_cls), np.nan)
    for tr, te in (item_folds(rows, cls) if folds is None else folds):
        m = _multinomial(C)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(X[rows[tr]], cls[tr], logisticregression__sample_weight=wts[tr])
        items = np.unique(rows[te])
        z = np.full((len(items), n_cls), _ABSENT)
        d = m.decision_function(X[items])
        z[:, m[-1].classes_] = (_class_logits(d) if len(m[-1].classes_) == 2
                                else d.reshape(len(items), -1))
        out[items] = z
    return out


def category_heldout(z: np.ndarray, Y: np.ndarray, groups: np.ndarray,
                     scored: np.ndarray, taught: Mapping[str, set[int]] | None = None
                     ) -> list[dict[str, float]]:
    """Per category, per source: the held-out metric of logits ``z`` (plguard_lab.training.select).

    ``taught``: source -> the categories the other sources have positives of; a category
    is not measured (NaN) on a source no other source teaches it for.
    """
    out = []
    for j in range(Y.shape[1]):
        s = z[:, j + 1] - z[:, 0]
        if taught is not None:  # untaught: not a held-out score, here or against others
            s = np.where([j in taught.get(g, set()) for g in groups.tolist()], s, np.nan)
        known = ~np.isnan(Y[:, j]) & ~np.isnan(s)
        d = Data(np.zeros((int(known.sum()), 0)), Y[known, j].astype(int), groups[known],
                 np.zeros((0, 0)), np.zeros((0, 0)), np.array([], dtype=str), scored[known])
        out.append(heldout_metrics(d, Scored(s[known], np.zeros(0), np.zeros(0)),
                                   sorted(set(groups.tolist()))))
    return out


def _mean_worst(metrics: Sequence[Mapping[str, float]]) -> float:
    ws = [worst(m)[0] for m in metrics]
    ok = [w for w in ws if not math.isnan(w)]
    return float(np.mean(ok)) if ok else -math.inf


def _class_logits(d: np.ndarray) -> np.ndarray:
    """Per-class logits: scikit-learn gives two classes one column (class 1 against 0)."""
    return np.column_stack([np.zeros(len(d)), d]) if d.ndim == 1 else d


def _log_loss(z: np.ndarray, rows: np.ndarray, cls: np.ndarray, wts: np.ndarray) -> float:
    zr = z[rows]
    zr = zr - zr.max(axis=1, keepdims=True)
    lp = zr - np.log(np.exp(zr).sum(axis=1, keepdims=True))
    return float(-(wts * lp[np.arange(len(rows)), cls]).sum() / wts.sum())


def top1(z: np.ndarray, rows: np.ndarray, cls: np.ndarray) -> float:
    """Share of single-category items whose own category has the highest logit."""
    single = [r for r in np.unique(rows[cls > 0])
              if (rows == r).sum() == 1 and not np.isnan(z[r]).any()]
    if not single:
        return math.nan
    own = {int(r): int(c) for r, c in zip(rows, cls, strict=True)}
    hits = [int(np.argmax(z[r, 1:])) + 1 == own[r] for r in single]
    return float(np.mean(hits))


class JointModel:
    """A fitted joint recipe: the multinomial and the categories' shared Platt map.

    ``weights``/``bias``: each category's logit against ``none``, in raw-state units;
    ``oof``: the out-of-fold class logits of the training items (NaN where unscored),
    computed here unless the caller has them (the same folds, ``C`` and rows).
    """

    def __init__(self, X: np.ndarray, Y: np.ndarray, C: float,
                 oof: np.ndarray | None = None) -> None:
        from sklearn.linear_model import LogisticRegression

        rows, cls, wts = _classes(Y)
        self.oof = _oof_logits(X, rows, cls, wts, C, len(X)) if oof is None else oof
        self.rows, self.cls = rows, cls
        model = _multinomial(C)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X[rows], cls, logisticregression__sample_weight=wts)
        scaler, lr = model[0], model[-1]
        if list(lr.classes_) != list(range(Y.shape[1] + 1)):
            raise ValueError("every category needs positive training items")
        W = lr.coef_ / scaler.scale_
        c = lr.intercept_ - W @ scaler.mean_
        if len(W) == 1:  # one category: its logit against none is the binary one
            W, c = np.vstack([np.zeros_like(W[0]), W[0]]), np.array([0.0, c[0]])
        self.weights = W[1:] - W[0]
        self.bias = c[1:] - c[0]
        self.cv_auroc: list[float] = []
        self.counts: list[tuple[int, int]] = []
        pooled_z, pooled_y = [], []
        # A class its fold's training rows lacked has no logit there (``_ABSENT``, a
        # sentinel): such rows are left out of the category's AUROC and of the Platt map,
        # whose slope a -1e9 "logit" would otherwise flatten to ~0 (0.5 for every input).
        scored = (self.oof > _ABSENT / 2) & np.isfinite(self.oof)
        for j in range(Y.shape[1]):
            zk = self.oof[:, j + 1] - self.oof[:, 0]
            labelled = ~np.isnan(Y[:, j])
            known = labelled & scored[:, j + 1] & scored[:, 0]
            yk = Y[known, j].astype(int)
            pooled_z.append(zk[known])
            pooled_y.append(yk)
            self.cv_auroc.append(auroc(yk, zk[known]))
            n_pos = int(np.nansum(Y[labelled, j]))  # what the head was trained on
            self.counts.append((n_pos, int(labelled.sum()) - n_pos))
        # One Platt map for every category, fitted on their pooled out-of-fold logits: a
        # map per category would reorder categories whose logits are close, and the
        # multinomial's own ranking of them is the point of fitting jointly.
        self.platt = LogisticRegression(C=1e4, max_iter=1000).fit(
            np.concatenate(pooled_z).reshape(-1, 1), np.concatenate(pooled_y))

    def proba(self, X: np.ndarray) -> np.ndarray:
        """``[n, categories]``: each category's head probability of rows ``X``."""
        z = X @ self.weights.T + self.bias
        a, c = float(self.platt.coef_[0][0]), float(self.platt.intercept_[0])
        return 1.0 / (1.0 + np.exp(-(a * z + c)))


def fit_joint_heads(policy: Any, ex: Extractor, items: Sequence[CorpusItem],
                    labels: Mapping[str, np.ndarray], names: Sequence[str],
                    readouts: Sequence[str] = ("prefix",),
                    zero_shot: Mapping[str, np.ndarray] | None = None,
                    ) -> tuple[list[PredicateFit], dict[str, Any]]:
    """Joint heads for the request predicates ``names`` (see the module docstring).

    ``readouts``: the request prompt's states tried (``prefix``, ``pool``); the readout
    and layer are chosen together. Returns a fit per name (a predicate with fewer than
    :data:`MIN_CLASS` positives is not a class and keeps its zero-shot reading) and the
    joint fit's summary for the report: chosen readout, layer and strength,
    log-loss, top-1 and mean worst held-out source per candidate (all out of fold: by
    source where it can be). ``zero_shot``: predicate -> zero-shot logit per item of
    ``items`` (NaN: not read), the floor a category's head must not fall below.
    """
    readouts = [r for r in readouts if r in ("prefix", "pool")]
    if not readouts:
        raise ValueError("joint heads read the prefix or pool state; ask for one of them")
    if "pool" in readouts and not ex.with_pool:
        raise ValueError("pool needs the pool states, which this extraction skips")
    idx = [i for i, it in enumerate(items) if it.response is None]
    sub = [items[i] for i in idx]
    Y_all = np.stack([labels[n][idx] for n in names], axis=1)
    n_pos = np.nansum(Y_all == 1, axis=0)
    keep = [j for j, n in enumerate(names) if n_pos[j] >= MIN_CLASS]
    fits = {n: PredicateFit(n, "request", int(n_pos[j]),
                            int(np.nansum(Y_all[:, j] == 0)), math.nan,
                            skipped=f"{int(n_pos[j])} positive training items "
                            f"(< {MIN_CLASS}): zero-shot kept")
            for j, n in enumerate(names) if j not in keep}
    classes = [names[j] for j in keep]
    if not classes:
        return [fits[n] for n in names], {"classes": []}
    Y = Y_all[:, keep]
    rows, cls, wts = _classes(Y)
    keys = {r: [ex.keys(it)[0] if r == "prefix" else ex.pool_key(it) for it in sub]
            for r in readouts}
    feats = ex.store.get([k for ks in keys.values() for k in ks])
    missing = sum(1 for ks in keys.values() for k in ks if k not in feats)
    if missing:
        raise ValueError(f"{missing} states lack stored features; run the extraction first")
    groups = np.array([it.source for it in sub])
    scored = np.array(["augmented" not in it.fields for it in sub], dtype=bool)
    folds = source_folds(rows, cls, groups)
    taught: dict[str, set[int]] = {}  # held-out source -> the categories the others teach
    for tr, te in folds:
        held = str(groups[rows[te[0]]])
        taught[held] = {int(c) - 1 for c in set(cls[tr].tolist()) if c > 0}
    by_source = bool(folds)
    cands: dict[str, dict[str, float]] = {}
    tried: dict[tuple[str, int, float], float] = {}
    oofs: dict[tuple[str, int, float], np.ndarray] = {}  # the winner's feed its Platt map

    def X_at(readout: str, layer: int) -> np.ndarray:
        j = ex.layers.index(layer)
        return np.stack([feats[k].states[j] for k in keys[readout]]).astype(np.float64)

    def score(at: tuple[str, int], C: float, X: np.ndarray) -> float:
        z = oofs[(*at, C)] = _oof_logits(X, rows, cls, wts, C, len(sub), folds or None)
        ok = ~np.isnan(z[rows]).any(axis=1)  # rows of a source no fold held out: unscored
        # A class the other sources lack is absent from the held-out model: clipped, so
        # it costs a large finite loss rather than 1e9.
        ll = _log_loss(np.maximum(z, -50.0), rows[ok], cls[ok], wts[ok])
        if by_source:  # higher is better: negated, so the minimum wins as for log-loss
            mw = _mean_worst(category_heldout(z, Y, groups, scored, taught))
            tried[(*at, C)] = -mw
        else:
            mw, tried[(*at, C)] = math.nan, ll
        cands[f"{at[0]}@{at[1]} C={C}"] = {"log_loss": round(ll, 4),
                                           "top1": round(top1(z, rows, cls), 4),
                                           "mean_worst_heldout": round(mw, 4)}
        return tried[(*at, C)]

    # Readout and layer at a middle strength, then the strength there: a full grid
    # costs five times the fits for the same choice on the embedded model's dev data.
    mid = CS_JOINT[len(CS_JOINT) // 2]
    at = min(((r, la) for r in readouts for la in ex.layers),
             key=lambda a: score(a, mid, X_at(*a)))
    readout, layer = at
    X = X_at(readout, layer)
    C = min(CS_JOINT, key=lambda c: tried[(*at, c)] if (*at, c) in tried
            else score(at, c, X))
    # The shipped map is fitted on item-fold logits, not the held-out-source ones that
    # chose the recipe: the shipped multinomial saw every source, and a map fitted on
    # logits of sources it never saw came out flat (slope 0.019 on the embedded model's
    # hazards: every request read near 0.02), so nothing the guard read matched the
    # threshold, which is fitted on item folds too (plguard_lab.studies.hazards.thresholds).
    jm = JointModel(X, Y, C, None if by_source else oofs[(*at, C)])
    heldout = category_heldout(oofs[(*at, C)], Y, groups, scored, taught if by_source else None)
    zs_held = (category_heldout(_zs_logits(zero_shot, classes, len(sub), idx), Y, groups,
                                scored) if zero_shot is not None and by_source
               else [{} for _ in classes])
    platt = {"a": float(jm.platt.coef_[0][0]), "b": float(jm.platt.intercept_[0])}
    how = ("held out by source" if by_source else
           "no two sources could be held out with a category and none left: 5 item folds "
           "stand in for sources")
    for j, name in enumerate(classes):
        (n_p, n_n), cv = jm.counts[j], jm.cv_auroc[j]
        w, src = worst(heldout[j]) if by_source else (cv, "")
        f = PredicateFit(name, "request", n_p, n_n, math.nan, cv_auroc=w,
                         readout=readout, layer=layer, mode="head", C=C,
                         heldout={k: round(v, 4) for k, v in heldout[j].items()},
                         zero_shot_heldout={k: round(v, 4) for k, v in zs_held[j].items()},
                         worst_source=src)
        floor = zs_held[j].get(src, math.nan) if src else math.nan
        if not math.isnan(floor) and w < floor - WORST_TOLERANCE:
            f.head, f.mode, f.choice = None, "", "zero-shot"
            f.why = (f"joint head's worst held-out source {src} {w:.3f} < zero-shot there "
                     f"{floor:.3f} - {WORST_TOLERANCE}: zero-shot kept")
            f.skipped = f.why
            fits[name] = f
            continue
        f.choice = "head"
        f.why = (f"joint multinomial, {how}; worst held-out source "
                 + (f"{src} {w:.3f}" if src else f"(folds) {w:.3f}")
                 + ("" if math.isnan(floor) else f" vs zero-shot there {floor:.3f}"))
        f.head = {"readout": readout, "layer": layer, "mode": "head",
                  "weights": encode_vector(jm.weights[j]), "bias": float(jm.bias[j]),
                  "platt": platt,
                  "info": {"cv_auroc": round(w, 4), "C": C, "n_pos": n_p, "n_neg": n_n,
                           "zero_shot_auroc": None, "joint": classes}}
        fits[name] = f
    summary = {"classes": classes, "readout": readout, "layer": layer, "C": C,
               "rows": len(rows), "selected_by": how,
               "cv_log_loss": cands[f"{readout}@{layer} C={C}"]["log_loss"],
               "cv_top1": cands[f"{readout}@{layer} C={C}"]["top1"],
               "mean_worst_heldout": cands[f"{readout}@{layer} C={C}"]["mean_worst_heldout"],
               "candidates": cands}
    return [fits[n] for n in names], summary


def _zs_logits(zero_shot: Mapping[str, np.ndarray], classes: Sequence[str], n: int,
               idx: Sequence[int]) -> np.ndarray:
    """Zero-shot logits in :func:`category_heldout`'s layout (column 0, ``none``, at 0)."""
    z = np.zeros((n, len(classes) + 1))
    for j, name in enumerate(classes):
        v = zero_shot.get(name)
        z[:, j + 1] = np.nan if v is None else np.asarray(v, dtype=np.float64)[list(idx)]
    return z


__all__ = ["CS_JOINT", "JointModel", "category_predicates", "fit_joint_heads", "item_folds",
           "top1"]
