"""The one client for OpenAI-compatible servers: retries, errors and streams, sync and async.

A local httpx.MockTransport plays the server, so each test decides every answer and
counts the attempts; nothing leaves the process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from plguard.backends.openai_client import (
    AsyncOpenAIClient,
    OpenAIClient,
    RemoteStatusError,
    Reply,
)
from plguard.config import ModelConfig
from plguard.errors import BackendDeadError, BackendError, ConfigError

URL = "http://up.test/v1"
OK = {"choices": [{"message": {"content": "hi"}}],
      "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

Answer = Callable[[int], Any]  # attempt number (1-based) -> response, or an exception


class Server:
    """Answers /v1/... by ``answer`` and /health by ``health``; records every request."""

    def __init__(self, answer: Answer, health: int | None = 200) -> None:
        self.answer = answer
        self.health = health
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            if self.health is None:
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(self.health)
        self.calls.append(request.url.path)
        out = self.answer(len(self.calls))
        if isinstance(out, Exception):
            if isinstance(out, httpx.RequestError):
                out.request = request
            raise out
        return out


def _client(kind: str, server: Server, **kw: Any) -> Any:
    settings = {"connect_timeout_s": 1.0, "request_timeout_s": 2.0, "max_retries": 2,
                "max_concurrency": 2, "backoff_s": 0.0, **kw}
    cls = OpenAIClient if kind == "sync" else AsyncOpenAIClient
    return cls(URL, transport=httpx.MockTransport(server), **settings)


def _post(kind: str, client: Any) -> Reply:
    """One POST through either client (the async one on a fresh loop, then closed)."""
    if kind == "sync":
        try:
            return client.post("/chat/completions", {"x": 1})
        finally:
            client.close()

    async def run() -> Reply:
        try:
            return await client.post("/chat/completions", {"x": 1})
        finally:
            await client.aclose()

    return asyncio.run(run())


KINDS = pytest.mark.parametrize("kind", ["sync", "async"])


def test_limits_come_from_config():
    with pytest.raises(TypeError, match="connect_timeout_s"):
        OpenAIClient("http://127.0.0.1:9/v1")  # type: ignore[call-arg]


@KINDS
def test_429_and_5xx_are_retried_then_succeed(kind):
    codes = iter([429, 503])
    server = Server(lambda n: httpx.Response(next(codes, 200), json=OK))
    reply = _post(kind, _client(kind, server))
    assert reply.body == OK and (reply.prompt_tokens, reply.completion_tokens) == (3, 1)
    assert len(server.calls) == 3


@KINDS
def test_retries_stop_after_max_retries_with_a_clear_error(kind):
    server = Server(lambda n: httpx.Response(500, json={"error": {"message": "boom"}}))
    with pytest.raises(BackendError, match="failed after 3 tries: status 500: boom") as exc:
        _post(kind, _client(kind, server, max_retries=2))
    assert not isinstance(exc.value, BackendDeadError)  # /health answers: the server is up
    assert len(server.calls) == 3


@KINDS
def test_no_retries_means_one_try(kind):
    server = Server(lambda n: httpx.Response(503, text="busy"))
    with pytest.raises(BackendError, match="failed after 1 tries: status 503: busy"):
        _post(kind, _client(kind, server, max_retries=0))
    assert len(server.calls) == 1


@KINDS
def test_broken_connections_are_retried_and_a_gone_server_is_dead(kind):
    server = Server(lambda n: httpx.ConnectError("refused"), health=None)
    with pytest.raises(BackendDeadError, match="is gone.*3 tries"):
        _post(kind, _client(kind, server))
    assert len(server.calls) == 3
    flaky = Server(lambda n: httpx.ReadError("reset") if n == 1 else httpx.Response(200, json=OK))
    assert _post(kind, _client(kind, flaky)).body == OK and len(flaky.calls) == 2


@KINDS
def test_other_4xx_are_not_retried(kind):
    server = Server(lambda n: httpx.Response(400, json={"error": {"message": "bad field"}}))
    with pytest.raises(RemoteStatusError, match="answered 400: bad field") as exc:
        _post(kind, _client(kind, server))
    assert (exc.value.status, exc.value.detail) == (400, "bad field")
    assert len(server.calls) == 1


@KINDS
def test_a_read_timeout_fails_once_naming_the_setting(kind):
    server = Server(lambda n: httpx.ReadTimeout("slow"))
    with pytest.raises(BackendError, match=r"no answer within 2 s \(model.request_timeout_s\)"):
        _post(kind, _client(kind, server))
    assert len(server.calls) == 1
    # Connecting is different: nothing reached the server yet, so it is tried again.
    connect = Server(lambda n: httpx.ConnectTimeout("no route") if n == 1
                     else httpx.Response(200, json=OK))
    assert _post(kind, _client(kind, connect)).body == OK and len(connect.calls) == 2


@KINDS
def test_retry_after_is_honoured(kind):
    server = Server(lambda n: httpx.Response(429, headers={"Retry-After": "0.3"})
                    if n == 1 else httpx.Response(200, json=OK))
    t0 = time.perf_counter()
    assert _post(kind, _client(kind, server)).body == OK
    assert time.perf_counter() - t0 >= 0.3 and len(server.calls) == 2


@KINDS
def test_backoff_grows_between_tries(kind):
    server = Server(lambda n: httpx.Response(502))
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match="after 3 tries"):
        _post(kind, _client(kind, server, backoff_s=0.1))
    # 0.1 and 0.2 s, each with jitter in [0.5, 1): at least 0.15 s in all.
    assert 0.15 <= time.perf_counter() - t0 < 2.0


@KINDS
def test_a_body_that_is_not_json_fails_naming_the_endpoint(kind):
    server = Server(lambda n: httpx.Response(200, text="<html>"))
    with pytest.raises(BackendError, match=r"POST http://up.test/v1/chat/completions .*not JSON"):
        _post(kind, _client(kind, server))


def test_from_config_reads_the_model_config(monkeypatch):
    monkeypatch.setenv("UP_KEY", "s3cret")
    cfg = ModelConfig(backend="openai", base_url=URL + "/", api_key_env="UP_KEY",
                      max_retries=5, request_timeout_s=7)
    for cls in (OpenAIClient, AsyncOpenAIClient):
        c = cls.from_config(cfg)
        assert (c.base_url, c.root, c.max_retries, c.request_timeout_s) == (
            URL, "http://up.test", 5, 7)
        assert c._headers == {"Authorization": "Bearer s3cret"}
    with pytest.raises(ConfigError, match="NO_SUCH_VAR, which is not set"):
        OpenAIClient.from_config(cfg.model_copy(update={"api_key_env": "NO_SUCH_VAR"}))
    lenient = AsyncOpenAIClient.from_config(
        cfg.model_copy(update={"api_key_env": "NO_SUCH_VAR"}), key_required=False)
    assert lenient._headers == {}


def _sse(*events: str) -> httpx.Response:
    body = "".join(f"{e}\n\n" for e in events)
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


def test_stream_reads_server_sent_events_until_done():
    server = Server(lambda n: _sse(": keep-alive", 'data: {"a": 1}', "event: x\ndata: {\"a\": 2}",
                                   "data: [DONE]", 'data: {"a": 3}'))
    client = _client("sync", server)
    assert list(client.stream("/chat/completions", {}, threading.Event())) == [{"a": 1},
                                                                                {"a": 2}]
    cancel = threading.Event()
    it = client.stream("/chat/completions", {}, cancel)
    assert next(it) == {"a": 1}
    cancel.set()
    assert list(it) == []
    client.close()


def test_stream_failures_are_backend_errors_and_not_retried():
    bad = Server(lambda n: _sse('data: {"a": 1}', "data: not json"))
    client = _client("sync", bad)
    with pytest.raises(BackendError, match="streamed an event that is not JSON"):
        list(client.stream("/chat/completions", {}, threading.Event()))
    busy = Server(lambda n: httpx.Response(503, text="busy"))
    client = _client("sync", busy)
    with pytest.raises(BackendError, match=r"\(stream\) answered 503: busy"):
        list(client.stream("/chat/completions", {}, threading.Event()))
    assert len(busy.calls) == 1
    refused = Server(lambda n: httpx.Response(404, text="no such route"))
    with pytest.raises(RemoteStatusError, match="answered 404"):
        list(_client("sync", refused).stream("/chat/completions", {}, threading.Event()))


def test_a_server_that_does_not_stream_answers_whole():
    client = _client("sync", Server(lambda n: httpx.Response(200, json=OK)))
    with client.open_stream("/chat/completions", {}) as es:
        assert not es.is_sse and es.json().body == OK
    client.close()
