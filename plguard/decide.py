"""The decision stage: strongest rules against thresholds, safety first (pure).

One decision, every rule an input: :func:`decide` compares a policy result's strongest rules
with the thresholds, and :func:`decide_for` is the whole decision on one item as the Guard
makes it (a policy's rule lists, the moderation threshold for a request judged alone, and
the rules on how the text was read: text addressed to the guard, a middle never read).
The Guard, streams, moderation, the viewer and the attack rescorer all call it, so none can
disagree with the Guard. :func:`decide_array` is its action over arrays, for sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from plguard.categories import categories_at, category_scores, in_order, policy_codes
from plguard.config import GroundingConfig, Thresholds
from plguard.types import Decision, Grounding, PolicyResult

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

#: The actions, in the order of :func:`decide_array`'s codes.
ACTIONS = ("allow", "refuse", "rewrite")


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


_GROUNDING = GroundingConfig.model_fields


@dataclass(frozen=True, slots=True)
class Reading:
    """How the judged text was read, as far as a decision cares (from its grounding).

    ``screen``: the kinds of text addressed to the guard found in it (plguard.screen), in
    order of first finding; ``unseen``: windowing was off and the response's middle was cut
    unread (scored at each predicate's prior).
    """

    screen: tuple[str, ...] = ()
    unseen: bool = False

    @classmethod
    def of(cls, grounding: Grounding) -> Reading:
        """What ``grounding`` says of how its text was read."""
        return cls(tuple(dict.fromkeys(f.kind for f in grounding.screen)),
                   any(s.unseen for s in grounding.scores))


@dataclass(frozen=True, slots=True)
class ReadRules:
    """What a decision does with how the text was read: ``grounding.screen`` and ``.unseen``.

    Defaults are the config's (one home for them); :meth:`of` takes a config's.
    """

    screen: str = _GROUNDING["screen"].default
    unseen: str = _GROUNDING["unseen"].default

    @classmethod
    def of(cls, config: GroundingConfig) -> ReadRules:
        """The rules of a grounding config."""
        return cls(config.screen, config.unseen)


#: Text read whole with nothing addressed to the guard; the config's rules on reading.
READ_WHOLE = Reading()
DEFAULT_READ_RULES = ReadRules()


def decide_for(policy: PolicyRules, result: PolicyResult, thresholds: Thresholds, *,
               answered: bool = True, reading: Reading = READ_WHOLE,
               rules: ReadRules = DEFAULT_READ_RULES) -> Decision:
    """The whole decision on one item, as the Guard makes it.

    :func:`decide` with every rule list of ``policy``, then what ``rules`` do with how the
    text was read (``reading``). ``answered=False``: a request with no answer yet (a
    moderation), which can neither over-refuse nor hold harmful content, so only the unsafe
    rules are compared, at the moderation threshold (``thresholds.moderation``, else the
    unsafe one).

    Text addressed to the guard refuses under ``screen: refuse`` and is noted otherwise; a
    response whose middle was never read refuses under ``unseen: refuse`` and is noted
    otherwise. Either refusal overrides whatever the rules said: no rule can vouch for text
    that was removed or not read.
    """
    th, name = thresholds, "unsafe threshold"
    if not answered and thresholds.moderation is not None:
        th = thresholds.model_copy(update={"unsafe": thresholds.moderation})
        name = "moderation threshold"
    d = decide(result, policy.unsafe_rules,
               policy.over_refusal_rules if answered else (), th,
               policy.categories, name,
               content_rules=policy.content_rules if answered else ())
    return read_rules(d, reading, rules)


def read_rules(d: Decision, reading: Reading, rules: ReadRules) -> Decision:
    """``d`` after the rules on how its text was read (see :func:`decide_for`)."""
    if reading.screen:
        kinds = ", ".join(reading.screen)
        if rules.screen == "refuse":
            return replace(d, action="refuse",
                           reason=f"text addressed to the guard ({kinds}) in the data "
                           "(grounding.screen = refuse): refuse")
        d = replace(d, reason=f"{d.reason} [text addressed to the guard ({kinds}) was "
                    "removed before grounding]")
    if not reading.unseen:
        return d
    if rules.unseen == "refuse":
        return replace(d, action="refuse",
                       reason="the response is longer than grounding.max_data_tokens and "
                       "windowing is off, so its middle was not read (grounding.unseen "
                       "= refuse): refuse")
    return replace(d, reason=d.reason + " [response cut to fit: its unseen middle was "
                   "scored at each predicate's prior]")


def decide_array(unsafe: ArrayLike | None, over: ArrayLike | None, t_unsafe: ArrayLike,
                 t_over: ArrayLike, content: ArrayLike | None = None,
                 t_content: ArrayLike = math.inf) -> np.ndarray:
    """:func:`decide`'s action for arrays of strongest-rule probabilities (for sweeps).

    Every argument broadcasts with the others (a grid of thresholds against many items);
    None: the policy has no rule of that kind, so it never fires (even at a threshold of
    0). An off over-refusal threshold is ``math.inf``. Returns ``int8`` codes into
    :data:`ACTIONS`; the order is :func:`decide`'s: unsafe, then unsafe content, then
    over-refusal.
    """
    import numpy as np

    never = np.False_
    refuse = never if unsafe is None else np.asarray(unsafe) >= t_unsafe
    if content is not None:
        refuse = refuse | (np.asarray(content) >= t_content)
    rewrite = never if over is None else np.asarray(over) >= t_over
    refuse, rewrite = np.broadcast_arrays(refuse, rewrite)
    return np.where(refuse, np.int8(1), np.where(rewrite, np.int8(2), np.int8(0))
                    ).astype(np.int8)
