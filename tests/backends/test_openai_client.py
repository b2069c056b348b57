"""OpenAIClient takes its limits from ModelConfig; it restates none of its defaults."""

from __future__ import annotations

import pytest

from plguard.backends.openai_client import OpenAIClient


def test_remote_client_limits_come_from_config():
    with pytest.raises(TypeError, match="connect_timeout_s"):
        OpenAIClient("http://127.0.0.1:9/v1")
