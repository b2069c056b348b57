"""Evaluation metrics: rates with Wilson intervals, agreement, ranking, paired bootstraps.

Every function takes plain sequences and returns a small frozen record, so reports and
tests can check the numbers without a model. Intervals and tests come from scipy.stats.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from plguard.stats import auroc  # the studies import it from here
from plguard_lab.config import EvalConfig

# The one default for bootstrap resamples (and their seed): the eval config's.
N_BOOT: int = EvalConfig.model_fields["bootstrap"].default
SEED: int = EvalConfig.model_fields["seed"].default


@dataclass(frozen=True, slots=True)
class Rate:
    """A proportion with its Wilson score 95% interval."""

    k: int
    n: int
    rate: float
    lo: float
    hi: float

    def fmt(self, pct: bool = True) -> str:
        """``12.0% [8.1, 16.3] (30/250)`` (or fractions when ``pct`` is False)."""
        if self.n == 0:
            return "n/a (0)"
        s = 100.0 if pct else 1.0
        unit = "%" if pct else ""
        return (f"{self.rate * s:.1f}{unit} [{self.lo * s:.1f}, {self.hi * s:.1f}] "
                f"({self.k}/{self.n})")


def wilson_rate(flags: Sequence[bool] | np.ndarray, alpha: float = 0.05) -> Rate:
    """The share of True in ``flags`` with its Wilson score interval.

    Unlike a bootstrap, it is not [0, 0] at zero events nor too narrow at the handful of
    events per XSTest type, and it needs no seed.
    """
    from scipy.stats import binomtest

    x = np.asarray(flags, dtype=bool)
    n, k = int(x.size), int(x.sum())
    if n == 0:
        return Rate(0, 0, float("nan"), float("nan"), float("nan"))
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method="wilson")
    return Rate(k, n, k / n, float(ci.low), float(ci.high))


def paired_bootstrap(samples: Sequence[np.ndarray], statistic: Callable[..., object],
                     n_boot: int, seed: int, *, vectorized: bool = False,
                     alpha: float = 0.05) -> list[tuple[float, float]]:
    """Percentile intervals of each output of ``statistic`` over resampled pairs.

    The resampling is scipy.stats.bootstrap's (``paired=True``, its own seeded generator).
    The quantiles are taken over the resamples where an output is defined: precision or
    AUROC is NaN on a resample with no flag or one class, and scipy's own interval would
    then be NaN.
    """
    from scipy.stats import DegenerateDataWarning, bootstrap

    arrays = tuple(np.asarray(a) for a in samples)
    n = arrays[0].shape[-1] if arrays else 0
    if n < 2:
        return [(float("nan"), float("nan"))]
    with warnings.catch_warnings():
        # Identical pairs give a one-point distribution: [x, x] is the right answer.
        warnings.simplefilter("ignore", DegenerateDataWarning)
        res = bootstrap(arrays, statistic, paired=True, vectorized=vectorized,
                        n_resamples=n_boot, method="percentile",
                        rng=np.random.default_rng(seed))
    dist = np.atleast_2d(np.asarray(res.bootstrap_distribution, dtype=float))
    out = []
    for row in dist:
        fin = row[np.isfinite(row)]
        if fin.size == 0:
            out.append((float("nan"), float("nan")))
            continue
        lo, hi = np.quantile(fin, [alpha / 2, 1 - alpha / 2])
        out.append((float(lo), float(hi)))
    return out


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof=1; 0 for one value) and count."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if x.size == 0:
        return float("nan"), float("nan"), 0
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0, int(x.size)


@dataclass(frozen=True, slots=True)
class Agreement:
    """Agreement of predicted labels with gold labels."""

    n: int
    accuracy: float
    kappa: float
    labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]  # rows: gold, columns: predicted


def confusion_matrix(gold: Sequence[Hashable], pred: Sequence[Hashable],
                     labels: Sequence[Hashable]) -> np.ndarray:
    """Counts with gold labels as rows and predictions as columns, in ``labels`` order.

    scikit-learn's, except that a label outside ``labels`` is an error here (scikit-learn
    drops it silently, which would shrink ``n`` without a word).
    """
    from sklearn.metrics import confusion_matrix as sk_confusion

    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels for {len(pred)} predictions")
    unknown = (set(gold) | set(pred)) - set(labels)
    if unknown:
        raise ValueError(f"labels {sorted(map(str, unknown))} are not among {list(labels)}")
    if not gold:
        return np.zeros((len(labels), len(labels)), dtype=int)
    return np.asarray(sk_confusion(list(gold), list(pred), labels=list(labels)), dtype=int)


def agreement(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str]) -> Agreement:
    """Accuracy, Cohen's kappa (scikit-learn's) and the confusion matrix of ``pred``.

    Where chance agreement is 1 (every label and prediction one class) kappa is undefined;
    it reads 1.0 when they all agree and 0.0 otherwise, rather than NaN.
    """
    from sklearn.metrics import cohen_kappa_score

    m = confusion_matrix(gold, pred, labels)
    n = int(m.sum())
    acc = float(np.trace(m) / n) if n else float("nan")
    pe = float((m.sum(axis=0) * m.sum(axis=1)).sum()) / (n * n) if n else float("nan")
    if not n:
        kappa = float("nan")
    elif pe == 1.0:
        kappa = 1.0 if acc == 1.0 else 0.0
    else:
        kappa = float(cohen_kappa_score(list(gold), list(pred), labels=list(labels)))
    return Agreement(n, acc, kappa, tuple(labels),
                     tuple(tuple(int(v) for v in row) for row in m))


@dataclass(frozen=True, slots=True)
class Detection:
    """A score thresholded into a detector, against binary targets."""

    n: int
    positives: int
    auroc: float
    precision: float
    recall: float
    threshold: float | None  # None: an over-refusal threshold that is off


def detection(y: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray,
              threshold: float) -> Detection:
    """AUROC of ``score`` and precision/recall of ``score >= threshold``.

    Precision is NaN when nothing is predicted positive, recall when nothing is positive.
    """
    yy = np.asarray(y, dtype=bool)
    pred = np.asarray(score, dtype=float) >= threshold
    tp = int((pred & yy).sum())
    precision = tp / int(pred.sum()) if pred.any() else float("nan")
    recall = tp / int(yy.sum()) if yy.any() else float("nan")
    return Detection(int(yy.size), int(yy.sum()), auroc(yy, score), precision, recall,
                     threshold)


def grouped_rates(groups: Sequence[str], flags: Sequence[bool]) -> dict[str, Rate]:
    """A Wilson rate per group, groups in first-seen order."""
    by: dict[str, list[bool]] = {}
    for g, f in zip(groups, flags, strict=True):
        by.setdefault(g, []).append(bool(f))
    return {g: wilson_rate(v) for g, v in by.items()}


def phase_stats(times: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, float, int]]:
    """Mean, std and count of each phase's seconds across examples (phases sorted)."""
    phases = sorted({p for t in times for p in t})
    return {p: mean_std([t[p] for t in times if p in t]) for p in phases}


def fmt_threshold(x: float | None) -> str:
    """A decision threshold for a report: None is an over-refusal threshold that is off."""
    return "off" if x is None else f"{x:.3f}"


def expected_calibration_error(y: Sequence[int] | Sequence[bool] | np.ndarray,
                               p: Sequence[float] | np.ndarray,
                               bins: int = 10) -> float:
    """ECE with ``bins`` equal-width bins: sum over bins of (n_b / n) |mean(y) - mean(p)|.

    Bin b holds b/bins <= p < (b+1)/bins; p = 1 falls in the last bin. NaN when empty.
    """
    yy = np.asarray(y, dtype=float)
    pp = np.asarray(p, dtype=float)
    if yy.size == 0:
        return float("nan")
    idx = np.minimum((pp * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            total += sel.sum() / yy.size * abs(yy[sel].mean() - pp[sel].mean())
    return float(total)


__all__ = [
    "N_BOOT",
    "SEED",
    "Agreement",
    "Detection",
    "Rate",
    "agreement",
    "auroc",
    "confusion_matrix",
    "detection",
    "expected_calibration_error",
    "fmt_threshold",
    "grouped_rates",
    "mean_std",
    "paired_bootstrap",
    "phase_stats",
    "wilson_rate",
]
