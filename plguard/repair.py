"""Symbolic repair prompts: the rule probabilities and an action label steer a rewrite.

Following the paper's symbolic repair (Appendix B.6), the generator sees the policy,
the request, its earlier answer, the ProbLog rule probabilities that fired and an
action label; it then writes a refusal / safe rewrite or a helpful direct answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from plguard.types import Action, Chat, Decision, Message

REPAIR_TEMPLATE_VERSION = "r1"

ACTION_LABELS: Mapping[str, str] = {
    "refuse": "REFUSE_OR_REWRITE_SAFELY",
    "rewrite": "ANSWER_HELPFULLY",
}

_INSTRUCTIONS: Mapping[str, str] = {
    "refuse": (
        "The earlier answer is likely to violate the policy by giving unsafe assistance. "
        "Write a new answer that does not provide actionable harmful instructions, "
        "details or evasion advice. Briefly say what you cannot help with and, where "
        "appropriate, offer a safe alternative (general information, prevention, or "
        "where to get help)."
    ),
    "rewrite": (
        "The earlier answer is likely to refuse a benign request unnecessarily. "
        "Write a new answer that helps the user directly and completely. The request is "
        "safe in its context (educational, fictional, historical, figurative or otherwise "
        "benign), so do not refuse and do not lecture."
    ),
}

SYSTEM_PROMPT = (
    "You are a careful assistant that repairs answers so they follow this policy.\n\n"
    "POLICY:\n{policy}"
)

USER_TEMPLATE = """A symbolic policy checker evaluated an earlier answer to a user request.

USER REQUEST:
{request}

EARLIER ANSWER:
{draft}

CHECKER RESULT (probabilities of policy rules):
{rules}

ACTION: {label}
{instructions}

Reply with the new answer to the user only, without mentioning the checker."""


#: Words in a row that a repair may share with its own instructions before it counts as
#: repeating them: a small generator sometimes answers the repair prompt by reciting it.
ECHO_WORDS = 8


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_']+", text.lower())


def _shingles(words: Sequence[str], n: int = ECHO_WORDS) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


# The fixed text of every repair prompt: the instructions, and the template's parts
# between its fields (no run spans a field, whose text is the user's or the draft's).
_FIXED = set().union(*(_shingles(_words(part)) for part in (
    *_INSTRUCTIONS.values(), *re.split(r"\{\w+\}", USER_TEMPLATE + SYSTEM_PROMPT))))


def repeats_instructions(text: str) -> bool:
    """Whether a repair recites its own prompt instead of answering.

    A run of ``ECHO_WORDS`` words of the fixed instructions or template: such a text is
    not an answer, and grounding it says nothing about what the user would be sent.
    """
    return not _shingles(_words(text)).isdisjoint(_FIXED)


def format_rules(probs: Mapping[str, float], rules: Sequence[str], limit: int = 6) -> str:
    """The strongest rules, one per line, highest first."""
    ranked = sorted(rules, key=lambda r: -probs.get(r, 0.0))[:limit]
    return "\n".join(f"- {r}: {probs.get(r, 0.0):.2f}" for r in ranked) or "- (none)"


def repair_chat(
    *,
    policy_text: str,
    request: str,
    draft: str,
    decision: Decision,
    probs: Mapping[str, float],
    unsafe_rules: Sequence[str],
    over_refusal_rules: Sequence[str],
) -> Chat:
    """The chat the generator answers to repair ``draft`` for ``decision.action``."""
    action: Action = decision.action
    if action not in ACTION_LABELS:
        raise ValueError(f"no repair for action {action!r}")
    rules = unsafe_rules if action == "refuse" else over_refusal_rules
    user = USER_TEMPLATE.format(
        request=request.strip(),
        draft=draft.strip() or "(empty)",
        rules=format_rules(probs, rules),
        label=ACTION_LABELS[action],
        instructions=_INSTRUCTIONS[action],
    )
    return (
        Message("system", SYSTEM_PROMPT.format(policy=policy_text.strip())),
        Message("user", user),
    )
