"""Whether a drafted condition asks about the view it reads (issue 55).

The commonest wrong predicate in the 1.5B model's drafts (eval/results/drafting-slots: 49
of the 139 request-condition entries of its drafts and kept bundles, in four of the five
policies) asks about the wrong side of the chat: a request condition that asks about the
answer ("Does the assistant promise a refund ...?", "Does the answer refuse the
request?"), or one about declining ("Does the request decline an educational
question?", when refusing is the fixed ``answer_refuses``).
Read on the request alone, such a question has no evidence to read. These checks find the
plain cases from the question's wording (its subject, or a word for refusing) and the
vetting README lists them for the author (:mod:`plguard.policy.drafting.run`). They were
first fed back to the model like a load error: the 1.5B repaired none of 10 flagged spans
in three re-asks each and its drafts got no better (eval/results/drafting-scope), so they
are not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from plguard.policy.drafting.schema import DraftPredicate

_AUX = r"^\s*(?:does|did|do|is|was|are|will|would|has|have|can|could|should)\s+(?:the\s+)?"
# A question whose subject is the assistant's side ("Is the assistant asked to ..." is
# about the request, so a passive ask after the subject does not count).
_ABOUT_ANSWER = re.compile(_AUX + r"(?:assistant|answer|response|reply|model|ai|chatbot|bot)"
                           r"(?:'s)?\b(?!\s+(?:being\s+)?(?:asked|requested|told)\b)", re.I)
_REFUSING = re.compile(r"\b(?:refus\w*|declin\w*)", re.I)
_ABOUT_REQUEST = re.compile(_AUX + r"(?:user|request|prompt|customer|patient|student)"
                            r"(?:'s)?\b", re.I)


def scope_problems(predicates: Iterable[DraftPredicate]) -> list[str]:
    """Each request or answer condition whose question asks about the other side."""
    out = []
    for p in predicates:
        q = p.question
        if p.view == "request" and _ABOUT_ANSWER.search(q):
            out.append(f"predicate {p.name} reads the request alone, but its question "
                       f"({q!r}) asks about the assistant's answer: it should ask what the "
                       "user asks for ('Does the user ask for ...?'); what the answer does "
                       "belongs in an answer condition")
        elif p.view == "request" and _REFUSING.search(q):
            out.append(f"predicate {p.name} reads the request alone, but its question "
                       f"({q!r}) is about refusing or declining: whether the answer refuses "
                       "is its own predicate (answer_refuses); it should ask what kind of "
                       "request it is")
        elif p.view == "answer" and _ABOUT_REQUEST.search(q):
            out.append(f"predicate {p.name} reads the answer alone, but its question "
                       f"({q!r}) asks about the request: it should ask what the answer "
                       "says or does ('Does the answer give ...?')")
    return out


__all__ = ["scope_problems"]
