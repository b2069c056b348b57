"""Hidden states of a growing text from one incremental forward (a stream's token check).

:class:`IncrementalStates` keeps a KV cache over ``before + text`` as ``text`` grows: each
:meth:`~IncrementalStates.feed` forwards only the tokens that are new (re-tokenising the
whole string, the cache is cut back to the longest common token prefix first, so a word
that later pieces change is re-read), and returns the states of every token of ``text`` at
the asked layers. Over a whole answer this is one forward plus what re-tokenisation
re-reads (``scripts/bench_token_check.py`` measures it).

The forward stops after the deepest layer asked for (:mod:`plguard.backends.depth`; the
content heads read layer 15 of the embedded model's 30), so the KV cache holds those
first layers only, which is all the next piece needs.

Transformers backends only (``Capabilities.hidden_states``); a text that outgrows the
model's context stops the reader (:meth:`feed` returns None) and the stream falls back to
its windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plguard.backends.depth import can_stop, states_to


class IncrementalStates:
    """The states of ``before + text`` for a growing ``text`` (module docstring)."""

    def __init__(self, backend: Any, before: str, layers: Sequence[int]) -> None:
        self.backend = backend
        self.before = before
        self.layers = tuple(layers)
        self.n_before = len(backend.encode(before))
        self.ids: list[int] = []
        self.rows: list[np.ndarray] = []  # per token: [len(layers), d] float32
        self.cache: Any = None
        self.forwarded = 0  # tokens forwarded in all (the cost: one forward is len(ids))
        self.stopped = False
        # Whether the forward stops after the deepest layer read (plguard.backends.depth).
        self.stops = can_stop(backend.model, self.layers)

    def feed(self, text: str, last: int | None = None) -> np.ndarray | None:
        """``[n, len(layers), d]``: the states of ``text``'s tokens (its ``last`` ones).

        None once the text no longer fits the model's context (the reader stops).
        """
        from transformers import DynamicCache

        if self.stopped:
            return None
        ids = list(self.backend.encode(self.before + text))
        if len(ids) > self.backend.max_context:
            self.stopped = True
            self.cache, self.rows = None, []
            return None
        keep = 0
        for a, b in zip(self.ids, ids, strict=False):
            if a != b:
                break
            keep += 1
        if self.cache is None or keep == 0:
            self.cache, self.rows, keep = DynamicCache(), [], 0
        elif keep < len(self.ids):  # re-tokenised differently from there: read it again
            self.cache.crop(keep - len(self.ids))  # negative: drop that many tokens
            del self.rows[keep:]
        new = ids[keep:]
        if new:
            self.rows.extend(self._forward(new))
            self.forwarded += len(new)
        self.ids = ids
        start = min(self.n_before, len(self.rows))
        if last is not None:
            start = max(start, len(self.rows) - last)
        if start == len(self.rows):
            return np.zeros((0, len(self.layers), 0), dtype=np.float32)
        return np.stack(self.rows[start:])

    def _forward(self, new: list[int]) -> list[np.ndarray]:
        """Per new token: its states at ``layers`` (``[len(layers), d]``), the cache grown."""
        import torch

        with torch.inference_mode():
            got = states_to(self.backend.model, self.layers,
                            input_ids=torch.tensor([new], device=self.backend.device),
                            past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            hid = torch.stack([got[x][0] for x in self.layers], dim=1)
        return list(hid.float().cpu().numpy())


__all__ = ["IncrementalStates"]
