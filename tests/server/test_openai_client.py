"""The real ``openai`` client against a real uvicorn server on a loopback port.

The server guards the embedded model (16 new tokens) through a FaultSwitch, so one
server covers answers, streaming, every bad input, auth, batching and a backend fault.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")

from plguard import Guard, GuardConfig  # noqa: E402
from plguard.config import ServerConfig  # noqa: E402
from plguard.server import build_app  # noqa: E402

from .helpers import MAX_NEW_TOKENS, FaultSwitch, LiveServer  # noqa: E402

KEY_ENV = "PLGUARD_TEST_SERVER_KEY"
KEY = "test-key-123"
MESSAGES = [{"role": "user", "content": "Name a colour of the sky."}]


class Served:
    def __init__(self, guard: Guard, switch: FaultSwitch, server: LiveServer) -> None:
        self.guard, self.switch, self.server = guard, switch, server
        self.batch_calls: list[int] = []

    def client(self, api_key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.server.url}/v1", api_key=api_key,
                             max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def served(embedded_backend, minimal_policy) -> Iterator[Served]:
    switch = FaultSwitch(embedded_backend)
    cfg = GuardConfig.from_dict({"generation": {"max_new_tokens": MAX_NEW_TOKENS}})
    guard = Guard(cfg, generator=switch, policy=minimal_policy)
    settings = ServerConfig(api_key_env=KEY_ENV, max_body_bytes=64 * 1024, max_wait_ms=200,
                            max_batch_size=8)
    old = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = KEY
    try:
        app = build_app(guard, settings)  # the key is read once, here
    finally:
        if old is None:
            del os.environ[KEY_ENV]
        else:
            os.environ[KEY_ENV] = old
    with LiveServer(app) as server:
        s = Served(guard, switch, server)
        real_batch = guard.batch

        def counting_batch(requests, responses=None, params=None):
            s.batch_calls.append(len(requests))
            return real_batch(requests, responses, params)

        guard.batch = counting_batch
        yield s


def test_models_list_and_retrieve(served):
    client = served.client()
    assert [m.id for m in client.models.list()] == ["plguard"]
    assert client.models.retrieve("plguard").id == "plguard"


def test_chat_completion_and_its_stream(served):
    client = served.client()
    resp = client.chat.completions.create(model="plguard", messages=MESSAGES,
                                          max_tokens=MAX_NEW_TOKENS)
    assert resp.object == "chat.completion" and resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content
    trace = (resp.model_extra or {})["plguard"]
    assert trace["action"] in {"allow", "refuse", "rewrite"}
    assert set(trace["predicates"]) == {p.name for p in served.guard.policy.predicates}
    assert (resp.choices[0].finish_reason == "content_filter") == (trace["action"] == "refuse")
    assert resp.usage is not None and resp.usage.completion_tokens > 0

    stream = client.chat.completions.create(model="plguard", messages=MESSAGES,
                                            max_tokens=MAX_NEW_TOKENS, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == resp.choices[0].message.content  # greedy decoding: the same answer
    assert chunks[-1].choices[0].finish_reason == resp.choices[0].finish_reason
    assert (chunks[-1].model_extra or {})["plguard"]["action"] == trace["action"]
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_bad_inputs_raise_typed_errors(served):
    client = served.client()
    create = client.chat.completions.create
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/chat/completions", cast_to=object, content=b'{"model": "plguard", "mes',
                    options={"headers": {"Content-Type": "application/json"}})
    assert e.value.code == "invalid_json"
    with pytest.raises(openai.UnprocessableEntityError):
        create(model="plguard", messages="hello")  # type: ignore[arg-type]
    with pytest.raises(openai.UnprocessableEntityError):
        create(model="plguard", messages=MESSAGES, max_tokens="16")  # type: ignore[arg-type]
    with pytest.raises(openai.UnprocessableEntityError) as e:
        create(model="plguard", messages=[])
    assert e.value.param == "messages"
    with pytest.raises(openai.UnprocessableEntityError):
        create(model="plguard", messages=MESSAGES, n=2)
    with pytest.raises(openai.BadRequestError) as e:
        create(model="plguard", messages=[{"role": "system", "content": "no user here"}])
    assert e.value.code == "invalid_messages"
    with pytest.raises(openai.NotFoundError) as e:
        create(model="gpt-4o", messages=MESSAGES)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        create(model="gpt-4o", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIStatusError) as e:
        create(model="plguard", messages=[{"role": "user", "content": "x" * 100_000}])
    assert e.value.status_code == 413 and e.value.code == "request_too_large"
    with pytest.raises(openai.BadRequestError) as e:
        create(model="plguard", messages=MESSAGES, extra_body={"thresholds": {"unsafe": 1.0}})
    assert e.value.code == "policy_fixed"
    with pytest.raises(openai.AuthenticationError):
        served.client(api_key="wrong").models.list()


def test_backend_fault_is_503_then_recovers(served):
    client = served.client()
    served.switch.broken = True
    try:
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model="plguard", messages=MESSAGES)
        assert e.value.status_code == 503 and "injected fault" in e.value.message
    finally:
        served.switch.broken = False
    resp = client.chat.completions.create(model="plguard", messages=MESSAGES)
    assert resp.choices[0].message.content


def test_concurrent_clients_are_batched(served):
    served.batch_calls.clear()
    client = served.client()
    prompts = ["Name a fruit.", "Name a city.", "Name a planet.", "Name a bird."]
    with ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(lambda p: client.chat.completions.create(
            model="plguard", messages=[{"role": "user", "content": p}]), prompts))
    assert all(a.choices[0].message.content for a in answers)
    assert sum(served.batch_calls) == len(prompts)
    assert len(served.batch_calls) < len(prompts), served.batch_calls
