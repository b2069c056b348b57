"""plguard.policy.bounds: each rule's lowest and highest value over every answer."""

from __future__ import annotations

import numpy as np
import pytest

from plguard.errors import InputError
from plguard.policy import MAX_FREE_PREDICATES, bounds, free_predicates, load_policy


@pytest.mark.parametrize("name", ["minimal", "detailed"])
def test_bounds_hold_every_answer_and_are_reached(name):
    policy = load_policy(name)
    names = list(policy.predicate_names)
    free = free_predicates(policy)
    fixed = [n for n in names if n not in free]
    rng = np.random.default_rng(5)
    rows = rng.random((7, len(fixed)))
    rules = [*policy.unsafe_rules, *policy.over_refusal_rules]
    b = bounds(policy, rows, fixed, rules)
    for i, row in enumerate(rows):
        # Answers anywhere in the cube stay within the bounds...
        m = np.zeros((300, len(names)))
        m[:, [names.index(n) for n in fixed]] = row
        m[:, [names.index(n) for n in free]] = rng.random((300, len(free)))
        m[:2, [names.index(n) for n in free]] = [[0.0] * len(free), [1.0] * len(free)]
        values = policy.evaluate_matrix(m, names)
        for q in rules:
            assert b.low[q][i] - 1e-12 <= values[q].min()
            assert values[q].max() <= b.high[q][i] + 1e-12
            assert b.low[q][i] <= b.high[q][i]
    # ...and rows bounded together or one at a time agree to the bit.
    one_by_one = [bounds(policy, r[None, :], fixed, rules) for r in rows]
    for q in rules:
        assert np.allclose(b.high[q], [x.high[q][0] for x in one_by_one], atol=0, rtol=0)


def test_too_many_free_predicates_is_refused():
    class Wide:
        name = "wide"
        predicates = [type("P", (), {"name": f"r{i}", "scope": "response"})()
                      for i in range(MAX_FREE_PREDICATES + 1)]
        predicate_names = tuple(p.name for p in predicates)

    with pytest.raises(InputError, match="at most 16"):
        bounds(Wide(), np.zeros((1, 0)), [], [])  # type: ignore[arg-type]
