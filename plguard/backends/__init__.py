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
        return _POOL[cfg]


def clear_pool() -> None:
    """Forget loaded backends (tests, or to free memory)."""
    with _POOL_LOCK:
        _POOL.clear()


__all__ = ["REGISTRY", "Backend", "backend_class", "clear_pool", "load_backend"]
