"""server.upstream is a ModelConfig: the old upstream_* keys map into it; drafts are retried.

The retry tests run the server app in process against a small real upstream on a
loopback port that fails a set number of requests before it answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from plguard import Guard, GuardConfig
from plguard.cli import build_parser
from plguard.config import ModelConfig, ServerConfig
from plguard.errors import ConfigError
from plguard.server import build_app
from plguard.server.cli import serve_config
from plguard.server.upstream import upstream_guard_config
from plguard.testing import LiveServer
from tests.scripted import ScriptedBackend, scripted_p_true, scripted_reply

from .helpers import sse_chunk

OLD = {"upstream_url": "http://gpu:8000/v1", "upstream_model": "llama",
       "upstream_api_key_env": "UP_KEY", "upstream_timeout_s": 900}


# -- the old keys ----------------------------------------------------------------------------

def test_old_keys_map_into_server_upstream_and_still_read():
    s = ServerConfig(**OLD)
    assert s.upstream == ModelConfig(backend="openai", base_url="http://gpu:8000/v1",
                                     served_model="llama", api_key_env="UP_KEY",
                                     request_timeout_s=900)
    assert (s.upstream_url, s.upstream_model, s.upstream_api_key_env,
            s.upstream_timeout_s) == tuple(OLD.values())
    # Dumped, the upstream is named once, and the dump builds the same config.
    dumped = s.model_dump()
    assert not set(OLD) & set(dumped) and dumped["upstream"]["base_url"] == OLD["upstream_url"]
    assert ServerConfig.model_validate(dumped) == s


def test_old_and_new_keys_from_a_file_and_set(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("server:\n  upstream_url: http://a:1/v1\n  upstream_timeout_s: 30\n")
    new = tmp_path / "new.yaml"
    new.write_text("server:\n  upstream:\n    base_url: http://a:1/v1\n"
                   "    request_timeout_s: 30\n")
    assert GuardConfig.from_yaml(old).server == GuardConfig.from_yaml(new).server
    # An old key given over a file that names the upstream wins (plguard serve --set).
    cfg = GuardConfig.from_yaml(new, **{"server.upstream_timeout_s": 900})
    assert cfg.server.upstream is not None and cfg.server.upstream.request_timeout_s == 900
    # A new key sets up an upstream where there was none.
    cfg = GuardConfig.from_dict({}, **{"server.upstream.base_url": "http://b:2/v1"})
    assert cfg.server.upstream is not None and cfg.server.upstream.backend == "openai"


def test_old_keys_without_a_url_configure_nothing():
    # An old manifest's server section: no upstream, nothing else changed.
    s = ServerConfig(upstream_url=None, upstream_model="m", upstream_api_key_env=None,
                     upstream_timeout_s=120.0)
    assert s.upstream is None and s.upstream_model is None


@pytest.mark.parametrize("upstream", [{"served_model": "m"},
                                      {"base_url": "http://a/v1", "backend": "vllm"}])
def test_an_upstream_is_a_server_with_a_url(upstream):
    with pytest.raises(ConfigError, match="server.upstream is an OpenAI-compatible server"):
        GuardConfig.from_dict({"server": {"upstream": upstream}})


def test_old_keys_are_marked_deprecated():
    for old, new in (("upstream_url", "base_url"), ("upstream_model", "served_model"),
                     ("upstream_api_key_env", "api_key_env"),
                     ("upstream_timeout_s", "request_timeout_s")):
        field = ServerConfig.model_fields[old]
        assert field.description == f"Deprecated: server.upstream.{new}." and field.exclude


def test_serve_flags_set_server_upstream(tmp_path):
    f = tmp_path / "serve.yaml"
    f.write_text("server:\n  upstream:\n    base_url: http://file:1/v1\n    max_retries: 7\n")
    args = build_parser().parse_args(["serve", "--config", str(f), "--upstream",
                                      "http://flag:2/v1", "--upstream-model", "m"])
    up = serve_config(args).server.upstream
    assert up is not None
    assert (up.base_url, up.served_model, up.max_retries) == ("http://flag:2/v1", "m", 7)


def test_upstream_grounding_takes_the_upstreams_server_settings():
    cfg = GuardConfig.from_dict({
        "generator": {"path": "tok", "max_concurrency": 32, "logprobs_mode": "topk"},
        "server": {"upstream_grounding": True,
                   "upstream": {"base_url": "http://gpu:8000/v1", "max_retries": 9,
                                "request_timeout_s": 60}}})
    g = upstream_guard_config(cfg).generator
    assert (g.backend, g.base_url, g.path, g.request_timeout_s) == (
        "openai", "http://gpu:8000/v1", "tok", 60)
    # Set on the upstream: its value; left at the default there: the generator's.
    assert (g.max_retries, g.max_concurrency, g.logprobs_mode) == (9, 32, "topk")


# -- drafts through the shared client ---------------------------------------------------------

@pytest.fixture
def flaky() -> Iterator[tuple[str, dict[str, Any]]]:
    """An upstream that answers 503 to its first ``state["fail"]`` requests."""
    state: dict[str, Any] = {"fail": 0, "seen": 0}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> Any:
        state["seen"] += 1
        if state["seen"] <= state["fail"]:
            return JSONResponse({"error": {"message": "warming up"}}, status_code=503)
        if body.get("stream"):
            from fastapi.responses import StreamingResponse

            chunks = [sse_chunk("up", {"content": "Hello."}), "data: [DONE]\n\n"]
            return StreamingResponse(iter(chunks), media_type="text/event-stream")
        return {"choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Hello."}}]}

    with LiveServer(app) as server:
        yield server.url + "/v1", state


def _app(minimal_policy, url: str, **upstream: Any) -> Any:
    guard = Guard(GuardConfig(), generator=ScriptedBackend(scripted_reply, scripted_p_true),
                  policy=minimal_policy)
    settings = ServerConfig(upstream=ModelConfig(backend="openai", base_url=url, **upstream))
    return build_app(guard, settings)


ASK = {"model": "plguard", "messages": [{"role": "user", "content": "Say hello."}]}


async def _ask(app: Any, **extra: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://plguard.test") as c:
        return await c.post("/v1/chat/completions", json={**ASK, **extra})


@pytest.mark.anyio
async def test_a_failing_upstream_draft_is_retried(flaky, minimal_policy):
    url, state = flaky
    state["fail"] = 2
    r = await _ask(_app(minimal_policy, url, max_retries=2))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Hello."
    assert state["seen"] == 3


@pytest.mark.anyio
async def test_upstream_retries_end_at_max_retries(flaky, minimal_policy):
    url, state = flaky
    state["fail"] = 5
    r = await _ask(_app(minimal_policy, url, max_retries=1))
    assert r.status_code == 502, r.text
    assert "failed after 2 tries: status 503: warming up" in r.json()["error"]["message"]
    assert state["seen"] == 2


@pytest.mark.anyio
async def test_an_upstream_stream_is_not_retried(flaky, minimal_policy):
    url, state = flaky
    state["fail"] = 1
    r = await _ask(_app(minimal_policy, url, max_retries=3), stream=True)
    assert r.status_code == 502 and "answered 503: warming up" in r.text
    assert state["seen"] == 1
    r = await _ask(_app(minimal_policy, url), stream=True)
    assert r.status_code == 200 and "Hello." in r.text



def test_an_old_key_set_on_the_command_line_applies_to_the_upstream_named_there():
    # plguard serve --upstream URL --set server.upstream_timeout_s=900: the timeout was lost
    # (the --set was validated before --upstream named the upstream), and a slow upstream
    # failed at the 120 s default (tests/backends/test_openai_vllm.py, CI 2026-12-06).
    args = build_parser().parse_args(["serve", "--upstream", "http://a:1/v1",
                                      "--set", "server.upstream_timeout_s=900"])
    cfg = serve_config(args)
    assert cfg.server.upstream is not None and cfg.server.upstream.request_timeout_s == 900
    args = build_parser().parse_args(["serve", "--upstream", "http://a:1/v1",
                                      "--upstream-grounding",
                                      "--set", "server.upstream_timeout_s=900"])
    assert serve_config(args).generator.request_timeout_s == 900
