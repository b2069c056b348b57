"""Upstream generator mode: another OpenAI-compatible server drafts, plguard guards.

The draft comes from ``{upstream_url}/chat/completions`` (vLLM, llama.cpp, Ollama or
anything that speaks the API); the decision stays here, through
``guard.batch(requests, responses=drafts)``. Grounding and repair run on the Guard's own
models, or, with ``server.upstream_grounding``, on the upstream too (an ``openai``
backend, :func:`upstream_guard_config`), so plguard loads no model at all. Upstream
drafts are not batched here: each request is forwarded as it comes, since the upstream
server batches its own traffic.
"""

from __future__ import annotations

import asyncio
import os
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
                    temperature: float) -> str:
        """The upstream's answer text.

        Raises:
            UpstreamError: unreachable, a non-2xx status, or a body without an answer.
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
        try:
            content = r.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError(f"upstream {self.base_url} gave no answer in "
                                f"choices[0].message.content: {r.text[:300]}") from exc
        # JSON can carry lone surrogates (\ud800 escapes); the guard could neither tokenize
        # nor return them, and the draft is the upstream's text, not the client's input.
        return replace_lone_surrogates(content) if isinstance(content, str) else ""

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
