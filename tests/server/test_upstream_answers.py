"""What the server does with the upstream's answer: no text, its usage, its finish reason.

The upstream is a fake on a loopback port that answers exactly what a test tells it to;
the Guard is the scripted one, so only the server's handling of those answers is tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

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
    async def chat(request: Request) -> Any:
        body = await request.json()
        reply.setdefault("seen", []).append(body)
        choice = reply["choice"]
        if body.get("stream"):  # the answer a few words a chunk, then its finish reason
            words = choice["message"]["content"].split(" ")
            events = [{"choices": [{"index": 0, "delta": {"content": " ".join(words[i:i + 3])
                                                          + " "}}]}
                      for i in range(0, len(words), 3)]
            events.append({"choices": [{"index": 0, "delta": {},
                                        "finish_reason": choice["finish_reason"]}]})
            sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            return StreamingResponse(iter([sse]), media_type="text/event-stream")
        return {"id": "up", "object": "chat.completion", "created": 0, "model": "up",
                "choices": [{"index": 0, **choice}], **reply.get("extra", {})}

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


async def test_the_clients_max_tokens_goes_upstream_and_none_if_none(upstream, minimal_policy):
    url, reply = upstream
    reply.clear()
    reply["choice"] = {"finish_reason": "stop",
                       "message": {"role": "assistant", "content": ANSWER}}
    app = _app(minimal_policy, url)
    async with _client(app) as c:
        for extra in ({}, {"max_tokens": 7}, {"max_completion_tokens": 9},
                      {"max_tokens": 10**6}):
            for stream in (False, True):
                r = await c.post("/v1/chat/completions", json={**ASK, **extra,
                                                               "stream": stream})
                assert r.status_code == 200, r.text
    cap = app.state.settings.max_tokens_cap
    # None asked, none sent (the upstream answers at its own length); asked: sent, clamped.
    assert [b.get("max_tokens") for b in reply["seen"]] == [None, None, 7, 7, 9, 9, cap, cap]


@pytest.mark.parametrize("finish", ["stop", "length"])
async def test_a_streamed_upstream_answer_ends_with_the_upstreams_finish_reason(
        upstream, minimal_policy, finish):
    url, reply = upstream
    reply.clear()
    reply["choice"] = {"finish_reason": finish,
                       "message": {"role": "assistant", "content": ANSWER}}
    # 4 new tokens locally: the answer's 11 words would read as "length" by our count.
    async with _client(_app(minimal_policy, url, max_new_tokens=4)) as c:
        r = await c.post("/v1/chat/completions", json={**ASK, "stream": True})
    chunks = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {")]
    finishes = [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]
                and ch["choices"][0].get("finish_reason")]
    assert finishes == [finish]
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks
                   if ch["choices"])
    assert text.strip() == ANSWER
