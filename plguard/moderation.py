"""Moderation: judge texts or conversations without generating anything.

:func:`moderate` is what ``Guard.moderate``, ``plguard moderate`` and the server's
``POST /v1/moderations`` run. Each input is either

- a text (or a conversation whose last turn is not the assistant's): a request with no
  answer. Only the request-scope predicates are grounded, and each unsafe rule is scored
  for the *worst answer*: its highest probability over every true/false assignment of the
  response-scope predicates (:func:`worst_case`, :func:`plguard.policy.bounds`' highest).
  A request is flagged when some answer to it would be unsafe compliance at the moderation
  threshold (``thresholds.moderation``, else the unsafe one), which is what the request-side
  predicates of a policy measure; over-refusal needs an answer, so it is not scored.
- a conversation whose last turn is the assistant's: that answer to the last user message is
  grounded and decided as ``Guard.check`` does, without repairing it.

Exhaustive over the response predicates because a rule's probability is multilinear in
each independent predicate's probability: its maximum over the unit cube lies at a vertex,
so the vertices give the exact worst case, for any program (negations included).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from plguard.calibration import platt
from plguard.errors import InputError
from plguard.messages import check_text, request_text, to_chat
from plguard.policy.bounds import MAX_FREE_PREDICATES, bounds, free_predicates
from plguard.policy.core import UNSAFE, rule_kind
from plguard.types import Decision, Grounding, PolicyResult, Scope

if TYPE_CHECKING:
    from plguard.grounding import Grounder
    from plguard.policy import Policy


class ModerationGuard(Protocol):
    """What moderation needs of its guard: part of :class:`plguard.Guard`'s judging seam.

    A protocol, not the Guard itself, so this module does not import the Guard (which
    imports it for ``Guard.moderate``): the layers stay one-way.
    """

    @property
    def policy(self) -> Policy:
        """The compiled policy the guard decides by."""
        ...

    @property
    def grounder(self) -> Grounder:
        """The grounder; ``Guard.moderate`` holds its lock around :func:`moderate`."""
        ...

    def decide(self, result: PolicyResult, grounding: Grounding, *,
               answered: bool = True) -> Decision:
        """The decision on one grounded item, as Guard.check makes it."""
        ...


@dataclass(frozen=True, slots=True)
class Moderation:
    """The verdict on one moderated input.

    ``scope`` is ``"request"`` when no answer was judged (``response`` None; the policy
    result then holds the unsafe queries only, each at its worst-answer probability) and
    ``"response"`` when the input ended with the assistant answer that was judged.
    ``flagged``: the decision refuses (an unsafe rule, hence its categories, at threshold).
    """

    request: str
    response: str | None
    scope: Scope
    flagged: bool
    grounding: Grounding
    policy: PolicyResult
    decision: Decision
    timings_s: Mapping[str, float] = field(default_factory=dict)
    #: The request predicates' P the worst case was scored with, where the calibration's
    #: moderation maps changed them from the grounding's (``Calibration.moderation``).
    mapped: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Item:
    request: str
    response: str | None


def parse_inputs(inputs: Any) -> list[_Item]:
    """The request (and answer, if any) of each input; InputError names a bad one.

    ``inputs``: one text, or a list whose items are each a text or a conversation (a list
    of ``{"role", "content"}`` messages).
    """
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, Sequence) or isinstance(inputs, bytes):
        raise InputError(f"inputs: expected a text or a list of texts and conversations, "
                         f"got {type(inputs).__name__}")
    if not inputs:
        raise InputError("inputs: nothing to moderate; give at least one text")
    out = []
    for i, x in enumerate(inputs):
        where = f"inputs[{i}]"
        if isinstance(x, str):
            # An empty text is judged like any other (OpenAI's API answers it too).
            out.append(_Item(check_text(x, where), None))
            continue
        chat = to_chat(x, where)
        if chat[-1].role == "assistant":
            out.append(_Item(request_text(chat[:-1]), chat[-1].content))
        else:
            out.append(_Item(request_text(chat), None))
    return out


def moderate(guard: ModerationGuard, inputs: Any) -> list[Moderation]:
    """Judge each input (see the module docstring); nothing is generated or repaired."""
    items = parse_inputs(inputs)
    policy = guard.policy
    asked = [i for i, it in enumerate(items) if it.response is None]
    answered = [i for i, it in enumerate(items) if it.response is not None]
    if asked:
        check_request_side(policy)
    groundings: list[Grounding | None] = [None] * len(items)
    results: list[PolicyResult | None] = [None] * len(items)
    spent: dict[int, dict[str, float]] = {i: {} for i in range(len(items))}

    def timed(phase: str, idx: list[int], fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        for i in idx:
            spent[i][phase] = (time.perf_counter() - t0) / len(idx)
        return out

    grounder = guard.grounder
    cal = getattr(grounder, "calibration_file", None)
    maps: Mapping[str, tuple[float, float]] = cal.moderation if cal is not None else {}
    if asked:
        gs = timed("ground", asked, lambda: grounder.ground(
            [(items[i].request, "") for i in asked], response=False))
        rs = timed("reason", asked, lambda: worst_case(policy, gs, maps))
        for i, g, r in zip(asked, gs, rs, strict=True):
            groundings[i], results[i] = g, r
    if answered:
        gs = timed("ground", answered, lambda: grounder.ground(
            [(items[i].request, items[i].response or "") for i in answered]))
        rs = timed("reason", answered, lambda: policy.evaluate_batch([g.probs for g in gs]))
        for i, g, r in zip(answered, gs, rs, strict=True):
            groundings[i], results[i] = g, r
    out = []
    for i, it in enumerate(items):
        g, r = groundings[i], results[i]
        assert g is not None and r is not None
        scope: Scope = "request" if it.response is None else "response"
        d = _decision(guard, r, g, scope)
        timings = dict(spent[i])
        timings["total"] = sum(timings.values())
        mapped = mapped_probs(g.probs, maps) if scope == "request" else {}
        out.append(Moderation(request=it.request, response=it.response, scope=scope,
                              flagged=d.action == "refuse", grounding=g, policy=r,
                              decision=d, timings_s=timings, mapped=mapped))
    return out


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


def mapped_probs(probs: Mapping[str, float], maps: Mapping[str, tuple[float, float]]
                 ) -> dict[str, float]:
    """The predicates of ``probs`` that ``maps`` has, through their Platt maps."""
    return {n: platt(probs[n], *ab) for n, ab in maps.items() if n in probs}


def _decision(guard: ModerationGuard, result: PolicyResult, grounding: Grounding,
              scope: Scope) -> Decision:
    # An answer is judged exactly as Guard.check judges it; a request has no over-refusal.
    return guard.decide(result, grounding, answered=scope == "response")


def category_key(name: str) -> str:
    """A category name as an API key: ``Suicide & Self-Harm`` is ``suicide_and_self_harm``."""
    words = name.lower().replace("&", " and ").replace("-", " ").replace("/", " ").split()
    return "_".join(words)


__all__ = ["MAX_FREE_PREDICATES", "Moderation", "ModerationGuard", "category_key",
           "check_request_side", "mapped_probs", "moderate", "parse_inputs", "worst_case"]
