"""Where a stream's windows end and where their held-back tails start: pure text arithmetic.

A window ends at a word boundary (so no part of a word is released alone) with at most
``size`` tokens from its start; an unbroken run of twice that is cut anyway. Where a window
ends is a function of the draft, not of how its pieces arrived: with no word boundary past
the last one that fits, the window waits (it could still end a word later).
"""

from __future__ import annotations

from collections.abc import Callable

SPACES = " \n\t\r"
Count = Callable[[str], int]


def last_true(xs: list[int], ok: Callable[[int], bool]) -> int | None:
    """The last of ``xs`` for which ``ok`` holds, where ``ok`` holds on a prefix of them."""
    lo, hi, best = 0, len(xs) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(xs[mid]):
            best, lo = xs[mid], mid + 1
        else:
            hi = mid - 1
    return best


def window_end(text: str, count: Count, start: int, checked: int, size: int) -> int | None:
    """Where the full window from ``start`` ends, or None when it is not due yet.

    ``checked``: how far the text was already read in an allowed window (no boundary
    before it may end this one).
    """
    n = count(text[start:])
    if n < size:
        return None
    spaces = [i for i in range(max(checked, start) + 1, len(text)) if text[i] in SPACES]
    if not spaces:
        return len(text) if n >= 2 * size else None
    fits = last_true(spaces, lambda p: count(text[start:p]) <= size)
    if fits is not None and fits == spaces[-1] and n < 2 * size:
        return None  # no word boundary past it yet: the window could still end later
    return spaces[0] if fits is None else fits


def word_start_before(text: str, count: Count, start: int, cut: int, want: int) -> int:
    """The latest word start in ``text[start:cut]`` with ``want`` tokens up to ``cut``."""
    if want == 0:
        return cut
    starts = [i for i in range(start, cut) if text[i] in SPACES]
    best = last_true(starts, lambda p: count(text[p:cut]) >= want)
    return start if best is None else best


__all__ = ["SPACES", "last_true", "window_end", "word_start_before"]
