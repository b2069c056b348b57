"""TransformersBackend.stream_generate on the embedded model: exact deltas, prompt cancel."""

from __future__ import annotations

import threading
import time

from plguard.types import GenerationParams, Message

# Accents and a non-Latin script: multi-byte characters split over byte-level tokens.
CHAT = (Message("user", "Say hello in French and in Japanese (こんにちは), then count to "
                "five."),)


def test_deltas_join_to_exactly_the_generated_text(embedded_backend):
    params = GenerationParams(max_new_tokens=24)
    full = embedded_backend.generate([CHAT], params)[0].text
    parts = list(embedded_backend.stream_generate(CHAT, params, threading.Event()))
    assert len(parts) > 3
    assert "".join(parts) == full
    assert all(p and "\ufffd" not in p for p in parts)


def test_cancel_stops_generation_at_once(embedded_backend):
    cancel = threading.Event()
    before = threading.active_count()
    it = embedded_backend.stream_generate(CHAT, GenerationParams(max_new_tokens=400), cancel)
    next(it)
    t0 = time.perf_counter()
    cancel.set()
    rest = list(it)
    assert time.perf_counter() - t0 < 2.0
    assert len(rest) <= 3  # what was decoded before the next step saw the cancel
    assert threading.active_count() == before  # the generation thread is gone


def test_closing_the_iterator_ends_the_generation_thread(embedded_backend):
    before = threading.active_count()
    cancel = threading.Event()
    it = embedded_backend.stream_generate(CHAT, GenerationParams(max_new_tokens=400), cancel)
    next(it)
    t0 = time.perf_counter()
    it.close()
    assert time.perf_counter() - t0 < 2.0
    assert threading.active_count() == before
    assert not cancel.is_set()  # the caller's event is left alone
