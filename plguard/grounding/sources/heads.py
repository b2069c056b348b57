"""The heads source: learned linear heads over the grounding model's hidden states.

Each head reads one layer at one readout (:mod:`plguard.heads.artefact`): on the grounding
prompt (``question``, ``prefix``, ``pair_prefix``, ``pool``) or on the evidence alone
(``alone``: the request alone for a request predicate, each answer window alone for a
response predicate, the mean over the text's tokens). Its P is its own Platt map of the
head's score (fitted on out-of-fold scores), so no calibration applies after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from plguard.grounding.sources.base import Reading, ViewKind
from plguard.heads.artefact import HeadsFile
from plguard.types import PredicateSpec


class HeadsSource:
    """The heads of one heads file, for the predicates it has heads for."""

    kind = "head"

    def __init__(self, heads: HeadsFile,
                 scopes: Mapping[str, str] | None = None) -> None:
        self.file = heads
        self.label = heads.label
        # predicate -> "request"/"response": which alone view each alone head reads, so a
        # view is read only as deep as its own heads need (plguard.backends.depth). Without
        # it every alone view reads the file's layers.
        self.scopes = dict(scopes or {})

    def view_of(self, spec: PredicateSpec) -> ViewKind | None:
        """``request``/``answer`` for an alone head, ``prompt`` for the others, else None."""
        h = self.file.heads.get(spec.name)
        if h is None:
            return None
        if h.readout == "alone":
            return "request" if spec.scope == "request" else "answer"
        return "prompt"

    def asks(self, spec: PredicateSpec) -> bool:
        """A question-position head, or one that adds the zero-shot logit, needs it asked."""
        h = self.file.heads.get(spec.name)
        return h is not None and (h.readout == "question" or h.mode == "both")

    def layers(self, view: ViewKind) -> tuple[int, ...]:
        """The layers read of ``view`` (the forward stops after the deepest).

        An alone view: those of the alone heads of its scope; a prompt view: the file's.
        """
        if view == "prompt":
            return (self.file.layers if any(h.readout != "alone"
                                            for h in self.file.heads.values()) else ())
        scope = "request" if view == "request" else "response"
        return tuple(sorted({h.layer for n, h in self.file.heads.items()
                             if h.readout == "alone"
                             and self.scopes.get(n, scope) == scope}))

    def states(self, spec: PredicateSpec) -> frozenset[str]:
        """The state its head reads (``alone`` reads its view's ``pool``)."""
        h = self.file.heads.get(spec.name)
        if h is None:
            return frozenset()
        return frozenset({"pool" if h.readout == "alone" else h.readout})

    def read(self, spec: PredicateSpec, reading: Reading) -> float:
        """The head's P on one view (NaN when the view has no states for it)."""
        h = self.file.heads.get(spec.name)
        st = reading.stated
        if h is None or st is None:
            return math.nan
        j = (reading.layers or self.file.layers).index(h.layer)
        if h.readout in ("pool", "alone"):
            state = st.pool_state[j]
        elif h.readout == "prefix":
            state = st.prefix_state[j]
        elif h.readout == "pair_prefix":  # the request block's end inside the pair prompt
            state = st.mark_states[0, j]
        else:
            start, _ = (reading.asked or {})[spec.name]
            state = st.answer_states[start, j]
        logit = None
        if h.mode == "both":
            qs = reading.questions(spec.name)
            logit = qs[0].logprob_true - qs[0].logprob_false if qs else None
        return h.score(np.asarray(state, dtype=np.float64), logit)

    def finish(self, spec: PredicateSpec, p: float) -> float:
        """A head's P is already its own calibrated map."""
        return p

    def describe(self, spec: PredicateSpec) -> Mapping[str, Any]:
        """The readout and layer of ``spec``'s head."""
        h = self.file.heads[spec.name]
        return {"readout": h.readout, "layer": h.layer, "mode": h.mode}


__all__ = ["HeadsSource"]
