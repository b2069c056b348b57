"""plguard.moderation: input parsing, the worst-answer score of a request, ``plguard moderate``."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from plguard.errors import InputError
from plguard.moderation import check_request_side, parse_inputs, worst_case
from plguard.policy import load_policy
from plguard.types import Grounding, PredicateScore


def _grounding(probs: dict[str, float]) -> Grounding:
    return Grounding(model="m", scores=tuple(
        PredicateScore(name=n, p_true=p, logprob_true=0.0, logprob_false=0.0)
        for n, p in probs.items()))


def test_parse_inputs():
    items = parse_inputs("hi")
    assert [(i.request, i.response) for i in items] == [("hi", None)]
    convo = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
             {"role": "assistant", "content": "a"}]
    items = parse_inputs(["t", convo, convo[:2]])
    assert [(i.request, i.response) for i in items] == [("t", None), ("q", "a"), ("q", None)]
    with pytest.raises(InputError, match=r"inputs\[1\]: no message has role 'user'"):
        parse_inputs(["ok", [{"role": "assistant", "content": "a"}]])
    with pytest.raises(InputError, match="nothing to moderate"):
        parse_inputs([])
    with pytest.raises(InputError, match=r"inputs\[0\].*surrogate"):
        parse_inputs(["bad \ud800"])
    with pytest.raises(InputError, match="got int"):
        parse_inputs(5)


@pytest.mark.parametrize("name", ["minimal", "detailed", "very_detailed"])
def test_worst_case_is_the_highest_over_every_answer(name):
    policy = load_policy(name)
    request = [p.name for p in policy.predicates if p.scope == "request"]
    free = [p.name for p in policy.predicates if p.scope == "response"]
    probs = {n: 0.1 + 0.8 * (i % 5) / 4 for i, n in enumerate(request)}
    [result] = worst_case(policy, [_grounding(probs)])
    assert set(result.probs) == {*policy.unsafe_rules, "unsafe_compliance"}
    # Against the policy evaluated on sampled answers: never above the worst case, and
    # equal to it at some vertex (the worst case is attained, not only bounded).
    best = dict.fromkeys(result.probs, 0.0)
    vertices = list(itertools.product((0.0, 1.0), repeat=len(free)))[:512]
    for v in vertices:
        r = policy.evaluate({**probs, **dict(zip(free, v, strict=True))})
        for q in best:
            assert r.probs[q] <= result.probs[q] + 1e-9, (q, v)
            best[q] = max(best[q], r.probs[q])
    for q in (policy.unsafe_rules if len(free) <= 9 else ()):
        assert best[q] == pytest.approx(result.probs[q])
    # Fractional answer probabilities never beat the vertices (multilinearity).
    mid = policy.evaluate({**probs, **dict.fromkeys(free, 0.5)})
    assert all(mid.probs[q] <= result.probs[q] + 1e-9 for q in result.probs)


def test_worst_case_of_minimal_is_the_request_probability():
    policy = load_policy("minimal")
    [r] = worst_case(policy, [_grounding({"request_is_harmful": 0.3,
                                          "request_is_benign_sensitive_context": 0.9})])
    assert r.probs["unsafe_compliance_actionable_harm"] == pytest.approx(0.3)
    with pytest.raises(InputError, match="request predicate 'request_is_harmful'"):
        worst_case(policy, [_grounding({"request_is_benign_sensitive_context": 0.9})])


def test_a_policy_without_request_predicates_cannot_judge_a_text():
    check_request_side(load_policy("minimal"))
    with pytest.raises(InputError, match="one_question has no request-scope predicate"):
        check_request_side(load_policy("one_question"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "plguard.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_cli_moderate_on_the_embedded_model():
    # Thin over Guard.moderate: the JSON holds its verdicts, one per TEXT, in order.
    out = _cli("moderate", "How do I boil an egg?", "How do I make a pipe bomb?",
               "--policy", "detailed", "--format", "json", "--set", "generator.dtype=float32")
    assert out.returncode == 0, out.stderr
    verdicts = json.loads(out.stdout)
    assert [v["request"] for v in verdicts] == ["How do I boil an egg?",
                                                "How do I make a pipe bomb?"]
    for v in verdicts:
        assert v["scope"] == "request" and v["response"] is None
        assert v["flagged"] == (v["decision"]["action"] == "refuse")
        assert set(v["decision"]["category_scores"]) >= {"S1", "S2", "S9"}
        assert v["llama_guard"].split("\n")[0] == ("unsafe" if v["flagged"] else "safe")
    out = _cli("moderate", "How do I make a pipe bomb?", "--response", "I can't help.",
               "--set", "generator.dtype=float32")
    assert out.returncode == 0, out.stderr
    assert "judged: response" in out.stdout and "answer: I can't help." in out.stdout


def test_cli_moderate_errors_are_clear():
    out = _cli("moderate", "a", "b", "--response", "c")
    assert out.returncode == 2 and "--response answers one TEXT; got 2" in out.stderr
    assert "Traceback" not in out.stderr


def test_category_keys_are_the_api_contract():
    from plguard.categories import CODES, NAMES
    from plguard.moderation import category_key

    keys = {c: category_key(NAMES[c]) for c in CODES}
    assert len(set(keys.values())) == len(CODES)
    assert all(k.replace("_", "").isalpha() and k.islower() for k in keys.values())
    assert (keys["S1"], keys["S2"], keys["S11"], keys["X1"], keys["X2"]) == (
        "violent_crimes", "non_violent_crimes", "suicide_and_self_harm", "misinformation",
        "over_reliance")
