"""Worst- and best-case rule probabilities over every answer, from request-side scores.

A request judged before (or without) its answer leaves the response-scope predicates free.
A rule's probability is multilinear in each independent predicate's probability, so over
the unit cube of the free ones it reaches its extremes at vertices: setting them to every
true/false assignment in turn gives the exact lowest and highest value, for any program
(negations included). Moderation flags a request by the highest (some answer would be
unsafe), a stream refuses before any text by the lowest (every answer would be), and the
hazards study scores categories by the highest, batched.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from plguard.errors import InputError

if TYPE_CHECKING:
    from plguard.policy.core import Policy

#: Most free (response-scope) predicates bounded: 2**N policy rows per item (4,096 of
#: very_detailed's 12 take ~35 ms).
MAX_FREE_PREDICATES = 16
#: Rows of one policy evaluation (items x assignments), so a long batch stays in memory.
ROWS_PER_BLOCK = 4096


def free_predicates(policy: Policy) -> list[str]:
    """The predicates an answer sets: the response-scope ones, in policy order."""
    return [p.name for p in policy.predicates if p.scope == "response"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """Each rule's lowest and highest probability over every answer, one value per item."""

    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]


def bounds(policy: Policy, rows: np.ndarray, names: Sequence[str],
           rules: Sequence[str], free: Sequence[str] | None = None) -> Bounds:
    """Each of ``rules`` at its best and worst answer, per row of request-side scores.

    ``rows``: ``[n, len(names)]``, the probabilities of the predicates ``names`` (the
    request-scope ones a rule reads; any other fixed predicate counts as 0). The free
    predicates are set to every true/false assignment; a value in ``rows`` for one of them
    is ignored. ``free``: which predicates are free (default: every response-scope one);
    a response predicate read some other way (a stream's token check) is then given.

    Raises:
        InputError: the policy has more free predicates than :data:`MAX_FREE_PREDICATES`.
    """
    all_names = list(policy.predicate_names)
    free_idx = [all_names.index(n) for n in (free_predicates(policy) if free is None
                                               else free)]
    if len(free_idx) > MAX_FREE_PREDICATES:
        raise InputError(f"policy {policy.name} has {len(free_idx)} response-scope predicates; "
                         f"a request alone is bounded over every answer for at most "
                         f"{MAX_FREE_PREDICATES}")
    given = [all_names.index(n) for n in names]
    verts = np.array(list(itertools.product((0.0, 1.0), repeat=len(free_idx))),
                     dtype=np.float64).reshape(-1, len(free_idx))
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(names))
    n = len(rows)
    low = {q: np.empty(n) for q in rules}
    high = {q: np.empty(n) for q in rules}
    per = max(1, ROWS_PER_BLOCK // len(verts))
    for start in range(0, n, per):
        block = rows[start:start + per]
        m = np.zeros((len(block) * len(verts), len(all_names)))
        m[:, given] = np.repeat(block, len(verts), axis=0)
        m[:, free_idx] = np.tile(verts, (len(block), 1))  # after: a free column in names is set
        values = policy.evaluate_matrix(m, all_names)
        for q in rules:
            v = values[q].reshape(len(block), len(verts))
            low[q][start:start + len(block)] = v.min(axis=1)
            high[q][start:start + len(block)] = v.max(axis=1)
    return Bounds(low, high)


__all__ = ["MAX_FREE_PREDICATES", "ROWS_PER_BLOCK", "Bounds", "bounds", "free_predicates"]
