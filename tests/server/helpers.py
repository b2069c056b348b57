"""Helpers of the server tests: a fault-switch backend and a live uvicorn server."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn

from plguard.errors import BackendError
from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore

MAX_NEW_TOKENS = 16


class FaultSwitch:
    """A backend that forwards to a real one and raises while ``broken`` is set.

    Counts the calls it forwards, so tests can tell how many batches reached the model.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.max_context = inner.max_context
        self.broken = False
        self.generate_calls: list[int] = []
        self.generate_params: list[GenerationParams] = []
        self.score_calls = 0

    def _check(self) -> None:
        if self.broken:
            raise BackendError("injected fault: the model backend is down")

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        return str(self.inner.format_chat(chat, add_generation_prompt))

    def count_tokens(self, text: str) -> int:
        return int(self.inner.count_tokens(text))

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, bool]:
        return self.inner.truncate_text(text, max_tokens)

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        self._check()
        self.generate_calls.append(len(chats))
        self.generate_params.append(params)
        return self.inner.generate(chats, params)

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        self._check()
        self.score_calls += 1
        return self.inner.true_false_logprobs(requests)


class LiveServer:
    """A uvicorn server on a free loopback port, in a thread of the test process."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
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
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
