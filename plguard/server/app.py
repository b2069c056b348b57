"""The OpenAI-compatible guard server: ``build_app(guard, settings)``.

Routes are thin: they validate, hand the request to the dynamic batcher (and, in upstream
mode, first ask the upstream server for a draft), and shape the result like the OpenAI
chat API with a ``plguard`` trace attached. Everything shared lives on ``app.state``.

Error contract: every non-2xx answer is ``{"error": {"message", "type", "param", "code"}}``;
malformed JSON 400, wrong types 422, missing/wrong API key 401, unknown model 404,
oversized body 413, a backend outage 503 and a bug in the Guard 500 (only the requests
that fail get them: a failed batch is retried one request at a time), the
upstream server failing 502 (errors.py). Each route documents its statuses in the
OpenAPI schema (``app.openapi()``, see openapi.py), and the fuzz tests hold the server to it.

Streaming (``stream: true``) is guarded window by window (plguard/server/streaming.py over
:mod:`plguard.streaming`): text leaves only once the window holding it is allowed, so the
first tokens arrive after the request check and one window, not after the whole answer; a
block ends the stream with the refusal and ``finish_reason: "content_filter"``.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from plguard.config import ServerConfig
from plguard.errors import InputError
from plguard.messages import to_chat
from plguard.server.batching import (
    BatchOutcome,
    DynamicBatcher,
    GenKey,
    GuardFailed,
    GuardUnavailable,
)
from plguard.server.completion import build_completion
from plguard.server.errors import ApiError, add_error_handlers, unanswered
from plguard.server.moderations import register as register_moderations
from plguard.server.openapi import error_responses, install_openapi
from plguard.server.schemas import (
    POLICY_FIELDS,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    GuardCheckRequest,
    Health,
    Mode,
    ModelCard,
    ModelList,
)
from plguard.server.streaming import stream_completion
from plguard.server.upstream import (
    UpstreamClient,
    UpstreamDraft,
    UpstreamError,
    upstream_tokens,
)
from plguard.types import Chat

if TYPE_CHECKING:
    from plguard.guard import Guard

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# An oversized body is read and dropped up to this much before the 413 goes out: closing
# a socket with unread data makes the client see a connection reset instead of the 413.
_DRAIN_LIMIT = 64 * 1024 * 1024


class _Gate:
    """Bearer-key check on ``/v1/*`` and the body size limit, before any parsing.

    Pure ASGI rather than a route dependency so that a caller without the key learns
    nothing else (not even whether the body parsed), and an oversized body is never
    handed to the JSON parser.
    """

    def __init__(self, app: ASGIApp, *, api_key: str, max_body_bytes: int) -> None:
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if self.api_key and str(scope.get("path", "")).startswith("/v1/"):
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    token.strip().encode(), self.api_key.encode()):
                err = ApiError(401, "missing or wrong API key: send the header "
                               "'Authorization: Bearer <key>' with the key the server was "
                               "started with", type="authentication_error",
                               code="invalid_api_key")
                await self._drain(receive, _DRAIN_LIMIT)
                await err.response()(scope, receive, send)
                return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            if int(declared) <= _DRAIN_LIMIT:
                await self._drain(receive, _DRAIN_LIMIT)
            await self._too_large().response()(scope, receive, send)
            return
        chunks: list[bytes] = []
        total = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_body_bytes:
                await self._drain(receive, _DRAIN_LIMIT - total)
                await self._too_large().response()(scope, receive, send)
                return
            chunks.append(body)
            more = bool(message.get("more_body", False))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self) -> ApiError:
        return ApiError(413, f"request body is larger than the server's limit of "
                        f"{self.max_body_bytes} bytes (server.max_body_bytes)",
                        code="request_too_large")

    @staticmethod
    async def _drain(receive: Receive, budget: int) -> None:
        more = True
        while more and budget > 0:
            message = await receive()
            if message["type"] != "http.request":
                return
            budget -= len(message.get("body", b""))
            more = bool(message.get("more_body", False))


def build_app(guard: Guard, settings: ServerConfig | None = None) -> FastAPI:
    """The server app around a loaded ``guard``; ``settings`` default to its config's.

    The policy, thresholds and models are the Guard's and cannot be changed by a request.
    """
    settings = settings or guard.config.server
    batcher = DynamicBatcher(guard, max_batch_size=settings.max_batch_size,
                             max_wait_ms=settings.max_wait_ms)
    upstream = UpstreamClient(settings.upstream) if settings.upstream else None
    if upstream is not None and upstream.model is None and settings.upstream_grounding:
        # The Guard's openai backend already found which model the upstream serves.
        upstream.model = getattr(guard.generator, "served_model", None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await batcher.aclose()
        if upstream is not None:
            await upstream.aclose()
        # The guard serves this app alone once it is built: shutdown frees its pools,
        # engines and cache (a backend the caller passed to the Guard stays open).
        guard.close()

    # No /docs or /openapi.json: a guard in front of an app exposes only what it serves.
    app = FastAPI(title="plguard", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.guard = guard
    app.state.settings = settings
    app.state.batcher = batcher
    app.state.upstream = upstream
    app.state.started = int(time.time())
    app.add_middleware(_Gate, api_key=os.environ.get(settings.api_key_env, ""),
                       max_body_bytes=settings.max_body_bytes)
    add_error_handlers(app)
    _add_routes(app)
    register_moderations(app)  # POST /v1/moderations
    install_openapi(app, settings.model_name)
    return app


def _add_routes(app: FastAPI) -> None:
    @app.get("/health")
    async def health(request: Request) -> Health:
        state = request.app.state
        stats = state.batcher.stats
        return Health(model=state.settings.model_name, policy=state.guard.policy.id,
                      mode="upstream" if state.upstream else "local", batches=stats.batches,
                      requests=stats.requests, failed_batches=stats.failed_batches,
                      max_batch_size=state.settings.max_batch_size)

    @app.get("/v1/models", responses=error_responses(401))
    async def models(request: Request) -> ModelList:
        return ModelList(data=[_card(request)])

    @app.get("/v1/models/{model}", responses=error_responses(401, 404))
    async def model(model: str, request: Request) -> ModelCard:
        _check_model(model, request.app.state.settings)
        return _card(request)

    @app.post("/v1/chat/completions", response_model=None,
              responses={200: {"model": ChatCompletion},
                         **error_responses(400, 401, 404, 413, 422, 500, 502, 503)})
    async def chat_completions(body: ChatCompletionRequest,
                               request: Request) -> JSONResponse | StreamingResponse:
        state = request.app.state
        _reject_policy_fields(body)
        _check_model(body.model, state.settings)
        chat = _chat(body.messages)
        key = _gen_key(body, state.settings, state.guard)
        if body.stream:
            return await stream_completion(request, body, chat, key)
        timings: dict[str, float] = {}
        draft: UpstreamDraft | None = None
        if state.upstream is not None:
            t0 = time.perf_counter()
            try:
                draft = await state.upstream.draft(body.model, [m.as_dict() for m in
                                                                body.messages],
                                                   upstream_tokens(body.requested_tokens,
                                                                   state.settings),
                                                   key.temperature)
            except UpstreamError as exc:
                raise ApiError(502, str(exc), type="upstream_error", code=exc.code) from None
            timings["upstream"] = time.perf_counter() - t0
        outcome = await _submit(state.batcher, chat, key,
                                draft.text if draft is not None else None)
        mode: Mode = "upstream" if draft is not None else "local"
        completion = build_completion(body.model, outcome, key, mode, timings, draft)
        return JSONResponse(completion.model_dump(mode="json"))

    @app.post("/v1/guard/check", response_model=None,
              responses={200: {"model": ChatCompletion},
                         **error_responses(400, 401, 404, 413, 422, 500, 503)})
    async def guard_check(body: GuardCheckRequest, request: Request) -> JSONResponse:
        state = request.app.state
        _reject_policy_fields(body)
        if body.model is not None:
            _check_model(body.model, state.settings)
        chat = _chat(body.messages)
        key = _gen_key(None, state.settings, state.guard)
        outcome = await _submit(state.batcher, chat, key, body.response)
        completion = build_completion(body.model or state.settings.model_name, outcome, key,
                                 "check", {})
        return JSONResponse(completion.model_dump(mode="json"))


# Route helpers ---------------------------------------------------------------------------
def _card(request: Request) -> ModelCard:
    return ModelCard(id=request.app.state.settings.model_name,
                     created=request.app.state.started)


def _check_model(model: str, settings: ServerConfig) -> None:
    if model != settings.model_name:
        raise ApiError(404, f"model {model!r} is not served here; this server serves "
                       f"{settings.model_name!r} (server.model_name)", param="model",
                       code="model_not_found")


def _reject_policy_fields(body: ChatCompletionRequest | GuardCheckRequest) -> None:
    bad = sorted(POLICY_FIELDS & set(body.model_extra or {}))
    if bad:
        raise ApiError(400, f"'{bad[0]}' cannot be set by a request: the policy and its "
                       "thresholds are fixed when the server starts", param=bad[0],
                       code="policy_fixed")


def _chat(messages: list[ChatMessage]) -> Chat:
    try:
        return to_chat([m.as_dict() for m in messages])
    except InputError as exc:
        raise ApiError(400, str(exc), param="messages", code="invalid_messages") from None


def _gen_key(body: ChatCompletionRequest | None, settings: ServerConfig, guard: Guard) -> GenKey:
    # Above the cap a request is clamped, not refused: OpenAI clients often send a large
    # max_tokens by default, and a drop-in proxy must not break them for it.
    gen = guard.config.generation
    asked = body.requested_tokens if body is not None else None
    temperature = body.temperature if body is not None else None
    return GenKey(max_new_tokens=min(asked or gen.max_new_tokens, settings.max_tokens_cap),
                  temperature=gen.temperature if temperature is None else temperature)


async def _submit(batcher: DynamicBatcher, chat: Chat, key: GenKey,
                  response: str | None) -> BatchOutcome:
    try:
        return await batcher.submit(chat, key, response=response)
    except (GuardUnavailable, GuardFailed) as exc:
        raise unanswered(exc) from None
