"""The conversation is the request: what request predicates read of a whole chat.

A chat of one user message is read as that message, unchanged (so ordinary traffic keeps
its prompts, caches and heads). Any other chat is read on its *asking side*: the system
prompt and every user turn, each a paragraph of its own, in order. Request predicates read
several texts of it and keep, per predicate, the highest probability:

- ``asked``: every user turn, joined (an ask split over turns is whole here);
- the latest user message alone (what the answer answers);
- the system prompt before ``asked``, where there is one.

So what else a conversation says (a permissive or adversarial system prompt, friendly
earlier turns) can add evidence of harm but never argue a reading down. The assistant's
turns are not part of the request: they were judged as answers when they were sent.

Why this reading and not a transcript with role labels or the chat template (measured on
275 dev requests split over 2-3 turns, the embedded model's request heads, minimal;
``scripts/results/conversation_readings.py``, eval/results/conversation): with role labels
the heads flag 98% of the benign conversations, with the chat template (its markers inside
the pooled span) 86%; the user turns joined read like the ask in one turn (AUROC 0.80 vs
0.83); the assistant's turns as plain paragraphs take that to 0.76; a benign system prompt
in front of the ask dilutes it (63% of harmful asks flagged, 90% without), hence the
highest of the readings. As shipped, an ask split over turns is flagged as often as in one
turn (116 of 129 both), at a cost: 49% of the benign ones flagged against 43%.

A token budget (``grounding.conversation_tokens``) keeps the system prompt, the first user
turn and the most recent user turns; turns dropped from the middle leave a line ``...`` and
their indices (into the chat's messages) are in the trace (``Grounding.dropped_turns``).
Text addressed to the guard is screened out of every reading by the grounder, as from any
request (plguard.screen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from plguard.types import Chat

GAP = "..."  # where user turns were dropped for the budget


@dataclass(frozen=True, slots=True)
class Conversation:
    """A chat as its request predicates read it.

    ``text``: the request as pair predicates, repairs and the trace see it (the system
    prompt and the user turns; the latest user message alone for a chat of one).
    ``readings``: every text the request predicates read, ``text`` first; each predicate
    keeps its highest probability over them. ``dropped``: indices (into the chat's
    messages) of user turns left out for the budget.
    """

    text: str
    readings: tuple[str, ...]
    dropped: tuple[int, ...] = ()

    @classmethod
    def of_text(cls, text: str) -> Conversation:
        """A request given as one text."""
        return cls(text, (text,))


def latest_user(chat: Chat) -> str:
    """The latest user message (what the answer answers)."""
    return next(m.content for m in reversed(chat) if m.role == "user")


def read_conversation(chat: Chat, count_tokens: Callable[[str], int],
                      budget: int) -> Conversation:
    """``chat`` (up to its latest user message) as its request predicates read it.

    Turns after the latest user message (an answer being judged) are not part of the
    request. Past ``budget`` tokens, user turns are dropped from the middle: the system
    prompt, the first and the latest user turn always stay, then the most recent turns
    that fit. What still exceeds the budget is cut later, head and tail kept, like any
    long request (flagged in the trace).
    """
    last = max(i for i, m in enumerate(chat) if m.role == "user")
    latest = chat[last].content
    system = [m.content for m in chat[:last] if m.role == "system"]
    users = [i for i, m in enumerate(chat[:last + 1]) if m.role == "user"]
    if len(users) == 1 and not system:
        return Conversation.of_text(latest)
    cost = {i: count_tokens(chat[i].content) + 2 for i in users}
    keep = {users[0], last}
    used = sum(count_tokens(s) + 2 for s in system) + sum(cost[i] for i in keep)
    for i in reversed(users[1:-1]):  # the most recent turns first
        if used + cost[i] > budget:
            break
        keep.add(i)
        used += cost[i]
    dropped = tuple(i for i in users if i not in keep)
    parts: list[str] = []
    for i in users:
        if i in keep:
            parts.append(chat[i].content)
        elif not parts or parts[-1] != GAP:
            parts.append(GAP)
    asked = "\n\n".join(parts)
    text = "\n\n".join([*system, asked])
    readings = tuple(dict.fromkeys((text, asked, latest)))  # distinct, text first
    return Conversation(text, readings, dropped)


__all__ = ["GAP", "Conversation", "latest_user", "read_conversation"]
