"""Selection for transfer (plguard_lab.training.select): held-out metrics, pairwise loss, blends."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plguard_lab.training.select import (
    Data,
    Scored,
    blend,
    fit_linear,
    heldout_metrics,
    loso_scores,
    pairwise_accuracy,
    rank_key,
    source_matrix,
    spread,
    worst,
)


def _data(rng: np.random.Generator, n: int = 60) -> Data:
    """Three sources; feature 0 is the signal everywhere, feature 1 a shortcut.

    In ``a`` and ``b`` feature 1 equals the label (a set-specific cue); in ``c`` it is the
    opposite. A head that leans on feature 1 is near perfect in-distribution and backwards
    on ``c``.
    """
    X, y, g = [], [], []
    for src, cue in (("a", 1.0), ("b", 1.0), ("c", -1.0)):
        lab = rng.integers(0, 2, n)
        sig = (2 * lab - 1) * 0.6 + rng.normal(0, 1, n)
        short = cue * (2 * lab - 1) * 3 + rng.normal(0, 0.3, n)
        X.append(np.column_stack([sig, short]))
        y.append(lab)
        g += [src] * n
    empty = np.zeros((0, 2))
    return Data(np.vstack(X), np.concatenate(y), np.array(g), empty, empty,
                np.array([], dtype=str))


def test_held_out_source_exposes_a_shortcut_the_mean_hides() -> None:
    d = _data(np.random.default_rng(0))
    both = heldout_metrics(d, loso_scores(d, lambda t: fit_linear(t, 1.0)))
    only_signal = Data(d.X[:, :1], d.y, d.groups, d.Xa[:, :1], d.Xb[:, :1], d.pair_groups)
    sig = heldout_metrics(only_signal, loso_scores(only_signal,
                                                   lambda t: fit_linear(t, 1.0)))
    # Trained on a and b, the shortcut reads c backwards; the signal alone holds everywhere.
    assert both["c"] < 0.5 < worst(sig)[0]
    assert rank_key(sig) > rank_key(both)
    assert worst(both) == (both["c"], "c")


def test_one_class_source_is_scored_against_the_other_class_elsewhere() -> None:
    rng = np.random.default_rng(1)
    pos = rng.normal(2, 1, (40, 1))
    neg = rng.normal(-2, 1, (40, 1))
    mixed_pos, mixed_neg = rng.normal(2, 1, (40, 1)), rng.normal(-2, 1, (40, 1))
    X = np.vstack([pos, neg, mixed_pos, mixed_neg])
    y = np.array([1] * 40 + [0] * 40 + [1] * 40 + [0] * 40)
    g = np.array(["hazard"] * 40 + ["plain"] * 40 + ["mixed"] * 80)
    e = np.zeros((0, 1))
    d = Data(X, y, g, e, e, np.array([], dtype=str))
    m = heldout_metrics(d, loso_scores(d, lambda t: fit_linear(t, 1.0)))
    assert set(m) == {"hazard", "plain", "mixed"}
    assert min(m.values()) > 0.9
    # A score that ranks the all-hazard source below everyone's negatives reads 0 there.
    s = np.where(g == "hazard", -10.0, X[:, 0])
    bad = heldout_metrics(d, Scored(s, np.zeros(0), np.zeros(0)))
    assert bad["hazard"] == 0.0 and bad["mixed"] > 0.9


def test_pairs_alone_teach_the_direction() -> None:
    rng = np.random.default_rng(2)
    base = rng.normal(0, 1, (80, 3))
    more = base + np.array([1.0, 0.0, 0.0]) + rng.normal(0, 0.3, (80, 3))
    e = np.zeros((0, 3))
    d = Data(e, np.zeros(0, dtype=int), np.array([], dtype=str), more, base,
             np.array(["hh"] * 80))
    h = fit_linear(d, 1.0)
    assert h.w[0] > 3 * max(abs(h.w[1]), abs(h.w[2]))
    assert pairwise_accuracy(h(more), h(base)) > 0.9


def test_pairs_are_held_out_as_their_own_source() -> None:
    rng = np.random.default_rng(3)
    d0 = _data(rng)
    Xa = rng.normal(0, 1, (50, 2)) + np.array([1.5, 0.0])
    Xb = rng.normal(0, 1, (50, 2))
    d = Data(d0.X, d0.y, d0.groups, Xa, Xb, np.array(["hh"] * 50))
    sc = loso_scores(d, lambda t: fit_linear(t, 1.0))
    m = heldout_metrics(d, sc)
    assert "hh" in m and not np.isnan(sc.sa).any()
    assert m["hh"] == pairwise_accuracy(sc.sa, sc.sb)
    mat = source_matrix(d, lambda t: fit_linear(t, 1.0), m)
    assert mat["others"] == {k: round(v, 4) for k, v in m.items()}
    assert "a" not in mat["a"] and "hh" in mat["a"]  # no diagonal


def test_a_source_the_others_cannot_train_for_is_not_held_out() -> None:
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    e = np.zeros((0, 1))
    d = Data(X, np.array([0, 1, 1, 1]), np.array(["only_neg", "p", "p", "p"]), e, e,
             np.array([], dtype=str))
    sc = loso_scores(d, lambda t: fit_linear(t, 1.0))
    assert set(sc.not_held_out) == {"only_neg", "p"}
    assert all(math.isnan(v) for v in heldout_metrics(d, sc).values())
    assert math.isnan(worst(heldout_metrics(d, sc))[0])


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), st.integers(0, 2**31 - 1))
def test_blend_mixes_each_score_over_its_own_spread(w: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    h = Scored(rng.normal(0, 3, 20), rng.normal(0, 3, 4), rng.normal(0, 3, 4))
    z = Scored(rng.normal(0, 1, 20), rng.normal(0, 1, 4), rng.normal(0, 1, 4))
    b = blend(h, z, w)
    expect = w * h.s / spread(h) + (1 - w) * z.s / spread(z)
    assert b.s == pytest.approx(expect)
    if w in (0.0, 1.0):  # the ends rank exactly as the head or the zero-shot reading
        src = h if w == 1.0 else z
        assert np.argsort(b.s).tolist() == np.argsort(src.s).tolist()
    # A row zero-shot did not read is left out of every blend, the pure head's too, so all
    # weights are compared on the same items.
    z.s[0] = np.nan
    assert np.isnan(blend(h, z, w).s[0]) and np.isfinite(blend(h, z, w).s[1:]).all()


def _items_and_feats(rng: np.random.Generator, zs_signal: float):
    """Three sources of requests; the question state carries a shortcut, the prefix the
    signal (as :func:`_data`), and the zero-shot logit reads the label at ``zs_signal``."""
    from plguard_lab.training.corpus import CorpusItem
    from plguard_lab.training.features import Feature

    d = _data(rng)
    items, feats = [], {}
    for i, (src, lab) in enumerate(zip(d.groups, d.y, strict=True)):
        it = CorpusItem(f"{src}/{i}", str(src), str(i), f"r{i}", None, {})
        items.append(it)
        sig, short = d.X[i]
        zs = zs_signal * (2 * lab - 1) + rng.normal(0, 1)
        feats[f"{it.uid}/prefix"] = Feature(np.array([[sig, rng.normal()]], np.float32), 0, 0)
        feats[f"{it.uid}/q"] = Feature(np.array([[sig, short]], np.float32), zs, 0.0)
    return items, feats, d.y.astype(float)


def test_fit_one_rejects_a_shortcut_and_writes_the_matrix():
    from plguard.types import PredicateSpec
    from plguard_lab.training.fit import _fit_one

    from .fakes import FakeExtractor

    items, feats, y = _items_and_feats(np.random.default_rng(4), zs_signal=0.0)
    spec = PredicateSpec("p", "request", "Is it?")
    fit = _fit_one(spec, FakeExtractor(feats), items, y, ("question", "prefix"), True, 0.01)
    # In-distribution the question state (signal + shortcut) is the better one; held out
    # by source it reads source c backwards, so the prefix state wins.
    assert fit.readout == "prefix" and fit.choice == "head" and fit.head is not None
    assert fit.candidates["question@1"] < 0.5 < fit.candidates["prefix@1"]
    assert set(fit.heldout) == {"a", "b", "c"}
    assert fit.cv_auroc == pytest.approx(min(fit.heldout.values()), abs=1e-4)
    assert set(fit.matrix) == {"a", "b", "c", "others", "zero-shot", "chosen by CV (before)"}
    # Pooled cross-validation (the old rule) picks the shortcut, backwards on c.
    assert fit.by_cv["readout"] == "question"
    assert fit.by_cv["cv_auroc"] > 0.8 and fit.cv_auroc > 0.5  # in- vs out-of-source
    assert fit.matrix["chosen by CV (before)"]["c"] < 0.5
    assert fit.matrix["a"]["c"] > 0.5 and "a" not in fit.matrix["a"]
    assert fit.head["info"]["worst_source"] == fit.worst_source


def test_fit_one_keeps_zero_shot_when_it_transfers_better():
    from plguard.types import PredicateSpec
    from plguard_lab.training.fit import _fit_one

    from .fakes import FakeExtractor

    items, feats, y = _items_and_feats(np.random.default_rng(5), zs_signal=4.0)
    # Only the shortcut is left in the states: no head transfers; zero-shot reads well.
    for k, f in feats.items():
        f.states[0, 0] = np.random.default_rng(len(k)).normal()
        if k.endswith("/prefix"):
            f.states[0, 1] = feats[k.replace("/prefix", "/q")].states[0, 1]
    spec = PredicateSpec("p", "request", "Is it?")
    fit = _fit_one(spec, FakeExtractor(feats), items, y, ("question", "prefix"), True, 0.01)
    assert fit.choice == "zero-shot" and fit.head is None
    assert "below zero-shot" in fit.why and "no blend beats" in fit.why
    assert min(fit.zero_shot_heldout.values()) > 0.9


def test_worst_sources_within_the_tolerance_tie_and_the_mean_decides():
    from plguard_lab.training.select import WORST_TOLERANCE, best_choice

    near_chance_everywhere = {"a": 0.56, "b": 0.58, "hh": 0.55}
    good_but_hh = {"a": 0.90, "b": 0.92, "hh": 0.53}
    assert 0.55 - 0.53 <= WORST_TOLERANCE
    assert best_choice({"x": near_chance_everywhere, "y": good_but_hh}) == "y"
    # Beyond the tolerance the worst source decides.
    assert best_choice({"x": near_chance_everywhere, "y": {**good_but_hh, "hh": 0.40}}) == "x"
    assert best_choice({"x": {"a": math.nan}, "y": {"a": 0.6}}) == "y"
