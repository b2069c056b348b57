"""Log-probability arithmetic shared by the backends that read token log-probs.

A leaf module (standard library only), so the openai backend can use it without importing
the vLLM backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Stands in for -inf: -inf would poison renormalisation and JSON traces, and this is far
#: below any real log-probability (the transformers backend uses the same floor).
LOGPROB_FLOOR = -1e4


def finite(x: float) -> float:
    """``x``, or :data:`LOGPROB_FLOOR` where it is not finite."""
    return x if math.isfinite(x) else LOGPROB_FLOOR


def logsumexp(xs: Sequence[float]) -> float:
    """``log(sum(exp(x)))`` without overflow; -inf (or nan) passes through."""
    m = max(xs)
    if not math.isfinite(m):
        return m
    return m + math.log(sum(math.exp(x - m) for x in xs))


__all__ = ["LOGPROB_FLOOR", "finite", "logsumexp"]
