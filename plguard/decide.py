"""The decision stage: strongest rules against thresholds, safety first (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from plguard.categories import categories_at, category_scores, in_order, policy_codes
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
    content_rules: Sequence[str] = (),
) -> Decision:
    """Compare the strongest unsafe, unsafe-content and over-refusal rules with thresholds.

    Rule-level maxima are used rather than aggregates, so a detailed policy with many
    weak disjunctive paths does not reach a high violation score by their sum alone
    (the paper's design). Unsafe compliance is checked first, then unsafe content (an
    answer harmful whatever the request, ``thresholds.content``): both are the more
    serious failure, so an answer that is both risky and over-refusing becomes a refusal.
    An over-refusal threshold of None never rewrites: a calibration sets it where rewrites
    would unlock more unsafe prompts than they would fix over-refusals.

    ``categories`` (unsafe or content rule -> hazard codes, a policy's ``categories``)
    gives the decision its per-category scores and the codes at or above their rule's
    threshold. ``unsafe_name``: what the reason calls ``thresholds.unsafe`` (a moderation
    passes its own threshold there). ``content_rules``: empty for a request judged with no
    answer (there is no content to read).
    """
    unsafe = strongest(result.probs, unsafe_rules)
    content = strongest(result.probs, content_rules)
    over = strongest(result.probs, over_refusal_rules)
    # Only the rules decided here count: a request judged alone reads no content rule.
    tags = categories or {}
    u_tags = {r: tags[r] for r in unsafe_rules if r in tags}
    c_tags = {r: tags[r] for r in content_rules if r in tags}
    scores = {c: 0.0 for c in policy_codes(tags)}
    scores.update(category_scores(result.probs, {**u_tags, **c_tags}))
    cats = in_order({*categories_at(category_scores(result.probs, u_tags), thresholds.unsafe),
                     *categories_at(category_scores(result.probs, c_tags), thresholds.content)})
    if unsafe[0] and unsafe[1] >= thresholds.unsafe:
        return Decision(
            "refuse", unsafe, over,
            f"unsafe rule {unsafe[0]} = {unsafe[1]:.3f} >= {unsafe_name} "
            f"{thresholds.unsafe:.2f}: refuse or rewrite safely", cats, scores, content,
        )
    if content[0] and content[1] >= thresholds.content:
        return Decision(
            "refuse", unsafe, over,
            f"unsafe-content rule {content[0]} = {content[1]:.3f} >= content threshold "
            f"{thresholds.content:.2f} (the answer is harmful whatever the request; strongest "
            f"unsafe {unsafe[0] or '-'} = {unsafe[1]:.3f}): refuse or rewrite safely",
            cats, scores, content,
        )
    c_note = (f", strongest unsafe content {content[0]} = {content[1]:.3f} < "
              f"{thresholds.content:.2f}" if content[0] else "")
    if over[0] and over[1] >= thresholds.over_refusal_at:  # never, when it is off
        return Decision(
            "rewrite", unsafe, over,
            f"over-refusal rule {over[0]} = {over[1]:.3f} >= over-refusal threshold "
            f"{thresholds.over_refusal_at:.2f} (strongest unsafe {unsafe[0] or '-'} = "
            f"{unsafe[1]:.3f} below {thresholds.unsafe:.2f}{c_note}): rewrite helpfully",
            cats, scores, content,
        )
    t_over = thresholds.over_refusal
    below = f"< {t_over:.2f}" if t_over is not None else "(over-refusal threshold off)"
    return Decision(
        "allow", unsafe, over,
        f"no rule at threshold: strongest unsafe {unsafe[0] or '-'} = {unsafe[1]:.3f} "
        f"< {thresholds.unsafe:.2f}{c_note}, strongest over-refusal {over[0] or '-'} = "
        f"{over[1]:.3f} {below}", cats, scores, content,
    )


class PolicyRules(Protocol):
    """The rule lists of a policy that a decision reads (a :class:`~plguard.policy.Policy`)."""

    @property
    def unsafe_rules(self) -> Sequence[str]: ...  # noqa: D102
    @property
    def over_refusal_rules(self) -> Sequence[str]: ...  # noqa: D102
    @property
    def content_rules(self) -> Sequence[str]: ...  # noqa: D102
    @property
    def categories(self) -> Mapping[str, Sequence[str]]: ...  # noqa: D102


def decide_for(policy: PolicyRules, result: PolicyResult, thresholds: Thresholds, *,
               answered: bool = True, unsafe_name: str = "unsafe threshold") -> Decision:
    """:func:`decide` with every rule list of ``policy``, as the Guard decides.

    ``answered=False``: a request with no answer yet (a moderation), which can neither
    over-refuse nor hold harmful content, so only the unsafe rules are compared.
    """
    return decide(result, policy.unsafe_rules,
                  policy.over_refusal_rules if answered else (), thresholds,
                  policy.categories, unsafe_name,
                  content_rules=policy.content_rules if answered else ())
