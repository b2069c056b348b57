"""``stream: true`` on ``/v1/chat/completions``: the guarded stream as server-sent events.

The events are those of :class:`plguard.streaming.GuardedStream` (text released only once
its window is allowed, see that module), written the way OpenAI streams a chat completion,
and the stream is valid whatever happens:

1. a role chunk (``delta: {"role": "assistant", "content": ""}``), sent at once;
2. one content chunk per released piece of text;
3. one final chunk with the ``finish_reason`` (exactly one in the stream) and the guard's
   trace (``plguard``). On a block it carries the refusal as its delta and
   ``finish_reason: "content_filter"``; text sent before the block stays sent (it was
   allowed when it left);
4. a usage chunk (``choices: []``) when ``stream_options.include_usage`` asks for it;
5. ``data: [DONE]``, and nothing after it.

A client that disconnects cancels generation (the guard's worker threads stop, the
backend's request is aborted or its connection closed). An error after the answer has
started (the guard failing, the upstream breaking off) fails closed: the stream ends with
the refusal and ``content_filter`` instead of breaking. Errors found before the first byte
(bad input, an unreachable upstream) are ordinary error answers, as without streaming.

In upstream mode the draft is the upstream's own stream (``stream: true`` there), read
in the guard's draft thread, so its first tokens are checked while the rest is generated.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from fastapi.responses import StreamingResponse

from plguard.server.errors import ApiError
from plguard.server.schemas import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    Delta,
    FinishReason,
    Mode,
    PlguardInfo,
    RuleScore,
    Usage,
)
from plguard.server.upstream import UpstreamError, upstream_tokens
from plguard.types import Chat, GenerationParams

if TYPE_CHECKING:
    from fastapi import Request

    from plguard.guard import Guard
    from plguard.server.batching import GenKey
    from plguard.streaming import GuardedStream, StreamEnd

log = logging.getLogger(__name__)

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def include_usage(body: ChatCompletionRequest) -> bool:
    """Whether ``stream_options.include_usage`` asks for the usage chunk (422 if malformed)."""
    opts = (body.model_extra or {}).get("stream_options")
    if opts is None:
        return False
    value = opts.get("include_usage", False) if isinstance(opts, dict) else None
    if not isinstance(value, bool):
        raise ApiError(422, "stream_options must be an object whose include_usage is a "
                       "boolean", param="stream_options", code="invalid_value")
    return value


async def stream_completion(request: Request, body: ChatCompletionRequest, chat: Chat,
                            key: GenKey) -> StreamingResponse:
    """The guarded stream of one chat completion (see the module docstring)."""
    state = request.app.state
    usage = include_usage(body)
    params = GenerationParams(max_new_tokens=key.max_new_tokens, temperature=key.temperature)
    source = None
    mode: Mode = "local"
    if state.upstream is not None:
        try:  # connected and answering before the 200 goes out: a failure is still a 502
            source = await state.upstream.open_stream(
                body.model, [m.as_dict() for m in body.messages],
                upstream_tokens(body.requested_tokens, state.settings), key.temperature)
        except UpstreamError as exc:
            raise ApiError(502, str(exc), type="upstream_error", code=exc.code) from None
        mode = "upstream"
    stream = state.guard.stream(chat, params=params, source=source)
    events = _Events(stream, state.guard, chat, body.model, mode, usage)
    return StreamingResponse(events.sse(request.receive), media_type="text/event-stream",
                             headers=_HEADERS)


class _Events:
    """One stream's server-sent events; its state is its own."""

    def __init__(self, stream: GuardedStream, guard: Guard, chat: Chat, model: str,
                 mode: Mode, usage: bool) -> None:
        self.stream, self.guard, self.chat, self.mode, self.usage = (stream, guard, chat,
                                                                     mode, usage)
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.fallback = guard.config.repair.fallback_refusal
        self.sent = ""

    def _chunk(self, choices: list[ChunkChoice], *, info: PlguardInfo | None = None,
               usage: Usage | None = None) -> str:
        c = ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                choices=choices, plguard=info, usage=usage)
        data = c.model_dump(mode="json", exclude_none=True)
        for ch in data["choices"]:
            ch.setdefault("finish_reason", None)
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

    def _delta(self, text: str, finish: FinishReason | None = None,
               info: PlguardInfo | None = None) -> str:
        self.sent += text
        return self._chunk([ChunkChoice(delta=Delta(content=text), finish_reason=finish)],
                           info=info)

    async def sse(self, receive: Callable[[], Any]) -> AsyncIterator[str]:
        watcher = asyncio.create_task(self._watch(receive))
        try:
            async for event in self._events():
                yield event
        finally:
            watcher.cancel()
            self.stream.cancel()  # a no-op after a normal end; a disconnect stops it all

    async def _watch(self, receive: Callable[[], Any]) -> None:
        # Starlette notices a gone client only at the next write, and a held-back window
        # may not write for a while: generation is cancelled as soon as the client goes.
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                self.stream.cancel()
                return

    async def _events(self) -> AsyncIterator[str]:
        from plguard.streaming import StreamChunk, StreamEnd, astream

        yield self._chunk([ChunkChoice(delta=Delta(role="assistant", content=""))])
        held = ""  # a piece ending in the refusal: it goes out with the finish_reason
        end: StreamEnd | None = None
        why = "the stream ended without a decision"
        try:
            async with aclosing(astream(self.stream)) as events:
                async for event in events:
                    if isinstance(event, StreamEnd):
                        end = event
                        break
                    if held:
                        yield self._delta(held)
                        held = ""
                    assert isinstance(event, StreamChunk)
                    if event.text.endswith(self.fallback):
                        held = event.text
                    else:
                        yield self._delta(event.text)
        except Exception as exc:  # fail closed below; the stream itself stays valid
            why = f"the stream failed: {type(exc).__name__}: {exc}"
            log.exception("guarded stream failed; ending it with the refusal")
        if end is None:
            sep = "\n\n" if (self.sent + held) and not (self.sent + held)[-1].isspace() else ""
            tail = held + (sep + self.fallback if not held.endswith(self.fallback) else "")
            yield self._delta(tail, "content_filter", self._failed_info(why))
        else:
            yield self._delta(held, end.finish_reason, self._info(end))
        if self.usage:
            yield self._chunk([], usage=await asyncio.to_thread(self._usage))
        yield "data: [DONE]\n\n"

    def _info(self, end: StreamEnd) -> PlguardInfo:
        from plguard.server.batching import BatchOutcome, GenKey
        from plguard.server.completion import build_completion

        # The non-streaming answer's trace, built by the same code.
        outcome = BatchOutcome(end.result, 1, 0.0, 0, 0)
        c = build_completion(self.model, outcome, GenKey(1, 0.0), self.mode, {})
        return c.plguard

    def _failed_info(self, why: str) -> PlguardInfo:
        none = RuleScore(rule="", p=0.0)
        return PlguardInfo(action="refuse", reason=f"{why}: the stream fails closed with the "
                           "refusal", repaired=False, fallback_used=True,
                           strongest_unsafe=none, strongest_over_refusal=none,
                           predicates={}, rules={}, policy=self.guard.policy.id,
                           grounding_model=self.guard.grounder_backend.model_id,
                           input_truncated=False, mode=self.mode, batch_size=1,
                           timings_s={})

    def _usage(self) -> Usage:
        backend = self.guard.generator
        n_prompt = backend.count_tokens(backend.format_chat(self.chat))
        n_new = backend.count_tokens(self.sent)
        return Usage(prompt_tokens=n_prompt, completion_tokens=n_new,
                     total_tokens=n_prompt + n_new)


__all__ = ["include_usage", "stream_completion"]
