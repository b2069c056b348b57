"""Dynamic batching: concurrent requests share one ``guard.batch`` call.

Requests wait in a queue; the first one of a batch waits at most ``max_wait_ms`` for others
to join, up to ``max_batch_size``. The batch then goes to ``Guard.batch`` in one worker
thread, so it costs one generation call and one grounding call however many requests it
holds, and the event loop stays free to accept more requests (which form the next batch
while this one runs). One worker thread, not a pool: the model backends are not written to
be called from several threads at once, and batching is where the throughput comes from.
"""

from __future__ import annotations

import asyncio
import collections
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from plguard.types import Chat, GenerationParams, GuardResult

if TYPE_CHECKING:
    from plguard.guard import Guard


@dataclass(frozen=True, slots=True)
class GenKey:
    """Decoding settings a batch shares: requests that differ go to separate calls."""

    max_new_tokens: int
    temperature: float


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One request's result and how it was served."""

    result: GuardResult
    batch_size: int
    queue_s: float
    prompt_tokens: int
    completion_tokens: int


class GuardUnavailable(Exception):
    """The Guard raised while serving a batch; every request of that batch gets this."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        text = str(cause)
        if len(text) > 300:
            text = text[:300] + "..."
        super().__init__(f"the guard backend failed: {type(cause).__name__}: {text}")


@dataclass(slots=True)
class _Item:
    chat: Chat
    response: str | None
    key: GenKey
    future: asyncio.Future[BatchOutcome]
    t_enqueued: float = field(default_factory=time.perf_counter)


@dataclass(slots=True)
class BatchStats:
    """Counters for /health, tests and the load script."""

    batches: int = 0
    requests: int = 0
    failed_batches: int = 0
    sizes: list[int] = field(default_factory=list)


class DynamicBatcher:
    """Gathers concurrent requests into ``Guard.batch`` calls."""

    def __init__(self, guard: Guard, *, max_batch_size: int, max_wait_ms: float) -> None:
        self.guard = guard
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self.stats = BatchStats()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plguard-guard")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: collections.deque[_Item] = collections.deque()
        self._wakeup = asyncio.Event()

    async def submit(self, chat: Chat, key: GenKey, response: str | None = None) -> BatchOutcome:
        """Queue one request (``response`` given: check it instead of drafting) and await it.

        Raises:
            GuardUnavailable: the Guard failed on the batch this request was part of.
        """
        self._ensure_worker()
        loop = asyncio.get_running_loop()
        item = _Item(chat, response, key, loop.create_future())
        self._pending.append(item)
        self._wakeup.set()
        return await item.future

    async def aclose(self) -> None:
        """Stop the worker; a batch already in the thread finishes there."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    # The worker ---------------------------------------------------------------------------
    def _ensure_worker(self) -> None:
        # Started lazily on the loop that serves requests: ASGI test transports run no
        # lifespan events, and each test may bring its own event loop.
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._task is not None and not self._task.done():
            return
        self._loop = loop
        self._pending = collections.deque()
        self._wakeup = asyncio.Event()
        self._task = loop.create_task(self._run(), name="plguard-batcher")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            deadline = loop.time() + self.max_wait_s
            while len(self._pending) < self.max_batch_size:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except asyncio.TimeoutError:  # not the builtin before Python 3.11
                    break
            batch: list[_Item] = []
            while self._pending and len(batch) < self.max_batch_size:
                item = self._pending.popleft()
                if not item.future.done():  # a client that went away is not served
                    batch.append(item)
            if batch:
                await self._dispatch(batch)

    async def _dispatch(self, batch: list[_Item]) -> None:
        groups: dict[GenKey, list[_Item]] = {}
        for item in batch:
            groups.setdefault(item.key, []).append(item)
        loop = asyncio.get_running_loop()
        for key, items in groups.items():
            self.stats.batches += 1
            self.stats.requests += len(items)
            self.stats.sizes.append(len(items))
            t_start = time.perf_counter()
            try:
                outcomes = await loop.run_in_executor(self._executor, self._call, key, items)
            except Exception as exc:
                self.stats.failed_batches += 1
                failure = GuardUnavailable(exc)
                for item in items:
                    if not item.future.done():
                        item.future.set_exception(failure)
                continue
            for item, outcome in zip(items, outcomes, strict=True):
                if not item.future.done():
                    queue_s = t_start - item.t_enqueued
                    item.future.set_result(_with_queue(outcome, queue_s))

    def _call(self, key: GenKey, items: list[_Item]) -> list[BatchOutcome]:
        guard = self.guard
        responses = [it.response for it in items]
        params = GenerationParams(max_new_tokens=key.max_new_tokens, temperature=key.temperature)
        results = guard.batch([it.chat for it in items],
                              responses if any(r is not None for r in responses) else None,
                              params)
        backend = guard.generator
        out = []
        for it, res in zip(items, results, strict=True):
            # Counted here, in the worker thread, so tokenising never blocks the loop.
            n_prompt = backend.count_tokens(backend.format_chat(it.chat))
            n_new = backend.count_tokens(res.final)
            out.append(BatchOutcome(res, len(items), 0.0, n_prompt, n_new))
        return out


def _with_queue(o: BatchOutcome, queue_s: float) -> BatchOutcome:
    return BatchOutcome(o.result, o.batch_size, queue_s, o.prompt_tokens, o.completion_tokens)
