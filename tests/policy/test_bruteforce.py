"""Compiled-once probabilities equal an independent possible-world enumeration."""

from __future__ import annotations

import numpy as np
import pytest

from plguard.policy import load_policy

from .brute import brute_probability, bundle_rules
from .testlib import BUNDLES

MAX_FREE = 16  # enumerate at most 2^16 worlds per check; condition on the rest


def _weights(rng, names):
    p = rng.uniform(0.0, 1.0, size=len(names))
    p[rng.random(len(names)) < 0.1] = rng.integers(0, 2)  # some exact 0/1 values too
    return dict(zip(names, p.tolist(), strict=True))


def test_every_bundle_is_covered():
    assert {"minimal", "moderate", "detailed", "very_detailed"} <= set(BUNDLES)


@pytest.mark.parametrize("name", BUNDLES)
def test_compiled_matches_brute_force(name):
    policy = load_policy(name)
    rs, names = bundle_rules(policy.path)
    assert names == list(policy.predicate_names)
    assert rs.queries == list(policy.queries)
    rng = np.random.default_rng(20240531)
    checked = 0
    for _ in range(4):
        probs = _weights(rng, names)
        for query in policy.queries:
            support = sorted(rs.support(query))
            conditioned = dict(probs)
            free = support
            if len(support) > MAX_FREE:
                # Too many worlds: fix a random subset at 0/1 in both paths and enumerate the rest.
                fixed = rng.choice(support, size=len(support) - MAX_FREE, replace=False)
                for f in fixed:
                    conditioned[str(f)] = float(rng.integers(0, 2))
                free = [f for f in support if f not in set(fixed)]
            expected = brute_probability(rs, query, conditioned, free)
            got = policy.evaluate_problog(conditioned).probs[query]
            assert got == pytest.approx(expected, abs=1e-9), (query, conditioned)
            got = policy.evaluate(conditioned).probs[query]
            assert got == pytest.approx(expected, abs=1e-9), (query, conditioned)
            matrix = np.array([[conditioned[n] for n in names]])
            fast = policy.evaluate_matrix(matrix, names)[query][0]
            assert fast == pytest.approx(expected, abs=1e-9), query
            checked += 1
    assert checked == 4 * len(policy.queries)


def test_brute_force_reference_can_fail():
    """The reference is not vacuous: it tells a conjunction from a disjunction."""
    from .brute import RuleSet

    rs = RuleSet("a :- p, q.\nb :- p ; q.\nquery(a).\nquery(b).\n")
    probs = {"p": 0.3, "q": 0.6}
    assert brute_probability(rs, "a", probs, ["p", "q"]) == pytest.approx(0.18)
    assert brute_probability(rs, "b", probs, ["p", "q"]) == pytest.approx(0.72)
