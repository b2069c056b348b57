"""HTTP to an OpenAI-compatible server: bounded concurrency, retries, clear failures.

One :class:`RemoteClient` per backend holds one connection pool and one thread pool of
``max_concurrency`` workers; every request of every caller thread goes through that
pool, so the bound holds however many threads (server batches, eval shards) call in.

Failure contract (what callers, and the eval runner above them, rely on):

- 429, 5xx and broken connections are retried with exponential backoff (``Retry-After``
  honoured, capped); what still fails after ``max_retries`` is a :class:`BackendError`,
  or a :class:`BackendDeadError` when the server is gone (no connection, or its
  ``/health`` fails), so batch jobs stop resumably instead of failing every record;
- other 4xx answers are not retried: :class:`RemoteStatusError` carries the status and
  the server's message (the start-up probe reads them to tell what a server offers);
- a request past ``request_timeout_s`` fails once, naming the setting; a body that is
  not JSON fails naming the endpoint.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from plguard.errors import BackendDeadError, BackendError, MissingDependencyError

try:
    import httpx
except ImportError:
    raise MissingDependencyError("httpx", "The openai backend",
                                 "pip install 'plguard[remote]'") from None

T = TypeVar("T")
U = TypeVar("U")

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_BACKOFF_S = 0.5
_BACKOFF_CAP_S = 8.0
# Broken connections: refused, reset, closed mid-answer. Timeouts are not among them.
_CONNECTION_ERRORS = (httpx.ConnectError, httpx.ReadError, httpx.WriteError,
                      httpx.RemoteProtocolError)


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
    u = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(u, dict):
        return 0, 0
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


def _message(r: httpx.Response) -> str:
    try:
        err = r.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:500]
    except (ValueError, AttributeError):
        pass
    return r.text[:500]


class RemoteClient:
    """Requests to one server, bounded, retried and with plguard's errors.

    The timeouts, retries and concurrency have no defaults here: they are ModelConfig's
    (``plguard.config``), which holds each default once.
    """

    def __init__(self, base_url: str, *, api_key: str = "", connect_timeout_s: float,
                 request_timeout_s: float, max_retries: int, max_concurrency: int,
                 backoff_s: float = _BACKOFF_S) -> None:
        self.base_url = base_url.rstrip("/")
        # /health and vLLM's /tokenize live at the server root, beside /v1.
        self.root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        self.request_timeout_s = request_timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(request_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency,
                                max_keepalive_connections=max_concurrency))
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency,
                                        thread_name_prefix="plguard-remote")
        self._closed = threading.Event()

    # -- one request -----------------------------------------------------------------------

    def get(self, path: str, *, root: bool = False) -> Reply:
        """GET ``path`` (under /v1, or under the server root with ``root``)."""
        return self._request("GET", path, None, root=root)

    def post(self, path: str, body: dict[str, Any], *, root: bool = False) -> Reply:
        """POST ``body`` as JSON to ``path``."""
        return self._request("POST", path, body, root=root)

    def _url(self, path: str, root: bool) -> str:
        return (self.root if root else self.base_url) + path

    def _request(self, method: str, path: str, body: dict[str, Any] | None, *,
                 root: bool) -> Reply:
        url = self._url(path, root)
        attempt = 0
        while True:
            wait: float | None = None
            try:
                r = self._http.request(method, url, json=body)
            except httpx.TimeoutException as exc:
                if not isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
                    raise BackendError(
                        f"{method} {url} got no answer within {self.request_timeout_s:g} s "
                        "(model.request_timeout_s); the server is overloaded or the "
                        "request is too large") from None
                failure: str = f"{type(exc).__name__}: {exc}"
            except _CONNECTION_ERRORS as exc:
                failure = f"{type(exc).__name__}: {exc}"
            except httpx.HTTPError as exc:
                raise BackendError(f"{method} {url} failed: {type(exc).__name__}: {exc}"
                                   ) from None
            else:
                if r.status_code < 400:
                    try:
                        data = r.json()
                    except ValueError:
                        raise BackendError(f"{method} {url} answered {r.status_code} with a "
                                           f"body that is not JSON: {r.text[:200]!r}"
                                           ) from None
                    return Reply(data, *usage_of(data))
                if r.status_code not in RETRY_STATUS:
                    raise RemoteStatusError(f"{method} {url} answered {r.status_code}: "
                                            f"{_message(r)}", r.status_code, _message(r))
                failure = f"status {r.status_code}: {_message(r)}"
                wait = _retry_after(r)
            if attempt >= self.max_retries or self._closed.is_set():
                raise self._give_up(method, url, failure, attempt + 1)
            delay = min(_BACKOFF_CAP_S, self.backoff_s * 2 ** attempt)
            time.sleep(wait if wait is not None else delay * (0.5 + random.random() / 2))
            attempt += 1

    def _give_up(self, method: str, url: str, failure: str, tries: int) -> BackendError:
        if not self.alive():
            return BackendDeadError(
                f"the server at {self.base_url} is gone ({failure}, {tries} tries, and its "
                "/health does not answer); nothing more can run on it. Records written so "
                "far are kept: restart the server and rerun to resume.")
        return BackendError(f"{method} {url} failed after {tries} tries: {failure}")

    def alive(self) -> bool:
        """Whether the server still answers: ``/health`` reachable and not 5xx."""
        try:
            r = self._http.get(self.root + "/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return r.status_code < 500

    def stream(self, path: str, body: dict[str, Any], cancel: threading.Event
               ) -> Iterator[Any]:
        """POST ``body`` with ``stream: true`` and yield each server-sent event's JSON.

        Not retried: part of the answer may already be out. Stops at ``data: [DONE]``, or
        once ``cancel`` is set (checked between events); the connection is closed when the
        iterator is, so the server sees the client go and stops generating.
        """
        url = self._url(path, False)
        try:
            with self._http.stream("POST", url, json={**body, "stream": True}) as r:
                if r.status_code >= 400:
                    r.read()
                    msg = f"POST {url} (stream) answered {r.status_code}: {_message(r)}"
                    if r.status_code in RETRY_STATUS:
                        raise BackendError(msg)
                    raise RemoteStatusError(msg, r.status_code, _message(r))
                for line in r.iter_lines():
                    if cancel.is_set():
                        return
                    if not line.startswith("data:"):
                        continue  # comments, event names, keep-alives
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        yield json.loads(data)
                    except ValueError:
                        raise BackendError(f"POST {url} streamed an event that is not JSON: "
                                           f"{data[:200]!r}") from None
        except httpx.TimeoutException:
            raise BackendError(f"POST {url} (stream) got no data within "
                               f"{self.request_timeout_s:g} s (model.request_timeout_s)"
                               ) from None
        except httpx.HTTPError as exc:
            raise BackendError(f"POST {url} (stream) failed: {type(exc).__name__}: {exc}"
                               ) from None

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


def _retry_after(r: httpx.Response) -> float | None:
    value = r.headers.get("retry-after")
    try:
        return min(_BACKOFF_CAP_S, max(0.0, float(value))) if value else None
    except ValueError:
        return None


__all__ = ["RETRY_STATUS", "RemoteClient", "RemoteStatusError", "Reply", "usage_of"]
