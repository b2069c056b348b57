"""The canonical token ids of a grounding request: the one rule every backend shares.

A request's prefix (the instructions and the data) and each of its suffixes (a question
ending where True/False would come next) are encoded separately and joined, so every
backend scores the same token sequence. When the prefix and the longest suffix do not fit
the context, the middle of the prefix is dropped, so its head (the instructions) and its
tail (the end of the data, next to the question) stay.
"""

from __future__ import annotations

from collections.abc import Callable

from plguard.errors import BackendError
from plguard.types import TFRequest


def request_ids(encode: Callable[[str], list[int]], max_context: int, req: TFRequest, *,
                sampled: bool = False) -> tuple[list[int], list[list[int]], bool]:
    """Prefix ids, each suffix's ids, and whether the prefix was cut.

    ``sampled``: the engine samples the answer token (vLLM, in-process or served), so one
    token of the context is left for it.
    """
    room_total = max_context - (1 if sampled else 0)
    prefix = encode(req.prefix)
    suffixes = [encode(s) for s in req.suffixes]
    longest = max((len(s) for s in suffixes), default=0)
    if longest >= room_total:
        raise BackendError(f"a grounding question is {longest} tokens, longer than the "
                           f"context window ({max_context}); shorten the question")
    room = room_total - longest
    if len(prefix) <= room:
        return prefix, suffixes, False
    head = room // 2
    return prefix[:head] + prefix[len(prefix) - (room - head):], suffixes, True


__all__ = ["request_ids"]
