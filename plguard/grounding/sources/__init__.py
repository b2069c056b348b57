"""Predicate sources: every way of turning text into P(predicate), behind one protocol.

* :mod:`~plguard.grounding.sources.base`: :class:`PredicateSource`, the views it can read
  and the :class:`Reading` of one view;
* :mod:`~plguard.grounding.sources.zeroshot`: the question's True/False log-probs;
* :mod:`~plguard.grounding.sources.heads`: learned heads over hidden states.

A new source is one file implementing the protocol; the Grounder takes a tuple of sources,
the first that reads a predicate decides it (:func:`deciding`).
"""

from __future__ import annotations

from collections.abc import Sequence

from plguard.grounding.sources.base import VIEW_KINDS, PredicateSource, Reading, ViewKind
from plguard.grounding.sources.heads import HeadsSource
from plguard.grounding.sources.zeroshot import ZeroShotSource
from plguard.types import PredicateSpec


def deciding(sources: Sequence[PredicateSource], spec: PredicateSpec) -> PredicateSource:
    """The first source that reads ``spec`` (the zero-shot source reads every predicate)."""
    for s in sources:
        if s.view_of(spec) is not None:
            return s
    raise LookupError(f"no predicate source reads {spec.name}")


__all__ = ["VIEW_KINDS", "HeadsSource", "PredicateSource", "Reading", "ViewKind",
           "ZeroShotSource", "deciding"]
