"""The one canonical token-id rule every backend shares (plguard/backends/token_ids.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plguard.backends.token_ids import request_ids
from plguard.errors import BackendError
from plguard.types import TFRequest


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


@given(prefix=st.text("abcdef", max_size=80),
       suffixes=st.lists(st.text("xyz", min_size=1, max_size=6), min_size=1, max_size=3),
       context=st.integers(8, 60), sampled=st.booleans())
def test_the_prefix_keeps_its_head_and_tail_and_fits_beside_every_suffix(
        prefix, suffixes, context, sampled):
    req = TFRequest(prefix=prefix, suffixes=tuple(suffixes))
    ids, sfx, cut = request_ids(encode, context, req, sampled=sampled)
    assert sfx == [encode(s) for s in suffixes]
    room = context - int(sampled) - max(len(s) for s in sfx)
    assert len(ids) <= room and cut == (len(prefix) > room)
    full = encode(prefix)
    if not cut:
        assert ids == full
    else:  # the middle goes: the head (instructions) and the tail (next to the question)
        head = room // 2
        assert ids == full[:head] + full[len(full) - (room - head):]


def test_a_question_longer_than_the_context_is_a_clear_error():
    req = TFRequest(prefix="ab", suffixes=("x" * 10,))
    with pytest.raises(BackendError, match="shorten the question"):
        request_ids(encode, 10, req)
    assert request_ids(encode, 11, req)[2] is True  # one token of prefix room: cut
    with pytest.raises(BackendError):
        request_ids(encode, 11, req, sampled=True)  # the sampled token takes it
