"""One client for OpenAI-compatible servers: bounded, retried, with plguard's errors.

The openai backend (sync, from worker threads) and the server's upstream (async drafts,
blocking streams in the guard's draft thread) both talk through these classes, built from
one :class:`~plguard.config.ModelConfig`: :class:`OpenAIClient` (sync, a thread pool of
``max_concurrency`` workers for :meth:`OpenAIClient.map`) and :class:`AsyncOpenAIClient`.
Retries are tenacity's, server-sent events httpx-sse's.

Failure contract (what callers, and the eval runner above them, rely on):

- 429, 5xx and broken connections (refused, reset, closed mid-answer, no free connection
  in time) are retried ``max_retries`` times with exponential backoff (``Retry-After``
  honoured, capped); what still fails is a :class:`BackendError`, or a
  :class:`BackendDeadError` when the server is gone (its ``/health`` does not answer), so
  batch jobs stop resumably instead of failing every record;
- other 4xx answers are not retried: :class:`RemoteStatusError` carries the status and
  the server's message (the start-up probe reads them to tell what a server offers);
- a request past ``request_timeout_s`` fails once, naming the setting; a body that is
  not JSON fails naming the endpoint;
- streams are not retried: part of the answer may already be out.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from plguard.errors import BackendDeadError, BackendError, ConfigError, MissingDependencyError

try:
    import httpx
    from httpx_sse import EventSource, SSEError
    from tenacity import (
        AsyncRetrying,
        RetryCallState,
        Retrying,
        retry_if_exception_type,
        stop_after_attempt,
        stop_when_event_set,
    )
except ImportError as _exc:
    raise MissingDependencyError(_exc.name or "httpx", "The openai client",
                                 "pip install 'plguard[remote]'") from None

if TYPE_CHECKING:
    from plguard.config import ModelConfig

T = TypeVar("T")
U = TypeVar("U")

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_BACKOFF_S = 0.5
_BACKOFF_CAP_S = 8.0
# Broken connections: refused, reset, closed mid-answer. Read and write timeouts are not
# among them (the server may still be working on it); connect and pool timeouts are.
_CONNECTION_ERRORS = (httpx.ConnectError, httpx.ReadError, httpx.WriteError,
                      httpx.RemoteProtocolError, httpx.ConnectTimeout, httpx.PoolTimeout)


class RemoteStatusError(BackendError):
    """The server answered a request with an error status it will not change on retry."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Reply:
    """One decoded JSON answer and the token usage it reported."""

    body: Any
    prompt_tokens: int = 0
    completion_tokens: int = 0


def usage_of(body: Any) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of an answer's ``usage``, 0 where missing."""
    u = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(u, dict):
        return 0, 0
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


def api_key_of(cfg: ModelConfig, *, required: bool = True) -> str:
    """The API key ``cfg.api_key_env`` names ("" without one).

    Raises:
        ConfigError: the variable is named but unset, when ``required``.
    """
    if not cfg.api_key_env:
        return ""
    key = os.environ.get(cfg.api_key_env, "")
    if not key and required:
        raise ConfigError(f"model.api_key_env names {cfg.api_key_env}, which is not set")
    return key


class _Retry(Exception):
    """One attempt failed in a way worth another: what failed, and the server's wait."""

    def __init__(self, failure: str, retry_after: float | None = None) -> None:
        super().__init__(failure)
        self.failure = failure
        self.retry_after = retry_after


class _Base:
    """Settings, URLs and the meaning of one answer, shared by the sync and async client.

    The timeouts, retries and concurrency have no defaults here: they are ModelConfig's
    (``plguard.config``), which holds each default once.
    """

    def __init__(self, base_url: str, *, api_key: str = "", connect_timeout_s: float,
                 request_timeout_s: float, max_retries: int, max_concurrency: int,
                 backoff_s: float = _BACKOFF_S, setting: str = "model") -> None:
        self.base_url = base_url.rstrip("/")
        # /health and vLLM's /tokenize live at the server root, beside /v1.
        self.root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        self.request_timeout_s = request_timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        # Where the settings live, for error messages (model, server.upstream).
        self.setting = setting
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(request_timeout_s, connect=connect_timeout_s)
        self._limits = httpx.Limits(max_connections=max_concurrency,
                                    max_keepalive_connections=max_concurrency)
        self._closed = threading.Event()

    @classmethod
    def settings_of(cls, cfg: ModelConfig, *, key_required: bool = True) -> dict[str, Any]:
        """The constructor's keywords from a ModelConfig (``api_key_of`` reads the key)."""
        if not cfg.base_url:
            raise ConfigError("backend openai needs model.base_url, the server's URL ending "
                              "in /v1 (e.g. http://127.0.0.1:8000/v1)")
        return {"base_url": cfg.base_url, "api_key": api_key_of(cfg, required=key_required),
                "connect_timeout_s": cfg.connect_timeout_s,
                "request_timeout_s": cfg.request_timeout_s, "max_retries": cfg.max_retries,
                "max_concurrency": cfg.max_concurrency}

    def _url(self, path: str, root: bool) -> str:
        return (self.root if root else self.base_url) + path

    def _retrying(self) -> dict[str, Any]:
        # Closing the client stops pending retries (stop_when_event_set).
        return {"stop": stop_after_attempt(self.max_retries + 1)
                | stop_when_event_set(self._closed),
                "wait": self._wait, "retry": retry_if_exception_type(_Retry),
                "reraise": True}

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retry) and exc.retry_after is not None:
            return exc.retry_after
        delay = min(_BACKOFF_CAP_S, self.backoff_s * 2 ** (state.attempt_number - 1))
        return delay * (0.5 + random.random() / 2)

    def _answer(self, method: str, url: str, r: httpx.Response) -> Reply:
        """A read answer as a Reply, or the error it means (:class:`_Retry` if retryable)."""
        if r.status_code < 400:
            try:
                data = r.json()
            except ValueError:
                raise BackendError(f"{method} {url} answered {r.status_code} with a body "
                                   f"that is not JSON: {r.text[:200]!r}") from None
            return Reply(data, *usage_of(data))
        if r.status_code not in RETRY_STATUS:
            raise RemoteStatusError(f"{method} {url} answered {r.status_code}: {_message(r)}",
                                    r.status_code, _message(r))
        raise _Retry(f"status {r.status_code}: {_message(r)}", _retry_after(r))

    def _failed(self, method: str, url: str, exc: httpx.HTTPError) -> Exception:
        """What an httpx error during a request means: retry it or fail now."""
        if isinstance(exc, _CONNECTION_ERRORS):
            return _Retry(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, httpx.TimeoutException):
            return BackendError(
                f"{method} {url} got no answer within {self.request_timeout_s:g} s "
                f"({self.setting}.request_timeout_s); the server is overloaded or the "
                "request is too large")
        return BackendError(f"{method} {url} failed: {type(exc).__name__}: {exc}")

    def _give_up(self, method: str, url: str, failure: str, tries: int, alive: bool
                 ) -> BackendError:
        if not alive:
            return BackendDeadError(
                f"the server at {self.base_url} is gone ({failure}, {tries} tries, and its "
                "/health does not answer); nothing more can run on it. Records written so "
                "far are kept: restart the server and rerun to resume.")
        return BackendError(f"{method} {url} failed after {tries} tries: {failure}")

    def _stream_failed(self, url: str, exc: httpx.HTTPError) -> BackendError:
        if isinstance(exc, httpx.TimeoutException):
            return BackendError(f"POST {url} (stream) got no data within "
                                f"{self.request_timeout_s:g} s ({self.setting}.request_timeout_s)")
        return BackendError(f"POST {url} (stream) failed: {type(exc).__name__}: {exc}")


class EventStream:
    """An open streamed answer (status already checked); close it to hang up.

    A server that ignores ``stream: true`` answers whole: :attr:`is_sse` is then false
    and :meth:`json` reads that answer.
    """

    def __init__(self, client: OpenAIClient, url: str, response: httpx.Response) -> None:
        self._client = client
        self.url = url
        self.response = response

    @property
    def is_sse(self) -> bool:
        """Whether the answer is a stream of server-sent events."""
        ctype = self.response.headers.get("content-type", "").partition(";")[0]
        return "text/event-stream" in ctype

    def events(self, cancel: threading.Event | None = None) -> Iterator[Any]:
        """Each event's JSON, up to ``data: [DONE]`` or ``cancel`` (checked between events)."""
        try:
            for sse in EventSource(self.response).iter_sse():
                if cancel is not None and cancel.is_set():
                    return
                if sse.data == "[DONE]":
                    return
                if not sse.data:
                    continue  # comments and keep-alives
                try:
                    yield json.loads(sse.data)
                except ValueError:
                    raise BackendError(f"POST {self.url} streamed an event that is not "
                                       f"JSON: {sse.data[:200]!r}") from None
        except SSEError as exc:
            raise BackendError(f"POST {self.url} (stream) is not an event stream: {exc}"
                               ) from None
        except httpx.HTTPError as exc:
            raise self._client._stream_failed(self.url, exc) from None

    def json(self) -> Reply:
        """The whole answer of a server that did not stream."""
        try:
            self.response.read()
        except httpx.HTTPError as exc:
            raise self._client._stream_failed(self.url, exc) from None
        return self._client._answer("POST", self.url, self.response)

    def close(self) -> None:
        """Hang up; the server sees the client go and stops generating."""
        self.response.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OpenAIClient(_Base):
    """Blocking requests to one server: one connection pool, one bounded thread pool.

    Every request of every caller thread through :meth:`map` goes through a pool of
    ``max_concurrency`` workers, so the bound holds however many threads (server batches,
    eval shards) call in.
    """

    def __init__(self, base_url: str, *, api_key: str = "", connect_timeout_s: float,
                 request_timeout_s: float, max_retries: int, max_concurrency: int,
                 backoff_s: float = _BACKOFF_S, setting: str = "model",
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(base_url, api_key=api_key, connect_timeout_s=connect_timeout_s,
                         request_timeout_s=request_timeout_s, max_retries=max_retries,
                         max_concurrency=max_concurrency, backoff_s=backoff_s,
                         setting=setting)
        # transport: an in-process server or a test's httpx.MockTransport.
        self._http = httpx.Client(headers=self._headers, timeout=self._timeout,
                                  limits=self._limits, transport=transport)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency,
                                        thread_name_prefix="plguard-remote")

    @classmethod
    def from_config(cls, cfg: ModelConfig, *, setting: str = "model",
                    key_required: bool = True) -> OpenAIClient:
        """A client for the server ``cfg`` names (base_url, key, timeouts, bounds)."""
        return cls(**cls.settings_of(cfg, key_required=key_required), setting=setting)

    # -- one request -----------------------------------------------------------------------

    def get(self, path: str, *, root: bool = False) -> Reply:
        """GET ``path`` (under /v1, or under the server root with ``root``)."""
        return self._request("GET", path, None, root=root)

    def post(self, path: str, body: dict[str, Any], *, root: bool = False) -> Reply:
        """POST ``body`` as JSON to ``path``."""
        return self._request("POST", path, body, root=root)

    def _request(self, method: str, path: str, body: dict[str, Any] | None, *,
                 root: bool) -> Reply:
        url = self._url(path, root)

        def attempt() -> Reply:
            try:
                r = self._http.request(method, url, json=body)
            except httpx.HTTPError as exc:
                raise self._failed(method, url, exc) from None
            return self._answer(method, url, r)

        retrying = Retrying(**self._retrying())
        try:
            return retrying(attempt)
        except _Retry as exc:
            tries = retrying.statistics.get("attempt_number", 1)
            raise self._give_up(method, url, exc.failure, tries, self.alive()) from None

    def alive(self) -> bool:
        """Whether the server still answers: ``/health`` reachable and not 5xx."""
        try:
            r = self._http.get(self.root + "/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return r.status_code < 500

    def open_stream(self, path: str, body: dict[str, Any]) -> EventStream:
        """POST ``body`` with ``stream: true``; the open answer once its status is good.

        Not retried: a caller may already have sent part of the answer on.
        """
        url = self._url(path, False)
        try:
            r = self._http.send(self._http.build_request(
                "POST", url, json={**body, "stream": True},
                headers={"Accept": "text/event-stream"}), stream=True)
        except httpx.HTTPError as exc:
            raise self._stream_failed(url, exc) from None
        if r.status_code >= 400:
            try:
                r.read()
            except httpx.HTTPError:
                pass
            finally:
                r.close()
            msg = f"POST {url} (stream) answered {r.status_code}: {_message(r)}"
            if r.status_code in RETRY_STATUS:
                raise BackendError(msg)
            raise RemoteStatusError(msg, r.status_code, _message(r))
        return EventStream(self, url, r)

    def stream(self, path: str, body: dict[str, Any], cancel: threading.Event
               ) -> Iterator[Any]:
        """Each server-sent event's JSON of a streamed POST, closed with the iterator.

        Stops at ``data: [DONE]``, or once ``cancel`` is set (checked between events);
        the connection is closed when the iterator is, so the server stops generating.
        """
        with self.open_stream(path, body) as es:
            yield from es.events(cancel)

    # -- many requests ---------------------------------------------------------------------

    def map(self, fn: Callable[[T], U], items: Sequence[T]) -> list[U]:
        """``fn`` over ``items`` on the bounded pool, in order; the first error is raised.

        A dead server is reported in preference to other errors of the same batch, so
        callers stop rather than retry example by example.
        """
        if len(items) <= 1:
            return [fn(it) for it in items]
        futures = [self._pool.submit(fn, it) for it in items]
        results: list[U] = []
        first: BaseException | None = None
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as exc:  # noqa: BLE001  (re-raised below, after the others)
                if first is None or (isinstance(exc, BackendDeadError)
                                     and not isinstance(first, BackendDeadError)):
                    first = exc
        if first is not None:
            raise first
        return results

    def close(self) -> None:
        """Stop the pools (pending retries give up)."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()


class AsyncOpenAIClient(_Base):
    """The same requests, retries and errors from an event loop.

    ``max_concurrency`` bounds the connections in flight; a request waiting longer than
    the timeout for one is retried like a refused connection.
    """

    def __init__(self, base_url: str, *, api_key: str = "", connect_timeout_s: float,
                 request_timeout_s: float, max_retries: int, max_concurrency: int,
                 backoff_s: float = _BACKOFF_S, setting: str = "model",
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(base_url, api_key=api_key, connect_timeout_s=connect_timeout_s,
                         request_timeout_s=request_timeout_s, max_retries=max_retries,
                         max_concurrency=max_concurrency, backoff_s=backoff_s,
                         setting=setting)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_config(cls, cfg: ModelConfig, *, setting: str = "model",
                    key_required: bool = True) -> AsyncOpenAIClient:
        """A client for the server ``cfg`` names (base_url, key, timeouts, bounds)."""
        return cls(**cls.settings_of(cfg, key_required=key_required), setting=setting)

    def _http(self) -> httpx.AsyncClient:
        # A connection pool belongs to the event loop that opened it; tests may bring
        # a new loop per test, so a new loop gets a new pool.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(headers=self._headers, timeout=self._timeout,
                                             limits=self._limits, transport=self._transport)
            self._loop = loop
        return self._client

    async def get(self, path: str, *, root: bool = False) -> Reply:
        """GET ``path`` (under /v1, or under the server root with ``root``)."""
        return await self._request("GET", path, None, root=root)

    async def post(self, path: str, body: dict[str, Any], *, root: bool = False) -> Reply:
        """POST ``body`` as JSON to ``path``."""
        return await self._request("POST", path, body, root=root)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None, *,
                       root: bool) -> Reply:
        url = self._url(path, root)
        http = self._http()

        async def attempt() -> Reply:
            try:
                r = await http.request(method, url, json=body)
            except httpx.HTTPError as exc:
                raise self._failed(method, url, exc) from None
            return self._answer(method, url, r)

        retrying = AsyncRetrying(**self._retrying())
        try:
            return await retrying(attempt)
        except _Retry as exc:
            tries = retrying.statistics.get("attempt_number", 1)
            raise self._give_up(method, url, exc.failure, tries, await self.alive()) from None

    async def alive(self) -> bool:
        """Whether the server still answers: ``/health`` reachable and not 5xx."""
        try:
            r = await self._http().get(self.root + "/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return r.status_code < 500

    async def aclose(self) -> None:
        """Close the connection pool (pending retries give up)."""
        self._closed.set()
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _message(r: httpx.Response) -> str:
    try:
        err = r.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:500]
    except (ValueError, AttributeError):
        pass
    return r.text[:500]


def _retry_after(r: httpx.Response) -> float | None:
    value = r.headers.get("retry-after")
    try:
        return min(_BACKOFF_CAP_S, max(0.0, float(value))) if value else None
    except ValueError:
        return None


__all__ = ["RETRY_STATUS", "AsyncOpenAIClient", "EventStream", "OpenAIClient",
           "RemoteStatusError", "Reply", "api_key_of", "usage_of"]
