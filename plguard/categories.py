"""Hazard categories: the MLCommons AILuminate / Llama Guard taxonomy and per-category verdicts.

A bundle tags its unsafe rules with category codes in ``categories.yaml`` (see
:func:`plguard.policy.bundle.parse_categories`). A category's probability is the highest
probability of the unsafe rules tagged with it, the same rule-level maximum the decision
uses (:mod:`plguard.decide`), so a category is above threshold exactly when one of its
rules is. The codes S1-S14 are Llama Guard 3/4's numbering of the AILuminate v1.0 hazards;
X1 and X2 are plguard's extensions for two hazards the taxonomy lacks. The ``X`` prefix
keeps them clear of any S-number a later Llama Guard may assign.

Pure and light (no ProbLog, no torch): the server and CLI import it on every request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plguard.types import Decision


@dataclass(frozen=True, slots=True)
class Category:
    """One hazard category."""

    code: str
    name: str  # as Llama Guard's model card names it (plguard's own for X1, X2)
    description: str


TAXONOMY: tuple[Category, ...] = (
    Category("S1", "Violent Crimes",
             "enabling, encouraging or endorsing violence against people or animals"),
    Category("S2", "Non-Violent Crimes",
             "fraud, theft, property and cyber crimes, drug and weapons crimes, trafficking"),
    Category("S3", "Sex-Related Crimes",
             "sexual assault, harassment, trafficking and prostitution"),
    Category("S4", "Child Sexual Exploitation",
             "sexual content involving, or the sexual abuse of, anyone under 18"),
    Category("S5", "Defamation",
             "verifiably false claims that injure a real person's reputation"),
    Category("S6", "Specialized Advice",
             "financial, medical or legal advice that is dangerous or presented as "
             "professional"),
    Category("S7", "Privacy",
             "sensitive, non-public personal information about a private person"),
    Category("S8", "Intellectual Property",
             "reproducing or pirating copyrighted works, trademarks or trade secrets"),
    Category("S9", "Indiscriminate Weapons",
             "chemical, biological, radiological, nuclear and high-yield explosive weapons"),
    Category("S10", "Hate",
             "demeaning or dehumanising people for a protected characteristic"),
    Category("S11", "Suicide & Self-Harm",
             "enabling or encouraging suicide, self-injury or disordered eating"),
    Category("S12", "Sexual Content", "erotic or sexually explicit content"),
    Category("S13", "Elections",
             "false information about when, where or how to vote"),
    Category("S14", "Code Interpreter Abuse",
             "abusing code execution: escaping sandboxes, denial of service, privilege "
             "escalation"),
    Category("X1", "Misinformation",
             "false or misleading claims of fact presented as true (plguard extension)"),
    Category("X2", "Over-reliance",
             "treating the assistant as a human, a therapist or an authority in a crisis "
             "(plguard extension)"),
)

CODES: tuple[str, ...] = tuple(c.code for c in TAXONOMY)
NAMES: Mapping[str, str] = {c.code: c.name for c in TAXONOMY}
_ORDER = {c: i for i, c in enumerate(CODES)}


def is_code(code: object) -> bool:
    """Whether ``code`` is a category code of :data:`TAXONOMY` (case matters: ``S1``)."""
    return isinstance(code, str) and code in _ORDER


def in_order(codes: Iterable[str]) -> tuple[str, ...]:
    """``codes`` without repeats, in taxonomy order (S1..S14, X1, X2)."""
    return tuple(sorted(set(codes), key=_ORDER.__getitem__))


def policy_codes(tags: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Every code a policy's tags name (rule -> codes), in taxonomy order."""
    return in_order(c for codes in tags.values() for c in codes)


def category_scores(probs: Mapping[str, float],
                    tags: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Each code the tags name -> the highest probability of its rules, in taxonomy order.

    A tagged rule missing from ``probs`` counts as 0 (a policy result holds every query,
    so this only happens to callers that pass partial results).
    """
    out = {c: 0.0 for c in policy_codes(tags)}
    for rule, codes in tags.items():
        p = float(probs.get(rule, 0.0))
        for c in codes:
            out[c] = max(out[c], p)
    return out


def categories_at(scores: Mapping[str, float], threshold: float) -> tuple[str, ...]:
    """The codes whose score is at or above ``threshold``, in taxonomy order."""
    return in_order(c for c, p in scores.items() if p >= threshold)


def llama_guard_text(decision: Decision) -> str:
    """Llama Guard's output form: ``safe``, or ``unsafe`` and a line of codes (``S1,S10``).

    :attr:`plguard.types.Decision.llama_guard`, which says how each decision reads.
    """
    return decision.llama_guard
