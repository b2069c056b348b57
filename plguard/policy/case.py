"""The expected-outcome record of a policy.

A leaf module: :class:`~plguard.policy.core.Policy` holds its cases and
:mod:`plguard.policy.cases` loads and runs them, so the record lives below both and neither
imports the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class Case:
    """One expected outcome."""

    name: str
    given: Mapping[str, float]
    expect: Mapping[str, float]
    default: float = 0.0
    tol: float = DEFAULT_TOL
    file: str = ""
    line: int = 0


__all__ = ["DEFAULT_TOL", "Case"]
