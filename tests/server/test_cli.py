"""``plguard serve`` option handling (the server itself is tested in the other files)."""

from __future__ import annotations

import pytest

from plguard.cli import build_parser
from plguard.errors import ConfigError
from plguard.server.cli import _is_loopback, serve_config


def _args(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def test_serve_defaults_are_loopback_and_batched():
    cfg = serve_config(_args())
    assert cfg.server.host == "127.0.0.1" and cfg.server.port == 8000
    assert cfg.server.max_batch_size > 1 and cfg.server.upstream_url is None


def test_serve_options_override_the_config(tmp_path):
    f = tmp_path / "serve.yaml"
    f.write_text("generation:\n  max_new_tokens: 32\nserver:\n  port: 9000\n  max_wait_ms: 5\n")
    cfg = serve_config(_args("--config", str(f), "--port", "9100", "--no-batching",
                             "--upstream", "http://127.0.0.1:8001/v1", "--model-name", "llama3",
                             "--set", "server.max_tokens_cap=64"))
    s = cfg.server
    assert (s.port, s.max_batch_size, s.max_wait_ms, s.max_tokens_cap) == (9100, 1, 5, 64)
    assert s.upstream_url == "http://127.0.0.1:8001/v1" and s.model_name == "llama3"
    assert cfg.generation.max_new_tokens == 32


def test_bad_server_values_are_config_errors():
    with pytest.raises(ConfigError, match="server.port"):
        serve_config(_args("--port", "70000"))
    with pytest.raises(ConfigError, match="unknown key 'server.prot'"):
        serve_config(_args("--set", "server.prot=1"))


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
    ("192.168.1.4", False), ("example.org", False)])
def test_loopback_detection(host, loopback):
    assert _is_loopback(host) is loopback
