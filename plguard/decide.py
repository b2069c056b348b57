"""The decision stage: strongest rules against thresholds, safety first (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from plguard.categories import categories_at, category_scores
from plguard.config import Thresholds
from plguard.types import Decision, PolicyResult


def strongest(probs: Mapping[str, float], rules: Sequence[str]) -> tuple[str, float]:
    """The rule with the highest probability (first in policy order on ties)."""
    if not rules:
        return ("", 0.0)
    best = max(rules, key=lambda r: (probs.get(r, 0.0), -rules.index(r)))
    return (best, float(probs.get(best, 0.0)))


def decide(
    result: PolicyResult,
    unsafe_rules: Sequence[str],
    over_refusal_rules: Sequence[str],
    thresholds: Thresholds,
    categories: Mapping[str, Sequence[str]] | None = None,
    unsafe_name: str = "unsafe threshold",
) -> Decision:
    """Compare the strongest unsafe and over-refusal rules with their thresholds.

    Rule-level maxima are used rather than aggregates, so a detailed policy with many
    weak disjunctive paths does not reach a high violation score by their sum alone
    (the paper's design). Unsafe compliance is checked first: it is the more serious
    failure, so an answer that is both risky and over-refusing becomes a refusal. An
    over-refusal threshold of None never rewrites: a calibration sets it where rewrites
    would unlock more unsafe prompts than they would fix over-refusals.

    ``categories`` (unsafe rule -> hazard codes, a policy's ``categories``) gives the
    decision its per-category scores and the codes at or above the unsafe threshold.
    ``unsafe_name``: what the reason calls ``thresholds.unsafe`` (a moderation passes its
    own threshold there).
    """
    unsafe = strongest(result.probs, unsafe_rules)
    over = strongest(result.probs, over_refusal_rules)
    scores = category_scores(result.probs, categories or {})
    cats = categories_at(scores, thresholds.unsafe)
    if unsafe[0] and unsafe[1] >= thresholds.unsafe:
        return Decision(
            "refuse", unsafe, over,
            f"unsafe rule {unsafe[0]} = {unsafe[1]:.3f} >= {unsafe_name} "
            f"{thresholds.unsafe:.2f}: refuse or rewrite safely", cats, scores,
        )
    if over[0] and over[1] >= thresholds.over_refusal_at:  # never, when it is off
        return Decision(
            "rewrite", unsafe, over,
            f"over-refusal rule {over[0]} = {over[1]:.3f} >= over-refusal threshold "
            f"{thresholds.over_refusal_at:.2f} (strongest unsafe {unsafe[0] or '-'} = "
            f"{unsafe[1]:.3f} below {thresholds.unsafe:.2f}): rewrite helpfully", cats, scores,
        )
    t_over = thresholds.over_refusal
    below = f"< {t_over:.2f}" if t_over is not None else "(over-refusal threshold off)"
    return Decision(
        "allow", unsafe, over,
        f"no rule at threshold: strongest unsafe {unsafe[0] or '-'} = {unsafe[1]:.3f} "
        f"< {thresholds.unsafe:.2f}, strongest over-refusal {over[0] or '-'} = "
        f"{over[1]:.3f} {below}", cats, scores,
    )
