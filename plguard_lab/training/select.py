"""Choosing heads for transfer: leave-one-source-out, pairwise labels, zero-shot as a floor.

A head that is only cross-validated inside its training sets learns what separates *those
sets* (their phrasing, their lengths, which of them is all hazardous). What a user meets is
another source. So every choice here (readout, layer, strength, and head vs zero-shot vs a
blend of both) is made by **leave-one-source-out**: each source is scored by a head fitted
on the other sources, and a choice is judged by its **worst** held-out source, not by the
mean.

Held-out metric of a source ``s`` (:func:`heldout_metrics`), from scores where every item
was scored by a head that never saw its source:

* both classes in ``s``: AUROC within ``s``;
* one class only (AILuminate is all hazardous; plain CoCoNot requests all benign): AUROC of
  ``s``'s items against the other class's items of every other source, each scored by its
  own held-out head. A source is then only "hard" if it crosses the other sources' items,
  so all-hazardous sets still count;
* preference pairs (``hh_harmless``): pairwise accuracy, the share of pairs whose more
  harmful reply scores higher (ties count half). Like AUROC, 0.5 is chance.

Worst sources within :data:`WORST_TOLERANCE` of each other are a tie, broken by the mean
over sources (:func:`best_choice`): a source's sampling noise is about that size.

A source is not held out when the others alone lack a class (no head can be fitted); the
matrix says so.

Pairwise labels train through a pairwise logistic loss beside the pointwise one
(:func:`fit_linear`): the score difference of a pair's replies is pushed the annotators'
way, weighted so all pairs together count ``pair_weight`` times the pointwise items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plguard.stats import auroc

C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3)  # strengths tried for the chosen readout and layer
QUICK_C = 0.03  # the strength readouts and layers are ranked at (standardised features)
BLEND_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # head weight in a head/zero-shot blend
PAIR_WEIGHT = 1.0  # all pairs together weigh this many times the pointwise items


@dataclass(frozen=True)
class Data:
    """One predicate's training data for one candidate feature set."""

    X: np.ndarray  # [n, d] pointwise rows
    y: np.ndarray  # [n] 0/1
    groups: np.ndarray  # [n] source of each row
    Xa: np.ndarray  # [m, d] the more harmful reply of each pair
    Xb: np.ndarray  # [m, d] the less harmful one
    pair_groups: np.ndarray  # [m] source of each pair
    # Rows the held-out metrics read (None: all). Augmented rewrites train but are not
    # scored, so a choice with and without augmentation is judged on the same items.
    scored: np.ndarray | None = None

    @property
    def sources(self) -> list[str]:
        """The sources of its rows and pairs, sorted."""
        return sorted(set(self.groups.tolist()) | set(self.pair_groups.tolist()))

    def without(self, source: str | None, only: str | None = None) -> Data:
        """The rows of every source but ``source`` (or of ``only``)."""
        keep = self.groups != source if only is None else self.groups == only
        pk = self.pair_groups != source if only is None else self.pair_groups == only
        return Data(self.X[keep], self.y[keep], self.groups[keep], self.Xa[pk], self.Xb[pk],
                    self.pair_groups[pk], None if self.scored is None else self.scored[keep])

    def fittable(self) -> bool:
        """Both classes among the pointwise rows, or some pairs to order."""
        return bool(0 < self.y.sum() < len(self.y)) or len(self.Xa) > 0


@dataclass
class Linear:
    """A linear score ``X @ w + b`` over raw features."""

    w: np.ndarray
    b: float

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """The scores of rows ``X``."""
        return np.asarray(X @ self.w + self.b, dtype=np.float64)


def fit_linear(d: Data, C: float, pair_weight: float = PAIR_WEIGHT) -> Linear:
    """L2 logistic regression on standardised features, pairs through a pairwise loss.

    Minimises ``sum_i log(1+exp(-s_i z_i)) + lam * sum_p log(1+exp(-(z_a-z_b)))
    + |v|^2 / (2C)`` (``s_i`` = +-1, ``z`` the standardised score, ``lam`` so that the
    pairs together weigh ``pair_weight`` times the pointwise items): scikit-learn's
    objective with a pairwise term, since no library fits the two jointly.
    """
    from scipy.optimize import minimize

    allx = np.concatenate([d.X, d.Xa, d.Xb]) if len(d.Xa) else d.X
    mu = allx.mean(axis=0)
    sd = allx.std(axis=0)
    sd[sd < 1e-8] = 1.0
    Z = (d.X - mu) / sd
    D = (d.Xa - d.Xb) / sd if len(d.Xa) else np.zeros((0, len(mu)))
    s = 2.0 * d.y - 1.0
    has_point = len(d.y) > 0 and 0 < d.y.sum() < len(d.y)
    lam = pair_weight * max(len(d.y), 1) / len(D) if len(D) else 0.0
    k = Z.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        v, c = theta[:k], theta[k]
        f = 0.5 * float(v @ v) / C
        g = np.concatenate([v / C, [0.0]])
        if has_point:
            m = s * (Z @ v + c)
            f += float(np.logaddexp(0.0, -m).sum())
            r = -s * _sigmoid(-m)
            g[:k] += Z.T @ r
            g[k] += r.sum()
        if len(D):
            m = D @ v
            f += lam * float(np.logaddexp(0.0, -m).sum())
            g[:k] += lam * (D.T @ -_sigmoid(-m))
        return f, g

    theta = minimize(loss, np.zeros(k + 1), jac=True, method="L-BFGS-B",
                     options={"maxiter": 500}).x
    v, c = theta[:k], theta[k]
    w = v / sd
    return Linear(w, float(c - w @ mu))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * x)))


def pairwise_accuracy(sa: np.ndarray, sb: np.ndarray) -> float:
    """Share of pairs whose first score is the higher (ties half); NaN for no pairs."""
    if not len(sa):
        return math.nan
    return float(((sa > sb) + 0.5 * (sa == sb)).mean())


@dataclass
class Scored:
    """Held-out scores: each row and pair scored by a head that did not see its source."""

    s: np.ndarray
    sa: np.ndarray
    sb: np.ndarray
    not_held_out: list[str] = field(default_factory=list)


def loso_scores(d: Data, fit: Callable[[Data], Linear]) -> Scored:
    """Leave-one-source-out scores of every row and pair (NaN where no head could fit)."""
    out = Scored(np.full(len(d.y), np.nan), np.full(len(d.Xa), np.nan),
                 np.full(len(d.Xa), np.nan))
    for src in d.sources:
        train = d.without(src)
        if not train.fittable():
            out.not_held_out.append(src)
            continue
        h = fit(train)
        rows, pairs = d.groups == src, d.pair_groups == src
        if rows.any():
            out.s[rows] = h(d.X[rows])
        if pairs.any():
            out.sa[pairs], out.sb[pairs] = h(d.Xa[pairs]), h(d.Xb[pairs])
    return out


def heldout_metrics(d: Data, sc: Scored, sources: Sequence[str] | None = None
                    ) -> dict[str, float]:
    """Per source: the held-out metric of the module docstring (NaN: not measurable)."""
    out: dict[str, float] = {}
    ok = ~np.isnan(sc.s) if d.scored is None else ~np.isnan(sc.s) & d.scored
    for src in sources or d.sources:
        pairs = (d.pair_groups == src) & ~np.isnan(sc.sa)
        if pairs.any():
            out[src] = pairwise_accuracy(sc.sa[pairs], sc.sb[pairs])
            continue
        rows = (d.groups == src) & ok
        y = d.y[rows]
        if not rows.any():
            out[src] = math.nan
        elif 0 < y.sum() < len(y):
            out[src] = auroc(y, sc.s[rows])
        else:  # one class: against the other class of every other source
            other = (d.groups != src) & ok & (d.y != y[0])
            yy = np.concatenate([y, d.y[other]])
            out[src] = auroc(yy, np.concatenate([sc.s[rows], sc.s[other]]))
    return out


def worst(metrics: Mapping[str, float]) -> tuple[float, str]:
    """(lowest measurable metric, its source); (NaN, "") when none is measurable."""
    ok = {k: v for k, v in metrics.items() if not math.isnan(v)}
    if not ok:
        return math.nan, ""
    k = min(ok, key=lambda s: ok[s])
    return ok[k], k


def rank_key(metrics: Mapping[str, float]) -> tuple[float, float]:
    """Sort key of a choice: worst held-out source first, mean as the tie-break."""
    ok = [v for v in metrics.values() if not math.isnan(v)]
    return (min(ok), float(np.mean(ok))) if ok else (-math.inf, -math.inf)


WORST_TOLERANCE = 0.03  # worst-source AUROCs this close are a tie (a source's sampling noise)


def best_choice(options: Mapping[Any, Mapping[str, float]],
                tolerance: float = WORST_TOLERANCE) -> Any:
    """The option with the best worst held-out source, the mean deciding within a tolerance.

    A worst source near chance for every option (hh-harmless's subtle pairs on a small
    model) would otherwise pick by noise and give up every other source for it: among the
    options within ``tolerance`` of the best worst, the best mean over sources wins.
    """
    keys = {k: rank_key(m) for k, m in options.items()}
    top = max(v[0] for v in keys.values())
    near = [k for k, v in keys.items() if v[0] >= top - tolerance]
    return max(near, key=lambda k: keys[k][1])


def source_matrix(d: Data, fit: Callable[[Data], Linear], loso: Mapping[str, float]
                  ) -> dict[str, dict[str, float]]:
    """Train source x test source, and the row ``others`` (leave-one-source-out, ``loso``).

    Each row fits a head on one source alone (where it can be) and scores every other
    source. The diagonal is left out: a source scored by its own head is the
    in-distribution reading this selection does not trust.
    """
    out: dict[str, dict[str, float]] = {}
    for a in d.sources:
        train = d.without(None, only=a)
        if not train.fittable():
            continue
        h = fit(train)
        rest = d.without(a)
        sc = Scored(h(rest.X), h(rest.Xa) if len(rest.Xa) else np.zeros(0),
                    h(rest.Xb) if len(rest.Xb) else np.zeros(0))
        out[a] = {k: round(v, 4) for k, v in heldout_metrics(rest, sc).items()}
    out["others"] = {k: round(v, 4) for k, v in loso.items()}
    return out


def within_source(d: Data, source: str, fit: Callable[[Data], Linear], folds: int = 5,
                  seed: int = 0) -> float:
    """The held-out metric of ``source`` when its *other* items train too.

    Each of ``folds`` seeded folds of the source's rows is scored by a head fitted on every
    other source and the source's other folds: what seeing this kind of item buys, where
    :func:`loso_scores` shows what a head that never saw it reads (the guarded model's own
    drafts, before and after). Rows only (no pairs); NaN when the source has one class.
    """
    rows = np.flatnonzero(d.groups == source)
    if len(rows) < folds or not 0 < d.y[rows].sum() < len(rows):
        return math.nan
    fold = np.random.default_rng(seed).permutation(len(rows)) % folds
    s = np.full(len(d.y), np.nan)
    for k in range(folds):
        test = np.zeros(len(d.y), dtype=bool)
        test[rows[fold == k]] = True
        train = Data(d.X[~test], d.y[~test], d.groups[~test], d.Xa, d.Xb, d.pair_groups)
        if train.fittable():
            s[test] = fit(train)(d.X[test])
    return heldout_metrics(d, Scored(s, np.full(len(d.Xa), np.nan),
                                     np.full(len(d.Xa), np.nan)), [source])[source]


def blend(sc: Scored, zs: Scored, w: float) -> Scored:
    """``w`` x the head score + ``1-w`` x the zero-shot logit, each over its own spread."""
    h0, z0 = spread(sc), spread(zs)

    def mix(h: np.ndarray, z: np.ndarray) -> np.ndarray:
        return np.asarray(w * h / h0 + (1 - w) * z / z0)

    return Scored(mix(sc.s, zs.s), mix(sc.sa, zs.sa), mix(sc.sb, zs.sb))


def spread(sc: Scored) -> float:
    """Standard deviation of a score set's finite values (1 when there is none)."""
    vals = np.concatenate([sc.s, sc.sa, sc.sb])
    vals = vals[np.isfinite(vals)]
    sd = float(vals.std()) if len(vals) > 1 else 1.0
    return sd if sd > 1e-8 else 1.0


__all__ = ["BLEND_WEIGHTS", "C_GRID", "PAIR_WEIGHT", "QUICK_C", "WORST_TOLERANCE", "Data",
           "Linear", "Scored", "best_choice", "blend", "fit_linear", "heldout_metrics",
           "loso_scores", "pairwise_accuracy", "rank_key", "source_matrix", "spread",
           "within_source", "worst"]
