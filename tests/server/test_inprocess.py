"""The server app in-process (httpx ASGI transport) on the real embedded model.

Error paths never reach the model, so they share the real guard without costing a
generation; control flow that needs a deterministic model (refusals, fault injection,
batch counting, max_tokens clamping) uses the scripted backend in test_scripted.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from plguard.config import ServerConfig
from plguard.server import build_app
from plguard.server.schemas import ChatCompletion, ChatCompletionChunk

from .helpers import MAX_NEW_TOKENS

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "How do I boil an egg?"}]


@pytest.fixture
async def client(real_guard) -> AsyncIterator[httpx.AsyncClient]:
    app = build_app(real_guard, ServerConfig(max_body_bytes=64 * 1024, max_tokens_cap=32))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://plguard.test") as c:
        yield c


def _sse_events(text: str) -> list[str]:
    assert text.endswith("\n\n")
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    return [e.removeprefix("data: ") for e in events]


async def test_chat_completion_and_its_stream(client, real_guard):
    body = {"model": "plguard", "messages": USER}
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    c = ChatCompletion.model_validate(r.json())
    assert c.object == "chat.completion" and c.id.startswith("chatcmpl-")
    assert len(c.choices) == 1 and c.choices[0].message.content.strip()
    info = c.plguard
    assert set(info.predicates) == {p.name for p in real_guard.policy.predicates}
    assert all(0.0 <= p <= 1.0 for p in info.predicates.values())
    assert info.strongest_unsafe.rule in real_guard.policy.unsafe_rules
    assert info.rules and info.policy == real_guard.policy.id
    assert info.mode == "local" and info.batch_size == 1
    assert {"generate", "ground", "reason", "decide", "queue", "total"} <= set(info.timings_s)
    assert (c.choices[0].finish_reason == "content_filter") == (info.action == "refuse")
    assert 0 < c.usage.completion_tokens <= MAX_NEW_TOKENS + 8  # re-tokenised final text
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens

    # The same request streamed, guarded window by window: the same (greedy) answer.
    r = await client.post("/v1/chat/completions", json={
        **body, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(e)) for e in events[:-1]]
    usage = chunks.pop()  # asked for: after the finish, a chunk of usage alone
    assert usage.choices == [] and usage.usage == c.usage
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({ch.id for ch in chunks}) == 1
    assert all(ch.choices[0].finish_reason is None for ch in chunks[:-1])
    last = chunks[-1]
    assert last.choices[0].finish_reason == c.choices[0].finish_reason
    assert last.plguard is not None and last.plguard.action == info.action
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == c.choices[0].message.content


async def test_guard_check_grounds_a_given_response(client, real_guard):
    response = "Put the egg in boiling water for about nine minutes."
    r = await client.post("/v1/guard/check", json={
        "messages": [{"role": "user", "content": "How do I boil an egg?"}],
        "response": response})
    assert r.status_code == 200, r.text
    c = ChatCompletion.model_validate(r.json())
    assert c.plguard.mode == "check" and "generate" not in c.plguard.timings_s
    if c.plguard.action == "allow":
        assert c.choices[0].message.content == response


async def test_models_and_health(client, real_guard):
    r = await client.get("/v1/models")
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["plguard"]
    assert (await client.get("/v1/models/plguard")).status_code == 200
    h = (await client.get("/health")).json()
    assert h["status"] == "ok" and h["policy"] == real_guard.policy.id and h["mode"] == "local"


def _assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code is not None:
        assert err["code"] == code
    return err


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"model": "plguard", "messages": []}, 422, "messages"),
    ({"model": "plguard", "messages": "hi"}, 422, "messages"),
    ({"model": "plguard", "messages": USER, "max_tokens": "16"}, 422, "max_tokens"),
    ({"model": "plguard", "messages": USER, "max_tokens": 0}, 422, "max_tokens"),
    ({"model": "plguard", "messages": USER, "temperature": 5}, 422, "temperature"),
    ({"model": "plguard", "messages": USER, "n": 2}, 422, "n"),
    ({"model": "plguard", "messages": USER, "stream": "yes"}, 422, "stream"),
    ({"model": 7, "messages": USER}, 422, "model"),
    ({"messages": USER}, 422, "model"),
    ({"model": "plguard", "messages": [{"role": "wizard", "content": "hi"}]}, 422,
     "messages.0.role"),
    ({"model": "plguard", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, 422, "messages.0.content"),
    ({"model": "plguard", "messages": [*USER, {"role": "tool", "tool_call_id": "c1",
                                                "content": "22C"}]}, 422, "messages.1.role"),
    ({"model": "plguard", "messages": USER, "max_tokens": 16.5}, 422, "max_tokens"),
])
async def test_wrong_types_are_422(client, body, status, param):
    err = _assert_error(await client.post("/v1/chat/completions", json=body), status)
    assert err["param"] == param


async def test_malformed_json_is_400(client):
    r = await client.post("/v1/chat/completions", content=b'{"model": "plguard", "messages": [',
                          headers={"content-type": "application/json"})
    _assert_error(r, 400, "invalid_json")
    # Bodies the JSON parser raises on (not JSONDecodeError): a clear 400, not FastAPI's
    # "There was an error parsing the body".
    for body, why in [(b'{"model": "\xff"}', "not UTF-8"), (b"[" * 50_000, "nested too deeply"),
                      (b'{"n": ' + b"9" * 5000 + b"}", "digits")]:
        r = await client.post("/v1/chat/completions", content=body,
                              headers={"content-type": "application/json"})
        assert why in _assert_error(r, 400, "invalid_json")["message"]


@pytest.mark.parametrize(("body", "ctype"), [(b"null", "application/json"), (b"", None),
                                             (b'{"model": "plguard"}', "text/plain")])
async def test_a_body_that_is_not_a_json_object_is_422(client, body, ctype):
    headers = {"content-type": ctype} if ctype else {}
    r = await client.post("/v1/chat/completions", content=body, headers=headers)
    assert "must be a JSON object" in _assert_error(r, 422, "invalid_value")["message"]


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/guard/check", b'{"messages": [{"role": "user", "content": "hi"}], '
                        b'"response": "a\\ud800"}', "response"),
    ("/v1/chat/completions", b'{"model": "plguard", "messages": [{"role": "user", '
                             b'"content": [{"type": "text", "text": "\\udfff"}]}]}',
     "messages.0.content.0.text"),
])
async def test_lone_surrogates_are_422(client, path, body, param):
    # JSON's \ud800 escape is a str Python keeps but no tokenizer takes and no answer can
    # encode: it was a 500 (a checked response) and a failed batch (a message).
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    err = _assert_error(r, 422, "invalid_value")
    assert err["param"] == param and "surrogate" in err["message"]


async def test_no_user_message_is_400(client):
    r = await client.post("/v1/chat/completions", json={
        "model": "plguard", "messages": [{"role": "system", "content": "Be brief."}]})
    assert _assert_error(r, 400, "invalid_messages")["param"] == "messages"


async def test_unknown_model_is_404(client):
    r = await client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": USER})
    assert _assert_error(r, 404, "model_not_found")["param"] == "model"
    _assert_error(await client.get("/v1/models/gpt-4o"), 404, "model_not_found")
    _assert_error(await client.get("/v1/nothing-here"), 404)


async def test_oversized_body_is_413_declared_or_chunked(client):
    big = {"model": "plguard", "messages": [{"role": "user", "content": "x" * 70_000}]}
    _assert_error(await client.post("/v1/chat/completions", json=big), 413, "request_too_large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i:i + 8192]

    r = await client.post("/v1/chat/completions", content=chunks(),
                          headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    _assert_error(r, 413, "request_too_large")


@pytest.mark.parametrize("field", ["policy", "thresholds", "plguard"])
async def test_policy_cannot_be_set_by_a_request(client, field):
    value = {"policy": "none", "thresholds": {"unsafe": 1.0}, "plguard": {"policy": "x"}}[field]
    r = await client.post("/v1/chat/completions",
                          json={"model": "plguard", "messages": USER, field: value})
    assert _assert_error(r, 400, "policy_fixed")["param"] == field
    r = await client.post("/v1/guard/check", json={"messages": USER, "response": "ok",
                                                   field: value})
    _assert_error(r, 400, "policy_fixed")


async def test_api_key_from_environment(real_guard, monkeypatch):
    monkeypatch.setenv("PLGUARD_TEST_KEY", "s3cret")
    app = build_app(real_guard, ServerConfig(api_key_env="PLGUARD_TEST_KEY"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                 base_url="http://plguard.test") as c:
        assert (await c.get("/health")).status_code == 200  # liveness needs no key
        _assert_error(await c.get("/v1/models"), 401, "invalid_api_key")
        _assert_error(await c.get("/v1/models", headers={"Authorization": "Bearer nope"}), 401)
        _assert_error(await c.get("/v1/models", headers={"Authorization": "s3cret"}), 401)
        # Without the key, nothing else is revealed: a malformed body is still a 401.
        _assert_error(await c.post("/v1/chat/completions", content=b"{"), 401)
        ok = await c.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
