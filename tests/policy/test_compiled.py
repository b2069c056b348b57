"""Compile-once evaluation: the vectorised path agrees with ProbLog's own answers."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from plguard.policy import CompiledProgram, load_policy
from plguard.types import PolicyResult

from .testlib import BUNDLES

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", BUNDLES)
def test_matrix_equals_problog_per_example(name):
    policy = load_policy(name)
    names = list(policy.predicate_names)
    rng = np.random.default_rng(7)
    m = rng.uniform(size=(25, len(names)))
    m[rng.random(m.shape) < 0.1] = 0.0
    m[rng.random(m.shape) < 0.1] = 1.0
    fast = policy.evaluate_matrix(m, names)
    assert list(fast) == list(policy.queries)
    batch = policy.evaluate_batch([dict(zip(names, row, strict=True)) for row in m])
    for i, row in enumerate(m):
        ref = policy.evaluate_problog(dict(zip(names, row, strict=True)))
        one = policy.evaluate(dict(zip(names, row, strict=True)))
        for q in policy.queries:
            assert abs(one.probs[q] - ref.probs[q]) <= 1e-9
            assert fast[q].dtype == np.float64
            assert abs(fast[q][i] - ref.probs[q]) <= 1e-9
            assert abs(batch[i].probs[q] - ref.probs[q]) <= 1e-9


def test_matrix_column_order_is_free():
    policy = load_policy("minimal")
    names = list(policy.predicate_names)
    rng = np.random.default_rng(1)
    m = rng.uniform(size=(5, len(names)))
    perm = rng.permutation(len(names))
    a = policy.evaluate_matrix(m, names)
    b = policy.evaluate_matrix(m[:, perm], [names[i] for i in perm])
    for q in a:
        np.testing.assert_allclose(a[q], b[q], rtol=0, atol=1e-12)


def test_result_shape_and_id():
    policy = load_policy("minimal")
    res = policy.evaluate(dict.fromkeys(policy.predicate_names, 0.5))
    assert isinstance(res, PolicyResult)
    digest = hashlib.sha256(policy.source.encode()).hexdigest()[:8]
    assert res.policy == policy.id == f"minimal@{digest}"
    assert tuple(res.probs) == policy.queries
    assert policy.unsafe_rules == ("unsafe_compliance_actionable_harm",)
    assert policy.over_refusal_rules == ("over_refusal_benign_sensitive",
                                         "over_refusal_harmless_request")
    assert policy.compiled is policy.compiled  # compiled once, cached
    assert policy.evaluate_batch([]) == []


def test_extra_keys_are_ignored():
    policy = load_policy("minimal")
    probs = dict.fromkeys(policy.predicate_names, 0.5)
    assert policy.evaluate({**probs, "something_else": 3.0}) == policy.evaluate(probs)


def test_pruned_facts_are_dropped_not_passed():
    src = "a :- p, q.\nquery(a).\n0.5::p.\n0.5::q.\n0.5::unused.\n"
    prog = CompiledProgram(src, ["p", "q", "unused"])
    assert prog.present == ("p", "q")
    assert prog.evaluate({"p": 0.5, "q": 0.4, "unused": 0.9})["a"] == pytest.approx(0.2)
    out = prog.evaluate_matrix(np.array([[0.5, 0.4, 0.9]]))
    assert out["a"][0] == pytest.approx(0.2)
    assert prog.support("a") == {"p", "q"}


def test_negation_and_constants():
    src = ("a :- \\+p, q.\nb :- fail.\nc :- true.\nd :- a ; p.\n"
           "query(a).\nquery(b).\nquery(c).\nquery(d).\n0.5::p.\n0.5::q.\n")
    prog = CompiledProgram(src, ["p", "q"])
    out = prog.evaluate_matrix(np.array([[0.3, 0.6], [1.0, 0.0]]))
    np.testing.assert_allclose(out["a"], [0.7 * 0.6, 0.0], atol=1e-12)
    np.testing.assert_allclose(out["b"], [0.0, 0.0])
    np.testing.assert_allclose(out["c"], [1.0, 1.0])
    np.testing.assert_allclose(out["d"], [0.3 + 0.7 * 0.6, 1.0], atol=1e-12)


def test_ddnnf_fallback_agrees_with_sdd():
    sdd = load_policy("minimal")
    try:
        ddnnf = load_policy("minimal", backend="ddnnf")
        assert ddnnf.compiled.present
    except Exception as exc:  # dsharp ships with ProbLog, but say so if it is absent
        pytest.fail(f"d-DNNF fallback unavailable: {exc}")
    assert ddnnf.compiled.backend == "ddnnf"
    names = list(sdd.predicate_names)
    m = np.random.default_rng(3).uniform(size=(4, len(names)))
    a, b = sdd.evaluate_matrix(m, names), ddnnf.evaluate_matrix(m, names)
    for q in a:
        np.testing.assert_allclose(a[q], b[q], atol=1e-9)


def test_bundles_load_by_name_from_an_installed_layout(tmp_path):
    """Mimic the wheel: policies/ force-included as plguard/_bundles, no source checkout."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "plguard", site / "plguard",
                    ignore=shutil.ignore_patterns("__pycache__", "_bundles"))
    shutil.copytree(REPO / "policies", site / "plguard" / "_bundles")
    code = ("from plguard.policy import load_policy, bundle_names; "
            "p = load_policy('minimal'); print(sorted(bundle_names())); print(p.path)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                         check=True)
    assert "_bundles" in out.stdout.splitlines()[-1]
    assert str(site) in out.stdout
