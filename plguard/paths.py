"""Where plguard keeps its on-disk state.

A leaf module (standard library only), so every module that stores something under the
cache root (converted models, grounding caches, features) can import it at module level
without importing :mod:`plguard.models` or each other.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The plguard cache root (``PLGUARD_CACHE_DIR`` overrides ``~/.cache/plguard``)."""
    env = os.environ.get("PLGUARD_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "plguard"


__all__ = ["cache_dir"]
