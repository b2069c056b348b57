"""Upstream mode against a real second OpenAI-compatible server on another loopback port.

The upstream is a minimal FastAPI app that answers with the embedded model's own
generations (a stand-in for vLLM or llama.cpp); plguard asks it for the draft and grounds,
decides and repairs locally.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from plguard import Guard, GuardConfig  # noqa: E402
from plguard.config import ServerConfig  # noqa: E402
from plguard.messages import to_chat  # noqa: E402
from plguard.server import build_app  # noqa: E402
from plguard.types import GenerationParams  # noqa: E402

from .helpers import MAX_NEW_TOKENS, FaultSwitch, LiveServer  # noqa: E402


def upstream_app(backend: Any) -> FastAPI:
    """An OpenAI-compatible chat endpoint over a real backend, recording what it saw."""
    app = FastAPI()
    app.state.seen = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        if body.get("model") == "broken":
            return JSONResponse({"error": {"message": "upstream exploded",
                                           "type": "server_error"}}, status_code=500)
        # A client that sets no max_tokens sends none upstream: the upstream picks.
        params = GenerationParams(max_new_tokens=body.get("max_tokens", MAX_NEW_TOKENS),
                                  temperature=body.get("temperature") or 0.0)
        gen = (await asyncio.to_thread(backend.generate, [to_chat(body["messages"])], params))[0]
        app.state.seen.append({"body": body, "reply": gen.text})
        return {"id": "up-1", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": gen.text}}]}

    return app


@pytest.fixture(scope="module")
def upstream(embedded_backend) -> Iterator[tuple[LiveServer, FastAPI]]:
    app = upstream_app(embedded_backend)
    with LiveServer(app) as server:
        yield server, app


def test_upstream_drafts_and_plguard_guards(upstream, embedded_backend, minimal_policy):
    up_server, up_app = upstream
    up_app.state.seen.clear()
    local = FaultSwitch(embedded_backend)  # counts local generations: none for the draft
    guard = Guard(GuardConfig.from_dict({"generation": {"max_new_tokens": MAX_NEW_TOKENS}}),
                  generator=local, policy=minimal_policy)
    settings = ServerConfig(upstream_url=f"{up_server.url}/v1", upstream_model="smollm2",
                            max_tokens_cap=12)
    with LiveServer(build_app(guard, settings)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                               timeout=300)
        messages = [{"role": "system", "content": "Answer in one sentence."},
                    {"role": "user", "content": "What is the capital of France?"}]
        resp = client.chat.completions.create(model="plguard", messages=messages,
                                              max_tokens=1000, temperature=0)
        stream = list(client.chat.completions.create(model="plguard", messages=messages,
                                                     max_tokens=1000, stream=True))
    trace = (resp.model_extra or {})["plguard"]
    assert trace["mode"] == "upstream" and "upstream" in trace["timings_s"]
    assert len(up_app.state.seen) == 2
    sent = up_app.state.seen[0]["body"]
    assert sent["model"] == "smollm2" and sent["max_tokens"] == 12  # clamped before forwarding
    assert sent["messages"] == messages and sent["stream"] is False
    # The draft came from upstream: no local draft generation (only repairs may generate).
    assert len(local.generate_calls) == int(trace["repaired"]) + int(
        (stream[-1].model_extra or {})["plguard"]["repaired"])
    assert local.score_calls >= 2  # grounding stayed local
    if trace["action"] == "allow":
        assert resp.choices[0].message.content == up_app.state.seen[0]["reply"]
    streamed = "".join(c.choices[0].delta.content or "" for c in stream)
    assert streamed == resp.choices[0].message.content


def test_upstream_error_is_502_and_plguard_keeps_serving(upstream, real_guard):
    up_server, _ = upstream
    settings = ServerConfig(upstream_url=f"{up_server.url}/v1", upstream_model="broken")
    with LiveServer(build_app(real_guard, settings)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as e:
                client.chat.completions.create(
                    model="plguard", messages=[{"role": "user", "content": "hi"}])
            assert e.value.status_code == 502 and "upstream exploded" in e.value.message
        assert [m.id for m in client.models.list()] == ["plguard"]
