"""The viewer's single HTML page, with its CSS, script and (for exports) data inline.

One document serves both modes: with ``data`` None the script fetches the ``/api`` routes
of a running server; with ``data`` it reads everything from the embedded JSON and hides
the what-if panel, so an exported file needs no server, no network and no other file.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

STATIC = Path(__file__).with_name("static")
_SLOT = re.compile(r"/\*\{\{(css|js)\}\}\*/|\{\{(title|data)\}\}")


@cache
def _asset(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    r"""JSON that is safe inside a ``<script>`` element.

    ``<`` is escaped so no string in the data (a prompt that says ``</script>``, say) can
    end the element early; ``\u2028``/``\u2029`` are escaped for old script parsers.
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_page(data: Any | None, title: str = "plguard view") -> str:
    """The page: served live when ``data`` is None, a standalone export otherwise."""
    import html

    parts = {"title": html.escape(title), "css": _asset("view.css"), "js": _asset("view.js"),
             "data": embed_json(data)}
    # One pass over the template only, so a placeholder-like string inside the data or
    # the script is never itself substituted.
    return _SLOT.sub(lambda m: parts[m.group(1) or m.group(2)], _asset("view.html"))


__all__ = ["STATIC", "embed_json", "render_page"]
