"""What-if: re-evaluate the compiled policy for edited predicate probabilities.

:func:`what_if` returns every rule's probability and the decision under the run's
thresholds, computed exactly as the Guard does (``Policy.evaluate`` then
:func:`plguard.decide.decide_for`, with how the record's text was read: text addressed to
the guard, a middle never read), and :func:`flips`, the smallest change of one predicate
that changes the decision (none, when how the text was read refuses it whatever the rules
say).

How the flip is found, and why it is exact: a ProbLog query's probability is a weighted
model count, which is multilinear in the probabilities of independent facts; every
predicate is such a fact, so with the others held fixed each rule's probability is affine
in the one predicate's value ``v``: ``r(v) = r(0) + v * (r(1) - r(0))``. A rule therefore
crosses its threshold at most once in [0, 1], at ``(t - r(0)) / (r(1) - r(0))``, and the
decision (a function of which rules reach their thresholds) is constant between those
crossings. The nearest flip on each side of the current value lies at, or just past, one of
them; each candidate is confirmed by exact evaluation, nudged by a few ulps-worth when
rounding puts it a hair on the wrong side of an inclusive threshold.

The affine property is checked per predicate (at two interior points). Should it ever fail,
for a policy object whose evaluation is not a plain weighted model count, that predicate
falls back to a grid scan refined by bisection, and the answer is marked approximate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from plguard.config import Thresholds
from plguard.decide import DEFAULT_READ_RULES, READ_WHOLE, Reading, ReadRules, decide_for
from plguard.errors import InputError
from plguard.types import Decision, PolicyResult

_AFFINE_TOL = 1e-9
_NUDGES = (0.0, 1e-12, 1e-10, 1e-8)  # past an inclusive threshold that rounding missed
_GRID = 257
_BISECT_STEPS = 60


class PolicyLike(Protocol):
    """What the what-if panel needs of a policy (:class:`plguard.policy.Policy` has it)."""

    @property
    def predicate_names(self) -> tuple[str, ...]:
        """Declared predicates, in order."""
        ...

    queries: tuple[str, ...]
    unsafe_rules: tuple[str, ...]
    over_refusal_rules: tuple[str, ...]
    content_rules: tuple[str, ...]
    categories: dict[str, tuple[str, ...]]

    def evaluate(self, probs: Mapping[str, float]) -> PolicyResult:
        """Every query's probability for one example."""
        ...

    def evaluate_matrix(self, matrix: np.ndarray, names: Sequence[str]
                        ) -> dict[str, np.ndarray]:
        """Every query's probability for each row."""
        ...


@dataclass(frozen=True, slots=True)
class Flip:
    """One predicate's nearest value that changes the decision."""

    predicate: str
    old: float
    new: float
    action: str  # the decision's action at ``new``
    exact: bool  # False: found by grid + bisection (a policy that is not affine)

    @property
    def delta(self) -> float:
        """``new - old``."""
        return self.new - self.old

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"predicate": self.predicate, "old": self.old, "new": self.new,
                "delta": self.delta, "action": self.action, "exact": self.exact}


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The policy's answer for one set of predicate probabilities."""

    probs: dict[str, float]
    result: PolicyResult
    decision: Decision
    flips: tuple[Flip, ...]  # one per predicate that can flip the decision, nearest first

    @property
    def smallest(self) -> Flip | None:
        """The smallest single-predicate change that flips the decision (None: none does)."""
        return self.flips[0] if self.flips else None

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        d = self.decision
        return {"probs": self.probs, "rules": dict(self.result.probs),
                "policy": self.result.policy,
                "decision": {"action": d.action, "reason": d.reason,
                             "strongest_unsafe": list(d.strongest_unsafe),
                             "strongest_over_refusal": list(d.strongest_over_refusal)},
                "smallest_flip": self.smallest.as_dict() if self.smallest else None,
                "flips": [f.as_dict() for f in self.flips]}


def check_probs(policy: PolicyLike, probs: Mapping[str, Any]) -> dict[str, float]:
    """Every declared predicate's probability as a float in [0, 1].

    Raises:
        InputError: a predicate is missing, unknown, not a number or out of range.
    """
    names = policy.predicate_names
    unknown = sorted(set(probs) - set(names))
    if unknown:
        raise InputError(f"unknown predicate(s) {', '.join(unknown)}; this policy has "
                         f"{', '.join(names)}")
    out: dict[str, float] = {}
    for n in names:
        if n not in probs:
            raise InputError(f"missing probability for predicate '{n}'")
        v = probs[n]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise InputError(f"probability of '{n}' must be a number, got {v!r}")
        if not 0.0 <= float(v) <= 1.0:
            raise InputError(f"probability of '{n}' must be in [0, 1], got {v!r}")
        out[n] = float(v)
    return out


def decision_for(policy: PolicyLike, result: PolicyResult, thresholds: Thresholds, *,
                 reading: Reading = READ_WHOLE, rules: ReadRules = DEFAULT_READ_RULES) -> Decision:
    """The Guard's decision for a policy result (the same pure function it calls).

    ``reading``: how the record's text was read; ``rules``: the run's ``grounding.screen``
    and ``grounding.unseen``.
    """
    return decide_for(policy, result, thresholds, reading=reading, rules=rules)


def what_if(policy: PolicyLike, probs: Mapping[str, Any], thresholds: Thresholds, *,
            reading: Reading = READ_WHOLE, rules: ReadRules = DEFAULT_READ_RULES) -> WhatIf:
    """Rule probabilities, decision and single-predicate flips for ``probs``."""
    p = check_probs(policy, probs)
    result = policy.evaluate(p)
    decision = decision_for(policy, result, thresholds, reading=reading, rules=rules)
    return WhatIf(p, result, decision, flips(policy, p, thresholds, decision.action,
                                             reading=reading, rules=rules))


def flips(policy: PolicyLike, probs: Mapping[str, float], thresholds: Thresholds,
          action: str | None = None, *, reading: Reading = READ_WHOLE,
          rules: ReadRules = DEFAULT_READ_RULES) -> tuple[Flip, ...]:
    """For each predicate, the nearest value that changes the decision; nearest first.

    Args:
        policy: the compiled policy.
        probs: every predicate's current probability.
        thresholds: the decision thresholds.
        action: the current decision's action, when already known.
        reading: how the record's text was read.
        rules: what the run does with how a text was read (``grounding.screen``, ``.unseen``).

    Returns:
        One :class:`Flip` per predicate whose change alone can flip the decision, sorted by
        ``|delta|`` (ties in predicate order); empty when no single change flips it.
    """
    names = list(policy.predicate_names)
    base = np.array([probs[n] for n in names], dtype=np.float64)

    def judge(result: PolicyResult) -> str:
        return decision_for(policy, result, thresholds, reading=reading, rules=rules).action

    if action is None:
        action = judge(policy.evaluate(dict(zip(names, base.tolist(), strict=True))))
    compared = [*policy.unsafe_rules, *policy.content_rules, *policy.over_refusal_rules]
    limit = {r: thresholds.unsafe for r in policy.unsafe_rules}
    limit.update({r: thresholds.content for r in policy.content_rules})
    # An over-refusal threshold that is off (infinite) gives no candidate value.
    limit.update({r: thresholds.over_refusal_at for r in policy.over_refusal_rules})
    probes = (0.0, 1.0, 0.5, 0.3819660112501051)
    rows = np.repeat(base[None, :], len(names) * len(probes), axis=0)
    for i in range(len(names)):
        rows[i * len(probes):(i + 1) * len(probes), i] = probes
    out = policy.evaluate_matrix(rows, names) if compared else {}
    found: list[Flip] = []
    for i in range(len(names)):
        at = {r: out[r][i * len(probes):(i + 1) * len(probes)] for r in compared}
        affine = all(abs(v[2 + k] - (v[0] + probes[2 + k] * (v[1] - v[0]))) <= _AFFINE_TOL
                     for v in at.values() for k in range(2))
        if affine:
            cands = [float((limit[r] - v[0]) / (v[1] - v[0])) for r, v in at.items()
                     if v[1] != v[0]]
            flip = _nearest_exact(policy, names, base, i, action, judge,
                                  [c for c in cands if -1e-12 <= c <= 1 + 1e-12])
        else:
            flip = _nearest_scan(policy, names, base, i, action, judge)
        if flip is not None:
            found.append(flip)
    order = {n: k for k, n in enumerate(names)}
    return tuple(sorted(found, key=lambda f: (abs(f.delta), order[f.predicate])))


Judge = Callable[[PolicyResult], str]  # a policy result's action, the record's way


def _action_at(policy: PolicyLike, names: Sequence[str], base: np.ndarray, i: int, v: float,
               judge: Judge) -> str:
    p = dict(zip(names, base.tolist(), strict=True))
    p[names[i]] = v
    return judge(policy.evaluate(p))


def _nearest_exact(policy: PolicyLike, names: Sequence[str], base: np.ndarray, i: int,
                   action: str, judge: Judge, cands: Sequence[float]) -> Flip | None:
    v0 = float(base[i])
    best: Flip | None = None
    for side in (-1.0, 1.0):
        ahead = sorted((min(1.0, max(0.0, c)) for c in cands if (c - v0) * side >= 0),
                       key=lambda c: abs(c - v0))
        for c in ahead:
            if best is not None and abs(c - v0) > abs(best.delta):
                break
            hit = _confirm(policy, names, base, i, c, side, action, judge)
            if hit is not None:
                if best is None or abs(hit[0] - v0) < abs(best.delta):
                    best = Flip(names[i], v0, hit[0], hit[1], True)
                break
    return best


def _confirm(policy: PolicyLike, names: Sequence[str], base: np.ndarray, i: int, c: float,
             side: float, action: str, judge: Judge) -> tuple[float, str] | None:
    """The first point at or just beyond ``c`` (away from the start) with another action."""
    for eps in _NUDGES:
        v = min(1.0, max(0.0, c + side * eps))
        act = _action_at(policy, names, base, i, v, judge)
        if act != action:
            return v, act
    return None


def _nearest_scan(policy: PolicyLike, names: Sequence[str], base: np.ndarray, i: int,
                  action: str, judge: Judge) -> Flip | None:
    """Grid scan plus bisection, for a predicate along which rules are not affine."""
    v0 = float(base[i])
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, _GRID), [v0]]))
    acts = [_action_at(policy, names, base, i, float(v), judge) for v in grid]
    k0 = int(np.searchsorted(grid, v0))
    best: Flip | None = None
    for step in (-1, 1):
        k = k0
        while 0 <= k + step < len(grid) and acts[k + step] == action:
            k += step
        if not 0 <= k + step < len(grid):
            continue
        lo, hi = float(grid[k]), float(grid[k + step])  # lo keeps the action, hi does not
        for _ in range(_BISECT_STEPS):
            mid = (lo + hi) / 2
            if _action_at(policy, names, base, i, mid, judge) == action:
                lo = mid
            else:
                hi = mid
        flip = Flip(names[i], v0, hi, _action_at(policy, names, base, i, hi, judge), False)
        if best is None or abs(flip.delta) < abs(best.delta):
            best = flip
    return best


__all__ = ["Flip", "PolicyLike", "WhatIf", "check_probs", "decision_for", "flips", "what_if"]
