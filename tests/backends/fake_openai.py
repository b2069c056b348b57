"""A small fake OpenAI-compatible server, only for fault injection.

The main path of the openai backend is tested against a real ``vllm serve``
(test_openai_vllm.py); this app answers in the same shapes with fixed log-probabilities
and lets a test queue faults per endpoint: ``429`` (then success), ``500``, ``slow``
(past any short timeout), ``badjson``; ``app.state.no_logprobs`` drops log-probabilities
from every answer.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

MODEL = "fake-model"


def fake_app(tokenizer: Any, *, true_lp: float = -0.5, false_lp: float = -1.5,
             tokenize: str = "match", exact: str = "token_ids",
             text_topk: bool = False) -> FastAPI:
    """The fake server. ``tokenize``: match | mismatch | missing; ``exact``: token_ids |
    echo (rejects logprob_token_ids, as a server without it would) | none; ``text_topk``:
    answer top-k log-probabilities for text prompts on /v1/completions."""
    app = FastAPI()
    app.state.faults = {}  # path -> list of faults, consumed one per request
    app.state.seen = []
    app.state.in_flight = 0
    app.state.max_in_flight = 0
    app.state.top_k_entries = None  # override the top-k list (bound tests)
    app.state.no_logprobs = False
    # Streamed chat: these pieces, one per event, ``stream_delay_s`` apart; the count sent
    # and whether the client went away are recorded (cancel tests).
    app.state.stream_pieces = [" Hello", ",", " wor", "ld", ".", " "]
    app.state.stream_delay_s = 0.0
    app.state.stream_sent = 0
    app.state.stream_disconnected = False

    async def fault(path: str) -> Response | None:
        queue = app.state.faults.get(path) or []
        if not queue:
            return None
        kind = queue.pop(0)
        if kind == "429":
            return JSONResponse({"error": {"message": "slow down"}}, status_code=429,
                                headers={"Retry-After": "0"})
        if kind == "500":
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)
        if kind == "slow":
            await asyncio.sleep(3.0)
            return None
        if kind == "400schema":  # a server without structured outputs
            return JSONResponse({"error": {"message": "response_format.json_schema is not "
                                           "supported"}}, status_code=400)
        if kind == "badjson":
            return PlainTextResponse("{not json", media_type="application/json")
        return None

    def track(body: dict[str, Any], path: str) -> None:
        app.state.seen.append((path, body))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": MODEL, "object": "model",
                                            "max_model_len": 2048}]}

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> Any:
        body = await request.json()
        if tokenize == "missing":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        ids = list(tokenizer.encode(body["prompt"], add_special_tokens=False))
        return {"tokens": ids[::-1] if tokenize == "mismatch" else ids}

    def usage(n_prompt: int, n_new: int) -> dict[str, int]:
        return {"prompt_tokens": n_prompt, "completion_tokens": n_new,
                "total_tokens": n_prompt + n_new}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await request.json()
        track(body, "/v1/completions")
        app.state.in_flight += 1
        app.state.max_in_flight = max(app.state.max_in_flight, app.state.in_flight)
        try:
            await asyncio.sleep(0.05)
            bad = await fault("/v1/completions")
            if bad is not None:
                return bad
            if isinstance(body["prompt"], str):
                top = {" True": true_lp, " False": false_lp, " The": -3.0}
                lp = ({"tokens": [" True"], "token_logprobs": [true_lp], "top_logprobs": [top]}
                      if text_topk and body.get("logprobs") else None)
                return {"object": "text_completion", "model": MODEL, "usage": usage(20, 1),
                        "choices": [{"index": 0, "text": " True", "logprobs": lp}]}
            prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
            ids = body.get("logprob_token_ids")
            if exact == "none" or (ids and exact == "echo"):
                return JSONResponse({"error": {"message": "unknown field"}}, status_code=400)
            choices = []
            nologprobs = app.state.no_logprobs
            for i, p in enumerate(prompts):
                ch: dict[str, Any] = {"index": i, "text": " True", "finish_reason": "length"}
                if body.get("echo"):
                    ans = p[-1]
                    lp = true_lp if ans in TRUE_IDS else false_lp
                    ch["logprobs"] = {"token_logprobs": [None] + [-1.0] * (len(p) - 2) + [lp]}
                elif ids:
                    ch["logprobs"] = {"top_logprobs": [{
                        f"token_id:{t}": (true_lp if t in TRUE_IDS else false_lp)
                        - (5.0 if t in SECOND_SPELLINGS else 0.0) for t in ids}]}
                if nologprobs:
                    ch["logprobs"] = None
                choices.append(ch)
            return {"object": "text_completion", "model": MODEL, "choices": choices,
                    "usage": usage(sum(len(p) for p in prompts), len(prompts))}
        finally:
            app.state.in_flight -= 1

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        track(body, "/v1/chat/completions")
        app.state.in_flight += 1
        app.state.max_in_flight = max(app.state.max_in_flight, app.state.in_flight)
        try:
            await asyncio.sleep(0.05)
            bad = await fault("/v1/chat/completions")
            if bad is not None:
                return bad
            if body.get("stream"):
                return _sse(app, request, body)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": " Hello."}}
            if body.get("logprobs"):
                entries = app.state.top_k_entries or [
                    {"token": " True", "logprob": true_lp},
                    {"token": " False", "logprob": false_lp},
                    {"token": " The", "logprob": -3.0},
                ]
                if app.state.no_logprobs:
                    entries = []
                first = dict(entries[0]) if entries else {"token": " x", "logprob": -0.1}
                first["top_logprobs"] = entries[:body.get("top_logprobs", 20)]
                choice["logprobs"] = {"content": [first]}
            return {"object": "chat.completion", "model": MODEL, "choices": [choice],
                    "usage": usage(10, 2)}
        finally:
            app.state.in_flight -= 1

    return app


def _sse(app: FastAPI, request: Request, body: dict[str, Any]) -> StreamingResponse:
    app.state.stream_sent = 0
    app.state.stream_disconnected = False

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        chunk = {"object": "chat.completion.chunk", "model": MODEL, "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(chunk)}\n\n"

    async def events() -> Any:
        try:
            yield event({"role": "assistant", "content": ""})
            for piece in app.state.stream_pieces:
                if app.state.stream_delay_s:
                    await asyncio.sleep(app.state.stream_delay_s)
                app.state.stream_sent += 1
                yield event({"content": piece})
            yield event({}, "stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": 7, "completion_tokens": app.state.stream_sent,
                         "total_tokens": 7 + app.state.stream_sent}
                yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            app.state.stream_disconnected = True
            raise

    return StreamingResponse(events(), media_type="text/event-stream")


# Filled in by the test module from the real tokenizer (ids of " True"/"True", ...).
TRUE_IDS: set[int] = set()
SECOND_SPELLINGS: set[int] = set()


def expected_p_true(true_lp: float, false_lp: float) -> float:
    """P(True) the backend must report for the fake token-id answers."""
    lt = true_lp + math.log1p(math.exp(-5.0))
    lf = false_lp + math.log1p(math.exp(-5.0))
    return 1 / (1 + math.exp(lf - lt))
