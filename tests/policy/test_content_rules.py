"""Every bundle judges an answer's content alone, whatever the request (issue 42)."""

import pytest

from plguard.policy import CONTENT, bundle_names, load_policy, rule_kind


@pytest.mark.parametrize("name", bundle_names())
def test_every_bundle_has_content_rules_that_read_the_answer_alone(name):
    policy = load_policy(name)
    assert policy.content_rules, f"{name} has no {CONTENT}_* rule"
    response = {p.name for p in policy.predicates if p.scope == "response"}
    for rule in policy.content_rules:
        support = policy.compiled.support(rule)
        assert support and support <= response, (rule, support - response)
        # all requests' readings at their extremes give the same probability
        probs = {p.name: 0.9 if p.scope == "response" else 0.0 for p in policy.predicates}
        low = policy.evaluate(probs).probs[rule]
        probs.update({p.name: 1.0 for p in policy.predicates if p.scope == "request"})
        assert policy.evaluate(probs).probs[rule] == pytest.approx(low) and low > 0


@pytest.mark.parametrize("name", bundle_names())
def test_content_rules_are_not_unsafe_compliance_rules(name):
    policy = load_policy(name)
    assert not set(policy.content_rules) & set(policy.unsafe_rules)
    assert all(rule_kind(r) == "content" for r in policy.content_rules)


def test_content_categories_tag_families():
    hazards = load_policy("hazards")
    assert hazards.categories["unsafe_content_weapons"] == ("S1", "S9")
    assert hazards.categories["unsafe_content_child_sexual_exploitation"] == ("S4",)
    assert "unsafe_content_actionable_harm" not in hazards.categories  # names no family
