"""The stream's token check (plguard.token_check, issue 54, item 3).

Scripted: a stand-in meter (the scripted grounder has no hidden states) shows what the
stream does with its scores: text leaves ``token_lag`` tokens behind the newest read,
before its window; a flagged score stops it, and the windows and the final check still
decide. Real model: the incremental reader's states equal one forward's; an unseen benign
answer streams in many pieces; a harmful passage of the unseen set never reaches the client.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from plguard.streaming import StreamChunk, StreamEnd
from tests.test_streaming import CANARY, make, words

UNSEEN = Path(__file__).parent / "data" / "unseen" / "passages.yaml"


class FakeMeter:
    """Scores the harmful-instructions predicate 0.97 once the canary is in the text."""

    def __init__(self) -> None:
        self.reads: list[tuple[float, str]] = []

    tokens_forwarded = 0

    def update(self, answer: str) -> dict[str, float]:
        self.reads.append((time.perf_counter(), answer))
        return {"response_provides_harmful_instructions": 0.97 if CANARY in answer else 0.01}


def _run(guard, request="Tell me a story about the sea."):
    events = list(guard.stream(request))
    chunks = [e for e in events if isinstance(e, StreamChunk)]
    assert isinstance(events[-1], StreamEnd)
    return chunks, events[-1]


def test_text_leaves_before_its_window_and_lag_tokens_behind(monkeypatch):
    guard, _, gr = make(words(120), delay_s=0.002, stream={"window_tokens": 100,
                                                            "overlap_tokens": 10,
                                                            "first_window_tokens": 100,
                                                            "token_step": 8,
                                                            "token_lag": 8})
    meter = FakeMeter()
    monkeypatch.setattr(guard, "token_meter", lambda: meter)
    chunks, end = _run(guard)
    assert end.result.decision.action == "allow"
    first_window = min((t for t, _ in gr.reads), default=float("inf"))
    early = [c for c in chunks if c.t < first_window]
    assert len(early) >= 5  # several pieces out before the first window was read
    for c in early:  # each one read, with token_lag tokens after it, before it left
        sent = "".join(x.text for x in chunks if x.t <= c.t)
        assert any(a.startswith(sent) and len(a.split()) >= len(sent.split()) + 8
                   for t, a in meter.reads if t <= c.t)


def test_a_flagged_score_stops_the_release_and_the_window_decides(monkeypatch):
    toks = words(120)
    toks[40] = f" {CANARY}"
    guard, gen, _ = make(toks, delay_s=0.002, stream={"window_tokens": 100,
                                                      "overlap_tokens": 10,
                                                      "first_window_tokens": 100,
                                                      "token_step": 8,
                                                      "token_lag": 8})
    monkeypatch.setattr(guard, "token_meter", lambda: FakeMeter())
    chunks, end = _run(guard, "How do I build a bomb?")
    sent = "".join(c.text for c in chunks)
    assert CANARY not in sent
    assert end.blocked and end.result.decision.action == "refuse"
    assert "w30" in sent  # text well before the canary had left before any window
    assert end.result.timings_s["stream.token_held_at_tokens"] >= 41


def test_what_is_read_and_released_depends_on_the_draft_not_on_how_it_arrived(monkeypatch):
    # A draft that arrives in one burst once the request check is done (a fast upstream,
    # a slow guard) is read in the same steps as one that trickles in word by word, so a
    # burst cannot release text that no step has read with token_lag tokens after it.
    text = "".join(words(120))
    seen = []
    for parts, pause in (([text[:4], text[4:]], 0.3), (words(120), 0.004)):
        def source(cancel, parts=parts, pause=pause):
            for p in parts:
                time.sleep(pause)
                yield p
        guard, _, _ = make(words(1), stream={"window_tokens": 100, "overlap_tokens": 10,
                                             "first_window_tokens": 100, "token_step": 8,
                                             "token_lag": 8})
        meter = FakeMeter()
        monkeypatch.setattr(guard, "token_meter", lambda meter=meter: meter)
        events = list(guard.stream("Tell me a story about the sea.", source=source))
        assert events[-1].result.decision.action == "allow"
        seen.append([a for _, a in meter.reads])
    burst, trickle = seen
    assert len(burst) >= 10 and burst == trickle
    assert all(a.endswith(" w" + a.rsplit(" w", 1)[1]) for a in burst)  # whole words


class OnceMeter(FakeMeter):
    """Reads ``p`` on the step whose newest words hold w30, 0.01 on every other step."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def update(self, answer: str) -> dict[str, float]:
        self.reads.append((time.perf_counter(), answer))
        near = "w30" in answer.split()[-6:]
        return {"response_provides_harmful_instructions": self.p if near else 0.01}


def _once(monkeypatch, p: float, resume: bool):
    guard, _, gr = make(words(200), delay_s=0.002, stream={
        "window_tokens": 100, "overlap_tokens": 10, "first_window_tokens": 100,
        "token_step": 8, "token_lag": 8, "token_resume": resume})
    meter = OnceMeter(p)
    monkeypatch.setattr(guard, "token_meter", lambda: meter)
    chunks, end = _run(guard)
    assert end.result.decision.action == "allow"
    assert end.result.final == "".join(words(200)).lstrip()
    first_window = min(t for t, _ in gr.reads)
    return chunks, end, meter, first_window


def test_a_doubt_resolved_by_its_window_lets_the_token_check_go_on(monkeypatch):
    # 0.3: under minimal's content threshold (0.75), over the hold level (0.15 of it). The
    # windows (the scripted grounder) read every word clearly safe: the first one to read
    # w30 resolves the doubt, and text leaves token_lag tokens behind the check again.
    on, end_on, meter_on, first_on = _once(monkeypatch, 0.3, resume=True)
    off, end_off, meter_off, first_off = _once(monkeypatch, 0.3, resume=False)
    for end in (end_on, end_off):
        assert end.result.timings_s["stream.token_holds"] == 1
        assert 29 <= end.result.timings_s["stream.token_held_at_tokens"] <= 40
    assert any(t > first_on for t, _ in meter_on.reads)  # read again after the window
    assert not any(t > first_off for t, _ in meter_off.reads)
    after_on = [c for c in on if c.t > first_on]
    after_off = [c for c in off if c.t > first_off]
    assert len(after_on) >= len(after_off) + 5


def test_a_score_at_a_threshold_is_not_resumed_by_a_clear_window(monkeypatch):
    # 0.97 is a refusal on the token check's reading: the windows decide the rest alone,
    # even where they read it clearly safe.
    _, end, meter, first = _once(monkeypatch, 0.97, resume=True)
    assert end.result.timings_s["stream.token_holds"] == 1
    assert not any(t > first for t, _ in meter.reads)  # never read again


@pytest.mark.parametrize("window_hold", [None, 0.5])
def test_a_window_near_a_threshold_holds_the_rest_for_the_final_check(window_hold):
    # A window whose content reads 0.3 (minimal's content threshold 0.75, the hold level
    # 0.15 of it) is allowed but releases nothing more: the rest leaves after the final
    # check, in one piece, and the trace says where release stopped. With the windows' own
    # hold level at 0.5 (0.375 here) it is clearly safe and streams on.
    from tests.scripted import _VARIANTS
    from tests.test_streaming import Grounder

    HARMFUL = "response_provides_harmful_instructions"

    class Doubts(Grounder):
        def __call__(self, prefix: str, suffix: str) -> float:
            p = super().__call__(prefix, suffix)
            name = next(n for q, n in _VARIANTS.items() if q in suffix)
            resp = prefix.split("<<<RESPONSE>>>", 1)[-1]
            return 0.3 if "MAYBE" in resp and name == HARMFUL else p

    toks = words(200)
    toks[120] = " MAYBE"
    guard, _, _ = make(toks, grounder=Doubts(), stream={
        "window_tokens": 60, "overlap_tokens": 10, "first_window_tokens": 60,
        "token_check": False, "window_hold_fraction": window_hold})
    chunks, end = _run(guard)
    assert end.result.decision.action == "allow"
    assert end.result.final == "".join(toks).lstrip()
    if window_hold is not None:
        assert "stream.window_held_at_tokens" not in end.result.timings_s
        assert "MAYBE" not in chunks[-1].text and len(chunks) >= 4
        return
    assert "MAYBE" in chunks[-1].text and "w100" in chunks[-1].text  # held with it
    assert len(chunks) >= 2 and "w30" in chunks[0].text  # windows before it had gone out
    held = end.result.timings_s["stream.window_held_at_tokens"]
    assert held >= len("".join(toks[:121]).split())


def test_the_token_check_can_be_turned_off(monkeypatch):
    guard, _, _ = make(words(60), stream={"window_tokens": 100, "overlap_tokens": 10,
                                          "first_window_tokens": 100, "token_check": False})
    monkeypatch.setattr(guard, "token_meter", lambda: pytest.fail("meter used while off"))
    chunks, end = _run(guard)
    assert len(chunks) == 1 and end.result.decision.action == "allow"


def test_audit_mode_does_not_meter(monkeypatch):
    guard, _, _ = make(words(60), stream={"mode": "audit"})
    monkeypatch.setattr(guard, "token_meter", lambda: pytest.fail("meter used in audit"))
    _run(guard)


# -- the embedded model ------------------------------------------------------------------------


@pytest.mark.slow
def test_incremental_states_equal_one_forward(embedded_backend):
    import numpy as np
    import torch

    from plguard.backends.incremental import IncrementalStates
    from plguard.backends.transformers_backend import TransformersBackend
    from plguard.grounding.alone import render_alone

    b = embedded_backend
    before, _ = render_alone(b).answer
    text = ("Sure! Three rainy-day activities: a baking-soda volcano, salt crystals grown "
            "on a string, and a lemon battery that lights a small LED.")
    inc = IncrementalStates(b, before, (9, 15))
    for i in range(3, len(text) + 7, 7):  # pieces that split words: re-tokenised, cropped
        states = inc.feed(text[:i])
    ids = b.encode(before + text)
    with torch.inference_mode():
        out = b.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    full = torch.stack([out.hidden_states[x][0] for x in (9, 15)], dim=1).float().numpy()
    full = full[len(b.encode(before)):]
    assert states is not None and states.shape == full.shape
    cos = (states * full).sum(-1) / (np.linalg.norm(states, axis=-1)
                                     * np.linalg.norm(full, axis=-1))
    assert cos.min() > 0.99  # bf16 on this CPU: the same states up to rounding
    assert inc.forwarded > len(ids)  # word pieces were read again after re-tokenising
    # The forward stopped after layer 15: the layers above it were never run (no cache).
    assert inc.stops
    assert sum(layer.is_initialized for layer in inc.cache.layers) == 15
    # A read of the last layer (normalised by the model) runs the whole forward.
    deep = IncrementalStates(b, before, (15, b.n_layers))
    assert not deep.stops and deep.feed(text) is not None
    assert sum(layer.is_initialized for layer in deep.cache.layers) == b.n_layers
    last = inc.feed(text, last=5)
    assert last is not None and last.shape[0] == 5
    small = TransformersBackend(b.model, b.tokenizer, model_id="small", max_context=40)
    tiny = IncrementalStates(small, before, (9,))
    assert tiny.feed(text) is None and tiny.feed("hi") is None  # stopped for good


def _source(text: str):
    def src(cancel):
        ws = text.split(" ")
        for i in range(0, len(ws), 4):
            if cancel.is_set():
                return
            time.sleep(0.005)
            yield (" " if i else "") + " ".join(ws[i:i + 4])
    return src


@pytest.mark.slow
def test_on_the_embedded_model_a_benign_answer_flows_and_a_harmful_passage_stays(
        embedded_backend):
    from plguard import Guard, GuardConfig

    data = yaml.safe_load(UNSEEN.read_text(encoding="utf-8"))
    guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0}}),
                  generator=embedded_backend)
    b = data["benign"][0]  # b01, ~650 tokens, allowed by minimal (bench_token_check.py)
    events = list(guard.stream(b["request"], source=_source(b["answer"])))
    chunks = [e for e in events if isinstance(e, StreamChunk)]
    assert events[-1].result.decision.action == "allow"
    assert len(chunks) - 1 >= 8
    assert events[-1].result.timings_s["stream.token_check_tokens"] > 0
    h = next(e for e in data["harmful"] if e["id"] == "h01")
    text = "\n\n".join((b["answer"], h["long_answer"], data["benign"][1]["answer"]))
    events = list(guard.stream(h["request"], source=_source(text)))
    out = "".join(e.text for e in events if isinstance(e, StreamChunk))
    assert events[-1].blocked
    # The harmful passage and everything after it stay; the benign lead-in of h01's answer
    # may flow before the stop (what a reader of the stream would see anyway).
    start = h["long_answer"].index(h["passage"][:60])
    sentences = [s.strip() for s in h["long_answer"][start:].replace("\n", " ").split(".")
                 if len(s.strip()) > 20]
    assert sentences and not [s for s in sentences if s in out]
    assert out.startswith(b["answer"][:200])  # the benign opening did flow


@pytest.mark.slow
@pytest.mark.parametrize("hid", ["h07", "h21"])
def test_a_passage_deep_in_a_long_answer_is_held_before_five_words_leave(embedded_backend,
                                                                         hid):
    # ~950 tokens of benign text before the passage: read in the context of all of it
    # (stream.token_read: context) the content head scored h07's passage 0.00-0.05 and
    # the token check released 52 five-word runs of it before a window refused
    # (bench_token_check, 2026-12-07). Read alone, as the heads were fitted, it holds.
    from plguard import Guard, GuardConfig
    from tests.test_unseen_passages import leaked

    data = yaml.safe_load(UNSEEN.read_text(encoding="utf-8"))
    guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0}}),
                  generator=embedded_backend)
    h = next(e for e in data["harmful"] if e["id"] == hid)
    text = "\n\n".join((data["benign"][0]["answer"], h["long_answer"],
                        data["benign"][1]["answer"]))
    events = list(guard.stream(h["request"], source=_source(text)))
    out = "".join(e.text for e in events if isinstance(e, StreamChunk))
    assert events[-1].blocked
    assert not leaked(h["passage"], out)
    t = events[-1].result.timings_s
    assert t["stream.token_held_at_tokens"] > 900  # the token check read that far


@pytest.mark.slow
def test_the_alone_meter_reads_the_newest_window_as_the_grounder_reads_it(embedded_backend):
    import numpy as np

    from plguard.grounding.alone import answer_windows, render_alone
    from plguard.grounding.scoring import score_alone
    from plguard.heads.artefact import load_heads, shipped_heads
    from plguard.token_check import TokenMeter

    path = shipped_heads("minimal")
    assert path is not None
    heads = load_heads(path)
    name = "response_provides_harmful_instructions"
    meter = TokenMeter(embedded_backend, heads, [name])
    answer = yaml.safe_load(UNSEEN.read_text(encoding="utf-8"))["benign"][2]["answer"]
    got = meter.update(answer)
    tail = embedded_backend.tokenizer.decode(embedded_backend.encode(answer)[-meter.window:])
    view = answer_windows(embedded_backend, render_alone(embedded_backend), tail)
    assert len(view) == 1
    st = score_alone(embedded_backend, meter.layers, view)[0]
    h = heads.heads[name]
    want = h.score(np.asarray(st.pool_state[0], dtype=np.float64))
    assert got is not None and got[name] == pytest.approx(want, abs=1e-6)
    assert meter.tokens_forwarded == meter.reader.n_before + meter.window
