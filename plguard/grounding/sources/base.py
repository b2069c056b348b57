"""The seam every predicate source implements: which view it reads, what it needs, its P.

A source turns one view of an item into P(predicate) for the predicates it reads. The
Grounder asks each source what it reads (:meth:`PredicateSource.view_of`), plans the views
and the forwards they need once per batch (questions on prompt views, hidden states of
some layers), runs them, and hands every view's :class:`Reading` to the source of each
predicate; the per-view P's are then combined by the predicate's window rule and passed
through the source's own map (:meth:`PredicateSource.finish`).

Views (:data:`ViewKind`):

* ``prompt``: the grounding prompt (instructions, the request, and for response
  predicates the answer or one window of it; :mod:`plguard.grounding.views`), where the
  zero-shot True/False question is asked;
* ``request``: the request alone, as the model sees it from a user
  (:mod:`plguard.grounding.alone`);
* ``answer``: each window of the answer alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from plguard.backends.base import StatedScores
from plguard.types import PredicateSpec, TFScore

ViewKind = Literal["prompt", "request", "answer"]
VIEW_KINDS: tuple[str, ...] = ("prompt", "request", "answer")
# The states a reading may need of its view's forward: each question's answer position,
# the prompt's last token, the mean over the data (``pool``; the text's own tokens on an
# alone view), the end of the request block inside the pair prompt.
STATES: tuple[str, ...] = ("question", "prefix", "pool", "pair_prefix")


@dataclass(frozen=True, slots=True)
class Reading:
    """What the forward of one view gave: question scores and, when asked, its states.

    ``scores``: the view's question scores in its plan's ``blocks`` order (prompt views;
    empty for alone views); ``asked``: predicate -> (index of its first question among
    them, how many variants); ``stated``: the hidden states (None when no source asked
    for layers); ``layers``: the layers ``stated`` holds, in its order (empty: a heads
    file's own layers).
    """

    scores: tuple[TFScore, ...] = ()
    asked: Mapping[str, tuple[int, int]] | None = None
    stated: StatedScores | None = None
    layers: tuple[int, ...] = ()

    def questions(self, name: str) -> tuple[TFScore, ...]:
        """The scores of one predicate's question variants on this view (empty: not asked)."""
        if not self.asked or name not in self.asked:
            return ()
        start, n = self.asked[name]
        return self.scores[start:start + n]


@runtime_checkable
class PredicateSource(Protocol):
    """One way of turning text into P(predicate).

    ``kind`` names the way in traces (``zeroshot``, ``head``); ``label`` the artefact it
    applies (a heads file's ``name@digest``; empty when none).
    """

    kind: str
    label: str

    def view_of(self, spec: PredicateSpec) -> ViewKind | None:
        """The view this source reads for ``spec`` (None: it does not score ``spec``)."""
        ...

    def asks(self, spec: PredicateSpec) -> bool:
        """Whether ``spec``'s question must be asked on its prompt views for this source."""
        ...

    def layers(self, view: ViewKind) -> tuple[int, ...]:
        """The hidden-state layers this source reads on views of ``view`` (empty: none)."""
        ...

    def states(self, spec: PredicateSpec) -> frozenset[str]:
        """Which states of its view ``spec``'s reading needs (:data:`STATES`; empty: none)."""
        ...

    def read(self, spec: PredicateSpec, reading: Reading) -> float:
        """P(``spec``) on one view (NaN when the view holds no reading for it)."""
        ...

    def finish(self, spec: PredicateSpec, p: float) -> float:
        """The map applied to ``spec``'s combined P (a calibration; identity if none)."""
        ...

    def describe(self, spec: PredicateSpec) -> Mapping[str, Any]:
        """What the trace says of how ``spec`` is read (readout, layer, ...)."""
        ...


__all__ = ["STATES", "VIEW_KINDS", "PredicateSource", "Reading", "ViewKind"]
