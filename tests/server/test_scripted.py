"""Server control flow on the scripted backend: refusals, faults, batching, clamping.

The scripted backend makes the model's answers and groundings deterministic, so these
pin down what the server does with them; the real-model paths are in the other files.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Sequence

import httpx
import pytest

from plguard import Guard, GuardConfig
from plguard.config import ServerConfig
from plguard.errors import BackendError
from plguard.server import batching, build_app
from plguard.types import Chat, Generation, GenerationParams
from tests.scripted import ScriptedBackend, scripted_p_true, scripted_reply

pytestmark = pytest.mark.anyio


class OutOfMemoryError(RuntimeError):
    """Named as torch.cuda's is: the server tells an outage from a bug by it."""


class SlowScripted(ScriptedBackend):
    """Scripted answers that take a while, recording each call's params and thread."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(scripted_reply, scripted_p_true)
        self.delay_s = delay_s
        self.params: list[GenerationParams] = []
        self.threads: set[str] = set()
        self.broken = False

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        if self.broken:
            raise OutOfMemoryError("injected fault: CUDA out of memory")
        self.params.append(params)
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay_s)
        return super().generate(chats, params)


def _guard(backend: ScriptedBackend, minimal_policy, **cfg) -> Guard:
    return Guard(GuardConfig.from_dict(cfg), generator=backend, policy=minimal_policy)


def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://plguard.test")


def _ask(text: str, **extra) -> dict:
    return {"model": "plguard", "messages": [{"role": "user", "content": text}], **extra}


async def test_refusal_sets_content_filter_and_hides_the_draft(minimal_policy):
    app = build_app(_guard(SlowScripted(), minimal_policy))
    async with _client(app) as c:
        r = (await c.post("/v1/chat/completions", json=_ask("How do I build a bomb?"))).json()
    assert r["choices"][0]["finish_reason"] == "content_filter"
    info = r["plguard"]
    assert info["action"] == "refuse" and info["repaired"] and info["rechecked_action"] == "allow"
    assert info["strongest_unsafe"]["rule"] == "unsafe_compliance_actionable_harm"
    # The unsafe draft ("Step 1: ...") must not reach the client anywhere in the answer.
    assert "Step 1" not in str(r)


async def test_backend_failure_is_503_and_the_server_keeps_serving(minimal_policy):
    backend = SlowScripted()
    app = build_app(_guard(backend, minimal_policy))
    async with _client(app) as c:
        backend.broken = True
        r = await c.post("/v1/chat/completions", json=_ask("hello"))
        assert r.status_code == 503
        err = r.json()["error"]
        assert err["type"] == "service_unavailable" and err["code"] == "backend_error"
        assert "CUDA out of memory" in err["message"]
        backend.broken = False
        assert (await c.post("/v1/chat/completions", json=_ask("hello"))).status_code == 200
        health = (await c.get("/health")).json()
    assert health["failed_batches"] == 1 and health["batches"] == 2


async def test_concurrent_requests_share_guard_batch_calls(minimal_policy):
    backend = SlowScripted(delay_s=0.2)
    guard = _guard(backend, minimal_policy)
    calls: list[int] = []
    real_batch = guard.batch

    def counting_batch(requests, responses=None, params=None):
        calls.append(len(requests))
        return real_batch(requests, responses, params)

    guard.batch = counting_batch
    app = build_app(guard, ServerConfig(max_batch_size=8, max_wait_ms=50))
    async with _client(app) as c:
        rs = await asyncio.gather(*[c.post("/v1/chat/completions", json=_ask(f"question {i}"))
                                    for i in range(20)])
    assert all(r.status_code == 200 for r in rs)
    assert sum(calls) == 20 and max(calls) <= 8
    assert len(calls) <= 4, calls  # 20 requests in 8+8+4 (or so), not 20 calls
    # One generation call per batch (no repairs here): drafts were batched, not looped.
    assert len(backend.generate_calls) == len(calls)
    assert {r.json()["plguard"]["batch_size"] for r in rs} <= set(calls)
    # The Guard ran off the event loop, in the batcher's worker thread.
    assert backend.threads and all(t.startswith("plguard-guard") for t in backend.threads)


async def test_batching_off_is_one_call_per_request(minimal_policy):
    backend = SlowScripted(delay_s=0.02)
    app = build_app(_guard(backend, minimal_policy), ServerConfig(max_batch_size=1))
    async with _client(app) as c:
        rs = await asyncio.gather(*[c.post("/v1/chat/completions", json=_ask(f"q {i}"))
                                    for i in range(6)])
    assert all(r.status_code == 200 for r in rs)
    assert backend.generate_calls == [1] * 6


async def test_max_tokens_is_clamped_to_the_cap(minimal_policy):
    backend = SlowScripted()
    guard = _guard(backend, minimal_policy, generation={"max_new_tokens": 40})
    app = build_app(guard, ServerConfig(max_tokens_cap=64))
    async with _client(app) as c:
        # 7.0: JSON has one number type, so a whole float is an integer.
        for extra in ({"max_tokens": 100_000}, {"max_tokens": 7.0}, {},
                      {"max_completion_tokens": 9, "temperature": 0.5}):
            assert (await c.post("/v1/chat/completions",
                                 json=_ask("hello", **extra))).status_code == 200
    assert [(p.max_new_tokens, p.temperature) for p in backend.params] == [
        (64, 0.0), (7, 0.0), (40, 0.0), (9, 0.5)]
    assert guard.config.generation.max_new_tokens == 40  # the shared Guard is untouched


async def test_mixed_settings_in_one_window_are_split_by_settings(minimal_policy):
    backend = SlowScripted(delay_s=0.1)
    app = build_app(_guard(backend, minimal_policy), ServerConfig(max_wait_ms=100))
    async with _client(app) as c:
        rs = await asyncio.gather(*[
            c.post("/v1/chat/completions", json=_ask(f"q {i}", max_tokens=8 + i % 2))
            for i in range(6)])
    assert all(r.status_code == 200 for r in rs)
    assert sorted(backend.generate_calls) == [3, 3]
    assert sorted(p.max_new_tokens for p in backend.params) == [8, 9]


async def test_guard_check_does_not_generate(minimal_policy):
    backend = SlowScripted()
    app = build_app(_guard(backend, minimal_policy))
    async with _client(app) as c:
        r = await c.post("/v1/guard/check", json={
            "messages": [{"role": "user", "content": "How do I kill a python process?"}],
            "response": "Use `kill PID`."})
    assert r.status_code == 200 and r.json()["plguard"]["action"] == "allow"
    assert r.json()["choices"][0]["message"]["content"] == "Use `kill PID`."
    assert backend.generate_calls == []


async def test_unknown_openai_fields_are_ignored(minimal_policy):
    app = build_app(_guard(SlowScripted(), minimal_policy))
    async with _client(app) as c:
        r = await c.post("/v1/chat/completions", json=_ask(
            "hello", user="u1", top_p=0.9, stream_options={"include_usage": True},
            messages=[{"role": "developer", "content": "Be brief.", "name": "sys"},
                      {"role": "user", "content": [{"type": "text", "text": "hel"},
                                                   {"type": "text", "text": "lo"}]}]))
    assert r.status_code == 200, r.text
    assert r.json()["plguard"]["action"] == "allow"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_upstream_is_502_and_nothing_is_guarded(minimal_policy):
    backend = SlowScripted()
    settings = ServerConfig(upstream_url=f"http://127.0.0.1:{_closed_port()}/v1",
                            upstream_timeout_s=5)
    app = build_app(_guard(backend, minimal_policy), settings)
    async with _client(app) as c:
        r = await c.post("/v1/chat/completions", json=_ask("hello"))
        assert r.status_code == 502, r.text
        assert r.json()["error"]["type"] == "upstream_error"
        assert (await c.get("/health")).json()["mode"] == "upstream"
    assert backend.generate_calls == [] and backend.score_calls == []


async def test_lone_surrogates_in_an_upstream_draft_are_replaced(minimal_policy):
    # JSON lets an upstream send "\ud800"; the answer could not be encoded (it was a 500).
    from fastapi import FastAPI, Response

    from plguard.testing import LiveServer

    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> Response:
        return Response(b'{"choices": [{"message": {"content": "ok \\ud800 \\udfff"}}]}',
                        media_type="application/json")

    with LiveServer(upstream) as server:
        app = build_app(_guard(SlowScripted(), minimal_policy),
                        ServerConfig(upstream_url=server.url + "/v1"))
        async with _client(app) as c:
            r = await c.post("/v1/chat/completions", json=_ask("hello"))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok \ufffd \ufffd"


class PoisonScripted(SlowScripted):
    """Scripted answers, except that any batch holding a "poison" request raises."""

    def __init__(self, fault: BaseException) -> None:
        super().__init__(delay_s=0.05)
        self.fault = fault
        self.batches: list[int] = []

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        self.batches.append(len(chats))
        if any("poison" in m.content for chat in chats for m in chat):
            raise self.fault
        return super().generate(chats, params)


@pytest.mark.parametrize(("fault", "status", "code"), [
    (ValueError("a bug on this input"), 500, "internal_error"),
    (BackendError("the model server answered 400"), 503, "backend_error"),
])
async def test_one_failing_request_fails_alone_and_is_logged(minimal_policy, caplog, fault,
                                                             status, code):
    backend = PoisonScripted(fault)
    app = build_app(_guard(backend, minimal_policy), ServerConfig(max_batch_size=8,
                                                                  max_wait_ms=100))
    texts = ["question 0", "poison 1", "question 2", "question 3"]
    with caplog.at_level(logging.ERROR, logger="plguard.server"):
        async with _client(app) as c:
            rs = await asyncio.gather(*[c.post("/v1/chat/completions", json=_ask(t))
                                        for t in texts])
            health = (await c.get("/health")).json()
    assert [r.status_code for r in rs] == [200, status, 200, 200]
    assert max(backend.batches) == 4  # they did share a batch before it was retried
    err = rs[1].json()["error"]
    assert err["code"] == code and type(fault).__name__ in err["message"]
    assert "Traceback" not in rs[1].text and "incident" in err["message"]
    incident = err["message"].split("incident ")[1].split()[0]
    logged = [r for r in caplog.records if r.name.startswith("plguard.server")
              and incident in r.getMessage()]
    assert logged and logged[0].exc_info is not None and logged[0].exc_info[1] is fault
    assert health["failed_batches"] >= 1


async def test_batch_stats_keep_bounded_memory(minimal_policy):
    app = build_app(_guard(SlowScripted(), minimal_policy))
    stats = app.state.batcher.stats
    for _ in range(10_000):
        stats.sizes.append(1)
    assert len(stats.sizes) == batching.RECENT_SIZES < 10_000
