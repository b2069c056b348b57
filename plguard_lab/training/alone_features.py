"""States of the evidence read alone: each request by itself, each answer window by itself.

The views are the product's own (:mod:`plguard.grounding.alone`), so a head fitted here
reads at inference exactly what it was fitted on. For every view two readouts are kept
at each layer: ``mean``, the mean over the text's own tokens (what the product's
``alone`` heads read), and ``last``, the state at the view's last token (kept beside it
so reports can show what the choice of readout is worth).

Stored in the same SQLite :class:`~plguard_lab.training.features.FeatureStore` as the
prompt states (keys differ by a readout tag), one committed transaction per batch: a
stopped extraction loses at most the batch in flight and a rerun skips what is stored.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from plguard.backends.base import states_backend
from plguard.grounding.alone import (
    ALONE_VERSION,
    ANSWER_WINDOW_OVERLAP,
    ANSWER_WINDOW_TOKENS,
    answer_windows,
    render_alone,
    request_view,
)
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Feature, FeatureStore, feature_key, model_key

# Depths read: a spread around the middle, where the measurements found the signal.
ALONE_LAYER_FRACTIONS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
READS = ("mean", "last")
VIEWS_PER_BATCH = 64
REQUEST_TOKENS = 1024  # a request longer than this keeps its head and tail


def alone_layers(n_layers: int) -> tuple[int, ...]:
    """The layers kept for alone views: :data:`ALONE_LAYER_FRACTIONS` of the depth."""
    return tuple(sorted({max(1, round(f * n_layers)) for f in ALONE_LAYER_FRACTIONS}))


class AloneExtractor:
    """Extracts and reads the alone states of corpus items (requests and answer windows)."""

    def __init__(self, backend: Any, store: FeatureStore, layers: Sequence[int] | None = None,
                 *, window_tokens: int = ANSWER_WINDOW_TOKENS,
                 window_overlap: int = ANSWER_WINDOW_OVERLAP) -> None:
        self.backend = states_backend(backend)
        self.store = store
        self.depth = int(backend.n_layers)  # the model's layer count
        self.layers = tuple(layers or alone_layers(self.depth))
        self.window_tokens = window_tokens
        self.window_overlap = window_overlap
        self.template = render_alone(backend)
        self.model_key = model_key(backend)
        self._windows: dict[str, list[Any]] = {}

    # -- keys --------------------------------------------------------------------------

    def _key(self, view: str, read: str, text: str) -> str:
        tag = f"\x00alone:{ALONE_VERSION}:{view}:{read}"
        if view == "answer":
            tag += f":{self.window_tokens}:{self.window_overlap}"
        return feature_key(self.model_key, ALONE_VERSION, 0, self.layers, tag, text, None)

    def request_key(self, text: str, read: str = "mean") -> str:
        """The key of a request's alone state."""
        return self._key("request", read, text)

    def windows(self, answer: str) -> list[Any]:
        """The answer's window views (memoised: windowing tokenises the whole answer)."""
        if answer not in self._windows:
            self._windows[answer] = answer_windows(self.backend, self.template, answer,
                                                   self.window_tokens, self.window_overlap)
        return self._windows[answer]

    def window_keys(self, answer: str, read: str = "mean") -> list[str]:
        """The keys of every window of an answer, in order."""
        return [self._key("answer", read, w.prefix) for w in self.windows(answer)]

    # -- extraction --------------------------------------------------------------------

    def run(self, items: Iterable[CorpusItem], *, requests: bool = True,
            answers: bool = True, progress: bool = True) -> int:
        """Forward every view not stored yet; returns how many views were forwarded."""
        todo: dict[str, tuple[str, Any]] = {}  # mean key -> (view kind, TFRequest)
        for it in items:
            if requests:
                todo.setdefault(self.request_key(it.request), ("request", it.request))
            if answers and it.response is not None:
                for k, w in zip(self.window_keys(it.response), self.windows(it.response),
                                strict=True):
                    todo.setdefault(k, ("answer", w))
        have = self.store.has(list(todo))
        keys = [k for k in todo if k not in have]
        from tqdm import tqdm

        with tqdm(total=len(keys), desc="alone views", unit="view", file=sys.stderr,
                  disable=not progress or not keys, dynamic_ncols=True) as bar:
            for i in range(0, len(keys), VIEWS_PER_BATCH):
                chunk = keys[i:i + VIEWS_PER_BATCH]
                reqs = [self._view(*todo[k]) for k in chunk]
                outs = self.backend.true_false_states(reqs, self.layers)
                rows: dict[str, Feature] = {}
                for k, (kind, payload), req, out in zip(
                        chunk, (todo[k] for k in chunk), reqs, outs, strict=True):
                    text = payload if kind == "request" else req.prefix
                    rows[k] = Feature(out.pool_state, 0.0, 0.0)
                    rows[self._key(kind, "last", text)] = Feature(out.prefix_state, 0.0, 0.0)
                self.store.put(rows)
                bar.update(len(chunk))
        return len(keys)

    def _view(self, kind: str, payload: Any) -> Any:
        if kind == "request":
            return request_view(self.backend, self.template, payload, REQUEST_TOKENS)[0]
        return payload

    # -- reading -----------------------------------------------------------------------

    def request_states(self, texts: Sequence[str], read: str = "mean") -> np.ndarray:
        """``[n, n_layers, d]``: each request's stored state (KeyError if not extracted)."""
        keys = [self.request_key(t, read) for t in texts]
        got = self.store.get(keys)
        return np.stack([got[k].states for k in keys])

    def window_states(self, answers: Sequence[str], read: str = "mean"
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Every window's state of each answer, and each window's answer index."""
        keys: list[str] = []
        owner: list[int] = []
        for i, a in enumerate(answers):
            ks = self.window_keys(a, read)
            keys += ks
            owner += [i] * len(ks)
        got = self.store.get(list(dict.fromkeys(keys)))
        return np.stack([got[k].states for k in keys]), np.asarray(owner)


__all__ = ["ALONE_LAYER_FRACTIONS", "READS", "AloneExtractor", "alone_layers"]
