"""Upstream generator mode: another OpenAI-compatible server drafts, plguard guards.

The draft comes from ``{upstream_url}/chat/completions`` (vLLM, llama.cpp, Ollama or
anything that speaks the API); the decision stays here, through
``guard.batch(requests, responses=drafts)``. Grounding and repair run on the Guard's own
models, or, with ``server.upstream_grounding``, on the upstream too (an ``openai``
backend, :func:`upstream_guard_config`), so plguard loads no model at all. Upstream
drafts are not batched here: each request is forwarded as it comes, since the upstream
server batches its own traffic. A streamed request (``stream: true``) streams from the
upstream too (:meth:`UpstreamClient.open_stream`): the guard checks the upstream's draft
window by window as it arrives, and hangs up on the upstream when it blocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from plguard.config import GuardConfig, ServerConfig
from plguard.errors import ConfigError
from plguard.messages import replace_lone_surrogates


def upstream_guard_config(cfg: GuardConfig) -> GuardConfig:
    """``cfg`` with every model role on the upstream server when upstream grounding is on.

    The generator (which repairs) becomes an ``openai`` backend on ``server.upstream_url``
    and grounds too; ``generator.path`` keeps naming the tokenizer and chat template.
    """
    s = cfg.server
    if not s.upstream_grounding:
        return cfg
    if not s.upstream_url:
        raise ConfigError("server.upstream_grounding needs server.upstream_url "
                          "(plguard serve --upstream URL --upstream-grounding)")
    data = cfg.model_dump()
    data["generator"].update(backend="openai", base_url=s.upstream_url,
                             served_model=s.upstream_model,
                             api_key_env=s.upstream_api_key_env,
                             request_timeout_s=s.upstream_timeout_s)
    data["grounder"] = None
    return GuardConfig.from_dict(data, source="server.upstream_grounding")


class UpstreamError(Exception):
    """The upstream server could not be reached or gave no usable answer."""

    def __init__(self, message: str, code: str = "upstream_failed") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class UpstreamDraft:
    """The upstream's answer, with its own finish reason and token counts where it gave them."""

    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class UpstreamClient:
    """Asks the upstream server for a draft answer."""

    def __init__(self, settings: ServerConfig) -> None:
        if not settings.upstream_url:
            raise ValueError("UpstreamClient needs server.upstream_url")
        self.base_url = settings.upstream_url.rstrip("/")
        self.model = settings.upstream_model
        self.timeout_s = settings.upstream_timeout_s
        key = os.environ.get(settings.upstream_api_key_env or "", "")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        # A connection pool belongs to the event loop that opened it; tests may bring
        # a new loop per test, so a new loop gets a new pool.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers,
                                             timeout=self.timeout_s)
            self._loop = loop
        return self._client

    async def draft(self, model: str, messages: list[dict[str, str]], max_tokens: int,
                    temperature: float) -> UpstreamDraft:
        """The upstream's answer.

        Raises:
            UpstreamError: unreachable, a non-2xx status, a body without an answer, or an
                answer with no text (``content: null``: tool calls or reasoning only). The
                guard judges text; passing tool calls or an empty answer through unjudged
                would let them past the policy, so such an answer is an error.
        """
        body: dict[str, Any] = {
            "model": self.model or model, "messages": messages, "max_tokens": max_tokens,
            "temperature": temperature, "stream": False,
        }
        try:
            r = await self._http().post("/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"upstream {self.base_url} unreachable: "
                                f"{type(exc).__name__}: {exc}") from exc
        if r.status_code >= 400:
            raise UpstreamError(f"upstream {self.base_url} answered {r.status_code}: "
                                f"{r.text[:300]}")
        return self._answer(r)

    def _answer(self, r: httpx.Response) -> UpstreamDraft:
        try:
            data = r.json()
            choice = data["choices"][0]
            message = choice["message"]
            content = message["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError(f"upstream {self.base_url} gave no answer in "
                                f"choices[0].message.content: {r.text[:300]}") from exc
        if not isinstance(content, str):
            parts = [k for k in ("tool_calls", "function_call", "reasoning_content",
                                 "reasoning") if message.get(k)]
            what = f"only {', '.join(parts)}" if parts else "no text"
            raise UpstreamError(
                f"upstream {self.base_url} answered with {what} (choices[0].message.content "
                f"is {type(content).__name__ if content is not None else 'null'}); plguard "
                "guards text answers and does not pass anything else through unchecked",
                code="upstream_no_content")
        usage = data.get("usage") if isinstance(data, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        finish = choice.get("finish_reason")
        # JSON can carry lone surrogates (\ud800 escapes); the guard could neither tokenize
        # nor return them, and the draft is the upstream's text, not the client's input.
        return UpstreamDraft(replace_lone_surrogates(content),
                             finish if isinstance(finish, str) else None,
                             _count(usage.get("prompt_tokens")),
                             _count(usage.get("completion_tokens")))

    async def open_stream(self, model: str, messages: list[dict[str, str]], max_tokens: int,
                          temperature: float) -> Callable[[threading.Event], Iterator[str]]:
        """Start the upstream's streamed draft; return the source that reads its deltas.

        The connection is opened and its status read here, so an unreachable or failing
        upstream is an :class:`UpstreamError` before anything is sent to the client. The
        source runs in the guard's draft thread (a blocking client of its own); it closes
        the connection when it stops, which makes the upstream stop generating.
        """
        body = {"model": self.model or model, "messages": messages, "max_tokens": max_tokens,
                "temperature": temperature, "stream": True}
        client = httpx.Client(base_url=self.base_url, headers=self._headers,
                              timeout=self.timeout_s)

        def connect() -> httpx.Response:
            try:
                r = client.send(client.build_request("POST", "/chat/completions", json=body),
                                stream=True)
            except httpx.HTTPError as exc:
                client.close()
                raise UpstreamError(f"upstream {self.base_url} unreachable: "
                                    f"{type(exc).__name__}: {exc}") from exc
            if r.status_code >= 400:
                text = r.read().decode("utf-8", "replace")
                r.close()
                client.close()
                raise UpstreamError(f"upstream {self.base_url} answered {r.status_code}: "
                                    f"{text[:300]}")
            return r

        r = await asyncio.to_thread(connect)
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            # A server that ignores stream: true answers whole; its answer is the draft.
            try:
                r.read()
                whole = self._answer(r).text
            finally:
                r.close()
                client.close()
            return lambda cancel: iter([whole] if whole else [])

        def source(cancel: threading.Event) -> Iterator[str]:
            try:
                yield from iter_upstream_deltas(r.iter_lines(), cancel, self.base_url)
            except httpx.HTTPError as exc:
                raise UpstreamError(f"upstream {self.base_url} broke off its stream: "
                                    f"{type(exc).__name__}: {exc}") from exc
            finally:
                r.close()
                client.close()

        return source

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def iter_upstream_deltas(lines: Iterator[str], cancel: threading.Event, base_url: str
                         ) -> Iterator[str]:
    """The text deltas of an upstream chat completion stream (its SSE lines).

    Tool calls, function calls or an event that is not JSON end the draft with an error:
    the guard judges text, and passing anything else through unjudged would let it past
    the policy (the stream then fails closed).
    """
    for line in lines:
        if cancel.is_set():
            return
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
            choices = event.get("choices") or []
            delta = choices[0].get("delta") or {} if choices else {}
        except (ValueError, AttributeError, IndexError, TypeError):
            raise UpstreamError(f"upstream {base_url} streamed an event that is not a chat "
                                f"completion chunk: {data[:300]!r}") from None
        other = [k for k in ("tool_calls", "function_call") if delta.get(k)]
        if other:
            raise UpstreamError(f"upstream {base_url} streamed {', '.join(other)}; plguard "
                                "guards text answers and does not pass anything else "
                                "through unchecked", code="upstream_no_content")
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            yield replace_lone_surrogates(piece)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
