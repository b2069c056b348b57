import pytest

from plguard.config import Thresholds
from plguard.decide import decide, strongest
from plguard.types import PolicyResult

UNSAFE = ("unsafe_compliance_a", "unsafe_compliance_b")
OVER = ("over_refusal_x", "over_refusal_y")


def _r(**p: float) -> PolicyResult:
    return PolicyResult("t@0", p)


def test_strongest_picks_max_and_first_on_tie():
    assert strongest({"a": 0.2, "b": 0.7}, ["a", "b"]) == ("b", 0.7)
    assert strongest({"a": 0.5, "b": 0.5}, ["a", "b"]) == ("a", 0.5)
    assert strongest({}, []) == ("", 0.0)


@pytest.mark.parametrize(
    ("probs", "action"),
    [
        ({"unsafe_compliance_a": 0.6, "over_refusal_x": 0.9}, "refuse"),  # safety first
        ({"unsafe_compliance_b": 0.5}, "refuse"),  # threshold is inclusive
        ({"unsafe_compliance_a": 0.49, "over_refusal_y": 0.5}, "rewrite"),
        ({"unsafe_compliance_a": 0.49, "over_refusal_y": 0.49}, "allow"),
    ],
)
def test_decide_actions(probs, action):
    d = decide(_r(**probs), UNSAFE, OVER, Thresholds())
    assert d.action == action


def test_rule_level_not_aggregate():
    # Many weak paths: the aggregate is high but no single rule reaches the threshold.
    probs = {"unsafe_compliance": 0.8, "unsafe_compliance_a": 0.4, "unsafe_compliance_b": 0.4}
    d = decide(_r(**probs), UNSAFE, OVER, Thresholds())
    assert d.action == "allow"
    assert d.strongest_unsafe == ("unsafe_compliance_a", 0.4)


def test_reason_names_rule_and_threshold():
    d = decide(_r(unsafe_compliance_b=0.73), UNSAFE, OVER, Thresholds(unsafe=0.3))
    assert "unsafe_compliance_b" in d.reason and "0.730" in d.reason and "0.30" in d.reason


def test_tunable_thresholds_change_decision():
    r = _r(unsafe_compliance_a=0.35)
    assert decide(r, UNSAFE, OVER, Thresholds(unsafe=0.5)).action == "allow"
    assert decide(r, UNSAFE, OVER, Thresholds(unsafe=0.3)).action == "refuse"


def test_an_over_refusal_threshold_that_is_off_never_rewrites():
    th = Thresholds(over_refusal=None)
    d = decide(_r(unsafe_compliance_a=0.1, over_refusal_x=1.0), UNSAFE, OVER, th)
    assert d.action == "allow"
    assert d.strongest_over_refusal == ("over_refusal_x", 1.0)  # still computed and traced
    assert "over-refusal threshold off" in d.reason
    # safety first is unchanged
    assert decide(_r(unsafe_compliance_a=0.6), UNSAFE, OVER, th).action == "refuse"
    # a config turns it off with null (an override of None means "not given")
    from plguard.config import NULL, GuardConfig

    assert GuardConfig.from_dict({"thresholds": {"over_refusal": None}}
                                 ).thresholds.over_refusal is None
    assert GuardConfig.from_dict({}, **{"thresholds.over_refusal": None}
                                 ).thresholds.over_refusal == 0.5
    assert GuardConfig.from_dict({}, **{"thresholds.over_refusal": NULL}
                                 ).thresholds.over_refusal is None


def test_set_null_on_the_command_line_sets_null():
    import argparse

    from plguard.cli import config_from_args

    args = argparse.Namespace(set=["thresholds.over_refusal=null"], config=None)
    assert config_from_args(args).thresholds.over_refusal is None
    # an empty value is a mistake (an unset shell variable), not a request for null
    from plguard.errors import PlguardError

    with pytest.raises(PlguardError, match="empty value.*grounding.calibration=null"):
        config_from_args(argparse.Namespace(set=["grounding.calibration="], config=None))


CONTENT = ("unsafe_content_a", "unsafe_content_b")


@pytest.mark.parametrize(
    ("probs", "action"),
    [
        # harmful content after an innocent request: refused whatever the request
        ({"unsafe_compliance_a": 0.0, "unsafe_content_b": 0.7}, "refuse"),
        ({"unsafe_content_a": 0.6, "over_refusal_x": 0.9}, "refuse"),  # before over-refusal
        ({"unsafe_content_a": 0.59, "over_refusal_x": 0.9}, "rewrite"),  # below its own
        ({"unsafe_content_a": 0.59}, "allow"),
        # its threshold is its own: 0.55 passes content 0.6 though unsafe is 0.5
        ({"unsafe_content_b": 0.55}, "allow"),
    ],
)
def test_content_rules_have_their_own_threshold(probs, action):
    d = decide(_r(**probs), UNSAFE, OVER, Thresholds(content=0.6), content_rules=CONTENT)
    assert d.action == action


def test_content_decision_traces_its_rule_and_categories():
    tags = {"unsafe_compliance_a": ("S1",), "unsafe_content_b": ("S9",)}
    th = Thresholds(unsafe=0.5, content=0.7)
    d = decide(_r(unsafe_compliance_a=0.6, unsafe_content_b=0.65), UNSAFE, OVER, th, tags,
               content_rules=CONTENT)
    # S1's rule is at the unsafe threshold; S9's content rule is not at the content one
    assert d.action == "refuse" and d.categories == ("S1",)
    assert d.category_scores == {"S1": 0.6, "S9": 0.65}
    d = decide(_r(unsafe_compliance_a=0.1, unsafe_content_b=0.8), UNSAFE, OVER, th, tags,
               content_rules=CONTENT)
    assert d.action == "refuse" and d.categories == ("S9",)
    assert d.strongest_content == ("unsafe_content_b", 0.8)
    assert d.strongest_unsafe == ("unsafe_compliance_a", 0.1)
    assert "unsafe-content rule unsafe_content_b = 0.800 >= content threshold 0.70" in d.reason


def test_a_request_alone_has_no_content_to_judge():
    from plguard.decide import decide_for
    from plguard.policy import load_policy

    policy = load_policy("minimal")
    assert policy.content_rules == ("unsafe_content_actionable_harm",)
    r = policy.evaluate({"request_is_harmful": 0.0, "request_is_benign_sensitive_context": 0.9,
                         "response_provides_harmful_instructions": 0.95,
                         "response_refuses": 0.0})
    answered = decide_for(policy, r, Thresholds())
    assert answered.action == "refuse"
    assert answered.strongest_content == ("unsafe_content_actionable_harm", pytest.approx(0.95))
    alone = decide_for(policy, r, Thresholds(), answered=False)
    assert alone.action == "allow" and alone.strongest_content == ("", 0.0)


# -- every rule an input: how the text was read, the moderation threshold, the array form ----

def _minimal():
    from plguard.policy import load_policy

    return load_policy("minimal")


HARMLESS = {"request_is_harmful": 0.1, "request_is_benign_sensitive_context": 0.1,
            "response_provides_harmful_instructions": 0.05, "response_refuses": 0.05}


@pytest.mark.parametrize(("screen", "unseen", "action", "note"), [
    ("refuse", "prior", "refuse", "(grounding.screen = refuse): refuse"),
    ("sanitize", "prior", "allow", "[text addressed to the guard (self_answer) was removed"),
    ("sanitize", "refuse", "refuse", "(grounding.unseen = refuse): refuse"),
])
def test_how_the_text_was_read_is_an_input(screen, unseen, action, note):
    from plguard.decide import Reading, ReadRules, decide_for

    policy = _minimal()
    r = policy.evaluate(HARMLESS)
    plain = decide_for(policy, r, Thresholds())
    assert plain.action == "allow" and "[" not in plain.reason
    reading = Reading(("self_answer",), unseen=unseen == "refuse")
    d = decide_for(policy, r, Thresholds(), reading=reading, rules=ReadRules(screen, unseen))
    assert d.action == action and note in d.reason
    # the scores are the rules' whatever the reading did to the action
    assert d.strongest_unsafe == plain.strongest_unsafe


def test_read_rules_default_to_the_config():
    from plguard.config import GroundingConfig
    from plguard.decide import DEFAULT_READ_RULES, ReadRules

    assert DEFAULT_READ_RULES == ReadRules.of(GroundingConfig())


def test_a_request_alone_is_decided_at_the_moderation_threshold():
    from plguard.decide import decide_for

    policy = _minimal()
    r = policy.evaluate({**HARMLESS, "request_is_harmful": 0.9,
                         "response_provides_harmful_instructions": 0.45})
    th = Thresholds(unsafe=0.5, moderation=0.3)
    assert decide_for(policy, r, th).action == "allow"  # an answer: the unsafe threshold
    alone = decide_for(policy, r, th, answered=False)
    assert alone.action == "refuse" and "moderation threshold 0.30" in alone.reason


@pytest.mark.parametrize("th", [Thresholds(unsafe=0.4, over_refusal=0.6, content=0.7),
                                Thresholds(unsafe=0.0, over_refusal=None, content=1.0),
                                Thresholds(unsafe=1.0, over_refusal=0.0, content=0.0)])
def test_decide_array_is_decide(th):
    import numpy as np

    from plguard.decide import ACTIONS, decide_array

    rng = np.random.default_rng(3)
    p = rng.random((200, 5))
    p[:60] = (p[:60] > 0.5).astype(float)  # exact ties with the thresholds 0 and 1
    content = ("unsafe_content_c",)
    codes = decide_array(p[:, :2].max(axis=1), p[:, 2:4].max(axis=1), th.unsafe,
                         th.over_refusal_at, p[:, 4], th.content)
    for i, row in enumerate(p):
        probs = dict(zip((*UNSAFE, *OVER, *content), row.tolist(), strict=True))
        d = decide(_r(**probs), UNSAFE, OVER, th, content_rules=content)
        assert ACTIONS[codes[i]] == d.action
    # No rule of a kind never fires, even at a threshold of 0, as decide's empty rule lists.
    none = decide_array(None, None, 0.0, 0.0, None, 0.0)
    assert ACTIONS[int(none)] == decide(_r(), (), (), Thresholds(unsafe=0.0, over_refusal=0.0,
                                                                content=0.0)).action == "allow"
    # Thresholds broadcast against items: a (2 thresholds, 200 items) grid.
    grid = decide_array(p[:, 0][None, :], None, np.array([[0.0], [1.1]]), 0.5)
    assert grid.shape == (2, 200) and set(grid[0]) == {1} and set(grid[1]) == {0}
