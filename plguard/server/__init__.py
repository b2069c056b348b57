"""The OpenAI-compatible guard server (``plguard serve``).

``build_app(guard)`` makes the ASGI app; it needs the ``server`` extra
(``pip install 'plguard[server]'``). Importing this package imports neither FastAPI nor a
model, so the CLI can list ``serve`` and explain a missing dependency when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plguard.server.app import build_app

__all__ = ["build_app"]


def __getattr__(name: str) -> Any:
    if name == "build_app":
        from plguard.server.app import build_app

        return build_app
    raise AttributeError(f"module 'plguard.server' has no attribute {name!r}")
