"""Harness pieces for exercising a deployment: a fault-switch backend and a live server.

Used by the server tests and by ``scripts/load_server.py``; they wrap a real backend and
a real uvicorn server, so nothing here replaces a component, it only lets a caller break
one on purpose. Importing this module imports neither torch nor uvicorn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
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


__all__ = ["FaultSwitch", "LiveServer"]
