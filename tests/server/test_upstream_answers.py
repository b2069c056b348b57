"""What the server does with the upstream's answer: no text, its usage, its finish reason.

The upstream is a fake on a loopback port that answers exactly what a test tells it to;
the Guard is the scripted one, so only the server's handling of those answers is tested.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from plguard import Guard, GuardConfig
from plguard.config import ServerConfig
from plguard.server import build_app
from plguard.testing import LiveServer
from tests.scripted import ScriptedBackend, scripted_p_true, scripted_reply

pytestmark = pytest.mark.anyio

ANSWER = "Water is wet because its molecules stick to surfaces they touch."


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, dict[str, Any]]]:
    reply: dict[str, Any] = {}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> Any:
        return {"id": "up", "object": "chat.completion", "created": 0, "model": "up",
                "choices": [{"index": 0, **reply["choice"]}], **reply.get("extra", {})}

    with LiveServer(app) as server:
        yield server.url + "/v1", reply


def _app(minimal_policy, upstream_url: str | None = None, max_new_tokens: int = 64) -> Any:
    guard = Guard(GuardConfig.from_dict({"generation": {"max_new_tokens": max_new_tokens}}),
                  generator=ScriptedBackend(scripted_reply, scripted_p_true),
                  policy=minimal_policy)
    return build_app(guard, ServerConfig(upstream_url=upstream_url))


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://plguard.test")


ASK = {"model": "plguard", "messages": [{"role": "user", "content": "Why is water wet?"}]}


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "rm", "arguments": "{\"path\": \"/\"}"}}]},
    {"role": "assistant", "content": None, "reasoning_content": "Let me think."},
])
async def test_upstream_answer_without_text_is_an_error_not_an_empty_draft(
        upstream, minimal_policy, message):
    url, reply = upstream
    reply.clear()
    reply["choice"] = {"finish_reason": "tool_calls", "message": message}
    async with _client(_app(minimal_policy, url)) as c:
        r = await c.post("/v1/chat/completions", json=ASK)
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert err["code"] == "upstream_no_content"
    assert "content is null" in err["message"] and "only" in err["message"]


async def test_upstream_usage_and_finish_reason_are_the_upstreams(upstream, minimal_policy):
    url, reply = upstream
    reply.clear()
    reply["choice"] = {"finish_reason": "stop",
                       "message": {"role": "assistant", "content": ANSWER}}
    reply["extra"] = {"usage": {"prompt_tokens": 1234, "completion_tokens": 3,
                                "total_tokens": 1237}}
    # 4 new tokens allowed; the scripted tokenizer counts 11 words in the answer.
    async with _client(_app(minimal_policy, url, max_new_tokens=4)) as c:
        r = (await c.post("/v1/chat/completions", json=ASK)).json()
        assert r["plguard"]["action"] == "allow"
        assert r["choices"][0]["finish_reason"] == "stop"
        assert r["usage"] == {"prompt_tokens": 1234, "completion_tokens": 3,
                              "total_tokens": 1237}
        reply["choice"]["finish_reason"] = "length"
        r = (await c.post("/v1/chat/completions", json=ASK)).json()
        assert r["choices"][0]["finish_reason"] == "length"


async def test_check_never_reports_length_for_a_supplied_answer(minimal_policy):
    async with _client(_app(minimal_policy, max_new_tokens=4)) as c:
        r = (await c.post("/v1/guard/check", json={**ASK, "response": ANSWER})).json()
    assert r["plguard"]["action"] == "allow"
    assert r["choices"][0]["finish_reason"] == "stop"
