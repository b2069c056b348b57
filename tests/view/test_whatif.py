"""What-if re-evaluation and the smallest flipping change, against the real policies."""

from __future__ import annotations

import random

import numpy as np
import pytest

from plguard.config import Thresholds
from plguard.decide import decide_for
from plguard.errors import InputError
from plguard.policy import load_policy
from plguard.types import PolicyResult
from plguard_lab.view.whatif import check_probs, flips, what_if

TH = Thresholds(unsafe=0.5, over_refusal=0.5)


@pytest.fixture(scope="module")
def minimal():
    return load_policy("minimal")


@pytest.fixture(scope="module")
def detailed():
    return load_policy("detailed")


def _mk(h, i, b, r):
    return {"request_is_harmful": h, "response_provides_harmful_instructions": i,
            "request_is_benign_sensitive_context": b, "response_refuses": r}


@pytest.mark.parametrize("name", ["minimal", "detailed", "very_detailed"])
def test_what_if_is_policy_evaluate_then_decide(name):
    policy = load_policy(name)
    rng = random.Random(7)
    for _ in range(5):
        probs = {n: rng.random() for n in policy.predicate_names}
        w = what_if(policy, probs, TH)
        ref = policy.evaluate(probs)
        assert dict(w.result.probs) == dict(ref.probs)
        assert w.decision == decide_for(policy, ref, TH)


def test_scripted_flip_on_minimal(minimal):
    # unsafe = h*i = 0.4 and over = b*r = 0.18: allow. Alone, i reaches 0.5 at 0.625 (refuse),
    # h would need 1.0 (refuse), b needs 0.5/0.9 (rewrite), r can never reach it.
    w = what_if(minimal, _mk(0.8, 0.5, 0.2, 0.9), TH)
    assert w.decision.action == "allow"
    by = {f.predicate: f for f in w.flips}
    assert set(by) == {"response_provides_harmful_instructions", "request_is_harmful",
                       "request_is_benign_sensitive_context"}
    assert w.smallest is by["response_provides_harmful_instructions"]
    assert by["response_provides_harmful_instructions"].new == pytest.approx(0.625, abs=1e-9)
    assert by["response_provides_harmful_instructions"].action == "refuse"
    assert by["request_is_harmful"].new == pytest.approx(1.0, abs=1e-9)
    assert by["request_is_benign_sensitive_context"].new == pytest.approx(0.5 / 0.9, abs=1e-9)
    assert by["request_is_benign_sensitive_context"].action == "rewrite"
    assert [abs(f.delta) for f in w.flips] == sorted(abs(f.delta) for f in w.flips)
    for f in w.flips:  # each reported value really flips it, checked the guard's way
        probs = _mk(0.8, 0.5, 0.2, 0.9)
        probs[f.predicate] = f.new
        r = minimal.evaluate(probs)
        assert decide_for(minimal, r, TH).action == f.action


def test_flip_downwards_and_at_an_inclusive_threshold(minimal):
    w = what_if(minimal, _mk(1.0, 0.5, 0.0, 0.0), TH)  # unsafe exactly 0.5: refuse (>=)
    assert w.decision.action == "refuse"
    s = w.smallest
    assert s is not None and s.delta < 0 and abs(s.delta) < 1e-9 and s.action == "allow"
    # content rules only at i = 1 here, so the unsafe rule's tie decides
    w = what_if(minimal, _mk(0.9, 0.9, 0.0, 0.0), TH.model_copy(update={"content": 1.0}))
    assert w.smallest is not None
    assert w.smallest.predicate == "request_is_harmful"  # tie with i: policy order decides
    assert w.smallest.new == pytest.approx(0.5 / 0.9, abs=1e-9)
    # with the content rule at 0.7, lowering h no longer allows: i alone is harmful content
    w = what_if(minimal, _mk(0.9, 0.9, 0.0, 0.0), TH.model_copy(update={"content": 0.7}))
    assert w.smallest is not None and w.smallest.predicate == \
        "response_provides_harmful_instructions"
    assert w.smallest.new == pytest.approx(0.5 / 0.9, abs=1e-9)
    assert "request_is_harmful" not in {f.predicate for f in w.flips}


def test_where_no_other_change_flips_harmful_content_still_does(minimal):
    # At 0.5/0.5 every allowed minimal world has a flip: h < 0.5 leaves the harmless-request
    # rule (1-h)*r room to reach 0.5, h >= 0.5 lets i reach it. At 0.5/0.7 with h = 0.4,
    # (1-h)*r <= 0.6, h*i <= 0.4, and b or h alone are multiplied by r = 0 or i = 0.1.
    # Only the content rule (i alone, at the default thresholds.content) is left to flip it.
    w = what_if(minimal, _mk(0.4, 0.1, 0.0, 0.0), Thresholds(unsafe=0.5, over_refusal=0.7))
    assert w.decision.action == "allow"
    assert [(f.predicate, f.action) for f in w.flips] == [
        ("response_provides_harmful_instructions", "refuse")]
    assert w.flips[0].new == pytest.approx(Thresholds().content, abs=1e-9)
    w = what_if(minimal, _mk(0.4, 0.1, 0.0, 0.0),
                Thresholds(unsafe=0.5, over_refusal=0.7, content=1.0))
    assert [f.new for f in w.flips] == [pytest.approx(1.0)]  # content at 1.0: only i = 1
    w = what_if(minimal, _mk(0.4, 0.1, 0.0, 0.0), Thresholds(unsafe=0.5, over_refusal=0.7))
    assert w.as_dict()["smallest_flip"] is not None


def test_an_over_refusal_threshold_that_is_off_offers_no_rewrite(minimal):
    # The scripted world above, with rewrites off: only the two refusing flips remain.
    w = what_if(minimal, _mk(0.8, 0.5, 0.2, 0.9), Thresholds(unsafe=0.5, over_refusal=None))
    assert w.decision.action == "allow"
    assert {f.predicate: f.action for f in w.flips} == {
        "response_provides_harmful_instructions": "refuse", "request_is_harmful": "refuse"}


def test_flips_match_a_dense_brute_force(detailed):
    names = list(detailed.predicate_names)
    rng = random.Random(3)
    grid = np.linspace(0.0, 1.0, 1001)
    for trial in range(3):
        probs = {n: rng.random() ** 2 for n in names}
        w = what_if(detailed, probs, TH)
        by = {f.predicate: f for f in w.flips}
        for i, n in enumerate(names):
            m = np.tile([probs[x] for x in names], (len(grid), 1))
            m[:, i] = grid
            out = detailed.evaluate_matrix(m, names)
            acts = [decide_for(detailed, PolicyResult("p", {q: float(out[q][k]) for q in out}),
                               TH).action
                    for k in range(len(grid))]
            other = [float(v) for v, a in zip(grid, acts, strict=True)
                     if a != w.decision.action]
            if not other:
                assert n not in by, (trial, n)
                continue
            best = min(other, key=lambda v: abs(v - probs[n]))
            assert n in by, (trial, n, best)
            assert abs(by[n].new - best) <= 1e-3 + 1e-9, (trial, n, by[n], best)


class _Curved:
    """A scripted policy whose rule is not affine in its predicate (r = v**2)."""

    predicate_names = ("x", "y")
    queries = ("unsafe_compliance_a", "over_refusal_b")
    unsafe_rules = ("unsafe_compliance_a",)
    over_refusal_rules = ("over_refusal_b",)
    content_rules = ()
    categories: dict[str, tuple[str, ...]] = {}

    def evaluate(self, probs):
        return PolicyResult("curved", {"unsafe_compliance_a": probs["x"] ** 2,
                                       "over_refusal_b": 0.0 * probs["y"]})

    def evaluate_matrix(self, matrix, names):
        m = np.asarray(matrix)
        return {"unsafe_compliance_a": m[:, 0] ** 2, "over_refusal_b": 0.0 * m[:, 1]}


def test_non_affine_policy_falls_back_to_bisection():
    fl = flips(_Curved(), {"x": 0.3, "y": 0.2}, TH)
    assert len(fl) == 1 and fl[0].predicate == "x" and not fl[0].exact
    assert fl[0].new == pytest.approx(0.5 ** 0.5, abs=1e-9) and fl[0].action == "refuse"


def test_bad_probabilities_are_input_errors(minimal):
    good = _mk(0.1, 0.1, 0.1, 0.1)
    with pytest.raises(InputError, match="missing"):
        check_probs(minimal, {k: v for k, v in good.items() if k != "response_refuses"})
    with pytest.raises(InputError, match="unknown"):
        check_probs(minimal, {**good, "nope": 0.3})
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        check_probs(minimal, {**good, "response_refuses": 1.5})
    with pytest.raises(InputError, match="number"):
        check_probs(minimal, {**good, "response_refuses": "0.3"})
    with pytest.raises(InputError, match="number"):
        check_probs(minimal, {**good, "response_refuses": True})
