"""The zero-shot source: the grounding model's True/False answer to a predicate's question.

P(True) is the True/False next-token probability renormalised over the two, after the
question asked on the grounding prompt (:mod:`plguard.grounding.prompt`); a predicate's
paraphrases are merged per view (``grounding.combine``) and the combined P passes through
the calibration's Platt map where one applies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plguard.calibration import platt
from plguard.grounding.sources.base import Reading, ViewKind
from plguard.types import PredicateSpec, TFScore, renormalise


@dataclass(frozen=True, slots=True)
class Merged:
    """A predicate's question variants on one view, merged."""

    p: float  # NaN when not asked
    logprob_true: float  # mean over variants
    logprob_false: float
    variants: tuple[float, ...]  # per-variant P(True), when there is more than one
    spread: float  # max - min of those
    truncated: bool
    bound: bool


NOT_ASKED = Merged(math.nan, 0.0, 0.0, (), 0.0, False, False)


def merge_variants(part: Sequence[TFScore], mode: str) -> Merged:
    """Merge one predicate's variant scores on one view (``mode``: ``grounding.combine``)."""
    n = len(part)
    if n == 0:  # not asked (a head reads the data alone): no zero-shot reading
        return NOT_ASKED
    lt = sum(s.logprob_true for s in part) / n
    lf = sum(s.logprob_false for s in part) / n
    if mode == "mean_prob":
        p = sum(s.p_true for s in part) / n
    else:  # mean_logit: mean(lT - lF) == mean(lT) - mean(lF)
        p = renormalise(lt, lf)
    ps = [s.p_true for s in part]
    return Merged(p, lt, lf, tuple(ps) if n > 1 else (), max(ps) - min(ps) if n > 1 else 0.0,
                  any(s.truncated for s in part), any(s.bound for s in part))


def calibrate(p: float, ab: tuple[float, float] | None) -> float:
    """``p`` through Platt ``(a, b)`` (unchanged without one); NaN (not asked) reads 0.5."""
    if not math.isfinite(p):
        return 0.5
    return p if ab is None else platt(p, *ab)


class ZeroShotSource:
    """True/False log-probs of each predicate's question on its prompt views."""

    kind = "zeroshot"

    def __init__(self, mode: str = "mean_logit",
                 calibration: Mapping[str, tuple[float, float]] | None = None,
                 label: str = "") -> None:
        self.mode = mode
        self.calibration = dict(calibration or {})
        self.label = label

    def view_of(self, spec: PredicateSpec) -> ViewKind | None:
        """Every predicate, on its prompt views."""
        return "prompt"

    def asks(self, spec: PredicateSpec) -> bool:
        """Its reading is the question's answer."""
        return True

    def layers(self, view: ViewKind) -> tuple[int, ...]:
        """Log-probs only: no hidden state."""
        return ()

    def states(self, spec: PredicateSpec) -> frozenset[str]:
        """None: the log-probs are the reading."""
        return frozenset()

    def merged(self, spec: PredicateSpec, reading: Reading) -> Merged:
        """The merged variants of ``spec`` on one view (what traces show)."""
        return merge_variants(reading.questions(spec.name), self.mode)

    def read(self, spec: PredicateSpec, reading: Reading) -> float:
        """The merged P(True) of ``spec``'s questions on this view."""
        return self.merged(spec, reading).p

    def finish(self, spec: PredicateSpec, p: float) -> float:
        """The calibration's Platt map of ``spec`` (unchanged without one)."""
        return calibrate(p, self.calibration.get(spec.name))

    def describe(self, spec: PredicateSpec) -> Mapping[str, Any]:
        """The question is the reading; a calibration may map it."""
        return {"calibrated": spec.name in self.calibration}


__all__ = ["NOT_ASKED", "Merged", "ZeroShotSource", "calibrate", "merge_variants"]
