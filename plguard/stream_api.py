"""What a guarded stream yields and what it needs of its guard (plguard.streaming).

The records a client reads (:class:`StreamChunk`, :class:`StreamEnd`), the names of a
stream's modes and endings, a draft source's shape, and :class:`StreamGuard`, the part of
the Guard's public seam a stream uses: a protocol, not the Guard itself, so the streaming
module does not import the Guard (which imports it for ``Guard.stream``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from plguard.backends.base import Backend
from plguard.judging import JudgingGuard, Request
from plguard.types import (
    Assessment,
    Decision,
    GenerationParams,
    Grounding,
    GuardResult,
    PolicyResult,
    Repair,
)

if TYPE_CHECKING:
    from plguard.config import GuardConfig, Thresholds
    from plguard.token_check import TokenMeter

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


class StreamGuard(JudgingGuard, Protocol):
    """What a stream needs of its guard: the judging seam, backends, lock, gate, repair."""

    @property
    def config(self) -> GuardConfig:
        """The guard's config (``stream``, ``repair.fallback_refusal``, ``grounding``)."""
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

    def token_meter(self) -> TokenMeter | None:
        """A per-token content meter for one stream, or None (plguard.token_check)."""
        ...

    def gate(self, request: Grounding, scores: Mapping[str, float]) -> Assessment:
        """The token check's decision (plguard.judging.gate)."""
        ...

    def repair(self, request: Request, answer: str, decision: Decision, result: PolicyResult,
               params: GenerationParams | None = None) -> Repair:
        """The repair loop on one answer that was not allowed."""
        ...



class OpenStream(Protocol):
    """A stream being consumed: its events, and a thread-safe cancel (GuardedStream)."""

    def __iter__(self) -> Iterator[StreamEvent]: ...  # noqa: D105

    def cancel(self) -> None:
        """Stop generating and end the stream at its next step."""
        ...


async def astream(stream: OpenStream) -> AsyncGenerator[StreamEvent, None]:
    """``stream``'s events for asyncio: the sync machinery runs in a thread.

    Leaving early (``aclose``, a cancelled task, a client that disconnects) cancels the
    stream and so the generation.
    """
    loop = asyncio.get_running_loop()
    out: asyncio.Queue[StreamEvent | BaseException | None] = asyncio.Queue()

    def put(item: StreamEvent | BaseException | None) -> None:
        try:
            loop.call_soon_threadsafe(out.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            stream.cancel()

    def run() -> None:
        try:
            for event in stream:
                put(event)
        except BaseException as exc:  # handed to the awaiting side
            put(exc)
        finally:
            put(None)

    worker = threading.Thread(target=run, daemon=True, name="plguard-stream")
    worker.start()
    try:
        while (item := await out.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stream.cancel()


__all__ = ["DraftSource", "FinishReason", "OpenStream", "StreamChunk", "StreamEnd",
           "StreamEvent", "StreamGuard", "StreamMode", "astream"]
