"""Hidden states of a growing text from one incremental forward (a stream's token check).

:class:`IncrementalStates` keeps a KV cache over ``before + text`` as ``text`` grows: each
:meth:`~IncrementalStates.feed` forwards only the tokens that are new (re-tokenising the
whole string, the cache is cut back to the longest common token prefix first, so a word
that later pieces change is re-read), and returns the states of every token of ``text`` at
the asked layers. Over a whole answer this is one forward plus what re-tokenisation
re-reads (``scripts/bench_token_check.py`` measures it).

The forward stops after the deepest layer asked for (the content heads read layer 15 of
the embedded model's 30): the layers above it would be computed only to be thrown away,
and they are half of a token's cost. The KV cache then holds those first layers only,
which is all the next piece needs.

Transformers backends only (``Capabilities.hidden_states``); a text that outgrows the
model's context stops the reader (:meth:`feed` returns None) and the stream falls back to
its windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class _Enough(Exception):
    """Raised by the hook on the deepest layer read: the rest of the forward is not needed."""


def decoder_layers(model: Any) -> Any | None:
    """The decoder layers of a transformers causal LM (``model.model.layers``), or None."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return layers if hasattr(layers, "__len__") and hasattr(layers, "__getitem__") else None


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
        # Hidden state x is the output of decoder layer x (1-based); the last one the model
        # returns is normalised, so a read of the last layer runs the whole forward.
        blocks = decoder_layers(backend.model)
        self.blocks = (blocks if blocks is not None and self.layers and min(self.layers) >= 1
                       and max(self.layers) < len(blocks) else None)

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

        inp = torch.tensor([new], device=self.backend.device)
        if self.blocks is None:
            with torch.inference_mode():
                out = self.backend.model(input_ids=inp, past_key_values=self.cache,
                                         use_cache=True, output_hidden_states=True,
                                         logits_to_keep=1)
            self.cache = out.past_key_values
            hid = torch.stack([out.hidden_states[x][0] for x in self.layers], dim=1)
            return list(hid.float().cpu().numpy())
        got: dict[int, Any] = {}
        deepest = max(self.layers)

        def keep(x: int) -> Any:
            def hook(_module: Any, _args: Any, output: Any) -> None:
                got[x] = output[0] if isinstance(output, tuple) else output
                if x == deepest:
                    raise _Enough
            return hook

        handles = [self.blocks[x - 1].register_forward_hook(keep(x)) for x in self.layers]
        try:
            with torch.inference_mode():
                self.backend.model(input_ids=inp, past_key_values=self.cache, use_cache=True,
                                   logits_to_keep=1)
        except _Enough:
            pass  # the layers above the deepest read are skipped (module docstring)
        finally:
            for h in handles:
                h.remove()
        hid = torch.stack([got[x][0] for x in self.layers], dim=1)
        return list(hid.float().cpu().numpy())


__all__ = ["IncrementalStates"]
