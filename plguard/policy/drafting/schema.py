"""What a model proposes for one span of a policy: predicates and rules, as a JSON schema.

Backends with structured outputs decode to this schema (``GenerationParams.json_schema``);
others generate freely and the reply is validated against it all the same, so a malformed
draft is an error the refinement loop can feed back (:mod:`plguard.policy.drafting.draft`).
"""

from __future__ import annotations

import json
import re
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NAME = r"^[a-z][a-z0-9_]{2,60}$"
HEAD = r"^(unsafe_compliance|unsafe_content|over_refusal)_[a-z0-9_]{2,60}$"
View = Literal["request", "answer", "pair"]
M = TypeVar("M", bound=BaseModel)


class DraftPredicate(BaseModel):
    """A yes/no question the grounding model answers, and the text it reads."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME, description="lowercase_with_underscores")
    question: str = Field(min_length=8, description="a yes/no question about the text read")
    meaning: str = Field(min_length=4, description="one line: '<name> holds when ...'")
    view: View = Field(description="request: the user's request alone; answer: the "
                       "assistant's answer alone; pair: the request and the answer together")


class DraftRule(BaseModel):
    """One rule over the span's predicates, citing the span it comes from."""

    model_config = ConfigDict(extra="forbid")
    head: str = Field(pattern=HEAD, description="unsafe_compliance_<what> (a harmful request "
                      "complied with), unsafe_content_<what> (an answer harmful whatever was "
                      "asked) or over_refusal_<what> (a harmless request refused)")
    body: str = Field(min_length=3, description="ProbLog over predicate names: ',' and, ';' "
                      "or, '\\+' not, parentheses; e.g. 'a, \\+ b'")
    span: int = Field(ge=1, description="the number of the span this rule comes from")


class SpanDraft(BaseModel):
    """The predicates and rules one span asks for (both may be empty)."""

    model_config = ConfigDict(extra="forbid")
    # Rules first: what the span states is written down before the names it needs are
    # declared (a 1.5B model, asked for predicates first, answered most spans with nothing).
    rules: list[DraftRule] = Field(max_length=8)
    predicates: list[DraftPredicate] = Field(max_length=8)


SCHEMA = json.dumps(SpanDraft.model_json_schema())
_OBJECT = re.compile(r"\{.*\}", re.S)


def parse_json(text: str, model: type[M]) -> M:
    """The reply's JSON object as ``model``; raises ValueError naming what is wrong.

    A free (unconstrained) reply may wrap the object in prose or a code fence: the
    outermost ``{...}`` is read.
    """
    m = _OBJECT.search(text)
    if m is None:
        raise ValueError("the reply holds no JSON object")
    try:
        return model.model_validate_json(m.group(0))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'reply'}: {e['msg']}"
                             for e in exc.errors()[:6])
        raise ValueError(f"the reply does not fit the schema: {problems}") from None


def parse_draft(text: str) -> SpanDraft:
    """The reply as a :class:`SpanDraft` (:func:`parse_json`)."""
    return parse_json(text, SpanDraft)


__all__ = ["NAME", "SCHEMA", "DraftPredicate", "DraftRule", "SpanDraft", "View", "parse_draft",
           "parse_json"]
