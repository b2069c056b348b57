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

Both go through the one check pipeline (:mod:`plguard.judging`, bounds ``worst`` and
``answer``), through the Guard's :meth:`~plguard.Guard.assess`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from plguard.errors import InputError
from plguard.judging import (
    Bound,
    JudgingGuard,
    check_request_side,
    is_time_key,
    mapped_probs,
    worst_case,
)
from plguard.messages import check_text, to_chat
from plguard.policy.bounds import MAX_FREE_PREDICATES
from plguard.types import Assessment, Chat, Decision, Grounding, Message, PolicyResult, Scope

if TYPE_CHECKING:
    from plguard.judging import Judge


class ModerationGuard(JudgingGuard, Protocol):
    """What moderation needs of its guard: the judging seam, and its calibration's maps."""

    @property
    def judge(self) -> Judge:
        """What the check pipeline judges with (its calibration's moderation maps)."""
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
    chat: Chat  # up to the latest user message, or a text as one user message
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
            out.append(_Item((Message("user", check_text(x, where)),), None))
            continue
        chat = to_chat(x, where)
        if chat[-1].role == "assistant":
            out.append(_Item(chat[:-1], chat[-1].content))
        else:
            out.append(_Item(chat, None))
    return out


def moderate(guard: ModerationGuard, inputs: Any) -> list[Moderation]:
    """Judge each input (see the module docstring); nothing is generated or repaired."""
    items = parse_inputs(inputs)
    asked = [i for i, it in enumerate(items) if it.response is None]
    answered = [i for i, it in enumerate(items) if it.response is not None]
    if asked:
        check_request_side(guard.policy)  # before any model work
    convs = [guard.conversation(it.chat) for it in items]
    judged: dict[int, Assessment] = {}
    plan: tuple[tuple[list[int], Bound], ...] = ((asked, "worst"), (answered, "answer"))
    for idx, bound in plan:
        if idx:
            out = guard.assess([(convs[i], items[i].response or "") for i in idx],
                               bound=bound)
            judged.update(zip(idx, out, strict=True))
    maps = guard.judge.maps
    moderations = []
    for i, it in enumerate(items):
        a = judged[i]
        scope: Scope = "request" if it.response is None else "response"
        timings = dict(a.timings_s)
        timings["total"] = sum(v for k, v in timings.items() if is_time_key(k))
        mapped = mapped_probs(a.grounding.probs, maps) if scope == "request" else {}
        moderations.append(Moderation(
            request=convs[i].text, response=it.response, scope=scope,
            flagged=a.decision.action == "refuse", grounding=a.grounding, policy=a.policy,
            decision=a.decision, timings_s=timings, mapped=mapped))
    return moderations


def category_key(name: str) -> str:
    """A category name as an API key: ``Suicide & Self-Harm`` is ``suicide_and_self_harm``."""
    words = name.lower().replace("&", " and ").replace("-", " ").replace("/", " ").split()
    return "_".join(words)


__all__ = ["MAX_FREE_PREDICATES", "Moderation", "ModerationGuard", "category_key",
           "check_request_side", "mapped_probs", "moderate", "parse_inputs", "worst_case"]
