"""One PredicateScore per predicate: paraphrases merged per view, then views by window rule.

A predicate's paraphrases are merged per view (``grounding.combine``: ``mean_logit`` or
``mean_prob``); its views (windows of a long response, or pieces of a screened one) are
combined by the rule it declares (:mod:`plguard.windows`), with heads' P's in place of the
zero-shot ones where every view has one. Zero-shot P's pass through the calibration's
Platt scaling; a head's P is its own (its file's calibration is fitted on it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from plguard.calibration import platt
from plguard.grounding.prompt import QuestionPlan
from plguard.grounding.scoring import ViewScores
from plguard.grounding.views import View
from plguard.types import PredicateScore, PredicateSpec, Scope, TFScore, renormalise
from plguard.windows import DEFAULT_RULE, WindowRule, combine_windows


@dataclass(frozen=True, slots=True)
class Merged:
    """A predicate's question variants on one view, merged."""

    p: float  # NaN when not asked (a head reads the data alone)
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


def combine(scope: Scope, plan: QuestionPlan, views: Sequence[tuple[View, ViewScores]],
            *, mode: str, unseen_rule: str, calibration: Mapping[str, tuple[float, float]]
            ) -> tuple[PredicateScore, ...]:
    """One score per predicate of ``plan`` over an item's ``views`` of ``scope``.

    ``mode``: ``grounding.combine``; ``unseen_rule``: ``grounding.unseen``; ``calibration``:
    predicate -> Platt ``(a, b)``.
    """
    out = []
    unseen = any(v.unseen for v, _ in views)
    for spec, start, qs in zip(plan.specs, plan.offsets, plan.variants, strict=True):
        per_view = [merge_variants(s.scores[start:start + len(qs)], mode) for _, s in views]
        out.append(_one(scope, spec, views, per_view, unseen, unseen_rule,
                        calibration.get(spec.name)))
    return tuple(out)


def _one(scope: Scope, spec: PredicateSpec, views: Sequence[tuple[View, ViewScores]],
         per_view: Sequence[Merged], unseen: bool, unseen_rule: str,
         ab: tuple[float, float] | None) -> PredicateScore:
    rule = cast(WindowRule, spec.windows or DEFAULT_RULE)
    heads = [s.heads.get(spec.name) for _, s in views]
    headed = all(h is not None for h in heads)
    ps = [cast(float, h) for h in heads] if headed else [m.p for m in per_view]
    prior = unseen and unseen_rule == "prior" and rule != "first"
    if prior:
        ps.append(0.5 if spec.prior is None else spec.prior)  # the unseen middle
    p, at = combine_windows(ps, rule)
    src = per_view[at if 0 <= at < len(per_view) else 0]
    cut = src.truncated or (headed and any(v.cut for v, _ in views))
    p_zero: float | None = None
    if not headed:
        p_zero = p = calibrate(p, ab)
    elif all(math.isfinite(m.p) for m in per_view):  # its question was asked
        zs = [m.p for m in per_view] + ([ps[-1]] if prior else [])
        p_zero = calibrate(combine_windows(zs, rule)[0], ab)
    return PredicateScore(
        name=spec.name, p_true=p, logprob_true=src.logprob_true,
        logprob_false=src.logprob_false, scope=scope, truncated=cut or unseen,
        variants=src.variants, variant_spread=src.spread,
        windows=tuple(ps) if len(ps) > 1 else (),
        window=at if len(ps) > 1 else -1, unseen=unseen,
        bound=any(m.bound for m in per_view), p_zeroshot=p_zero,
        p_head=p if headed else None, source="head" if headed else "zeroshot")


__all__ = ["NOT_ASKED", "Merged", "calibrate", "combine", "merge_variants"]
