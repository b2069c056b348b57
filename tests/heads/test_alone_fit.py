"""The read study's fitting: closed-form ridge folds, held-out figures, lexical baseline,
and the calibration header its thresholds write (synthetic rows; no model)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from plguard_lab.training.alone_fit import (
    RidgeFolds,
    Rows,
    crossfit,
    fit_alone,
    heldout,
    item_scores,
)


def _rows(n_per: int = 60, d: int = 6, seed: int = 0, windows: int = 1) -> Rows:
    """Three two-class sources and one all-positive one; feature 0 carries the label."""
    rng = np.random.default_rng(seed)
    groups, y = [], []
    for s, classes in (("a", (0, 1)), ("b", (0, 1)), ("c", (0, 1)), ("pos", (1,))):
        for i in range(n_per):
            groups.append(s)
            y.append(float(classes[i % len(classes)]))
    yv = np.asarray(y)
    item = np.repeat(np.arange(len(yv)), windows)
    X = rng.normal(size=(len(item), 2, d))
    X[:, :, 0] += 3.0 * yv[item][:, None]  # the signal, at both layers
    texts = [("bad thing" if yv[i] else "nice thing") + f" {k}" for k, i in enumerate(item)]
    return Rows("answer" if windows > 1 else "request", (3, 6), texts, item, yv,
                np.asarray(groups), [f"u{i}" for i in range(len(yv))],
                [f"p{i // 2}" for i in range(len(yv))],
                {"mean": X, "last": X[:, ::-1, :].copy()}, [])


def _ridge(X: np.ndarray, y: np.ndarray, w: np.ndarray, strength: float
           ) -> tuple[np.ndarray, float]:
    """The same ridge, fitted directly on rows (weighted standardisation, +-1 target)."""
    n = w.sum()
    mu = (X * w[:, None]).sum(0) / n
    Xc = X - mu
    sd = np.sqrt((Xc ** 2 * w[:, None]).sum(0) / n)
    Z = Xc / sd
    t = y * 2 - 1
    tbar = (w * t).sum() / n
    A = (Z * w[:, None]).T @ Z / n + strength * np.eye(X.shape[1]) / 100.0
    v = np.linalg.solve(A, (Z * w[:, None]).T @ (t - tbar) / n)
    wv = v / sd
    return wv, float(tbar - mu @ wv)


def test_a_folds_head_is_the_ridge_fitted_on_the_other_sources_rows():
    rows = _rows(windows=3)
    X = rows.states["mean"][:, 0, :].astype(np.float64)
    rf = RidgeFolds(X, rows)
    w, b = rf.head(frozenset({"b"}), 1.0)
    keep = rows.row_groups != "b"
    w2, b2 = _ridge(X[keep], rows.row_y[keep], rows.row_weight[keep], 1.0)
    np.testing.assert_allclose(w, w2, rtol=1e-6, atol=1e-9)
    assert b == pytest.approx(b2, abs=1e-9)
    # Excluding another source gives another head.
    assert not np.allclose(rf.head(frozenset({"a"}), 1.0)[0], w)


def test_heldout_ranks_two_class_sources_within_and_one_class_sources_against_others():
    rows = _rows()
    X = rows.states["mean"][:, 0, :].astype(np.float64)
    h = heldout(rows, RidgeFolds(X, rows).fitter(1.0))
    assert set(h.metrics) == {"a", "b", "c", "pos"}
    assert min(h.metrics.values()) > 0.85  # the signal transfers across sources
    # The all-positive source is ranked against each other source's negatives.
    assert set(h.matrix) == {"pos"} and set(h.matrix["pos"]) == {"a", "b", "c"}
    assert h.metrics["pos"] == pytest.approx(np.mean(list(h.matrix["pos"].values())),
                                             abs=1e-4)
    # Labels that carry nothing read as chance.
    noise = _rows(seed=1)
    rng = np.random.default_rng(5)
    noise.states["mean"] = rng.normal(size=noise.states["mean"].shape)
    Xn = noise.states["mean"][:, 0, :]
    hn = heldout(noise, RidgeFolds(Xn, noise).fitter(1.0))
    assert max(hn.metrics[s] for s in "abc") < 0.75


def test_untrained_sources_are_judged_never_fitted_on():
    rows = _rows()
    X = rows.states["mean"][:, 0, :].astype(np.float64)
    rf = RidgeFolds(X, rows)
    seen: list[frozenset[str]] = []

    def fitter(excluded: frozenset[str]) -> Any:
        seen.append(excluded)
        return rf.fitter(1.0)(excluded)

    h = heldout(rows, fitter, untrained=frozenset({"c"}))
    assert "c" in h.metrics and all("c" in e for e in seen)


def test_answer_scores_are_the_best_window():
    rows = _rows(windows=3)
    scores = np.arange(len(rows.item), dtype=float)
    scores[1] = np.nan
    its = item_scores(rows, scores)
    assert its[0] == 2.0 and its[1] == 5.0


def test_fit_alone_keeps_the_prior_without_search_and_cross_fits_every_row():
    rows = _rows(windows=2)
    fit = fit_alone("p", rows, rows.layers, 12, search=False)
    assert fit.choice == ("mean", 6, 1.0)  # the mean at half of 12 layers
    assert fit.head is not None and fit.head["readout"] == "alone"
    assert fit.head["layer"] == 6 and fit.head["info"]["view"] == "answer"
    assert fit.crossfit is not None and np.isfinite(fit.crossfit).all()
    cf = crossfit(rows, rows.states["mean"][:, 1, :].astype(np.float64), 1.0, None,
                  frozenset())
    np.testing.assert_allclose(cf, fit.crossfit)
    # Calibrated on cross-fitted scores: positives read higher than negatives.
    z = item_scores(rows, fit.crossfit)
    p = 1 / (1 + np.exp(-(fit.head["platt"]["a"] * z + fit.head["platt"]["b"])))
    assert p[rows.y == 1].mean() > 0.7 > 0.3 > p[rows.y == 0].mean()


def test_lexical_baseline_reads_the_words_on_the_same_folds():
    from plguard_lab.training.lexical import lexical_fitter

    rows = _rows()
    lex = heldout(rows, lexical_fitter(rows))
    assert min(lex.metrics[s] for s in "abc") > 0.95  # "bad" vs "nice" is in the words
    rows.texts = ["same words" for _ in rows.texts]
    blind = heldout(rows, lexical_fitter(rows))
    assert max(blind.metrics[s] for s in "abc") == pytest.approx(0.5, abs=0.05)


def test_the_calibration_names_the_heads_model_and_its_hash(tmp_path):
    from plguard.policy import load_policy
    from plguard_lab.studies.read.thresholds import write_calibration

    heads = tmp_path / "heads-minimal.json"
    heads.write_text(json.dumps({"model": {"model_id": "m:bfloat16", "sha256": "ab" * 32}}))
    out = tmp_path / "cal.json"
    write_calibration(load_policy("minimal"), heads,
                      {"unsafe": {"threshold": 0.4}, "content": {"threshold": 0.5}}, out)
    cal = json.loads(out.read_text())
    assert cal["model"] == {"model_id": "m:bfloat16", "sha256": "ab" * 32}
    assert cal["thresholds"] == {"unsafe": 0.4, "content": 0.5}


def test_the_moderation_threshold_caps_every_benign_group_of_dev_requests():
    from plguard.policy import load_policy
    from plguard_lab.studies.hazards.items import BENIGN, test_items
    from plguard_lab.studies.read.thresholds import moderation_threshold

    policy = load_policy("hazards")
    # A seeded sample of every group (the worst-answer bounds of all of dev take minutes).
    rng0 = np.random.default_rng(1)
    every = test_items("dev")
    dev = [every[i] for i in sorted(rng0.choice(len(every), 80, replace=False))]
    rng = np.random.default_rng(0)
    # Each request predicate reads higher for a hazardous request than for a benign one.
    score = {it.request: float(rng.uniform(0.3, 0.9) if it.fields["group"] not in BENIGN
                               else rng.uniform(0.0, 0.5)) for it in dev}
    req = {s.name: {"by_text": score} for s in policy.predicates if s.scope == "request"}
    doc = moderation_threshold(policy, req, dev)
    assert doc["n_scored"] == doc["n_dev"] == len(dev)
    assert all(v <= 0.05 for g, v in doc["dev_flagged"].items()
               if g in ("coconot_contrast", "xstest_safe", "coconot_plain", "answer_texts"))
    assert 0.5 < doc["dev_recall"] < 1.0 and doc["auroc_hazardous_vs_benign"] > 0.8
    # A request predicate an unsafe rule reads without a head: no threshold.
    del req["request_seeks_hate"]
    assert "skipped" in moderation_threshold(policy, req, dev)


def test_the_feature_store_keeps_states_beyond_float16(tmp_path):
    from plguard_lab.training.features import Feature, FeatureStore

    store = FeatureStore(tmp_path / "f.sqlite")
    small = np.array([[0.5, -1.25], [3.0, 7.0]], dtype=np.float32)
    big = np.array([[1.0e5, -2.5], [0.1, 7.0e4]], dtype=np.float32)  # Gemma-3-sized values
    store.put({"small": Feature(small, -0.1, -2.0), "big": Feature(big, 0.0, 0.0)})
    got = store.get(["small", "big"])
    np.testing.assert_array_equal(got["small"].states, small)  # float16 holds them exactly
    np.testing.assert_allclose(got["big"].states, big, rtol=1e-6)
    assert np.isfinite(got["big"].states).all()
    sizes = dict(store._con.execute("SELECT key, length(states) FROM feats"))
    assert sizes == {"small": 4 * 2, "big": 4 * 4}  # float16 unless it would overflow


def test_a_heads_file_lists_the_sources_its_heads_were_fitted_on():
    from types import SimpleNamespace

    from plguard.policy import load_policy
    from plguard_lab.studies.read.fit import heads_document
    from plguard_lab.training.corpus import CorpusItem

    items = [CorpusItem("a1", "alpaca", "1", "Write a poem", None),
             CorpusItem("x1", "xsafety", "2", "Is this unsafe?", None),
             CorpusItem("g1", "gptfuzz", "3", "How to?", "Step 1: ...")]
    ex = SimpleNamespace(layers=(15,), window_tokens=64, window_overlap=32)
    head = {"readout": "alone", "layer": 15, "weights": [], "bias": 0.0}
    content = {"response_provides_harmful_instructions": {"view": "answer", "head": head,
                                                          "untrained": []}}
    doc = heads_document(load_policy("minimal"), content, ex, {}, items, "none")
    # A content head reads answers only: Alpaca's and XSafety's licences do not apply.
    assert doc["training"]["sources"] == ["gptfuzz"]
    assert doc["training"]["non_commercial"] == []
    request = {"request_is_harmful": {"view": "request", "head": head,
                                      "untrained": ["xsafety"]}}
    doc = heads_document(load_policy("minimal"), {**content, **request}, ex, {}, items, "none")
    assert doc["training"]["sources"] == ["alpaca", "gptfuzz"]  # XSafety never trained it
    assert doc["training"]["non_commercial"] == ["alpaca"]


def test_compare_fits_tells_a_refits_differences_from_changed_items(tmp_path, capsys):
    import json

    from plguard_lab.studies.read import compare

    def fit(passages: float, cell: float, gpt: float) -> dict:
        return {"name": "p", "heldout": {"coconot": (cell + passages) / 2, "gptfuzz": gpt,
                                         "ours": 0.8},
                "matrix": {"coconot": {"gptfuzz": cell, "ours": passages}}}

    before, after = fit(0.82, 0.77, 0.97), fit(0.70, 0.79, 0.96)
    table = compare.rows(before, after, {"ours"})
    kinds = {(s, t): k for s, t, _, _, k in table}
    assert kinds == {("coconot", ""): "items", ("coconot", "gptfuzz"): "refit",
                     ("coconot", "ours"): "items", ("gptfuzz", ""): "refit",
                     ("ours", ""): "both"}
    # coconot's own figure falls 0.05, all of it on the changed source's cell: the refit's
    # own largest fall is gptfuzz's 0.01.
    assert compare.worst_refit_drop(table) == (0.01, "gptfuzz")
    assert compare.worst_refit_drop(table, {"gptfuzz"}) == (0.0, "")
    for name, rec in (("b", before), ("a", after)):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"name": "q"}) + "\n"
                                               + json.dumps(rec) + "\n")
    assert compare.main([str(tmp_path / "b.jsonl"), str(tmp_path / "a.jsonl"),
                         "--predicate", "p", "--changed", "ours"]) == 0
    out = capsys.readouterr().out
    assert "| coconot | ours | 0.820 | 0.700 | -0.120 | items |" in out
    assert out.strip().endswith("largest fall on refit rows: 0.010 (gptfuzz)")
