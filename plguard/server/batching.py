"""Dynamic batching: concurrent requests share one ``guard.batch`` call.

Requests wait in a queue; the first one of a batch waits at most ``max_wait_ms`` for others
to join, up to ``max_batch_size``. The batch then goes to ``Guard.batch`` in one worker
thread, so it costs one generation call and one grounding call however many requests it
holds, and the event loop stays free to accept more requests (which form the next batch
while this one runs). One worker thread, not a pool: the model backends are not written to
be called from several threads at once, and batching is where the throughput comes from.

A batch that fails is retried request by request, so one request that breaks the Guard
fails alone and the others of its batch are still answered. A failure is either an outage
(:class:`GuardUnavailable`: a backend error or running out of memory, 503, worth a retry)
or a bug (:class:`GuardFailed`, 500); both are logged with their traceback under
``plguard.server.batching``, and the client is told only the exception's type and message.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from plguard.errors import BackendDeadError, BackendError
from plguard.types import Chat, GenerationParams, GuardResult

if TYPE_CHECKING:
    from plguard.guard import Guard

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Batch sizes kept for /health and the load script: the most recent ones only.
RECENT_SIZES = 1024


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


class GuardError(Exception):
    """The Guard raised while serving a request."""

    def __init__(self, cause: BaseException, incident: str) -> None:
        self.cause = cause
        self.incident = incident
        text = str(cause)
        if len(text) > 300:
            text = text[:300] + "..."
        super().__init__(f"{self.summary}: {type(cause).__name__}: {text} "
                         f"(incident {incident} in the server log)")

    summary = "the guard failed"


class GuardUnavailable(GuardError):
    """A backend outage (its error, or out of memory): the request may succeed later."""

    summary = "the guard backend failed"


class GuardFailed(GuardError):
    """A bug in the Guard or its backends for this request: retrying will not help."""

    summary = "the guard failed with an internal error"


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is the backend being unavailable rather than a bug.

    ``torch.cuda.OutOfMemoryError`` is matched by name: torch is not imported here.
    """
    return isinstance(exc, BackendError | MemoryError) or type(exc).__name__ == "OutOfMemoryError"


def _failure(exc: BaseException, what: str) -> GuardError:
    incident = uuid.uuid4().hex[:12]
    log.error("%s failed (incident %s)", what, incident, exc_info=exc)
    return (GuardUnavailable if is_outage(exc) else GuardFailed)(exc, incident)


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
    failed_requests: int = 0
    sizes: collections.deque[int] = field(
        default_factory=lambda: collections.deque(maxlen=RECENT_SIZES))


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
            GuardUnavailable: a backend outage while serving this request.
            GuardFailed: the Guard raised for this request (a bug).
        """
        self._ensure_worker()
        loop = asyncio.get_running_loop()
        item = _Item(chat, response, key, loop.create_future())
        self._pending.append(item)
        self._wakeup.set()
        return await item.future

    async def call(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` (a Guard call outside ``Guard.batch``) in the batches' worker thread.

        Between batches, since the backends are not written for two threads at once; a
        failure is logged and raised as for a batch of one (``what`` names it in the log).

        Raises:
            GuardUnavailable: a backend outage.
            GuardFailed: ``fn`` raised otherwise (a bug).
        """
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn)
        except Exception as exc:
            raise _failure(exc, what) from None

    async def aclose(self) -> None:
        """Stop the worker and wait for a batch already in the thread to finish there.

        Waiting matters: the app closes the Guard next, which must not pull its backends
        from under a running batch.
        """
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)

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
                if len(items) == 1:
                    self._fail(items[0], _failure(exc, "a batch of 1 request"))
                    continue
                log.warning("a batch of %d requests failed; retrying them one by one",
                            len(items), exc_info=exc)
                await self._one_by_one(key, items, t_start)
                continue
            for item, outcome in zip(items, outcomes, strict=True):
                self._succeed(item, outcome, t_start)

    async def _one_by_one(self, key: GenKey, items: list[_Item], t_start: float) -> None:
        # Isolates the request(s) that broke the batch; after a dead backend the rest are
        # not tried, since each try would only wait for the same dead server.
        loop = asyncio.get_running_loop()
        dead: GuardError | None = None
        for item in items:
            if item.future.done():
                continue
            if dead is not None:
                self._fail(item, dead)
                continue
            try:
                [outcome] = await loop.run_in_executor(self._executor, self._call, key, [item])
            except Exception as exc:
                failure = _failure(exc, "a request retried alone")
                if isinstance(exc, BackendDeadError):
                    dead = failure
                self._fail(item, failure)
                continue
            self._succeed(item, outcome, t_start)

    def _succeed(self, item: _Item, outcome: BatchOutcome, t_start: float) -> None:
        if not item.future.done():
            item.future.set_result(_with_queue(outcome, t_start - item.t_enqueued))

    def _fail(self, item: _Item, failure: GuardError) -> None:
        self.stats.failed_requests += 1
        if not item.future.done():
            item.future.set_exception(failure)

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
