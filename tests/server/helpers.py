"""Helpers of the server tests: the fault-switch backend and live server of plguard.testing."""

from __future__ import annotations

import json
from typing import Any

from plguard.testing import FaultSwitch, LiveServer

MAX_NEW_TOKENS = 16


def sse_chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    """One ``chat.completion.chunk`` event as a scripted OpenAI-compatible upstream sends it."""
    return "data: " + json.dumps({"id": "up", "object": "chat.completion.chunk", "created": 0,
                                  "model": model, "choices": [{"index": 0, "delta": delta,
                                                               "finish_reason": finish}]}) + "\n\n"


__all__ = ["MAX_NEW_TOKENS", "FaultSwitch", "LiveServer", "sse_chunk"]
