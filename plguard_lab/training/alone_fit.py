"""Heads that read the evidence alone, chosen by held-out source beside a lexical baseline.

Request predicates read each request alone; content predicates (those an
``unsafe_content_*`` rule depends on) read each answer window alone, an answer's score the
maximum over its windows, as the product reads them (:mod:`plguard.grounding.alone`).
Each answer weighs one item in all, shared by its windows; a benign answer's windows are
all negatives, a harmful answer's all positives, or (the ``mean+mil`` candidate) its
:data:`MIL_TOP` best windows, re-chosen by the fold's own head (multiple-instance
learning: a harmful answer's label is true of the windows that hold the harm, not of its
greeting); every metric is per item.

**Held out on both sides.** A source with both classes is scored by a head fitted on the
other sources (AUROC within it). A source of one class (AILuminate, CatQA: all harmful;
Alpaca: all benign) has nothing to rank within itself: it is ranked against the other
class of each other source ``t`` by a head fitted without *both* (so neither side was
seen), and its figure is the mean over ``t`` (:attr:`Heldout.matrix` keeps each ``t``).
Scores of two different heads are never compared with each other: a head fitted without a
large one-class source has another intercept, which would make such a comparison read
the class balance, not the text. Preference pairs (hh-harmless) are ordered by a head
fitted without them (pairwise accuracy), held-out metrics only.

**The head** is a ridge classifier on standardised states (each item weighing one): its
fits for every fold come from per-source sums in closed form
(:class:`RidgeFolds`), so every candidate (readout ``mean`` or ``last``, layer, strength)
is judged on every fold in seconds. The **prior** (:data:`PRIOR`: the mean at half depth,
the reading the measurements found to transfer) is kept unless the best ``mean``
candidate (:func:`~plguard_lab.training.select.best_choice`) beats its worst or its mean
held-out source by more than :data:`~plguard_lab.training.select.WORST_TOLERANCE`; the
product reads the mean only, so ``last`` candidates are reported, never shipped. A lexical
baseline (:mod:`plguard_lab.training.lexical`) is judged on the same items and folds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plguard.stats import auroc
from plguard_lab.training.alone_features import AloneExtractor
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.select import (
    WORST_TOLERANCE,
    best_choice,
    pairwise_accuracy,
    rank_key,
    worst,
)

PRIOR = ("mean", 0.5, 1.0)  # readout, depth fraction, ridge strength: what ships with no data
CANDIDATE_READS = ("mean", "last")
CANDIDATE_STRENGTHS = (0.1, 1.0, 10.0)
MIN_ITEMS = 10  # a source with fewer items of a class is no held-out figure of its own
# Multiple-instance learning of answer windows: a harmful answer's label is true of some
# of its windows; its ``MIL_TOP`` best windows stay positives, re-chosen MIL_ROUNDS times.
MIL_TOP = 2
MIL_ROUNDS = 2
Sums = tuple[float, np.ndarray, np.ndarray, np.ndarray, float]  # weighted n, sums, moments

# (excluded sources) -> a scorer of row indices
Fitter = Callable[[frozenset[str]], Callable[[np.ndarray], np.ndarray]]


@dataclass
class Rows:
    """One predicate's rows: states per read, labels, and the items they belong to."""

    view: str  # request | answer
    layers: tuple[int, ...]  # the layers of ``states``, in order
    texts: list[str]  # each row's text (a request, or one answer window)
    item: np.ndarray  # [n_rows] item index of each row
    y: np.ndarray  # [n_items] label per item (NaN: in a preference pair only)
    groups: np.ndarray  # [n_items] source per item
    uids: list[str]
    prompts: list[str]  # what cross-fitting folds by (an item's prompt: its answers together)
    states: dict[str, np.ndarray] = field(default_factory=dict)  # read -> [rows, layers, d]
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (more harmful, less) items

    @property
    def row_groups(self) -> np.ndarray:
        """The source of each row."""
        return self.groups[self.item]

    @property
    def row_y(self) -> np.ndarray:
        """The label of each row (its item's)."""
        return self.y[self.item]

    @property
    def row_weight(self) -> np.ndarray:
        """Each row's weight: its item's one unit shared by the item's rows."""
        counts = np.bincount(self.item, minlength=len(self.y)).astype(np.float64)
        return 1.0 / counts[self.item]


def build_rows(view: str, ex: AloneExtractor, items: Sequence[CorpusItem],
               y: np.ndarray, pairs: Sequence[tuple[int, int]] = ()) -> Rows:
    """The rows of the items with a known label (and the preference pairs' items)."""
    in_pair = {i for p in pairs for i in p}
    keep = [i for i in range(len(items))
            if (not math.isnan(y[i]) or i in in_pair)
            and (items[i].response is None) == (view == "request")]
    if view == "request":  # one row per distinct request text and label
        seen: set[tuple[str, float]] = set()
        uniq = []
        for i in keep:
            key = (items[i].request, float(y[i]))
            if key not in seen:
                seen.add(key)
                uniq.append(i)
        keep = uniq
    pos = {i: k for k, i in enumerate(keep)}
    states: dict[str, np.ndarray] = {}
    if view == "request":
        texts = [items[i].request for i in keep]
        for r in CANDIDATE_READS:
            states[r] = ex.request_states(texts, r)
        owner = np.arange(len(keep))
    else:
        answers = [items[i].response or "" for i in keep]
        for r in CANDIDATE_READS:
            states[r], owner = ex.window_states(answers, r)
        texts = [w.prefix[w.pool[0]:w.pool[1]] if w.pool else "" for a in answers
                 for w in ex.windows(a)]
    return Rows(view, ex.layers, texts, owner, np.asarray([y[i] for i in keep], dtype=np.float64),
                np.asarray([items[i].source for i in keep]), [items[i].uid for i in keep],
                [f"{items[i].source}/{items[i].prompt_id}" for i in keep],
                states, [(pos[a], pos[b]) for a, b in pairs if a in pos and b in pos])


def item_scores(rows: Rows, row_scores: np.ndarray) -> np.ndarray:
    """Each item's score: the maximum over its rows (NaN where none was scored)."""
    out = np.full(len(rows.y), -np.inf)
    np.maximum.at(out, rows.item, np.nan_to_num(row_scores, nan=-np.inf))
    out[np.isneginf(out)] = np.nan
    return out


@dataclass
class Heldout:
    """Held-out figures per source, the one-class sources' matrix rows, and row scores.

    ``rows``: every row scored by the head fitted without its source (for a Platt map of
    scores the head never saw).
    """

    metrics: dict[str, float]
    matrix: dict[str, dict[str, float]]
    rows: np.ndarray


def heldout(rows: Rows, fitter: Fitter, untrained: frozenset[str] = frozenset()) -> Heldout:
    """The held-out figure of every source (see the module docstring).

    ``untrained``: sources no fold trains on (held-out figures only).
    """
    def fit(excluded: frozenset[str]) -> Callable[[np.ndarray], np.ndarray]:
        return fitter(excluded | untrained)

    known = ~np.isnan(rows.y)
    rg = rows.row_groups
    sources = sorted(set(rows.groups.tolist()))
    classes = {s: set(rows.y[(rows.groups == s) & known].tolist()) for s in sources}
    counts = {(s, c): int(((rows.groups == s) & (rows.y == c)).sum())
              for s in sources for c in (0.0, 1.0)}
    metrics: dict[str, float] = {}
    matrix: dict[str, dict[str, float]] = {}
    row_s = np.full(len(rows.item), np.nan)
    paired = {a for p in rows.pairs for a in p}
    for s in sources:
        mine = rows.groups == s
        if not _fittable(rows, {s} | untrained):
            continue
        score = fit(frozenset({s}))
        row_s[rg == s] = score(np.flatnonzero(rg == s))
        its = item_scores(rows, row_s)
        pairs = [(a, b) for a, b in rows.pairs if rows.groups[a] == s]
        if pairs and not (mine & known).any():
            metrics[s] = round(pairwise_accuracy(its[[a for a, _ in pairs]],
                                                 its[[b for _, b in pairs]]), 4)
            continue
        m = mine & known & ~np.isin(np.arange(len(rows.y)), list(paired))
        if len(classes[s]) == 2 and min(counts[s, 0.0], counts[s, 1.0]) >= MIN_ITEMS:
            metrics[s] = round(auroc(rows.y[m], its[m]), 4)
            continue
        if not classes[s]:
            continue
        c = next(iter(classes[s]))
        row: dict[str, float] = {}
        for t in sources:
            if t == s or counts[t, 1.0 - c] < MIN_ITEMS or not _fittable(rows, {s, t} | untrained):
                continue
            sc = fit(frozenset({s, t}))
            other = (rows.groups == t) & (rows.y == 1.0 - c)
            idx = np.flatnonzero(np.isin(rg, [s, t]))
            rs = np.full(len(rows.item), np.nan)
            rs[idx] = sc(idx)
            pit = item_scores(rows, rs)
            yy = np.concatenate([np.full(int(m.sum()), c), np.full(int(other.sum()), 1.0 - c)])
            row[t] = round(auroc(yy, np.concatenate([pit[m], pit[other]])), 4)
        if row:
            matrix[s] = row
            metrics[s] = round(float(np.mean(list(row.values()))), 4)
    return Heldout(metrics, matrix, row_s)


def _fittable(rows: Rows, excluded: set[str]) -> bool:
    keep = ~np.isin(rows.groups, list(excluded)) & ~np.isnan(rows.y)
    yy = rows.y[keep]
    return bool(0 < yy.sum() < len(yy))


class RidgeFolds:
    """Ridge heads on standardised features for any excluded set of sources, in closed form.

    Per source, the weighted sums of rows, squares, cross products with the label are kept
    once; a fold's head is the ridge solution of the others' sums: the same head as a fit on
    their rows, at the cost of one ``d x d`` solve.
    """

    def __init__(self, X: np.ndarray, rows: Rows, top: int | None = None) -> None:
        self.X = X
        self.rows = rows
        self.ok = ~np.isnan(rows.row_y)
        self.w = rows.row_weight * self.ok
        self.yv = np.nan_to_num(rows.row_y) * 2.0 - 1.0  # the ridge target is +-1
        self.stats: dict[str, Sums] = {}
        rg = rows.row_groups
        for s in sorted(set(rg.tolist())):
            m = (rg == s) & self.ok
            self.stats[s] = self._sums(m)
        self.top = top

    def _sums(self, m: np.ndarray) -> Sums:
        Xs, ws, ys = self.X[m], self.w[m], self.yv[m]
        Xw = Xs * ws[:, None]
        return (float(ws.sum()), Xw.sum(0), Xw.T @ Xs, Xw.T @ ys, float((ws * ys).sum()))

    def head(self, excluded: frozenset[str], strength: float) -> tuple[np.ndarray, float]:
        """Raw-feature weights and bias of the head fitted without ``excluded``.

        With ``top`` (answer windows), a harmful answer's benign windows are not positives:
        each positive answer keeps only its ``top`` highest-scoring windows, re-chosen by
        the head of the previous round (:data:`MIL_ROUNDS` rounds, multiple-instance
        learning), all within this fold.
        """
        parts = [v for k, v in self.stats.items() if k not in excluded]
        total: tuple[Any, ...] = tuple(sum(p[i] for p in parts) for i in range(5))
        w, b = self._solve(total, strength)
        if not self.top:
            return w, b
        rows = self.rows
        pos = self.ok & (rows.row_y == 1) & ~np.isin(rows.row_groups, list(excluded))
        idx = np.flatnonzero(pos)
        for _ in range(MIL_ROUNDS):
            sc = self.X[idx] @ w
            drop = np.zeros(len(self.X), dtype=bool)
            order = np.lexsort((-sc, rows.item[idx]))  # by item, best window first
            rank = np.zeros(len(idx), dtype=int)
            items = rows.item[idx][order]
            start = np.r_[0, np.flatnonzero(np.diff(items)) + 1]
            for a, z in zip(start, np.r_[start[1:], len(items)], strict=True):
                rank[order[a:z]] = np.arange(z - a)
            drop[idx[rank >= self.top]] = True
            d = self._sums(drop)
            rest: tuple[Any, ...] = tuple(t - x for t, x in zip(total, d, strict=True))
            w, b = self._solve(rest, strength)
        return w, b

    @staticmethod
    def _solve(t: Sums | tuple[Any, ...], strength: float) -> tuple[np.ndarray, float]:
        n, sx, sxx, sxy, sy = t
        mu, ybar = sx / n, sy / n
        cov = sxx / n - np.outer(mu, mu)
        cxy = sxy / n - mu * ybar
        sd = np.sqrt(np.clip(np.diag(cov), 1e-12, None))
        corr = cov / np.outer(sd, sd)
        v = np.linalg.solve(corr + strength * np.eye(len(sd)) / 100.0, cxy / sd)
        wv = v / sd
        return wv, float(ybar - mu @ wv)

    def fitter(self, strength: float) -> Fitter:
        """A :data:`Fitter` at ``strength``."""
        def fit(excluded: frozenset[str]) -> Callable[[np.ndarray], np.ndarray]:
            w, b = self.head(excluded, strength)
            return lambda idx: self.X[idx] @ w + b
        return fit


CROSSFIT_FOLDS = 5


def crossfit(rows: Rows, X: np.ndarray, strength: float, top: int | None,
             untrained: frozenset[str], folds: int = CROSSFIT_FOLDS) -> np.ndarray:
    """Each row's score by a head fitted on the other folds of prompts (every source in each).

    Unlike a head fitted without a whole source, each fold's head sees every source, so its
    scores share one scale with the final head's: what a Platt map and thresholds need. A
    row of an untrained source is scored by the head of all trained rows.
    """
    import hashlib

    fold = np.array([int(hashlib.sha256(p.encode()).hexdigest()[:8], 16) % folds
                     for p in rows.prompts])
    fold_rows = Rows(rows.view, rows.layers, rows.texts, rows.item, rows.y,
                     np.where(np.isin(rows.groups, list(untrained)), "untrained",
                              fold.astype(str)),
                     rows.uids, rows.prompts, {}, [])
    rf = RidgeFolds(X, fold_rows, top)
    out = np.full(len(rows.item), np.nan)
    rg = fold_rows.row_groups
    for g in sorted(set(rg.tolist())):
        w, b = rf.head(frozenset({g, "untrained"}), strength)
        out[rg == g] = X[rg == g] @ w + b
    return out


@dataclass
class AloneFit:
    """One predicate's alone head, how it was chosen, and the lexical baseline beside it."""

    name: str
    view: str
    n_items: int
    positives: int
    choice: tuple[str, int, float]  # read, layer, strength
    heldout: Heldout
    prior: dict[str, float]
    lexical: Heldout | None
    candidates: dict[str, dict[str, float]]
    untrained: frozenset[str] = frozenset()
    unjudged: frozenset[str] = frozenset()
    crossfit: np.ndarray | None = None  # each row's cross-fitted score (:func:`crossfit`)
    head: dict[str, Any] | None = None
    why: str = ""


def fit_alone(name: str, rows: Rows, layers: Sequence[int], depth: int, *,
              lexical: Heldout | None = None, search: bool = True,
              untrained: frozenset[str] = frozenset(), unjudged: frozenset[str] = frozenset(),
              encode: Any = None) -> AloneFit:
    """Choose and fit one predicate's head on ``rows`` (see the module docstring).

    ``layers``: the extracted layers (``rows.states`` order); ``depth``: the model's
    layer count (the prior reads at half of it); ``search``: try the other reads, layers
    and strengths beside the prior (else the prior alone); ``untrained``: sources held
    out of every fit, the final one too (reported, never trained on); ``unjudged``:
    sources whose figures are reported but do not choose (their labels do not speak to
    this view: statements judged by a request head); ``encode``: how
    weights are written (:func:`plguard.heads.artefact.encode_vector`).
    """
    prior = (PRIOR[0], min(layers, key=lambda x: abs(x - PRIOR[1] * depth)), PRIOR[2])
    folds: dict[tuple[str, int], RidgeFolds] = {}
    found: dict[tuple[str, int, float], Heldout] = {}

    def run(c: tuple[str, int, float]) -> None:
        key = (c[0], c[1])
        if key not in folds:
            folds[key] = RidgeFolds(rows.states[c[0].split("+")[0]][:, layers.index(c[1]), :]
                                    .astype(np.float64), rows,
                                    MIL_TOP if c[0].endswith("+mil") else None)
        found[c] = heldout(rows, folds[key].fitter(c[2]), untrained)

    run(prior)
    reads = (*CANDIDATE_READS, "mean+mil") if rows.view == "answer" else CANDIDATE_READS
    if search:
        for read in reads:  # readout and layer at the prior's strength
            for layer in layers:
                if (read, layer, prior[2]) not in found:
                    run((read, layer, prior[2]))
        best = best_choice({c: judged(h.metrics, unjudged) for c, h in found.items()
                            if c[0].startswith("mean")})
        for strength in CANDIDATE_STRENGTHS:  # then its strength
            if (best[0], best[1], strength) not in found:
                run((best[0], best[1], strength))
    best = best_choice({c: judged(h.metrics, unjudged) for c, h in found.items()
                        if c[0].startswith("mean")})
    (pw, pm) = rank_key(judged(found[prior].metrics, unjudged))
    (bw, bm) = rank_key(judged(found[best].metrics, unjudged))
    # A near-tie (worst and mean both within the tolerance) goes to the prior.
    near = bw <= pw + WORST_TOLERANCE and bm <= pm + WORST_TOLERANCE
    choice = prior if near else best
    why = ("the prior (mean at half depth)" + (f"; best other mean@{best[1]} strength "
                                               f"{best[2]} within {WORST_TOLERANCE}"
                                               if best != prior else "")
           if choice == prior else
           f"{choice[0]}@{choice[1]} strength {choice[2]}: worst/mean held-out {bw:.3f}/{bm:.3f} "
           f"against the prior's {pw:.3f}/{pm:.3f}")
    fit = AloneFit(name, rows.view, int((~np.isnan(rows.y)).sum()), int(np.nansum(rows.y)),
                   choice, found[choice], found[prior].metrics, lexical,
                   {f"{r}@{lay} s={s}": h.metrics for (r, lay, s), h in found.items()},
                   untrained, unjudged, why=why)
    rf = folds[(choice[0], choice[1])]
    w, b = rf.head(untrained, choice[2])
    fit.crossfit = crossfit(rows, rf.X, choice[2], rf.top, untrained)
    fit.head = _head_record(rows, choice, w, b, fit, encode)
    return fit


def _head_record(rows: Rows, choice: tuple[str, int, float], w: np.ndarray, b: float,
                 fit: AloneFit, encode: Any) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    # Platt on cross-fitted item scores (an answer's: its best window, as the product
    # combines them; a monotone map, so the map of the maximum is the maximum of the maps).
    y = rows.y
    assert fit.crossfit is not None
    z = item_scores(rows, fit.crossfit)
    ok = ~np.isnan(z) & ~np.isnan(y) & ~np.isin(rows.groups, list(fit.untrained))
    pl = LogisticRegression(C=1e4, max_iter=1000).fit(z[ok].reshape(-1, 1), y[ok])
    hw, hsrc = worst(judged(fit.heldout.metrics, fit.unjudged))
    lw, lsrc = (worst(judged(fit.lexical.metrics, fit.unjudged)) if fit.lexical
                else (math.nan, ""))
    info = {"view": rows.view, "strength": choice[2], "mil": choice[0].endswith("+mil"),
            "n_items": fit.n_items,
            "positives": fit.positives, "worst_heldout": hw, "worst_source": hsrc,
            "lexical_worst": lw, "lexical_worst_source": lsrc,
            "beats_lexical": bool(not math.isnan(lw) and hw > lw),
            "unjudged": sorted(fit.unjudged), "why": fit.why}
    return {"readout": "alone", "layer": int(choice[1]), "mode": "head",
            "weights": encode(w) if encode else w.tolist(), "bias": b,
            "platt": {"a": float(pl.coef_[0, 0]), "b": float(pl.intercept_[0])},
            "info": info}


def judged(metrics: Mapping[str, float], unjudged: Collection[str]) -> dict[str, float]:
    """The figures of the sources that take part in a choice (``unjudged`` left out)."""
    return {k: v for k, v in metrics.items() if k not in unjudged}


def summary(metrics: Mapping[str, float]) -> tuple[float, str]:
    """(worst, source) of held-out metrics."""
    return worst(metrics)


__all__ = ["CANDIDATE_READS", "CANDIDATE_STRENGTHS", "PRIOR", "AloneFit", "Fitter",
           "Heldout", "RidgeFolds", "Rows", "build_rows", "fit_alone", "heldout",
           "item_scores", "judged", "summary"]
