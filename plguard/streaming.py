"""Guarded streaming: the draft is released window by window, each window checked first.

:meth:`plguard.Guard.stream` yields :class:`StreamChunk` records (text to send) and ends with
one :class:`StreamEnd` (the full :class:`~plguard.types.GuardResult`). The chunks' texts
concatenate to exactly ``result.final``, which is what a client was sent.

How a stream is guarded (mode ``buffered``, the default):

1. The request-scope predicates are grounded in a worker thread while the draft starts
   generating in another. Nothing is released before this request verdict; when some
   unsafe rule is at the threshold whatever the answer says (the check pipeline at its
   ``best`` bound, :mod:`plguard.judging`: each rule's lowest value over every true/false
   setting of the response-scope predicates), generation is cancelled and the fixed
   refusal is sent.
2. The draft streams into a hold-back buffer. Each time the unchecked text reaches
   ``stream.window_tokens`` (grounding-model tokens, cut at a word boundary so no part of a
   word leaves alone; the first window is ``stream.first_window_tokens``, smaller, so the
   first text is released early), the window (the new text plus ``stream.overlap_tokens``
   of what came before) is judged on its unsafe and content rules as :meth:`Guard.check`
   judges them (bound ``window`` of plguard.judging), and so is its new text alone, in the
   same batch, so the overlap's text cannot dilute a harmful opening.
   Its text is released only once neither decision is a refusal, and not its tail (the
   last ``overlap_tokens``, at most half the window): that goes out only once the next
   window has read it with what follows, so a passage that starts at the end of an allowed
   window is judged whole. A window ends at the last word boundary within its size once
   the next boundary has arrived, so where windows end depends on the draft, not on how
   its pieces arrived. A window allowed but near a refusal (its strongest unsafe or
   unsafe-content rule, in either reading, at ``stream.hold_fraction`` of its threshold or
   more) releases nothing more: the rest waits for the final check. A refusal cancels
   generation at once and the stream ends with the refusal, or with the ordinary repair
   when nothing was released yet.
   Between windows, the token check (:mod:`plguard.token_check`, ``stream.token_check``)
   scores the content heads on the newest tokens every ``stream.token_step`` tokens and
   releases text ``stream.token_lag`` tokens behind them while ``Guard.gate`` finds every
   unsafe and content rule clearly below its threshold; once it is not, only windows
   release, until one reads the doubted text clearly safe (``stream.token_resume``).
3. At the end the whole draft gets the ordinary decision (``Guard.check``'s grounding and
   decision code) before its held-back tail is released, so a stream refuses every draft the
   non-streaming guard refuses; a rewrite (over-refusal) is repaired when nothing was
   released, as ``Guard.check`` would.

Mode ``audit`` (never the default) sends text as it is generated once the request verdict
allows it, and checks the same windows after sending; a block ends the stream with the
refusal, but what was sent cannot be recalled. The decision's reason says so.

Guard errors and steps over ``stream.timeout_s`` fail closed: the stream ends with the
fixed refusal and ``finish_reason`` ``content_filter``. Each step is timed in
``GuardResult.timings_s`` under ``stream.*`` keys (``stream.request_check``,
``stream.window_N``, ``stream.final_check``, ``stream.first_release``: seconds from the
start to the first text sent); where release stopped is there too (``stream.*held_at_tokens``).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from plguard.backends.base import can_stream
from plguard.stream_api import (
    DraftSource,
    FinishReason,
    StreamChunk,
    StreamEnd,
    StreamEvent,
    StreamGuard,
    StreamMode,
    astream,
)
from plguard.stream_cuts import SPACES as _SPACES
from plguard.stream_cuts import window_end, word_start_before
from plguard.types import (
    Chat,
    Decision,
    GenerationParams,
    Grounding,
    GuardResult,
    PolicyResult,
    RepairRound,
)

if TYPE_CHECKING:
    from plguard.judging import Bound
    from plguard.token_check import TokenMeter

T = TypeVar("T")
_POLL_S = 0.01  # how often the hold-back loop looks at a pending request check


class _Failed(Exception):
    """A guard step failed or timed out: the stream fails closed."""


@dataclass(slots=True)
class _Verdict:
    """A decision with what it was made on."""

    decision: Decision
    grounding: Grounding
    policy: PolicyResult


class GuardedStream:
    """One guarded stream; all of its state lives here, so streams share none.

    What :meth:`Guard.stream` returns: an iterator of its :meth:`events` (closing it early
    cancels generation); :meth:`cancel` may be called from any thread (``Guard.astream``
    does on ``aclose``, the server when its client goes).
    """

    def __init__(self, guard: StreamGuard, chat: Chat, params: GenerationParams,
                 mode: StreamMode | None = None, source: DraftSource | None = None) -> None:
        self.guard, self.chat, self.params = guard, chat, params
        self.cfg = guard.config.stream
        self.mode: StreamMode = mode or self.cfg.mode
        self.req = guard.conversation(chat)
        self.source = source
        self._cancel = threading.Event()
        self._deltas: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plguard-guard")
        self._pump = threading.Thread(target=self._generate, daemon=True,
                                      name="plguard-draft")
        self._count = guard.grounder_backend.count_tokens
        self.text = ""  # the draft so far
        self.sent = ""  # what was released
        self.checked = 0  # chars of the draft inside an allowed window
        self.win_start = 0  # where the next window starts (overlap included)
        self.windows = 0
        self.hold = False  # release nothing more before the final check (see _windows)
        # The token check (plguard.token_check): built lazily in the guard worker, None
        # once it is off, stopped or has held (the windows then release alone).
        self.meter: TokenMeter | None = None
        self.metering = self.mode == "buffered" and guard.config.stream.token_check
        self.req_grounding: Grounding | None = None
        self._metered_at = 0  # where the draft ended (characters) at the last token check
        self._doubted_at: int | None = None  # where a token check step doubted (_windows)
        self.timings: dict[str, float] = {}
        self.t0 = 0.0
        self._events: Generator[StreamEvent, None, None] | None = None

    def cancel(self) -> None:
        """Stop generating and end the stream at its next step (thread-safe)."""
        self._cancel.set()

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> StreamEvent:
        if self._events is None:
            self._events = self.events()
        return next(self._events)

    def close(self) -> None:
        """Stop the stream (as closing its events' generator does); idempotent."""
        self.cancel()
        if self._events is not None:
            self._events.close()

    # -- the draft ---------------------------------------------------------------------------

    def _generate(self) -> None:
        try:
            if self.source is not None:
                it: Iterator[str] = self.source(self._cancel)
            elif can_stream(self.guard.generator):
                it = self.guard.generator.stream_generate(  # type: ignore[attr-defined]
                    self.chat, self.params, self._cancel)
            else:
                it = iter([self.guard.generator.generate([self.chat], self.params)[0].text])
            try:
                for delta in it:
                    if self._cancel.is_set():
                        break
                    self._deltas.put(("delta", delta))
            finally:
                close = getattr(it, "close", None)
                if callable(close):
                    close()
            self._deltas.put(("done", None))
        except Exception as exc:  # reported to the stream, which fails closed
            self._deltas.put(("error", exc))

    # -- guard steps -------------------------------------------------------------------------

    def _step(self, name: str, fn: Callable[[], T]) -> T:
        """Run one guard step in the worker with the step timeout; _Failed on any error."""
        fut = self._pool.submit(self._locked, fn)
        return self._wait(name, fut, time.perf_counter())

    def _locked(self, fn: Callable[[], T]) -> T:
        with self.guard.grounder_lock:  # the grounder and its memo are not thread-safe
            return fn()

    def _wait(self, name: str, fut: Future[T], t_start: float) -> T:
        left = self.cfg.timeout_s - (time.perf_counter() - t_start)
        try:
            return fut.result(timeout=max(left, 0.0))
        except FutureTimeout:
            raise _Failed(f"guard step {name} took more than stream.timeout_s = "
                          f"{self.cfg.timeout_s:g} s") from None
        except Exception as exc:
            raise _Failed(f"guard step {name} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self.timings[f"stream.{name}"] = time.perf_counter() - t_start

    def _request_check(self) -> _Verdict | None:
        """The request verdict: a refusal whatever the answer, or None (go on).

        The check pipeline at its ``best`` bound (:mod:`plguard.judging`): each unsafe rule
        at its lowest value over every answer, so refused here only if every answer would
        be refused.
        """
        a = self.guard.assess([(self.req, "")], bound="best")[0]
        self.req_grounding = a.grounding
        if a.decision.action != "refuse":
            return None
        d = a.decision
        return _Verdict(replace(d, reason="request check, before any text (each unsafe rule "
                                f"at its lowest value whatever the answer says): {d.reason}"),
                        a.grounding, a.policy)

    def _assess(self, answer: str) -> _Verdict:
        """``answer`` grounded, reasoned and decided exactly as Guard.check does."""
        return self._assess_all([answer], "answer")[0]

    def _assess_all(self, answers: Sequence[str], bound: Bound = "window") -> list[_Verdict]:
        """Each of ``answers`` judged at ``bound`` (a part of the draft: ``window``), batched."""
        out = []
        for a in self.guard.assess([(self.req, answer) for answer in answers], bound=bound):
            _add_times(self.timings, a.timings_s)
            out.append(_Verdict(a.decision, a.grounding, a.policy))
        return out

    # -- the stream --------------------------------------------------------------------------

    def events(self) -> Generator[StreamEvent, None, None]:
        """The stream's chunks, then its end (see the module docstring)."""
        self.t0 = time.perf_counter()
        self._pump.start()
        t_req = time.perf_counter()
        req_fut = self._pool.submit(self._locked, self._request_check)
        try:
            yield from self._run(req_fut, t_req)
        finally:
            self._cancel.set()
            self._pool.shutdown(wait=False, cancel_futures=True)
            if self.source is not None or can_stream(self.guard.generator):
                self._pump.join(timeout=self.cfg.timeout_s)  # it stops on the cancel

    def _run(self, req_fut: Future[_Verdict | None], t_req: float) -> Iterator[StreamEvent]:
        verdict_known = done = False
        try:
            while True:
                if not verdict_known and (done or req_fut.done() or
                                          time.perf_counter() - t_req > self.cfg.timeout_s):
                    refused = self._wait("request_check", req_fut, t_req)
                    verdict_known = True
                    if refused is not None:
                        yield from self._end_refused(refused, repair=False)
                        return
                if verdict_known:
                    blocked = yield from self._windows(final=done)
                    if blocked is not None:
                        yield from self._end_refused(blocked, repair=True)
                        return
                    if done:
                        break
                    yield from self._token_release()
                kind, value = self._next(verdict_known)
                if self._cancel.is_set():
                    raise _Failed("the stream was cancelled")
                if kind == "error":
                    raise _Failed(f"generation failed: {type(value).__name__}: {value}")
                if kind == "done":
                    done = True
                elif kind == "delta":
                    self.text += value
            yield from self._finish()
        except Exception as exc:  # any guard fault, in a step or between them, fails closed
            self._cancel.set()
            yield from self._fail_closed(str(exc) if isinstance(exc, _Failed)
                                         else f"guard error: {type(exc).__name__}: {exc}")

    def _next(self, verdict_known: bool) -> tuple[str, Any]:
        """The next draft event; ("idle", None) while a pending request check is polled."""
        try:
            return self._deltas.get(timeout=self.cfg.timeout_s if verdict_known else _POLL_S)
        except queue.Empty:
            if verdict_known:
                raise _Failed("the generator sent nothing for stream.timeout_s = "
                              f"{self.cfg.timeout_s:g} s") from None
            return ("idle", None)

    def _windows(self, final: bool) -> Generator[StreamEvent, None, _Verdict | None]:
        """Check every window that is due; release what they allow. A refusal is returned."""
        if self.mode == "audit":
            yield from self._release(len(self.text))
        # Every full window is read, then (at the end) the partial last one, however fast
        # the draft came: which windows decide is a function of the draft, not of timing.
        while (cut := self._window_due(False) or (self._window_due(True) if final else None)
               ) is not None:
            self.windows += 1
            window = self.text[self.win_start:cut]
            # The window is read whole (its overlap re-reads the last window's tail with what
            # follows) and, where it has an overlap, its fresh text alone too: a few words of
            # benign text before a harmful opening can dilute the whole window's reading
            # (measured: 0.18 whole, 0.96 fresh; tests/test_content_leak.py).
            texts = [window, *([self.text[self.checked:cut]] if self.checked > self.win_start
                               else [])]
            vs = self._step(f"window_{self.windows}", functools.partial(self._assess_all, texts))
            if refused := [w for w in vs if w.decision.action == "refuse"]:
                return max(refused, key=lambda w: w.decision.strongest_content[1])
            # An over-refusal is not decided here: a polite or hedging opening reads like a
            # refusal in a partial window, and holding on it held whole helpful answers.
            # The final check on the whole draft decides a rewrite (issue 54, item 4).
            if any(self._doubtful(w.decision, self.cfg.window_hold_fraction) for w in vs):
                self.hold = True  # the final check on the whole draft decides the rest
                self.timings["stream.window_held_at_tokens"] = float(self._count(self.text[:cut]))
            elif self._doubted_at is not None and cut >= self._doubted_at:
                # Every window up to here, this one with the text the token check doubted,
                # read clearly safe: the doubt is resolved, the token check goes on.
                self._doubted_at, self.metering = None, True
            # The window's tail goes out only once the next window has read it with what
            # follows: a passage that starts at the end of an allowed window is judged whole.
            held = self._word_start_before(
                cut, min(self.cfg.overlap_tokens, self._count(window) // 2))
            self.checked = cut
            self.win_start = self._word_start_before(cut, self.cfg.overlap_tokens)
            if not self.hold:
                yield from self._release(held)
        return None

    def _token_release(self) -> Iterator[StreamEvent]:
        """Release text ``token_lag`` tokens behind the token check (plguard.token_check).

        The check reads the draft in steps of about ``token_step`` tokens that end at word
        boundaries (:func:`~plguard.stream_cuts.window_end`, from the text alone): a draft
        that arrived in one burst is read step by step, exactly as one that trickled in,
        so what is released is a function of the draft, not of timing. Each step is one
        forward (``stream.token_read``; each has a fixed cost, docs/benchmarks.md). A score near
        a threshold stops it: the windows decide from there, and the check goes on once a
        window that reads the doubted text finds it clearly safe (``stream.token_resume``;
        never after a score at a threshold).
        """
        step, lag = max(1, self.cfg.token_step), self.cfg.token_lag
        while self.metering and not self.hold and self.req_grounding is not None:
            at = self._metered_at
            cut = window_end(self.text, self._count, at, at, step)
            if cut is None:
                return
            self._metered_at = cut
            scores = self._step("token_check", functools.partial(self._meter_scores, cut))
            if scores is None:
                self.metering = False
                return
            a = self.guard.gate(self.req_grounding, scores)
            if a.decision.action == "refuse" or self._doubtful(a.decision):
                self.metering = False
                if self.cfg.token_resume and a.decision.action != "refuse":
                    self._doubted_at = cut
                self.timings.setdefault("stream.token_held_at_tokens",
                                        float(self._count(self.text[:cut])))
                _add_times(self.timings, {"stream.token_holds": 1.0})
                return
            start = len(self.sent)
            upto = word_start_before(self.text, self._count, start, cut, lag)
            if upto > start:
                yield from self._release(upto)

    def _meter_scores(self, upto: int) -> dict[str, float] | None:
        if self.meter is None:
            self.meter = self.guard.token_meter()
            if self.meter is None:
                return None
        t0 = time.perf_counter()
        scores = self.meter.update(self.text[:upto])
        self.timings["stream.token_check_s"] = (self.timings.get("stream.token_check_s", 0.0)
                                                + time.perf_counter() - t0)
        self.timings["stream.token_check_tokens"] = float(self.meter.tokens_forwarded)
        return scores

    def _doubtful(self, d: Decision, frac: float | None = None) -> bool:
        """Whether an allowed decision is near a refusal (``frac`` or hold_fraction of it)."""
        th, frac = self.guard.thresholds, self.cfg.hold_fraction if frac is None else frac
        return (d.strongest_unsafe[1] >= frac * th.unsafe
                or d.strongest_content[1] >= frac * th.content)

    def _window_due(self, final: bool) -> int | None:
        """Where the next window to check ends, or None when none is due yet (stream_cuts)."""
        if final:
            # The last, partial window; a draft read whole by the final check needs none.
            has_new = len(self.text.rstrip(_SPACES)) > self.checked
            return len(self.text) if has_new and self.win_start > 0 else None
        # The first window is small, so the first text leaves early; the rest are full size.
        size, first = self.cfg.window_tokens, self.cfg.first_window_tokens
        if self.windows == 0 and first is not None:
            size = min(first, size)
        return window_end(self.text, self._count, self.win_start, self.checked, size)

    def _word_start_before(self, cut: int, want: int) -> int:
        return word_start_before(self.text, self._count, self.win_start, cut, want)

    def _release(self, upto: int) -> Iterator[StreamEvent]:
        yield from self._send(self.text[len(self.sent):upto])  # nothing if upto <= sent

    def _send(self, text: str) -> Iterator[StreamEvent]:
        if not text:
            return
        if not self.sent:
            self.timings["stream.first_release"] = time.perf_counter() - self.t0
        self.sent += text
        yield StreamChunk(text, time.perf_counter())

    # -- endings -----------------------------------------------------------------------------

    def _finish(self) -> Iterator[StreamEvent]:
        """The ordinary decision on the whole draft, then the tail (or the repair)."""
        v = self._step("final_check", lambda: self._assess(self.text))
        if v.decision.action == "refuse":
            yield from self._end_refused(v, repair=True)
            return
        if v.decision.action == "rewrite" and not self.sent:
            yield from self._end_refused(v, repair=True)
            return
        if v.decision.action == "rewrite":
            v.decision = replace(v.decision, reason=v.decision.reason + " [stream: text was "
                                 "released before the rewrite was due, so it is kept]")
        yield from self._release(len(self.text))
        yield self._end(v, blocked=False, rounds=(), fallback=False)

    def _end_refused(self, v: _Verdict, repair: bool) -> Iterator[StreamEvent]:
        """A refusal (or rewrite): the repair where nothing was sent, else the refusal."""
        self._cancel.set()
        fallback = self.guard.config.repair.fallback_refusal
        rounds: tuple[RepairRound, ...] = ()
        used_fallback = True
        if self.sent:
            sep = "" if self.sent[-1] in _SPACES else "\n\n"
            yield from self._send(sep + fallback)
        elif repair:
            final, rounds, used_fallback = self._step("repair", lambda: self._repair(v))
            yield from self._send(final)
        else:
            yield from self._send(fallback)
        yield self._end(v, blocked=v.decision.action == "refuse", rounds=rounds,
                        fallback=used_fallback)

    def _repair(self, v: _Verdict) -> tuple[str, tuple[RepairRound, ...], bool]:
        r = self.guard.repair(self.req, self.text, v.decision, v.policy, self.params)
        _add_times(self.timings, r.timings_s)
        return r.final, r.repairs, r.fallback_used

    def _fail_closed(self, why: str) -> Iterator[StreamEvent]:
        d = Decision("refuse", ("", 0.0), ("", 0.0),
                     f"{why}: the stream fails closed with the refusal")
        g = Grounding(model=self.guard.grounder_backend.model_id, scores=())
        v = _Verdict(d, g, PolicyResult(self.guard.policy.id, {}))
        fallback = self.guard.config.repair.fallback_refusal
        sep = "\n\n" if self.sent and self.sent[-1] not in _SPACES else ""
        yield from self._send(sep + fallback)
        yield self._end(v, blocked=True, rounds=(), fallback=True)

    def _end(self, v: _Verdict, *, blocked: bool, rounds: tuple[RepairRound, ...],
             fallback: bool) -> StreamEnd:
        d = v.decision
        if self.mode == "audit":
            d = replace(d, reason=d.reason + " [stream.mode audit: text was sent before it "
                        "was checked]")
        self.timings["total"] = time.perf_counter() - self.t0
        result = GuardResult(request=self.req.text, draft=self.text, final=self.sent,
                             repaired=bool(rounds), grounding=v.grounding, policy=v.policy,
                             decision=d, repairs=rounds, fallback_used=fallback,
                             timings_s=dict(self.timings))
        finish: FinishReason = "content_filter" if blocked else "stop"
        if not blocked and not rounds and self._ran_out():
            finish = "length"
        return StreamEnd(result, blocked, finish)

    def _ran_out(self) -> bool:
        if self.source is not None:
            # Another server wrote the draft at its own length limit: only it knows
            # whether it ran out, and a source that says (an upstream's) is believed.
            return getattr(self.source, "finish_reason", None) == "length"
        count = getattr(self.guard.generator, "count_tokens", None)
        return callable(count) and count(self.text) >= self.params.max_new_tokens


def _add_times(into: dict[str, float], spent: Mapping[str, float]) -> None:
    for k, v in spent.items():
        into[k] = into.get(k, 0.0) + v


__all__ = ["DraftSource", "FinishReason", "GuardedStream", "StreamChunk", "StreamEnd",
           "StreamEvent", "StreamGuard", "StreamMode", "astream"]
