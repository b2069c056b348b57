"""Metrics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plguard.evals.metrics import (
    agreement,
    auroc,
    bootstrap_rate,
    cohen_kappa,
    confusion_matrix,
    detection,
    grouped_rates,
    mean_std,
    phase_stats,
)


def test_bootstrap_rate_is_seeded_and_brackets_the_rate():
    flags = [True] * 30 + [False] * 70
    a = bootstrap_rate(flags, 2000, seed=7)
    assert (a.k, a.n, a.rate) == (30, 100, 0.3)
    assert a == bootstrap_rate(flags, 2000, seed=7)
    # normal approximation: 0.3 +- 1.96 * sqrt(0.21 / 100) = [0.21, 0.39]
    assert a.lo == pytest.approx(0.21, abs=0.02) and a.hi == pytest.approx(0.39, abs=0.02)
    assert bootstrap_rate([False] * 10).hi == 0.0
    empty = bootstrap_rate([])
    assert empty.n == 0 and math.isnan(empty.rate) and empty.fmt() == "n/a (0)"
    assert a.fmt().startswith("30.0% [")


def test_confusion_and_kappa_by_hand():
    gold = ["a", "a", "a", "b", "b", "c"]
    pred = ["a", "a", "b", "b", "c", "c"]
    m = confusion_matrix(gold, pred, ["a", "b", "c"])
    assert m.tolist() == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    # p_o = 4/6; p_e = (3*2 + 2*2 + 1*2) / 36 = 12/36; kappa = (2/3 - 1/3) / (2/3) = 0.5
    assert cohen_kappa(m) == pytest.approx(0.5)
    ag = agreement(gold, pred, ["a", "b", "c"])
    assert ag.accuracy == pytest.approx(4 / 6) and ag.kappa == pytest.approx(0.5)
    assert ag.confusion[0] == (2, 1, 0)
    assert cohen_kappa(np.array([[5, 0], [0, 0]])) == 1.0


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
    g = grouped_rates(["x", "y", "x", "x"], [True, False, False, True], 100, 0)
    assert list(g) == ["x", "y"] and (g["x"].k, g["x"].n) == (2, 3)
    assert mean_std([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0, 3))
    assert mean_std([4.0]) == (4.0, 0.0, 1)
    ph = phase_stats([{"generation": 1.0, "total": 1.0}, {"generation": 3.0, "total": 5.0,
                                                         "repair": 2.0}])
    assert ph["generation"][0] == 2.0 and ph["repair"] == (2.0, 0.0, 1)
