"""``plguard view``: a local web viewer for eval runs and guard traces.

>>> from plguard_lab.view import ViewState
>>> from plguard_lab.view.whatif import what_if

``build_view_app`` needs the server extra (FastAPI); the loader, what-if and export do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plguard_lab.view.loader import Problem, ViewData, load
from plguard_lab.view.state import ViewState
from plguard_lab.view.whatif import Flip, WhatIf, flips, what_if

if TYPE_CHECKING:
    from plguard_lab.view.app import build_view_app
    from plguard_lab.view.export import export_html


def __getattr__(name: str) -> Any:
    # FastAPI is imported only when the app is built, so the loader works without it.
    if name == "build_view_app":
        from plguard_lab.view.app import build_view_app

        return build_view_app
    if name == "export_html":
        from plguard_lab.view.export import export_html

        return export_html
    raise AttributeError(f"module 'plguard_lab.view' has no attribute {name!r}")


__all__ = ["Flip", "Problem", "ViewData", "ViewState", "WhatIf", "build_view_app",
           "export_html", "flips", "load", "what_if"]
