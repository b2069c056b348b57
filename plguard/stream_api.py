"""What a guarded stream yields and what it needs of its guard (plguard.streaming).

The records a client reads (:class:`StreamChunk`, :class:`StreamEnd`), the names of a
stream's modes and endings, a draft source's shape, and :class:`StreamGuard`, the part of
the Guard's public seam a stream uses: a protocol, not the Guard itself, so the streaming
module does not import the Guard (which imports it for ``Guard.stream``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from plguard.backends.base import Backend
from plguard.conversation import Conversation
from plguard.judging import Bound, Request
from plguard.types import (
    Assessment,
    Decision,
    GenerationParams,
    GuardResult,
    PolicyResult,
    Repair,
)

if TYPE_CHECKING:
    from plguard.config import GuardConfig, Thresholds
    from plguard.policy import Policy

StreamMode = Literal["buffered", "audit"]
FinishReason = Literal["stop", "length", "content_filter"]
#: A draft source in place of the generator: ``source(cancel)`` yields text deltas.
DraftSource = Callable[[threading.Event], Iterator[str]]


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """Text released to the client; ``t`` is ``time.perf_counter()`` when it was released."""

    text: str
    t: float


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The end of a stream: its full trace, and how it finished.

    ``blocked``: the draft was refused (a window, the request or the final check) or the
    guard failed closed; ``finish_reason`` is then ``content_filter``, else ``stop`` or
    ``length`` (the draft ran out of ``max_new_tokens``).
    """

    result: GuardResult
    blocked: bool
    finish_reason: FinishReason


StreamEvent = StreamChunk | StreamEnd


class StreamGuard(Protocol):
    """What a stream needs of its guard: :class:`plguard.Guard`'s judging seam.

    A protocol, not the Guard itself, so this module does not import the Guard (which
    imports it for ``Guard.stream``): the layers stay one-way.
    """

    @property
    def config(self) -> GuardConfig:
        """The guard's config (``stream``, ``repair.fallback_refusal``, ``grounding``)."""
        ...

    @property
    def policy(self) -> Policy:
        """The compiled policy the guard decides by."""
        ...

    @property
    def thresholds(self) -> Thresholds:
        """The thresholds in force (calibrated ones included)."""
        ...

    @property
    def generator(self) -> Backend:
        """The backend that drafts."""
        ...

    @property
    def grounder_backend(self) -> Backend:
        """The backend that grounds (its tokens size the windows)."""
        ...

    @property
    def grounder_lock(self) -> AbstractContextManager[object]:
        """Held while the grounder works: it serves one thread at a time."""
        ...

    def assess(self, pairs: Sequence[tuple[Request, str]], *,
               bound: Bound = "answer") -> list[Assessment]:
        """Each pair through the one check pipeline (:func:`plguard.judging.judge`)."""
        ...

    def conversation(self, messages: Any) -> Conversation:
        """The chat as its request predicates read it (plguard.conversation)."""
        ...

    def repair(self, request: Request, answer: str, decision: Decision, result: PolicyResult,
               params: GenerationParams | None = None) -> Repair:
        """The repair loop on one answer that was not allowed."""
        ...


__all__ = ["DraftSource", "FinishReason", "StreamChunk", "StreamEnd", "StreamEvent",
           "StreamGuard", "StreamMode"]
