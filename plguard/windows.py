"""Windowed grounding of long responses: how per-window scores become one predicate score.

A response longer than its share of ``grounding.max_data_tokens`` is split into
overlapping token windows that each fit (``Backend.window_text``); every response-scope
question is asked of every window (each window is its own shared prefix), and the window
scores of one predicate are combined by the rule its ``predicates.yaml`` entry declares
(``windows:``):

* ``max``: true if any window shows it (harmful instructions: a passage anywhere counts);
  the default for a response predicate that declares nothing (lint warns);
* ``all``: true only if every window shows it (the minimum);
* ``first``: the opening window decides (a refusal is made at the start);
* ``mean``: the average of the windows.

With windowing off, a response that does not fit is cut to its head and tail; the unseen
middle is then either scored as one more window at the predicate's prior
(``grounding.unseen: prior``) or makes the Guard refuse (``unseen: refuse``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

WindowRule = Literal["max", "all", "first", "mean"]
WINDOW_RULES: tuple[str, ...] = ("max", "all", "first", "mean")
DEFAULT_RULE: WindowRule = "max"


def combine_windows(ps: Sequence[float], rule: WindowRule) -> tuple[float, int]:
    """The combined probability and the index of the deciding window (-1 for ``mean``)."""
    if not ps:
        raise ValueError("no window scores to combine")
    if rule == "first":
        return float(ps[0]), 0
    if rule == "mean":
        return float(sum(ps) / len(ps)), -1
    pick = max if rule == "max" else min
    i = pick(range(len(ps)), key=lambda k: ps[k])
    return float(ps[i]), int(i)


def window_spans(n_tokens: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Token spans ``[start, end)`` of overlapping windows covering ``n_tokens``.

    Consecutive windows share ``overlap`` tokens, so a passage shorter than the overlap is
    always whole in at least one window.
    """
    if size < 1:
        raise ValueError("window size must be at least 1")
    overlap = max(0, min(overlap, size - 1))
    if n_tokens <= size:
        return [(0, n_tokens)]
    spans, start = [], 0
    while True:
        end = min(start + size, n_tokens)
        spans.append((start, end))
        if end >= n_tokens:
            return spans
        start = end - overlap


__all__ = ["DEFAULT_RULE", "WINDOW_RULES", "WindowRule", "combine_windows", "window_spans"]
