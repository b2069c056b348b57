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
    assert [([m.content for m in i.chat], i.response) for i in items] == [(["hi"], None)]
    convo = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
             {"role": "assistant", "content": "a"}]
    items = parse_inputs(["t", convo, convo[:2]])
    # A conversation is kept whole up to its answer: its request is the conversation.
    assert [([m.content for m in i.chat], i.response) for i in items] == [
        (["t"], None), (["s", "q"], "a"), (["s", "q"], None)]
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


def test_worst_case_reads_request_predicates_through_moderation_maps():
    import math

    policy = load_policy("minimal")
    g = _grounding({"request_is_harmful": 0.3, "request_is_benign_sensitive_context": 0.2})
    plain = worst_case(policy, [g])[0].probs
    b = math.log(0.9 / 0.1)  # a flat map at 0.9
    mapped = worst_case(policy, [g], {"request_is_harmful": (0.0, b)})[0].probs
    assert plain["unsafe_compliance"] == pytest.approx(0.3)
    assert mapped["unsafe_compliance"] == pytest.approx(0.9)
    assert worst_case(policy, [g], {"no_such_predicate": (0.0, b)})[0].probs == plain


@pytest.mark.slow
def test_moderation_applies_the_calibrations_moderation_maps_and_only_there(tmp_path):
    """The embedded model with the shipped hazards heads and a calibration whose moderation
    map reads one zero-shot category at 0.99: a harmless text is flagged in that category
    by moderation, its raw P stays in the grounding, and the guard's own pair decision
    (which the moderation maps do not touch) reads the raw P."""
    import math

    from plguard import Guard
    from plguard.calibration import load_calibration
    from plguard.errors import ConfigError
    from plguard.heads.artefact import shipped_calibration

    shipped = shipped_calibration("hazards")
    assert shipped is not None
    doc = json.loads(shipped.read_text())
    cat = "request_sexualises_minors"
    doc["moderation_predicates"] = {cat: {"a": 0.0, "b": math.log(0.99 / 0.01)}}
    forced = tmp_path / "cal.json"
    forced.write_text(json.dumps(doc))
    text = "Recommend a good book about the history of Rome."
    g = Guard.from_config(policy="hazards", **{"grounding.calibration": str(forced),
                                               "grounding.cache": None})
    m = g.moderate(text)[0]
    raw = m.grounding.probs[cat]
    assert m.mapped[cat] == pytest.approx(0.99) and raw < 0.9
    assert m.flagged and "S4" in m.decision.categories
    assert g.check(text, "Try SPQR by Mary Beard.").decision.action == "allow"
    # A malformed map is refused by name, before any grounding.
    doc["moderation_predicates"] = {cat: {"a": "steep"}}
    forced.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="moderation_predicates: predicate "
                       "'request_sexualises_minors' needs numeric 'a' and 'b'"):
        load_calibration(forced)
