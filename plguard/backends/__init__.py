"""Backends by name: a registry of lazy ``module:attr`` strings.

Importing this package imports neither torch nor vllm; a backend's module is imported
only when that backend is built. ``openai`` talks to a model behind an OpenAI-compatible
server and loads no weights.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any

from plguard.backends.base import Backend
from plguard.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from plguard.config import ModelConfig

REGISTRY: dict[str, str] = {
    "transformers": "plguard.backends.transformers_backend:TransformersBackend",
    "vllm": "plguard.backends.vllm_backend:VLLMBackend",
    "openai": "plguard.backends.openai_backend:OpenAIBackend",
}

_POOL: dict[ModelConfig, Backend] = {}
_REFS: dict[ModelConfig, int] = {}  # load_backend calls not yet given back
_POOL_LOCK = threading.Lock()


def backend_class(name: str) -> Any:
    """The backend class registered under ``name``."""
    if name not in REGISTRY:
        raise ConfigError(
            f"unknown backend '{name}'{did_you_mean(name, REGISTRY)}; "
            f"known backends: {', '.join(sorted(REGISTRY))}"
        )
    module, attr = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)


def load_backend(cfg: ModelConfig) -> Backend:
    """Load (or reuse) the backend for ``cfg``: one load per distinct model config."""
    with _POOL_LOCK:
        if cfg not in _POOL:
            _POOL[cfg] = backend_class(cfg.backend).from_config(cfg)
        _REFS[cfg] = _REFS.get(cfg, 0) + 1
        return _POOL[cfg]


def release_backend(backend: Backend) -> bool:
    """Give back one :func:`load_backend` of ``backend``; the last closes it (returns True).

    Several Guards (or roles) that name one model share one load, so one of them closing
    must not close the model under the others. A backend the pool did not load is left
    alone: it is its creator's to close.
    """
    with _POOL_LOCK:
        cfg = next((c for c, b in _POOL.items() if b is backend), None)
        if cfg is None:
            return False
        _REFS[cfg] = _REFS.get(cfg, 1) - 1
        if _REFS[cfg] > 0:
            return False
        del _POOL[cfg], _REFS[cfg]
    close = getattr(backend, "close", None)
    if callable(close):
        close()
    return True


def clear_pool() -> None:
    """Forget loaded backends (tests, or to free memory)."""
    with _POOL_LOCK:
        _POOL.clear()
        _REFS.clear()


__all__ = ["REGISTRY", "Backend", "backend_class", "clear_pool", "load_backend",
           "release_backend"]
