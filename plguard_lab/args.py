"""Argument types shared by the evaluation commands (a leaf: it imports no command module).

One definition each, so ``--policies a,b`` and ``--methods "a b"`` parse alike in every
command, and a checked number fails with the same message everywhere.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def csv_list(value: str) -> list[str]:
    """Names separated by commas and/or whitespace, blanks dropped."""
    return [v.strip() for part in value.split(",") for v in part.split() if v.strip()]


def checked_float(name: str, ok: Callable[[float], bool], what: str) -> Callable[[str], float]:
    """An argparse type: a float for which ``ok`` holds, else "must be ``what``"."""
    def parse(v: str) -> float:
        x = float(v)
        if not ok(x):
            raise argparse.ArgumentTypeError(f"must be {what}, got {v!r}")
        return x
    parse.__name__ = name  # argparse names it when float() fails: "invalid cost value"
    return parse


def unit_float(value: str) -> float:
    """A float in [0, 1] (a probability or threshold)."""
    x = float(value)
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return x


__all__ = ["checked_float", "csv_list", "unit_float"]
