"""Flattening: JSON documents and markdown tables in a response, read as plain lines.

A 1.5B grounder reads a plain refusal as a refusal (P 0.90) and the same sentence as the
value of a JSON field (``{"status": "ok", "answer": "I'm sorry, ..."}``) or a table cell
as something else (0.56): on the attack suite, wrapping a refusal that way hid it from the
over-refusal rules (eval/results/attacks-qwen1.5b, `fmt_json`, `fmt_table`). The markup
carries nothing the questions ask about, so the grounder is given the same content as
lines of text: a JSON document becomes one ``key: value`` line per string or number (keys
of nested objects joined by ``/``), a table becomes its header line and one line per row
with the cells joined by `` - ``.

Only the grounder's copy changes; the user-facing response never does, and the trace
names what was flattened. Text with neither is returned unchanged, character for
character: none of XSTest's prompts and 2,250 labelled completions holds a table or a
JSON document (tested; nor do the 1.5B model's 450 drafts), so calibrations fitted on them
still apply. JSON is flattened
only when it holds prose (a string value with a space): a data array or a config snippet
in a code answer is left as written. Pure functions only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Flattened:
    """A response as the grounder reads it, and what was flattened ("json", "table")."""

    text: str
    kinds: tuple[str, ...] = ()


# A markdown table: a row of cells, a separator row (|---|:--:|), then more rows.
_ROW = r"[ \t]*+\|[^\n]*\|[ \t]*+"
_SEP = r"[ \t]*+\|(?:[ \t]*+:?-{3,}:?[ \t]*+\|)++[ \t]*+"
_TABLE = re.compile(rf"^{_ROW}\n{_SEP}(?:\n{_ROW})*+$", re.MULTILINE)
# Where a JSON document may start: an opening brace or bracket at the start of a line.
_JSON_START = re.compile(r"^[ \t]*+[{\[]", re.MULTILINE)
_DECODER = json.JSONDecoder()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(block: str) -> str:
    lines = block.split("\n")
    rows = [lines[0], *lines[2:]]  # the separator row says nothing
    return "\n".join(" - ".join(c for c in _cells(r) if c) for r in rows)


def _leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, str(k)))
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v, path)
    elif value is not None:
        yield path, value


def _json_lines(value: Any) -> str:
    out = []
    for path, leaf in _leaves(value):
        text = leaf if isinstance(leaf, str) else json.dumps(leaf)
        out.append(f"{'/'.join(path)}: {text}" if path else text)
    return "\n".join(out)


def _has_prose(value: Any) -> bool:
    return any(isinstance(v, str) and " " in v.strip() for _, v in _leaves(value))


# A failed parse can cost a scan of the rest of the text: a response with thousands of
# lines opening with "[" would be quadratic, so the search stops after this many failures.
MAX_JSON_FAILURES = 32


def _json_spans(text: str) -> Iterator[tuple[int, int, str]]:
    pos, failures = 0, 0
    for m in _JSON_START.finditer(text):
        start = m.end() - 1
        if start < pos:
            continue  # inside a document already taken
        try:
            value, end = _DECODER.raw_decode(text, start)
            lines = (_json_lines(value) if isinstance(value, dict | list) and _has_prose(value)
                     else None)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than it can parse
            failures += 1
            if failures >= MAX_JSON_FAILURES:
                return
            continue
        if lines is not None:
            yield start, end, lines
        pos = end  # a document without prose is left whole, its inner lines too


def flatten(text: str) -> Flattened:
    """``text`` with its JSON documents and markdown tables rewritten as plain lines."""
    spans = [(a, b, new, "json") for a, b, new in _json_spans(text)]
    spans += [(m.start(), m.end(), _table(m.group()), "table") for m in _TABLE.finditer(text)
              if not any(a < m.end() and m.start() < b for a, b, _, _ in spans)]
    if not spans:
        return Flattened(text)
    pieces, pos = [], 0
    for a, b, new, _ in sorted(spans):
        pieces += [text[pos:a], new]
        pos = b
    pieces.append(text[pos:])
    return Flattened("".join(pieces), tuple(dict.fromkeys(k for *_, k in sorted(spans))))


__all__ = ["Flattened", "flatten"]
