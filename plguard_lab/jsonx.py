"""Robust extraction of one JSON object from free model text.

Small and mid-size models wrap JSON in prose or code fences, leave a trailing comma, use
single quotes or stop before the closing brace. Extraction tries, in order: every
balanced ``{...}`` span parsed strictly, the same spans after light repairs, then a
key-by-key scan for ``"key": value`` pairs. It never raises; ``None`` means nothing usable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)


def _balanced_spans(text: str) -> Iterator[str]:
    """Every ``{...}`` span whose braces balance outside string literals, in order."""
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        depth, in_str, esc = 0, False, False
        for j in range(start, len(text)):
            ch = text[j]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    yield text[start:j + 1]
                    break


def _repairs(span: str) -> Iterator[str]:
    yield _TRAILING_COMMA.sub(r"\1", span)
    if "'" in span and '"' not in span:
        yield _TRAILING_COMMA.sub(r"\1", span.replace("'", '"'))
    yield re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false",
                                               _TRAILING_COMMA.sub(r"\1", span)))


def _loads(s: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _scan_keys(text: str, keys: Sequence[str]) -> dict[str, Any]:
    """``"key": value`` pairs found anywhere, for outputs cut off before the brace."""
    found: dict[str, Any] = {}
    for key in keys:
        m = re.search(r'["\']?' + re.escape(key) + r'["\']?\s*:\s*'
                      r'("(?:[^"\\]|\\.)*"?|true|false|True|False|null|-?\d+(?:\.\d+)?)',
                      text)
        if not m:
            continue
        raw = m.group(1)
        if raw.startswith('"'):
            body = raw[1:-1] if raw.endswith('"') and len(raw) > 1 else raw[1:]
            try:
                found[key] = json.loads(f'"{body}"')
            except ValueError:
                found[key] = body
        elif raw.lower() in ("true", "false"):
            found[key] = raw.lower() == "true"
        elif raw == "null":
            found[key] = None
        else:
            found[key] = float(raw) if "." in raw else int(raw)
    return found


def extract_json(text: str, keys: Sequence[str] = ()) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (containing one of ``keys`` if given), or None.

    Args:
        text: free model output.
        keys: expected keys; an object holding none of them is skipped, and when no
            object parses, the keys are scanned for one by one.

    Returns:
        The parsed object, or None when nothing usable was found.
    """
    cleaned = _FENCE.sub("", text)
    spans = list(_balanced_spans(cleaned))

    def wanted(obj: dict[str, Any]) -> bool:
        return not keys or any(k in obj for k in keys)

    for span in spans:
        obj = _loads(span)
        if obj is not None and wanted(obj):
            return obj
    for span in spans:
        for fixed in _repairs(span):
            obj = _loads(fixed)
            if obj is not None and wanted(obj):
                return obj
    if keys:
        found = _scan_keys(cleaned, keys)
        if found:
            return found
    return None


def parse_mode(text: str, keys: Sequence[str] = ()) -> str:
    """How an output was read: ``json``, ``repaired`` or ``failed``.

    ``json``: it is a JSON object as it stands; ``repaired``: only :func:`extract_json`'s
    lenient fallback recovered one. With constrained decoding an output is ``json``
    unless the token limit cut it; records keep this so reports show how often the
    fallback was needed.
    """
    if _loads(text.strip()) is not None:
        return "json"
    return "repaired" if extract_json(text, keys) else "failed"


__all__ = ["extract_json", "parse_mode"]
