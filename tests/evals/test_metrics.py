"""Metrics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plguard_lab.metrics import (
    agreement,
    auroc,
    confusion_matrix,
    detection,
    grouped_rates,
    mean_std,
    paired_bootstrap,
    phase_stats,
    wilson_rate,
)


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return mid - half, mid + half


def test_rates_have_wilson_intervals_also_at_small_counts():
    flags = [True] * 30 + [False] * 70
    a = wilson_rate(flags)
    assert (a.k, a.n, a.rate) == (30, 100, 0.3)
    assert (a.lo, a.hi) == pytest.approx(_wilson(30, 100))
    # zero events: not [0, 0] (a bootstrap's), the upper bound is z^2 / (n + z^2)
    zero = wilson_rate([False] * 10)
    assert zero.lo == pytest.approx(0, abs=1e-12) and zero.hi == pytest.approx(0.2775, abs=1e-4)
    # the ~10-event rates of docs/quality.md: 10 of 75
    ten = wilson_rate([True] * 10 + [False] * 65)
    assert (ten.lo, ten.hi) == pytest.approx(_wilson(10, 75))
    assert ten.hi - ten.lo > 0.15  # a binomial bootstrap gives about 0.15
    empty = wilson_rate([])
    assert empty.n == 0 and math.isnan(empty.rate) and empty.fmt() == "n/a (0)"
    assert a.fmt().startswith("30.0% [")


def test_paired_bootstrap_is_seeded_and_skips_undefined_resamples():
    c = np.array([1.0] * 10 + [0.0] * 10)
    a = np.array([1.0] * 15 + [0.0] * 5)
    diff = lambda c, a, axis=-1: a.mean(axis=axis) - c.mean(axis=axis)  # noqa: E731
    ((lo, hi),) = paired_bootstrap((c, a), diff, 500, 3, vectorized=True)
    assert lo < 0.25 < hi and lo >= 0  # every pair moves one way: the difference is >= 0
    assert paired_bootstrap((c, a), diff, 500, 3, vectorized=True) == [(lo, hi)]
    assert paired_bootstrap((c, c), diff, 200, 0, vectorized=True) == [(0.0, 0.0)]
    nan_half = paired_bootstrap((c,), lambda x: np.array([x.mean(), np.nan]), 100, 0)
    assert 0 < nan_half[0][0] < nan_half[0][1] < 1 and all(map(math.isnan, nan_half[1]))


def test_confusion_and_kappa_by_hand():
    gold = ["a", "a", "a", "b", "b", "c"]
    pred = ["a", "a", "b", "b", "c", "c"]
    m = confusion_matrix(gold, pred, ["a", "b", "c"])
    assert m.tolist() == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    # p_o = 4/6; p_e = (3*2 + 2*2 + 1*2) / 36 = 12/36; kappa = (2/3 - 1/3) / (2/3) = 0.5
    ag = agreement(gold, pred, ["a", "b", "c"])
    assert ag.accuracy == pytest.approx(4 / 6) and ag.kappa == pytest.approx(0.5)
    assert ag.confusion[0] == (2, 1, 0)
    # One class everywhere: kappa is undefined; all agreeing reads 1.0, not NaN.
    assert agreement(["a"] * 5, ["a"] * 5, ["a", "b"]).kappa == 1.0
    assert math.isnan(agreement([], [], ["a", "b"]).kappa)
    with pytest.raises(ValueError, match=r"\['x'\] are not among"):
        confusion_matrix(["a", "x"], ["a", "a"], ["a", "b"])


def test_auroc_by_hand_with_ties():
    # positives 0.8, 0.4; negatives 0.4, 0.1: pairs (0.8>0.4, 0.8>0.1, 0.4=0.4 half, 0.4>0.1)
    assert auroc([1, 1, 0, 0], [0.8, 0.4, 0.4, 0.1]) == pytest.approx(3.5 / 4)
    assert auroc([1, 0], [0.1, 0.9]) == 0.0
    assert auroc([1, 0, 1], [0.5, 0.5, 0.5]) == 0.5
    assert math.isnan(auroc([1, 1], [0.2, 0.3]))


def test_detection_precision_recall_by_hand():
    d = detection([1, 1, 0, 0, 0], [0.9, 0.3, 0.6, 0.2, 0.1], threshold=0.5)
    # predicted positive: 0.9 (tp), 0.6 (fp) -> precision 1/2, recall 1/2
    assert (d.precision, d.recall, d.positives, d.n) == (0.5, 0.5, 2, 5)
    assert d.auroc == pytest.approx(5 / 6)
    assert math.isnan(detection([1, 0], [0.1, 0.2], 0.5).precision)


def test_grouped_rates_mean_std_and_phases():
    g = grouped_rates(["x", "y", "x", "x"], [True, False, False, True])
    assert list(g) == ["x", "y"] and (g["x"].k, g["x"].n) == (2, 3)
    assert mean_std([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0, 3))
    assert mean_std([4.0]) == (4.0, 0.0, 1)
    ph = phase_stats([{"generation": 1.0, "total": 1.0}, {"generation": 3.0, "total": 5.0,
                                                         "repair": 2.0}])
    assert ph["generation"][0] == 2.0 and ph["repair"] == (2.0, 0.0, 1)
