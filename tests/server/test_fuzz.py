"""Property-based fuzzing of the server (issue 17; results and commands in docs/fuzzing.md).

The property, for every generated request: the answer is a status the route documents in
the OpenAPI schema, never a 5xx; a 200 body validates against the documented schema (a
stream is valid server-sent events of chunks ending in ``data: [DONE]``); an error is the
OpenAI error shape with no traceback; no request hangs (every call has a timeout); and the
server still answers a normal request afterwards.

Two generators, one real uvicorn server each:

- schemathesis, from ``app.openapi()``: valid requests (positive) and schema violations
  (negative) for every operation, with its own checks (status, content type, response
  schema, negative data rejected) plus :func:`check_answer`;
- hypothesis strategies in fuzz_inputs.py for what the schema cannot describe: lone
  surrogates, byte-level damage, bodies over the limit, tool messages, image parts, ...

Both run on the scripted backend; a short run sends the hand-written strategies through the
embedded model. Examples are derandomized (CI is reproducible); ``PLGUARD_FUZZ_EXAMPLES=N``
sets every run's example count for a longer manual run.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings

from plguard import Guard, GuardConfig
from plguard.config import ServerConfig
from plguard.server import build_app
from plguard.testing import LiveServer
from tests.scripted import ScriptedBackend, scripted_p_true, scripted_reply

from .fuzz_inputs import CHAT, CHECK, MODEL, MODERATIONS, Probe, check_answer, probe, probes

schemathesis = pytest.importorskip("schemathesis", reason="fuzz tests need: pip install "
                                   "schemathesis (the dev extra)")
from schemathesis.checks import CHECKS, load_all_checks  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TIMEOUT_S = 30.0  # per request: a request still unanswered by then counts as a hang
LIMIT = 64 * 1024  # max_body_bytes here, so that oversized bodies are cheap to send


def _examples(default: int) -> int:
    return int(os.environ.get("PLGUARD_FUZZ_EXAMPLES") or default)


def _settings(default: int) -> settings:
    return settings(max_examples=_examples(default), derandomize=True, database=None,
                    deadline=None, phases=[Phase.explicit, Phase.generate, Phase.shrink],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


class Tally:
    """How many requests each test sent, by route and outcome (printed with -s)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def add(self, path: str, outcome: str) -> None:
        self.counts[(path, outcome)] += 1

    def outcomes(self, path: str) -> set[str]:
        return {o for (p, o) in self.counts if p == path}

    def report(self) -> None:
        rows = ", ".join(f"{p} {o}: {n}" for (p, o), n in sorted(self.counts.items()))
        print(f"\n[fuzz] {self.name}: {sum(self.counts.values())} requests; {rows}")


def _send(url: str, p: Probe, timeout_s: float) -> httpx.Response:
    headers = {"content-type": p.content_type} if p.content_type else {}
    return httpx.post(url + p.path, content=p.body, headers=headers, timeout=timeout_s)


def _still_serving(url: str) -> None:
    """A normal request after the fuzzing is answered (the server keeps serving)."""
    r = httpx.post(url + CHAT, timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": "How do I boil an egg?"}]})
    assert r.status_code == 200, r.text
    check_answer(CHAT, r.status_code, r.headers, r.content)
    assert httpx.get(url + "/health", timeout=TIMEOUT_S).json()["failed_batches"] == 0


@pytest.fixture(scope="module")
def scripted_app(minimal_policy):
    backend = ScriptedBackend(scripted_reply, scripted_p_true)
    guard = Guard(GuardConfig.from_dict({}), generator=backend, policy=minimal_policy)
    return build_app(guard, ServerConfig(max_body_bytes=LIMIT, max_tokens_cap=64,
                                         max_wait_ms=0))


@pytest.fixture(scope="module")
def scripted_url(scripted_app) -> Iterator[str]:
    with LiveServer(scripted_app) as server:
        yield server.url


# Schemathesis -----------------------------------------------------------------------------
_OPERATIONS = [("GET", "/health"), ("GET", "/v1/models"), ("GET", "/v1/models/{model}"),
               ("POST", CHAT), ("POST", CHECK), ("POST", MODERATIONS)]
_CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
           "response_schema_conformance", "negative_data_rejection"]


def test_schema_documents_every_route(scripted_app):
    # The schema is what the fuzzer trusts: every route is in it with its error statuses.
    schema = scripted_app.openapi()
    ops = {(m.upper(), p) for p, item in schema["paths"].items() for m in item}
    assert ops == set(_OPERATIONS)
    chat = schema["paths"][CHAT]["post"]["responses"]
    assert set(chat) == {"200", "400", "401", "404", "413", "422", "500", "502", "503"}
    assert set(chat["200"]["content"]) == {"application/json", "text/event-stream"}
    assert "HTTPValidationError" not in str(schema)
    moderations = schema["paths"][MODERATIONS]["post"]["responses"]
    assert set(moderations) == {"200", "400", "401", "404", "413", "422", "500", "503"}


# Negative cases need input a schema can violate: no GET route has any (the one path
# parameter is any string).
_RUNS = [(m, p, "positive") for m, p in _OPERATIONS] + [("POST", CHAT, "negative"),
                                                          ("POST", CHECK, "negative"),
                                                          ("POST", MODERATIONS, "negative")]


@pytest.mark.parametrize(("method", "path", "mode"), _RUNS)
def test_schemathesis(scripted_app, scripted_url, method, path, mode):
    schema = schemathesis.openapi.from_dict(scripted_app.openapi())
    operation = schema[path][method]
    load_all_checks()
    checks = CHECKS.get_by_names(_CHECKS)
    tally = Tally(f"schemathesis {mode} {method} {path}")
    generation = schemathesis.GenerationMode(mode)

    @_settings(150 if method == "POST" else 25)
    @given(case=operation.as_strategy(generation_mode=generation))
    def fuzz(case: schemathesis.Case) -> None:
        note(case.as_curl_command(base_url=scripted_url))
        response = case.call(base_url=scripted_url, timeout=TIMEOUT_S)
        case.validate_response(response, checks=checks)
        if mode == "positive" and method == "POST":
            # The schema says exactly what is accepted: valid data is answered (or too big).
            assert response.status_code in (200, 413), response.text[:500]
        documented = frozenset(int(s) for s in case.operation.responses.status_codes
                               if s.isdigit() and s != "200")
        headers = {k: v[0] for k, v in response.headers.items()}
        tally.add(path, check_answer(response.request.path_url, response.status_code,
                                     headers, response.content, documented))

    fuzz()
    tally.report()
    _still_serving(scripted_url)
    if mode == "positive" and path == CHAT:
        # Reaching the guard, not only the validators, and both ways of answering.
        assert {"200", "200 stream"} <= tally.outcomes(path), tally.counts
    if mode == "positive" and method == "GET":
        assert "200" in tally.outcomes(path), tally.counts
    if mode == "negative" and method == "POST":
        assert tally.outcomes(path) >= {"422"}, tally.counts


# Hand-written strategies ----------------------------------------------------------------
# Regressions the fuzzing found, kept as explicit examples (see docs/fuzzing.md).
_REGRESSIONS = [
    probe(CHECK, {"messages": [{"role": "user", "content": "hi"}], "response": "a\ud800b"},
          label="surrogate in response was a 500"),
    probe(CHAT, {"model": MODEL, "stream": True,
                 "messages": [{"role": "user", "content": "x\udc00"}]},
          label="surrogate in a message failed the batch (503) on a real tokenizer"),
    probe(CHAT, {"model": MODEL, "temperature": 1e-300,
                 "messages": [{"role": "user", "content": "hi"}]},
          label="tiny temperature overflowed sampling (503) on a real model"),
    Probe(CHAT, b'{"model": "plguard", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
          label="deep nesting: 'There was an error parsing the body'"),
]


def _run_probes(url: str, tally: Tally, n: int, timeout_s: float = TIMEOUT_S) -> None:
    @_settings(n)
    @given(p=probes())
    @example(p=_REGRESSIONS[0])
    @example(p=_REGRESSIONS[1])
    @example(p=_REGRESSIONS[2])
    @example(p=_REGRESSIONS[3])
    def fuzz(p: Probe) -> None:
        note(repr(p))
        r = _send(url, p, timeout_s)
        tally.add(p.path, check_answer(p.path, r.status_code, r.headers, r.content))

    fuzz()
    tally.report()


def test_hostile_requests_scripted(scripted_url):
    tally = Tally("hostile requests, scripted backend")
    _run_probes(scripted_url, tally, 300)
    _still_serving(scripted_url)
    seen = tally.outcomes(CHAT) | tally.outcomes(CHECK)
    assert {"200", "200 stream", "400", "404", "413", "422"} <= seen, tally.counts
    assert {"200", "400", "422"} <= tally.outcomes(MODERATIONS), tally.counts


def test_hostile_requests_embedded_model(embedded_backend, minimal_policy):
    # Inputs reach a real tokenizer and a real sampler here (the scripted backend takes any
    # str and any temperature). Kept short: 4 new tokens, 256 data tokens per grounding
    # question, and bodies over 2 KiB are refused (413), so a request costs seconds even
    # on a loaded 2-core machine; the timeout is longer for the same reason.
    cfg = GuardConfig.from_dict({"generation": {"max_new_tokens": 4},
                                 "grounding": {"max_data_tokens": 256}})
    guard = Guard(cfg, generator=embedded_backend, policy=minimal_policy)
    app = build_app(guard, ServerConfig(max_body_bytes=2048, max_tokens_cap=4,
                                        max_wait_ms=0))
    tally = Tally("hostile requests, embedded model")
    with LiveServer(app) as server:
        _run_probes(server.url, tally, 40, timeout_s=120)
        _still_serving(server.url)
    assert "200" in tally.outcomes(CHAT) | tally.outcomes(CHECK), tally.counts


def test_the_property_can_fail() -> None:
    # check_answer is the oracle of every test above: it must reject what it is meant to.
    ok = {"content-type": "application/json"}
    for status, body in [(500, b'{"error": {"message": "x", "type": "t", "code": "c"}}'),
                         (418, b'{"error": {"message": "x", "type": "t", "code": "c"}}'),
                         (422, b'{"detail": [{"loc": ["body"]}]}'),
                         (200, b'{"id": "x"}')]:
        with pytest.raises((AssertionError, ValueError)):  # pydantic's errors are ValueErrors
            check_answer(CHAT, status, ok, body)
    stream = {"content-type": "text/event-stream"}
    with pytest.raises(AssertionError):  # no [DONE]
        check_answer(CHAT, 200, stream, b'data: {"id": "x"}\n\n')
