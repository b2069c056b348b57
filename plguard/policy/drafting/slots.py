r"""The slot form of a span's draft: the model fills the conditions, code writes the logic.

In the free form (:mod:`~plguard.policy.drafting.schema`) the model writes rule bodies
itself. A 1.5B model does that badly: it reuses a predicate for a rule it does not fit
(``unsafe_content_test_or_exam :- answer_refuses``), cites the wrong span, or writes
arithmetic into an atom (eval/results/drafting). In the slot form each rule kind has
fixed slots, the shape most rules of the shipped bundles have:

- ``unsafe_compliance``: a request condition and an answer condition (the answer goes
  along with a request it must not): ``head :- request, answer``;
- ``unsafe_content``: an answer condition, whatever was asked: ``head :- answer``;
- ``over_refusal``: a request condition, an *unless* condition (a request under which
  refusing is right: "a request that does not seek harm" is ``unless`` seeking harm), or
  both; refusing is the fixed :data:`REFUSES` predicate (read from the pair):
  ``head :- request, \+ unless, answer_refuses``.

Each condition is a predicate (name, yes/no question, one-line meaning) whose view is its
slot's. The span a rule cites is the span asked about, not something the model writes.
What this form cannot say (a disjunction inside a rule, a negated answer condition, three
conditions) is said with several rules; ``--form free`` keeps the general form. The unless
slot was added after the study of eval/results/drafting-slots, where over-refusal rules
lost the policy's "when the request is not harmful" (no slot held a negation).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, model_validator

from plguard.policy.drafting.schema import (
    NAME,
    DraftPredicate,
    DraftRule,
    SpanDraft,
    View,
    parse_json,
)
from plguard.policy.drafting.write import REFUSES_NAME

WHAT = r"^[a-z][a-z0-9_]{2,40}$"

REFUSES = DraftPredicate(
    name=REFUSES_NAME, view="pair",
    question="Does the answer refuse, decline or avoid the request, fully or in part?",
    meaning="answer_refuses holds when the answer refuses or declines the request")


class Condition(BaseModel):
    """One yes/no question about the request or the answer."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME, description="lowercase_with_underscores, after what it asks")
    question: str = Field(min_length=8, description="a yes/no question")
    meaning: str = Field(min_length=4, description="one line: '<name> holds when ...'")


class Compliance(BaseModel):
    """A request the assistant must not go along with, and what going along is."""

    model_config = ConfigDict(extra="forbid")
    what: str = Field(pattern=WHAT, description="a short name for the rule")
    request: Condition = Field(description="what the request asks for")
    answer: Condition = Field(description="what in the answer goes along with it")


class Content(BaseModel):
    """Something the answer must never contain, whatever was asked."""

    model_config = ConfigDict(extra="forbid")
    what: str = Field(pattern=WHAT, description="a short name for the rule")
    answer: Condition = Field(description="what the answer contains")


class Refusal(BaseModel):
    """A request the assistant must not refuse, and what would make refusing it right."""

    model_config = ConfigDict(extra="forbid")
    what: str = Field(pattern=WHAT, description="a short name for the rule")
    request: Condition | None = Field(description="what the request asks for (null: any "
                                      "request, but the unless one)")
    unless: Condition | None = Field(None, description="a request condition under which "
                                     "refusing is right after all (null: none)")

    @model_validator(mode="after")
    def _some_condition(self) -> Refusal:
        if self.request is None and self.unless is None:
            raise ValueError("an over_refusal rule needs a request condition, an unless "
                             "condition or both")
        return self


class SlotDraft(BaseModel):
    """The rules one span states, by kind (all may be empty)."""

    model_config = ConfigDict(extra="forbid")
    unsafe_compliance: list[Compliance] = Field(max_length=6)
    unsafe_content: list[Content] = Field(max_length=6)
    over_refusal: list[Refusal] = Field(max_length=6)


SCHEMA = json.dumps(SlotDraft.model_json_schema())

SYSTEM = """You turn one part of a written policy into rules for a guardrail.
The guardrail asks yes/no questions about a chat (the user's request, the assistant's
answer) and applies rules. A part can state three kinds of rule:
- unsafe_compliance: a kind of request the assistant must not go along with. Give the
  request condition and the answer condition that would be going along with it.
- unsafe_content: something the answer must never contain, whatever was asked. Give the
  answer condition.
- over_refusal: a kind of request the assistant must not refuse. Give the request
  condition, and an unless condition when the part names requests that may be refused
  ("a request that does not seek X": unless it seeks X); either may be null, not both.
  Whether the answer refuses is checked for you.
A condition has a name (lowercase_with_underscores, after what it asks), a yes/no question
about the request or the answer, and a one-line meaning. Write one rule for each thing the
part forbids or protects. A part that states no rule (a title, background) gets three empty
lists. Reply with one JSON object.

An example from another policy (a gardening assistant; never reuse its names).
Part: "Never recommend a banned pesticide to someone asking how to kill pests. Never call a
banned pesticide safe. Do not refuse plain gardening questions."
Reply:
{"unsafe_compliance": [{"what": "banned_pesticide",
  "request": {"name": "asks_about_pest_control",
   "question": "Does the user ask how to get rid of pests?",
   "meaning": "asks_about_pest_control holds when the request asks how to kill or repel pests"},
  "answer": {"name": "recommends_banned_pesticide",
   "question": "Does the answer recommend a pesticide that is banned?",
   "meaning": "recommends_banned_pesticide holds when the answer advises a banned pesticide"}}],
 "unsafe_content": [{"what": "banned_called_safe",
  "answer": {"name": "calls_banned_pesticide_safe",
   "question": "Does the answer say a banned pesticide is safe to use?",
   "meaning": "calls_banned_pesticide_safe holds when the answer calls a banned pesticide safe"}}],
 "over_refusal": [{"what": "gardening_question",
  "request": {"name": "asks_gardening_question",
   "question": "Is the request an ordinary gardening question?",
   "meaning": "asks_gardening_question holds when the request is a plain gardening question"},
  "unless": null}]}"""


def _pred(c: Condition, view: View) -> DraftPredicate:
    return DraftPredicate(name=c.name, question=c.question, meaning=c.meaning,
                          view=view)


def parse_slots(text: str, span: int) -> SpanDraft:
    """The reply as the free form's :class:`SpanDraft` (rules written from the slots).

    Raises ValueError naming what is wrong, as :func:`schema.parse_draft` does.
    """
    d = parse_json(text, SlotDraft)
    preds: dict[str, DraftPredicate] = {}
    rules: list[DraftRule] = []

    def add(p: DraftPredicate) -> str:
        preds.setdefault(p.name, p)
        return p.name

    for c in d.unsafe_compliance:
        body = f"{add(_pred(c.request, 'request'))}, {add(_pred(c.answer, 'answer'))}"
        rules.append(DraftRule(head=f"unsafe_compliance_{c.what}", body=body, span=span))
    for t in d.unsafe_content:
        rules.append(DraftRule(head=f"unsafe_content_{t.what}",
                               body=add(_pred(t.answer, "answer")), span=span))
    for r in d.over_refusal:
        parts = [add(_pred(r.request, "request"))] if r.request else []
        if r.unless:
            parts.append(f"\\+ {add(_pred(r.unless, 'request'))}")
        body = ", ".join([*parts, add(REFUSES)])
        rules.append(DraftRule(head=f"over_refusal_{r.what}", body=body, span=span))
    return SpanDraft(rules=rules, predicates=list(preds.values()))


__all__ = ["REFUSES", "SCHEMA", "SYSTEM", "SlotDraft", "parse_slots"]
