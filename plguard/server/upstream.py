"""Upstream generator mode: another OpenAI-compatible server drafts, plguard guards.

The draft comes from ``server.upstream`` (a :class:`~plguard.config.ModelConfig` with
backend openai: vLLM, llama.cpp, Ollama or anything that speaks the API), through the one
client for such servers (:mod:`plguard.backends.openai_client`: its retries, timeouts and
concurrency bound); the decision stays here, through ``guard.batch(requests,
responses=drafts)``. Grounding and repair run on the Guard's own models, or, with
``server.upstream_grounding``, on the upstream too (an ``openai`` backend,
:func:`upstream_guard_config`), so plguard loads no model at all. Upstream drafts are not
batched here: each request is forwarded as it comes, since the upstream server batches
its own traffic. A streamed request (``stream: true``) streams from the upstream too
(:meth:`UpstreamClient.open_stream`): the guard checks the upstream's draft window by
window as it arrives, and hangs up on the upstream when it blocks.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from plguard.backends.openai_client import AsyncOpenAIClient, EventStream, OpenAIClient
from plguard.config import GuardConfig, ModelConfig, ServerConfig
from plguard.errors import BackendError, ConfigError
from plguard.messages import replace_lone_surrogates

# How the upstream's server settings reach the generator under upstream grounding: these
# always (they name the server and were the old upstream_* keys) ...
_SERVER_FIELDS = ("base_url", "served_model", "api_key_env", "request_timeout_s")
# ... these where server.upstream sets them (differ from the default), else the
# generator's own, as before the upstream was a ModelConfig.
_TUNING_FIELDS = ("connect_timeout_s", "max_concurrency", "max_retries", "logprobs_mode",
                  "top_logprobs")


def upstream_guard_config(cfg: GuardConfig) -> GuardConfig:
    """``cfg`` with every model role on the upstream server when upstream grounding is on.

    The generator (which repairs) becomes an ``openai`` backend on ``server.upstream``
    and grounds too; ``generator.path`` keeps naming the tokenizer and chat template.
    """
    s = cfg.server
    if not s.upstream_grounding:
        return cfg
    if s.upstream is None:
        raise ConfigError("server.upstream_grounding needs server.upstream_url "
                          "(server.upstream.base_url; plguard serve --upstream URL "
                          "--upstream-grounding)")
    up = s.upstream
    fields = ModelConfig.model_fields
    data = cfg.model_dump()
    data["generator"].update(backend="openai", **{k: getattr(up, k) for k in _SERVER_FIELDS})
    data["generator"].update({k: getattr(up, k) for k in _TUNING_FIELDS
                              if getattr(up, k) != fields[k].default})
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

    def __init__(self, cfg: ModelConfig) -> None:
        if not cfg.base_url:
            raise ValueError("UpstreamClient needs server.upstream.base_url")
        self.base_url = cfg.base_url.rstrip("/")
        self.model = cfg.served_model
        # An unset api_key_env sends no key, as before the upstream was a ModelConfig.
        kw: dict[str, Any] = {"setting": "server.upstream", "key_required": False}
        self._async = AsyncOpenAIClient.from_config(cfg, **kw)
        # Streams are read in the guard's draft thread, blocking, with their own pool.
        self._sync = OpenAIClient.from_config(cfg, **kw)

    async def draft(self, model: str, messages: list[dict[str, str]], max_tokens: int | None,
                    temperature: float) -> UpstreamDraft:
        """The upstream's answer (429, 5xx and broken connections retried).

        ``max_tokens``: what the client asked for (clamped to the server's cap); ``None``
        (the client set none) sends none, so the upstream answers at its own length.

        Raises:
            UpstreamError: unreachable, a non-2xx status, a body without an answer, or an
                answer with no text (``content: null``: tool calls or reasoning only). The
                guard judges text; passing tool calls or an empty answer through unjudged
                would let them past the policy, so such an answer is an error.
        """
        body = _body(self.model or model, messages, max_tokens, temperature)
        body["stream"] = False
        try:
            reply = await self._async.post("/chat/completions", body)
        except BackendError as exc:
            raise UpstreamError(f"upstream {self.base_url}: {exc}") from exc
        return self._answer(reply.body)

    def _answer(self, data: Any) -> UpstreamDraft:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            content = message["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise UpstreamError(f"upstream {self.base_url} gave no answer in "
                                f"choices[0].message.content: {_show(data)}") from exc
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

    async def open_stream(self, model: str, messages: list[dict[str, str]],
                          max_tokens: int | None, temperature: float) -> UpstreamSource:
        """Start the upstream's streamed draft; return the source that reads its deltas.

        The connection is opened and its status read here, so an unreachable or failing
        upstream is an :class:`UpstreamError` before anything is sent to the client (not
        retried, like every stream). The source runs in the guard's draft thread; it
        closes the connection when it stops, which makes the upstream stop generating.
        ``max_tokens`` as for :meth:`draft`.
        """
        body = _body(self.model or model, messages, max_tokens, temperature)

        def connect() -> EventStream:
            try:
                return self._sync.open_stream("/chat/completions", body)
            except BackendError as exc:
                raise UpstreamError(f"upstream {self.base_url}: {exc}") from exc

        es = await asyncio.to_thread(connect)
        src = UpstreamSource()
        if not es.is_sse:
            # A server that ignores stream: true answers whole; its answer is the draft.
            try:
                whole = self._answer(es.json().body)
            except BackendError as exc:
                raise UpstreamError(f"upstream {self.base_url}: {exc}") from exc
            finally:
                es.close()
            src.finish_reason = whole.finish_reason
            src.read = lambda cancel: iter([whole.text] if whole.text else [])
            return src

        def read(cancel: threading.Event) -> Iterator[str]:
            try:
                yield from iter_upstream_deltas(es.events(cancel), self.base_url, src)
            except BackendError as exc:
                raise UpstreamError(f"upstream {self.base_url} broke off its stream: {exc}"
                                    ) from exc
            finally:
                es.close()

        src.read = read
        return src

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._async.aclose()
        await asyncio.to_thread(self._sync.close)


def upstream_tokens(asked: int | None, settings: ServerConfig) -> int | None:
    """The ``max_tokens`` sent upstream: the client's, clamped to the cap; none if none.

    A proxy does not shorten what the client did not limit: the upstream answers at its
    own length, and says whether it ran out (its ``finish_reason``).
    """
    return None if asked is None else min(asked, settings.max_tokens_cap)


class UpstreamSource:
    """A streamed upstream draft (a ``DraftSource``) and the finish reason it ended with.

    ``finish_reason`` is the upstream's own (``stop``, ``length``, ...) once its stream
    said it, ``None`` before or if it never did: the stream's end reports it, since only
    the upstream knows whether it ran out of tokens.
    """

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.read: Callable[[threading.Event], Iterator[str]] = lambda cancel: iter(())

    def __call__(self, cancel: threading.Event) -> Iterator[str]:
        """The draft's text deltas (``read`` them until ``cancel`` is set)."""
        return self.read(cancel)


def iter_upstream_deltas(events: Iterable[Any], base_url: str,
                         into: UpstreamSource | None = None) -> Iterator[str]:
    """The text deltas of an upstream chat completion stream (its events' JSON).

    ``into``: where the upstream's ``finish_reason`` is recorded when an event carries one.

    Tool calls, function calls or an event that is not a chunk end the draft with an
    error: the guard judges text, and passing anything else through unjudged would let it
    past the policy (the stream then fails closed).
    """
    for event in events:
        try:
            choices = event.get("choices") or []
            delta = choices[0].get("delta") or {} if choices else {}
        except (AttributeError, IndexError, TypeError):
            raise UpstreamError(f"upstream {base_url} streamed an event that is not a chat "
                                f"completion chunk: {_show(event)}") from None
        other = [k for k in ("tool_calls", "function_call") if delta.get(k)]
        if other:
            raise UpstreamError(f"upstream {base_url} streamed {', '.join(other)}; plguard "
                                "guards text answers and does not pass anything else "
                                "through unchecked", code="upstream_no_content")
        finish = choices[0].get("finish_reason") if choices else None
        if into is not None and isinstance(finish, str):
            into.finish_reason = finish
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            yield replace_lone_surrogates(piece)


def _body(model: str, messages: list[dict[str, str]], max_tokens: int | None,
          temperature: float) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "temperature": temperature}
    if max_tokens is not None:  # none asked: none sent (the upstream's own default applies)
        body["max_tokens"] = max_tokens
    return body


def _show(data: Any) -> str:
    return json.dumps(data)[:300]


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
