"""The transformers backend's reference paths: one full forward per sequence, no sharing.

What the fast, prefix-shared paths of :class:`~plguard.backends.transformers_backend.\
TransformersBackend` must equal (the tests compare them token id for token id); a mixin so
the backend module holds its serving code only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plguard.backends.base import StatedScores
from plguard.backends.torch_states import mean_states
from plguard.types import TFRequest, TFScore


class ReferencePaths:
    """``true_false_logprobs_naive`` and ``true_false_states_naive`` of a backend."""

    if TYPE_CHECKING:  # what the backend provides
        model: Any
        device: Any

        def request_ids(  # noqa: D102
                self, req: TFRequest) -> tuple[list[int], list[list[int]], bool]: ...
        def answer_ids(  # noqa: D102
                self, answers: tuple[str, str] = ...) -> tuple[tuple[int, ...],
                                                               tuple[int, ...]]: ...
        def _score_ids(self, ids: list[int], truncated: bool,
                       ids_tf: tuple[tuple[int, ...], tuple[int, ...]],
                       layers: tuple[int, ...] = ()) -> StatedScores: ...
        def _last_states(self, ids: list[int], layers: tuple[int, ...]) -> Any: ...
        def _mark_ids(self, req: TFRequest, mark: int) -> list[int]: ...
        def _pool_positions(self, req: TFRequest, n_ids: int, truncated: bool
                            ) -> list[int]: ...

    def true_false_logprobs_naive(self, requests: Sequence[TFRequest]
                                  ) -> list[list[TFScore]]:
        """Reference path: one full forward per question, over the same token ids."""
        import torch

        with torch.inference_mode():
            out = []
            for req in requests:
                prefix, suffixes, truncated = self.request_ids(req)
                ids_tf = self.answer_ids(req.answers)
                out.append([self._score_ids(prefix + s, truncated, ids_tf).scores[0]
                            for s in suffixes])
        return out

    def true_false_states_naive(self, requests: Sequence[TFRequest], layers: Sequence[int]
                                ) -> list[StatedScores]:
        """Reference path of :meth:`true_false_states`: one full forward per sequence."""
        import numpy as np
        import torch

        lay = tuple(layers)
        out = []
        with torch.inference_mode():
            for req in requests:
                prefix, suffixes, truncated = self.request_ids(req)
                ids_tf = self.answer_ids(req.answers)
                rows = [self._score_ids(prefix + s, truncated, ids_tf, lay) for s in suffixes]
                pre = self._score_ids(prefix, truncated, ids_tf, lay) if prefix else None
                marks = (np.stack([self._last_states(self._mark_ids(req, m), lay)
                                   for m in req.marks]) if lay and req.marks else None)
                pool = None
                if lay and req.pool is not None and prefix:
                    res = self.model(input_ids=torch.tensor([prefix], device=self.device),
                                     logits_to_keep=1, output_hidden_states=True)
                    pool = mean_states(res.hidden_states,
                                        self._pool_positions(req, len(prefix), truncated), lay)
                out.append(StatedScores(
                    [r.scores[0] for r in rows],
                    np.concatenate([r.answer_states for r in rows]) if rows else None,
                    pre.answer_states[0] if pre is not None else None, marks, pool))
        return out


__all__ = ["ReferencePaths"]
