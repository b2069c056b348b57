"""Shared loads are closed by their last user: the backend pool and vLLM engines."""

from __future__ import annotations

import pytest

import plguard.backends as backends
from plguard.config import ModelConfig


class _Closing:
    closed = 0

    def __init__(self, cfg):
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg)

    def close(self):
        type(self).closed += 1


def test_pool_closes_a_backend_when_its_last_user_gives_it_back(monkeypatch):
    monkeypatch.setattr(backends, "backend_class", lambda name: _Closing)
    cfg = ModelConfig(path="/models/x", backend="closing")
    _Closing.closed = 0
    a = backends.load_backend(cfg)
    b = backends.load_backend(cfg)  # a second Guard naming the same model: one load
    assert a is b
    assert backends.release_backend(a) is False and _Closing.closed == 0  # b still uses it
    assert backends.release_backend(b) is True and _Closing.closed == 1
    assert backends.release_backend(b) is False  # no longer pooled: left alone
    c = backends.load_backend(cfg)
    assert c is not a  # a fresh load after the last release
    backends.release_backend(c)
    assert backends.release_backend(object()) is False  # not the pool's: its owner's


def test_vllm_engine_shut_down_by_its_last_backend(monkeypatch):
    from plguard.backends import vllm_backend as vb

    stopped = []
    monkeypatch.setattr(vb, "_shutdown", stopped.append)
    key = vb.EngineKey(model="/m", dtype="bfloat16", max_model_len=512,
                       gpu_memory_utilization=0.4, tensor_parallel_size=1,
                       distributed_executor_backend=None, enable_prefix_caching=True,
                       cpu_kvcache_space_gib=2, enforce_eager=True)
    engine = object()
    monkeypatch.setitem(vb._ENGINES, key, engine)
    vb.acquire_engine(key)
    vb.acquire_engine(key)
    assert vb.release_engine(key) is False and key in vb._ENGINES and not stopped
    assert vb.release_engine(key) is True and key not in vb._ENGINES
    assert stopped == [engine]


@pytest.mark.parametrize("twice", [False, True])
def test_vllm_backend_close_is_idempotent(monkeypatch, twice):
    from plguard.backends import vllm_backend as vb

    released = []
    monkeypatch.setattr(vb, "release_engine", released.append)
    b = object.__new__(vb.VLLMBackend)
    b._engine_key = "k"  # type: ignore[assignment]
    b.close()
    if twice:
        b.close()
    assert released == ["k"]
