"""Guarded streaming (plguard.streaming) on a scripted generator and a scripted grounder.

The generator (plguard.testing.ScriptedStreamBackend) places a canary phrase at chosen
token positions; the grounder flags a window that holds it. Every test reads what a client
would be sent (the chunks) and when, against what the grounder had read by then.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

import pytest

from plguard import Guard, GuardConfig
from plguard.errors import InputError
from plguard.policy import load_policy
from plguard.streaming import StreamChunk, StreamEnd
from plguard.testing import ScriptedStreamBackend
from tests.scripted import _VARIANTS, scripted_p_true

POLICY = load_policy("minimal")
CANARY = "ZEBRA-PLUM-7"
# A harmful request: the minimal policy then refuses an answer that gives instructions,
# which the scripted grounder says of any window holding the canary.
REQUEST = "How do I build a bomb?"


def words(n: int, start: int = 0) -> list[str]:
    return [f" w{i}" for i in range(start, start + n)]


class Grounder:
    """Scores the minimal policy like tests.scripted, and flags a response holding ``flag``.

    A response is flagged when it holds ``flag`` (and ``also``, when given): it then
    provides harmful instructions. Records the response text of every response-scope read
    with the time it was read. ``fail_on``/``slow_on``: a response holding it raises /
    sleeps ``slow_s`` first.
    """

    def __init__(self, flag: str = CANARY, also: str | None = None, fail_on: str | None = None,
                 slow_on: str | None = None, slow_s: float = 0.0) -> None:
        self.flag, self.also = flag, also
        self.fail_on, self.slow_on, self.slow_s = fail_on, slow_on, slow_s
        self.reads: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def flags(self, resp: str) -> bool:
        return self.flag in resp and (self.also is None or self.also in resp)

    def __call__(self, prefix: str, suffix: str) -> float:
        resp = (prefix.split("<<<RESPONSE>>>", 1)[1].split("<<<END RESPONSE>>>", 1)[0]
                if "<<<RESPONSE>>>" in prefix else None)
        base = scripted_p_true(prefix, suffix)  # also fills _VARIANTS
        name = next(n for q, n in _VARIANTS.items() if q in suffix)
        if resp is not None:
            if self.fail_on and self.fail_on in resp:
                raise RuntimeError("injected grounder fault")
            if self.slow_on and self.slow_on in resp:
                time.sleep(self.slow_s)
            with self.lock:
                self.reads.append((time.perf_counter(), resp))
            if name == "response_provides_harmful_instructions" and self.flags(resp):
                return 0.97
        return base


def make(tokens, grounder: Grounder | None = None, delay_s: float = 0.0, policy=POLICY,
         **cfg) -> tuple[Guard, ScriptedStreamBackend, Grounder]:
    gr = grounder or Grounder()
    gen = ScriptedStreamBackend(tokens, delay_s=delay_s, p_true=gr)
    conf = {"stream": {"window_tokens": 8, "overlap_tokens": 3}, **cfg}
    return Guard(GuardConfig.from_dict(conf), generator=gen, policy=policy), gen, gr


def run(guard: Guard, request: str = REQUEST, **kw) -> tuple[list[StreamChunk], StreamEnd]:
    events = list(guard.stream(request, **kw))
    chunks = [e for e in events if isinstance(e, StreamChunk)]
    ends = [e for e in events if isinstance(e, StreamEnd)]
    assert len(ends) == 1 and events[-1] is ends[0], "exactly one StreamEnd, last"
    assert "".join(c.text for c in chunks) == ends[0].result.final
    return chunks, ends[0]


def assert_blocked_without_leak(chunks: list[StreamChunk], end: StreamEnd, guard: Guard,
                                needle: str = CANARY) -> None:
    sent = "".join(c.text for c in chunks)
    assert needle not in sent
    assert end.blocked and end.finish_reason == "content_filter"
    assert end.result.decision.action == "refuse"
    assert sent.endswith(guard.config.repair.fallback_refusal) or end.result.repaired


def assert_released_after_allowed(chunks: list[StreamChunk], gr: Grounder,
                                  end: StreamEnd) -> None:
    """Every released draft byte lay in a window the grounder had read, clean, before."""
    # A refusal or repair sent at the end is not draft text.
    body = chunks[:-1] if end.result.fallback_used or end.result.repaired else chunks
    for c in body:
        piece = c.text.strip()
        before = [resp for t, resp in gr.reads if t < c.t]
        assert any(piece in resp and not gr.flags(resp) for resp in before), (
            f"{c.text!r} was released before any clean window held it")


# -- the canary at chosen places ------------------------------------------------------------


@pytest.mark.parametrize("at", [4, 9, 15, 22])
def test_a_canary_inside_a_window_is_never_released(at):
    toks = words(200)
    toks[at] = f" {CANARY}"
    guard, gen, gr = make(toks, delay_s=0.005)
    chunks, end = run(guard)
    assert_blocked_without_leak(chunks, end, guard)
    assert_released_after_allowed(chunks, gr, end)
    # Cancelled soon after the canary's window was read (a generous margin for a busy CPU),
    # not left to run to its end.
    assert gen.cancelled and gen.cancelled_at is not None and gen.cancelled_at < at + 100
    assert gen.runs[-1].closed


def test_stream_config_refuses_an_overlap_over_half_the_window():
    from plguard.errors import ConfigError

    with pytest.raises(ConfigError, match="overlap_tokens"):
        GuardConfig.from_dict({"stream": {"window_tokens": 10, "overlap_tokens": 6}})
    assert GuardConfig().stream.window_tokens == 200 and GuardConfig().stream.mode == "buffered"
    assert GuardConfig().stream.first_window_tokens == 48


@pytest.mark.parametrize("canary_at", [None, 3, 6])
def test_a_small_first_window_releases_early_and_leaks_nothing(canary_at):
    toks = words(60)
    if canary_at is not None:
        toks[canary_at] = f" {CANARY}"
    guard, gen, gr = make(toks, delay_s=0.002, stream={"window_tokens": 20,
                                                      "overlap_tokens": 5,
                                                      "first_window_tokens": 4})
    chunks, end = run(guard)
    assert_released_after_allowed(chunks, gr, end)
    windows = [r.split() for r in dict.fromkeys(resp for _, resp in gr.reads)]
    assert len(windows[0]) <= 4  # the first window is the small one
    if canary_at is None:
        assert not end.blocked
        # released once those words passed, all but the window's tail (half of it here,
        # under the 5-token overlap), which waits for the next window to read it too
        assert chunks[0].text.split() == windows[0][:len(windows[0]) - len(windows[0]) // 2]
        assert len(windows[1]) > 8  # later windows are full size
    else:
        assert_blocked_without_leak(chunks, end, guard)


def test_a_canary_phrase_across_a_window_boundary_is_never_released_whole():
    # Windows of 8 words with 3 of overlap: the first ends at word 7; the phrase runs
    # from word 6 to 8, so no first-window read sees it and the second does.
    phrase = "launch the rocket"
    toks = words(30)
    toks[6:9] = [" launch", " the", " rocket"]
    guard, gen, gr = make(toks, grounder=Grounder(flag=phrase), delay_s=0.002)
    chunks, end = run(guard)
    assert_blocked_without_leak(chunks, end, guard, needle=phrase)
    assert_released_after_allowed(chunks, gr, end)
    assert gen.cancelled


def test_a_canary_split_across_sub_word_tokens_leaves_no_piece():
    toks = words(12)
    toks[7:7] = [" ZEB", "RA-", "PLUM", "-7"]  # one word in four deltas
    guard, gen, gr = make(toks, delay_s=0.002)
    chunks, end = run(guard)
    sent = "".join(c.text for c in chunks)
    assert_blocked_without_leak(chunks, end, guard)
    assert "ZEB" not in sent  # no part of the word left before its window was read
    assert_released_after_allowed(chunks, gr, end)


def test_a_clean_draft_streams_in_windows_and_ends_with_the_whole_draft():
    toks = words(40)
    guard, gen, gr = make(toks, delay_s=0.002)
    chunks, end = run(guard)
    assert not end.blocked and end.finish_reason == "stop"
    assert end.result.final == end.result.draft == "".join(toks).strip()
    assert len(chunks) > 3  # released window by window, not at the end
    assert_released_after_allowed(chunks, gr, end)
    t = end.result.timings_s
    assert {"stream.request_check", "stream.window_1", "stream.first_release",
            "stream.final_check", "total"} <= set(t)
    assert t["stream.first_release"] < t["total"]
    assert not gen.cancelled


def test_nothing_is_released_before_the_request_verdict():
    slow = Grounder()
    guard, gen, _ = make(words(30), grounder=slow)
    first_request_read: list[float] = []
    inner = slow.__call__

    def timed(prefix: str, suffix: str) -> float:
        if "<<<RESPONSE>>>" not in prefix:
            time.sleep(0.2)
            first_request_read.append(time.perf_counter())
        return inner(prefix, suffix)

    gen.p_true = timed
    chunks, end = run(guard)
    assert not end.blocked
    assert chunks[0].t > max(first_request_read)


def test_length_finish_when_the_draft_runs_out_of_tokens():
    guard, _, _ = make(words(30), generation={"max_new_tokens": 12})
    chunks, end = run(guard)
    assert end.finish_reason == "length" and not end.blocked
    assert end.result.final == "".join(words(12)).strip()


# -- equivalence with the non-streaming guard -----------------------------------------------


DRAFTS = {
    "clean": words(30),
    "harmful_middle": [*words(12), " Step", " 1:", " mix", *words(12, 20)],
    "harmful_tail": [*words(25), " Step", " 1:", " go."],
    "short_harmful": [" Sure.", " Step", " 1:", " get", " it."],
    "short_clean": [" Sure,", " here", " it", " is."],
    "over_refusal": [" I", " can't", " help", " with", " that."],
    "canary": [*words(17), f" {CANARY}", *words(5, 30)],
}


@pytest.mark.parametrize("name", sorted(DRAFTS))
@pytest.mark.parametrize("request_text", [REQUEST, "Tell me a story about the sea."])
def test_a_stream_is_never_more_lenient_than_check(name, request_text):
    toks = DRAFTS[name]
    guard, _, _ = make(toks, repair={"max_rounds": 0})
    _, end = run(guard, request_text)
    plain = guard.check(request_text, "".join(toks).strip())
    if plain.decision.action == "refuse":
        assert end.blocked and end.finish_reason == "content_filter"
        assert end.result.final.endswith(guard.config.repair.fallback_refusal)
    if not end.blocked:
        assert plain.decision.action != "refuse"
        assert end.result.decision.action == plain.decision.action
    if plain.decision.action == "allow" and not end.blocked:
        assert end.result.final == plain.final == "".join(toks).strip()


def test_the_final_check_catches_what_no_window_shows():
    # Flagged only when "alpha" and "omega" are read together: they are 20 words apart, so
    # no 8-word window has both, and only the whole-draft check (Guard.check's) refuses.
    toks = [" alpha", *words(20), " omega", *words(3, 40)]
    gr = Grounder(flag="alpha", also="omega")
    guard, gen, _ = make(toks, grounder=gr, delay_s=0.002)
    plain = guard.check(REQUEST, "".join(toks).strip())
    assert plain.decision.action == "refuse"
    gr.reads.clear()
    chunks, end = run(guard)
    flagged = {r.strip() for _, r in gr.reads if gr.flags(r)}
    assert flagged == {end.result.draft}  # no window showed it, the whole-draft read did
    assert end.blocked and end.finish_reason == "content_filter"
    assert len(chunks) > 1 and chunks[-1].text.endswith(guard.config.repair.fallback_refusal)
    assert end.result.fallback_used and not end.result.repaired  # text was out: no rewrite


def test_a_refused_draft_with_nothing_released_is_repaired():
    # A harmful draft shorter than one window: nothing was released, so the ordinary
    # repair runs (as Guard.check would) and its answer is sent instead.
    def script(chat):
        if "REFUSE_OR_REWRITE_SAFELY" in chat[-1].content:
            return [" I", " can't", " help", " with", " weapons."]
        return [" Sure.", " Step", " 1:", " get", " the", " parts."]

    guard, gen, _ = make(script)
    chunks, end = run(guard, "How do I build a bomb?")
    assert end.blocked and end.finish_reason == "content_filter"
    assert end.result.repaired and end.result.final == "I can't help with weapons."
    assert len(chunks) == 1 and "Step 1" not in chunks[0].text
    plain = guard.chat("How do I build a bomb?")
    assert plain.final.strip() == end.result.final


def test_an_over_refusal_with_nothing_released_is_rewritten():
    def script(chat):
        if "ANSWER_HELPFULLY" in chat[-1].content:
            return [" Use", " `kill", " PID`."]
        return [" I", " can't", " help", " with", " that."]

    guard, _, _ = make(script)
    chunks, end = run(guard, "How can I kill a Python process?")
    assert not end.blocked and end.finish_reason == "stop"
    assert end.result.decision.action == "rewrite" and end.result.final == "Use `kill PID`."


# -- the request verdict --------------------------------------------------------------------


def strict_policy(tmp_path: Path):
    """minimal plus an unsafe rule on the request alone: refused whatever the answer."""
    d = tmp_path / "strict"
    shutil.copytree(Path(POLICY.path), d)
    pl = d / "policy.pl"
    pl.write_text(pl.read_text().replace(
        "unsafe_compliance :- unsafe_compliance_actionable_harm.",
        "unsafe_compliance_harmful_request :- request_is_harmful.\n\n"
        "unsafe_compliance :- unsafe_compliance_actionable_harm.\n"
        "unsafe_compliance :- unsafe_compliance_harmful_request.")
        + "query(unsafe_compliance_harmful_request).\n")
    return load_policy(d)


def test_a_certain_refusal_at_the_request_cancels_the_generator(tmp_path):
    toks = words(200)
    guard, gen, gr = make(toks, delay_s=0.01, policy=strict_policy(tmp_path))
    chunks, end = run(guard, "How do I build a bomb?")
    assert [c.text for c in chunks] == [guard.config.repair.fallback_refusal]
    assert end.blocked and end.finish_reason == "content_filter"
    assert "request check" in end.result.decision.reason
    assert gen.cancelled and gen.cancelled_at is not None and gen.cancelled_at < 100
    assert gr.reads == []  # no window was read: the request decided


def test_a_request_that_may_be_answered_safely_is_not_refused_early():
    # minimal refuses a bomb request only for a harmful answer: the request check goes on.
    guard, gen, _ = make(DRAFTS["short_clean"])
    _, end = run(guard, "How do I build a bomb?")
    assert not end.blocked and end.result.final == "Sure, here it is."


# -- state, faults, time-outs ---------------------------------------------------------------


def test_two_streams_back_to_back_share_no_state():
    toks = [*words(20), f" {CANARY}", *words(10, 30)]
    calls = {"n": 0}

    def script(chat):
        calls["n"] += 1
        return toks if calls["n"] == 1 else words(20)

    guard, gen, gr = make(script, delay_s=0.001)
    c1, e1 = run(guard)
    c2, e2 = run(guard)
    assert e1.blocked and not e2.blocked
    assert e2.result.final == "".join(words(20)).strip()
    assert e2.result.draft == "".join(words(20)).strip()  # no text carried over from the first
    assert not gen.runs[1].cancelled and gen.runs[0].cancelled
    assert e1.result.timings_s is not e2.result.timings_s
    assert not any(k.startswith("repair") for k in e2.result.timings_s)


def test_a_failing_grounder_blocks_and_never_leaks():
    toks = [*words(14), " BOOM", *words(20, 20)]
    guard, gen, _ = make(toks, grounder=Grounder(fail_on="BOOM"), delay_s=0.002)
    chunks, end = run(guard)
    sent = "".join(c.text for c in chunks)
    assert "BOOM" not in sent
    assert end.blocked and end.finish_reason == "content_filter"
    assert "injected grounder fault" in end.result.decision.reason
    assert "fails closed" in end.result.decision.reason
    assert sent.endswith(guard.config.repair.fallback_refusal)
    assert gen.cancelled


def test_a_slow_grounder_times_out_closed():
    toks = [*words(14), " SLOW", *words(200, 20)]
    guard, gen, _ = make(toks, grounder=Grounder(slow_on="SLOW", slow_s=1.0), delay_s=0.005,
                         stream={"window_tokens": 8, "overlap_tokens": 3, "timeout_s": 0.3})
    t0 = time.perf_counter()
    chunks, end = run(guard)
    assert time.perf_counter() - t0 < 0.9  # did not wait for the slow read
    assert "SLOW" not in "".join(c.text for c in chunks)
    assert end.blocked and end.finish_reason == "content_filter"
    assert "stream.timeout_s" in end.result.decision.reason
    assert gen.cancelled


def test_a_fault_between_guard_steps_fails_closed():
    # The window bookkeeping counts tokens on the grounder's tokenizer; one that breaks
    # mid-stream must end the stream with the refusal, not with an exception.
    class BadTokenizer(ScriptedStreamBackend):
        def count_tokens(self, text: str) -> int:
            if "BREAK" in text:
                raise RuntimeError("tokenizer broke")
            return super().count_tokens(text)

    gr = Grounder()
    gen = BadTokenizer([*words(12), " BREAK", *words(20, 20)], p_true=gr)
    guard = Guard(GuardConfig.from_dict({"stream": {"window_tokens": 8, "overlap_tokens": 3}}),
                  generator=gen, policy=POLICY)
    chunks, end = run(guard)
    assert end.blocked and end.finish_reason == "content_filter"
    assert "tokenizer broke" in end.result.decision.reason
    assert "BREAK" not in "".join(c.text for c in chunks)


def test_a_failing_generator_fails_closed():
    class Broken(ScriptedStreamBackend):
        def stream_generate(self, chat, params, cancel):
            yield " fine"
            raise RuntimeError("generator died")

    gr = Grounder()
    gen = Broken(words(3), p_true=gr)
    guard = Guard(GuardConfig(), generator=gen, policy=POLICY)
    chunks, end = run(guard)
    assert end.blocked and end.finish_reason == "content_filter"
    assert "generator died" in end.result.decision.reason
    assert "fine" not in "".join(c.text for c in chunks)


def test_closing_the_stream_early_cancels_generation():
    guard, gen, _ = make(words(400), delay_s=0.005)
    it = guard.stream(REQUEST)
    first = next(it)
    assert isinstance(first, StreamChunk)
    it.close()
    assert gen.cancelled and gen.runs[-1].closed
    assert gen.cancelled_at is not None and gen.cancelled_at < 400


def test_bad_arguments_are_refused_when_the_stream_is_made():
    guard, _, _ = make(words(3))
    with pytest.raises(InputError, match="mode"):
        guard.stream(REQUEST, mode="eager")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="messages"):
        guard.stream([{"role": "wizard", "content": "x"}])


# -- audit mode, async, other draft sources -------------------------------------------------


def test_audit_mode_sends_first_and_says_so():
    toks = [*words(14), f" {CANARY}", *words(20, 20)]
    guard, gen, _ = make(toks, delay_s=0.002)
    chunks, end = run(guard, mode="audit")
    sent = "".join(c.text for c in chunks)
    assert CANARY in sent  # the risk audit mode accepts: sent before its check
    assert end.blocked and end.finish_reason == "content_filter"
    assert sent.endswith(guard.config.repair.fallback_refusal)
    assert "audit" in end.result.decision.reason
    assert gen.cancelled
    _, default_end = run(make(words(5))[0])
    assert "audit" not in default_end.result.decision.reason


def test_astream_matches_stream_and_aclose_cancels():
    guard, gen, _ = make(words(30), delay_s=0.001)
    sync_chunks, sync_end = run(guard)

    async def collect():
        return [e async for e in guard.astream(REQUEST)]

    events = asyncio.run(collect())
    assert isinstance(events[-1], StreamEnd)
    assert "".join(e.text for e in events if isinstance(e, StreamChunk)) == sync_end.result.final

    guard2, gen2, _ = make(words(400), delay_s=0.005)

    async def leave_early():
        agen = guard2.astream(REQUEST)
        first = await agen.__anext__()
        await agen.aclose()
        return first

    assert isinstance(asyncio.run(leave_early()), StreamChunk)
    deadline = time.monotonic() + 5
    while not gen2.runs[-1].closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gen2.cancelled and gen2.cancelled_at is not None and gen2.cancelled_at < 400


def test_a_draft_source_replaces_the_generator():
    seen: list[threading.Event] = []

    def source(cancel: threading.Event):
        seen.append(cancel)
        yield from [" from", " upstream"]

    guard, gen, _ = make(words(3))
    _, end = run(guard, source=source)
    assert end.result.final == " from upstream" and len(seen) == 1  # a source is as it is
    assert gen.runs == []


def test_a_backend_without_stream_generate_still_streams_guarded():
    from tests.scripted import ScriptedBackend

    b = ScriptedBackend(lambda chat: "Sure. Step 1: get the materials.", scripted_p_true)
    guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0}}), generator=b,
                  policy=POLICY)
    chunks, end = run(guard, "How do I build a bomb?")
    assert end.blocked and [c.text for c in chunks] == [guard.config.repair.fallback_refusal]


def test_windows_do_not_depend_on_timing():
    # The whole draft is in before a slow request verdict: every window is still read, and a
    # passage only a window shows (diluted in the whole draft) is still caught.
    toks = [*words(14), f" {CANARY}", *words(30, 20)]

    def windows(request_delay_s: float) -> tuple[list[str], StreamEnd]:
        gr = Grounder()
        guard, gen, _ = make(toks, grounder=gr)

        def p(prefix: str, suffix: str) -> float:
            if "<<<RESPONSE>>>" not in prefix:
                time.sleep(request_delay_s)
            return gr(prefix, suffix)

        gen.p_true = p
        _, end = run(guard)
        return sorted(k for k in end.result.timings_s if k.startswith("stream.window_")), end

    fast, end_fast = windows(0.0)
    slow, end_slow = windows(0.1)
    assert fast == slow and fast
    assert end_fast.blocked and end_slow.blocked
    assert end_fast.result.decision.reason == end_slow.result.decision.reason


def test_a_hedging_opening_does_not_hold_a_helpful_answer():
    # The first window reads as a refusal of a harmless request (an over-refusal, rewrite);
    # the answer goes on helpfully. Only the whole answer may decide a rewrite, so the
    # text that no unsafe rule holds streams as it is checked.
    toks = [" I", " can't", " be", " sure,", " but", " here", " goes:", *words(60)]
    guard, _, gr = make(toks, delay_s=0.002)
    chunks, end = run(guard, "How can I kill a Python process?")
    whole = "".join(toks).strip()
    final_read = min(t for t, resp in gr.reads if resp.strip() == whole)
    assert len(chunks) > 3 and "can't" in chunks[0].text
    assert chunks[0].t < final_read  # the opening went out before the whole was judged
    assert not end.blocked and not end.result.repaired
    assert end.result.final.strip() == whole  # kept, as the decision's reason says
    assert_released_after_allowed(chunks, gr, end)
