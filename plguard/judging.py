"""The one check pipeline: ground -> reason -> decide, with each phase timed.

Every judgement plguard makes goes through :func:`judge`: ``Guard.check`` and ``Guard.chat``
(drafts and repairs), moderation (``Guard.moderate``, ``/v1/moderations``) and streams (the
request check before any text, every window, the final check). What differs between them is
only the *bound* an item is judged at:

- ``answer``: a request and its answer, grounded together, every rule evaluated and decided
  as ``Guard.check`` decides (over-refusal and content rules included);
- ``worst``: a request with no answer (a moderation): its request-scope predicates grounded,
  each unsafe rule at its highest value over every answer (:func:`worst_case`), decided at
  the moderation threshold;
- ``best``: a request before its answer exists (a stream's request check): each unsafe rule
  at its lowest value over every answer (:func:`best_case`), decided at the unsafe threshold
  (a best case is on an answer's scale, not a worst case's), so a refusal here means every
  answer would be refused.
- ``window``: a part of an answer still being written (a stream's windows before the
  end): decided as ``answer`` on the unsafe and content rules only. Over-refusal is not
  decided on a partial answer (a polite opening reads like a refusal), so the response
  predicates that only over-refusal rules read are not grounded (:func:`window_skip`; for
  the shipped bundles the refusal, read from the pair prompt: most of a window's cost)
  and every over-refusal rule reads 0 there.

Exhaustive over the response predicates because a rule's probability is multilinear in each
independent predicate's probability: its extremes over the unit cube lie at vertices, so the
vertices give the exact worst and best cases, for any program (negations included).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import numpy as np

from plguard.calibration import platt
from plguard.config import Thresholds
from plguard.conversation import Conversation
from plguard.decide import DEFAULT_READ_RULES, Reading, ReadRules, decide_for
from plguard.errors import InputError
from plguard.policy.bounds import MAX_FREE_PREDICATES, bounds, free_predicates
from plguard.policy.core import UNSAFE, rule_kind
from plguard.types import Assessment, Decision, Grounding, PolicyResult

if TYPE_CHECKING:
    from plguard.grounding import Grounder
    from plguard.policy import Policy

T = TypeVar("T")
Bound = Literal["answer", "worst", "best", "window"]
BOUNDS: tuple[Bound, ...] = ("answer", "worst", "best", "window")

#: A backend's running token counts (remote servers report what each call cost).
Usage = Callable[[], dict[str, int]]
USAGE_KEYS = ("prompt_tokens", "completion_tokens")


class Clock:
    """Per-phase wall time, shared evenly by the examples of a batched call.

    With ``usage`` (backends that report the tokens a call cost, i.e. remote servers), the
    tokens of each phase are shared out the same way, as ``<phase>_prompt_tokens`` and
    ``<phase>_completion_tokens``.
    """

    def __init__(self, n: int, usage: Usage | None = None) -> None:
        self.per_example: list[dict[str, float]] = [{} for _ in range(n)]
        self.usage = usage

    def run(self, phase: str, idx: Sequence[int], fn: Callable[[], T]) -> T:
        """``fn()``, its time (and tokens) added to ``phase`` of each example in ``idx``."""
        u0 = self.usage() if self.usage else {}
        t0 = time.perf_counter()
        out = fn()
        n = max(len(idx), 1)
        share = (time.perf_counter() - t0) / n
        spent = {}
        if self.usage:
            u1 = self.usage()
            spent = {f"{phase}_{k}": (u1.get(k, 0) - u0.get(k, 0)) / n for k in USAGE_KEYS}
        for i in idx:
            ex = self.per_example[i]
            ex[phase] = ex.get(phase, 0.0) + share
            for k, v in spent.items():
                if v:
                    ex[k] = ex.get(k, 0.0) + v
        return out


class SubClock(Clock):
    """Maps a sub-batch's phases onto the parent clock under a prefix (repair_ground...)."""

    def __init__(self, parent: Clock, idx: Sequence[int], prefix: str) -> None:
        self.parent, self.idx, self.prefix = parent, list(idx), prefix

    def run(self, phase: str, idx: Sequence[int], fn: Callable[[], T]) -> T:
        """The parent's :meth:`Clock.run`, on the parent's examples, under the prefix."""
        return self.parent.run(self.prefix + phase, [self.idx[k] for k in idx], fn)


def is_time_key(key: str) -> bool:
    """Whether a ``timings_s`` key holds seconds (not a token count)."""
    return not key.endswith(tuple(f"_{k}" for k in USAGE_KEYS))


@dataclass(frozen=True)
class Judge:
    """What the pipeline judges with: one Guard's grounder, policy, thresholds and rules.

    ``maps``: the calibration's moderation maps (Platt ``(a, b)`` per request predicate),
    applied to a ``worst`` bound only. ``lock``: held while the grounder works (it serves
    one thread at a time: its request memo, its cache).
    """

    grounder: Grounder
    policy: Policy
    thresholds: Thresholds
    rules: ReadRules = DEFAULT_READ_RULES
    maps: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    lock: AbstractContextManager[object] = field(default_factory=nullcontext)


Request = str | Conversation


class JudgingGuard(Protocol):
    """The part of :class:`plguard.Guard`'s seam that moderation and streams both use.

    A protocol, not the Guard itself, so the modules below the Guard do not import it
    (the Guard imports them): the layers stay one-way. :class:`plguard.moderation.
    ModerationGuard` and :class:`plguard.stream_api.StreamGuard` extend it.
    """

    @property
    def policy(self) -> Policy:
        """The compiled policy the guard decides by."""
        ...

    def assess(self, pairs: Sequence[tuple[Request, str]], *,
               bound: Bound = "answer") -> list[Assessment]:
        """Each pair through the one check pipeline (:func:`judge`)."""
        ...

    def conversation(self, messages: Any) -> Conversation:
        """The chat as its request predicates read it (plguard.conversation)."""
        ...


def judge(j: Judge, pairs: Sequence[tuple[Request, str]], *, bound: Bound = "answer",
          clock: Clock | None = None) -> list[Assessment]:
    """Each ``(request, answer)`` grounded, reasoned and decided at ``bound``.

    A request is a text or a :class:`~plguard.conversation.Conversation`, whose request
    predicates keep their highest probability over its readings (see :func:`ground`).
    For ``worst`` and ``best`` the answers are ignored (the request is judged over every
    answer). Nothing is generated. ``clock`` (one example per pair) gets the ``ground``,
    ``reason`` and ``decide`` phases; each Assessment carries its own share.
    """
    if bound not in BOUNDS:
        raise InputError(f"bound: expected one of {', '.join(BOUNDS)}, got {bound!r}")
    clock = clock or Clock(len(pairs))
    idx = list(range(len(pairs)))
    if not pairs:
        return []
    answered = bound in ("answer", "window")
    if bound == "worst":  # a stream's best case falls back to its first window instead
        check_request_side(j.policy)
    skip = window_skip(j.policy) if bound == "window" else frozenset()
    with j.lock:
        gs = clock.run("ground", idx, lambda: ground(j.grounder, pairs, response=answered,
                                                     skip=skip))
    rs = clock.run("reason", idx, lambda: _reason(j, gs, bound))
    ds = clock.run("decide", idx, lambda: [decision(j, r, g, bound)
                                           for r, g in zip(rs, gs, strict=True)])
    per = getattr(clock, "per_example", None)
    return [Assessment(grounding=g, policy=r, decision=d,
                       timings_s=dict(per[i]) if per is not None else {})
            for i, (g, r, d) in enumerate(zip(gs, rs, ds, strict=True))]


def ground(grounder: Grounder, pairs: Sequence[tuple[Request, str]], *,
           response: bool = True, skip: frozenset[str] = frozenset()) -> list[Grounding]:
    """The ground phase: every pair read, a conversation's request side on each reading.

    A conversation's ``text`` is grounded with the answer; its other readings (the user
    turns alone, the latest user message: plguard.conversation) get the request-scope
    predicates too, and each predicate keeps its highest probability, so what else the
    conversation says can raise a request reading, never lower it.
    """
    texts = [(q.text if isinstance(q, Conversation) else q, a if response else "")
             for q, a in pairs]
    gs = grounder.ground(texts, response=response, skip=skip)
    more = [(k, r) for k, (q, _) in enumerate(pairs) if isinstance(q, Conversation)
            for r in q.readings[1:]]
    if more:
        alone = grounder.ground([(r, "") for _, r in more], response=False)
        for (k, _), g in zip(more, alone, strict=True):
            gs[k] = _higher(gs[k], g)
    for k, (q, _) in enumerate(pairs):
        if isinstance(q, Conversation) and q.dropped:
            gs[k] = replace(gs[k], dropped_turns=q.dropped)
    return gs


def _higher(whole: Grounding, latest: Grounding) -> Grounding:
    """``whole`` with each request-scope score replaced by ``latest``'s where that is higher."""
    by_name = {s.name: s for s in latest.scores if s.scope == "request"}
    scores = tuple(by_name[s.name] if s.name in by_name and by_name[s.name].p_true > s.p_true
                   else s for s in whole.scores)
    screen = whole.screen + tuple(f for f in latest.screen if f not in whole.screen)
    return replace(whole, scores=scores, screen=screen)


def decision(j: Judge, result: PolicyResult, grounding: Grounding,
             bound: Bound = "answer") -> Decision:
    """The decide phase on one grounded, reasoned item (:func:`plguard.decide.decide_for`).

    ``answer``: as ``Guard.check``; ``worst``: the unsafe side at the moderation threshold;
    ``best``: the unsafe side at the unsafe threshold.
    """
    th = j.thresholds
    if bound == "best":
        th = th.model_copy(update={"moderation": None})
    return decide_for(j.policy, result, th, answered=bound in ("answer", "window"),
                      reading=Reading.of(grounding), rules=j.rules)


def _reason(j: Judge, gs: Sequence[Grounding], bound: Bound) -> list[PolicyResult]:
    if bound == "answer":
        return j.policy.evaluate_batch([g.probs for g in gs])
    if bound == "window":
        return window_results(j.policy, gs)
    if bound == "worst":
        return worst_case(j.policy, gs, j.maps)
    return [PolicyResult(j.policy.id, best_case(j.policy, g)) for g in gs]


def gate(j: Judge, request: Grounding, scores: Mapping[str, float]) -> Assessment:
    """A stream's token check: may text go out ahead of its window? (plguard.token_check).

    ``request``: the request's grounding (its request-scope scores); ``scores``: response
    predicates read on the newest tokens. Every unsafe and unsafe-content rule is taken at
    its highest value over the other response predicates (every true/false setting), and
    decided as an answer; over-refusal is not judged here (it needs the whole answer).
    """
    policy = j.policy
    probs = {**request.probs, **scores}
    names = [n for n in policy.predicate_names if n in probs]
    free = [n for n in free_predicates(policy) if n not in scores]
    rules = _deciding_rules(policy)
    high = bounds(policy, np.array([[probs[n] for n in names]]), names, rules, free=free).high
    result = PolicyResult(policy.id, {q: 0.0 for q in policy.queries}
                          | {q: float(high[q][0]) for q in rules})
    return Assessment(grounding=request, policy=result,
                      decision=decision(j, result, request, "answer"))


def _deciding_rules(policy: Policy) -> list[str]:
    """The queries a partial answer is decided on: the unsafe and content rules."""
    return [q for q in policy.queries if q == UNSAFE or rule_kind(q) in ("unsafe", "content")]


def window_skip(policy: Policy) -> frozenset[str]:
    """The predicates that no unsafe or content rule reads (a window need not ground them)."""
    needed = set().union(*(policy.compiled.support(q) for q in _deciding_rules(policy)))
    return frozenset(policy.predicate_names) - needed


def window_results(policy: Policy, gs: Sequence[Grounding]) -> list[PolicyResult]:
    """The ``window`` bound: unsafe and content rules exactly, over-refusal rules at 0.

    A predicate left unread (:func:`window_skip`) is outside every unsafe and content
    rule's support, so any value gives those rules their exact probability; 0 is used.
    """
    rules = set(_deciding_rules(policy))
    names = policy.predicate_names
    out = policy.evaluate_batch([{n: 0.0 for n in names} | g.probs for g in gs])
    return [replace(r, probs={q: (p if q in rules else 0.0) for q, p in r.probs.items()})
            for r in out]


def check_request_side(policy: Policy) -> None:
    """InputError unless ``policy`` can judge a request with no answer."""
    if not any(p.scope == "request" for p in policy.predicates):
        raise InputError(f"policy {policy.name} has no request-scope predicate, so it cannot "
                         "judge a text without an answer; pass a conversation that ends "
                         "with the assistant's answer, or use a policy with request "
                         "predicates")
    free = len(free_predicates(policy))
    if free > MAX_FREE_PREDICATES:
        raise InputError(f"policy {policy.name} has {free} response-scope predicates; a "
                         f"request alone is scored over every answer for at most "
                         f"{MAX_FREE_PREDICATES}")


def worst_case(policy: Policy, groundings: Sequence[Grounding],
               maps: Mapping[str, tuple[float, float]] | None = None) -> list[PolicyResult]:
    """Each unsafe query's probability for the worst answer, from request-side groundings.

    ``groundings`` hold (at least) every request-scope predicate; the response-scope ones
    are set to each true/false assignment in turn and every unsafe query keeps its highest
    probability. The result holds the unsafe rules and the unsafe aggregate only.
    ``maps``: Platt ``(a, b)`` per request predicate, applied first (a calibration's
    moderation maps: a category whose zero-shot reading carries no information reads at
    its base rate instead of setting a floor under every text's score).
    """
    names = list(policy.predicate_names)
    free = set(free_predicates(policy))
    fixed = [n for n in names if n not in free]
    keep = [q for q in policy.queries if q == UNSAFE or rule_kind(q) == "unsafe"]
    rows = []
    for g in groundings:
        probs = g.probs
        missing = [n for n in fixed if n not in probs]
        if missing:
            raise InputError(f"no grounded probability for request predicate "
                             f"'{missing[0]}'")
        probs = {**probs, **mapped_probs(probs, maps or {})}
        rows.append([probs[n] for n in fixed])
    worst = bounds(policy, np.array(rows, dtype=np.float64).reshape(-1, len(fixed)), fixed,
                   keep).high
    return [PolicyResult(policy=policy.id, probs={q: float(worst[q][i]) for q in keep})
            for i in range(len(groundings))]


def best_case(policy: Policy, grounding: Grounding) -> dict[str, float]:
    """Each unsafe rule's lowest probability over every answer, from request-side scores.

    :func:`plguard.policy.bounds`' lowest value (an unscored request predicate counts as 0).
    Empty when the policy has more free predicates than it bounds: a stream then waits for
    the first window instead.
    """
    if len(free_predicates(policy)) > MAX_FREE_PREDICATES:
        return {}
    probs = grounding.probs
    free = set(free_predicates(policy))
    names = [n for n in policy.predicate_names if n not in free]
    low = bounds(policy, np.array([[probs.get(n, 0.0) for n in names]]), names,
                 list(policy.unsafe_rules)).low
    return {r: float(v[0]) for r, v in low.items()}


def mapped_probs(probs: Mapping[str, float], maps: Mapping[str, tuple[float, float]]
                 ) -> dict[str, float]:
    """The predicates of ``probs`` that ``maps`` has, through their Platt maps."""
    return {n: platt(probs[n], *ab) for n, ab in maps.items() if n in probs}


__all__ = ["BOUNDS", "USAGE_KEYS", "Bound", "Clock", "Judge", "JudgingGuard", "Request",
           "SubClock", "Usage", "best_case", "check_request_side", "decision", "gate",
           "ground", "is_time_key", "judge", "mapped_probs", "worst_case"]
