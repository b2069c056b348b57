"""``POST /v1/moderations``: the OpenAI moderation API over the guard's policy.

The request is OpenAI's (``input``: a text or a list of texts; ``model`` optional) plus one
plguard form: ``input`` as a list of chat messages is one conversation, and when its last
turn is the assistant's, that answer is judged too (see :mod:`plguard.moderation`). A list
of text parts (``{"type": "text", "text": ...}``) is one text, as OpenAI reads it.

Each result has OpenAI's fields: ``flagged`` (the guard would refuse), ``categories`` and
``category_scores`` keyed by the hazard names of the categories the policy tags
(``violent_crimes``, ``suicide_and_self_harm``, ... from :mod:`plguard.categories`), and
``plguard``: the codes (``S1``), the Llama Guard text form and the trace. Flagged with no
category above threshold means an untagged rule (or text addressed to the guard) decided.

The inputs of one request are grounded together in one call, in the worker thread that
serves the dynamic batcher (the model backends serve one thread); they are not merged
with other requests' inputs.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from plguard.categories import NAMES
from plguard.errors import InputError
from plguard.moderation import (
    Moderation,
    category_key,
    check_request_side,
    parse_inputs,
)
from plguard.server.batching import GuardFailed, GuardUnavailable
from plguard.server.errors import ApiError, unanswered
from plguard.server.openapi import error_responses
from plguard.server.schemas import POLICY_FIELDS, ChatMessage, ContentPart, RuleScore, Text
from plguard.types import Action, Scope

#: JSON Schema of a conversation input: it holds a user message (the request judged).
_HAS_USER: dict[str, Any] = {"contains": {"type": "object", "required": ["role"],
                                          "properties": {"role": {"const": "user"}}}}


#: JSON Schema of the body: any field but the policy ones.
_NO_POLICY_FIELDS: dict[str, Any] = {"propertyNames": {"not": {"enum": sorted(POLICY_FIELDS)}}}


class ModerationRequest(BaseModel):
    """``POST /v1/moderations``. Unknown fields are ignored, the policy ones refused (400)."""

    model_config = ConfigDict(extra="allow", strict=True,
                              json_schema_extra=_NO_POLICY_FIELDS)

    input: (Text
            | Annotated[list[Text], Field(min_length=1)]
            | Annotated[list[ChatMessage], Field(min_length=1, json_schema_extra=_HAS_USER)]
            | Annotated[list[ContentPart], Field(min_length=1)]) = Field(
        description="A text, a list of texts (one result each), one conversation as a list "
                    "of chat messages (its last assistant turn, if last, is judged too), or "
                    "one text as a list of text parts.")
    model: Text | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _one_kind(cls, v: Any) -> Any:
        # Said before the union is tried: its members' errors ("should be a valid string;
        # should be a valid list") do not say what an input may be.
        if isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise ValueError(f"must be a text, a list of texts or a list of chat messages, "
                             f"got {_json_type(v)}")
        kinds = [_kind(x) for x in v]
        for i, k in enumerate(kinds):
            if k is None:
                raise ValueError(f"item {i} is {_json_type(v[i])}: each item must be a text, "
                                 "a chat message ({'role', 'content'}) or a text part "
                                 "({'type': 'text', 'text'})")
            if k != kinds[0]:
                raise ValueError(f"item {i} is a {k} but item 0 is a {kinds[0]}: a list "
                                 "holds texts, or the messages of one conversation, or the "
                                 "parts of one text")
        return v


def _kind(x: Any) -> str | None:
    if isinstance(x, str):
        return "text"
    if isinstance(x, dict):
        return "text part" if "type" in x and "role" not in x else "message"
    return None


def _json_type(v: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", dict: "an object",
             list: "a list", str: "a string", type(None): "null"}
    return names.get(type(v), type(v).__name__)


class ModerationInfo(BaseModel):
    """plguard's verdict and trace for one input."""

    scope: Scope = Field(description="request: a text with no answer, scored for the worst "
                         "answer; response: the conversation's last assistant turn judged.")
    action: Action
    reason: str
    codes: list[str] = Field(description="Hazard codes (S1-S14, X1, X2) at or above the "
                             "threshold (a request alone: the moderation one), in taxonomy "
                             "order.")
    code_scores: dict[str, float] = Field(description="Every code the policy tags -> its "
                                          "probability.")
    llama_guard: str = Field(description="'safe', or 'unsafe' and a line of codes "
                             "('S1,S10').")
    strongest_unsafe: RuleScore
    strongest_content: RuleScore = Field(
        default_factory=lambda: RuleScore(rule="", p=0.0), description="The strongest "
        "unsafe-content rule when an answer is judged (rule '' for a request alone).")
    predicates: dict[str, float]
    rules: dict[str, float]
    policy: str
    grounding_model: str
    input_truncated: bool
    dropped_turns: list[int] = Field(
        default_factory=list, description="Turns of the conversation (indices into its "
        "messages) left out of what the request predicates read, for the token budget "
        "grounding.conversation_tokens.")
    timings_s: dict[str, float]


class ModerationResult(BaseModel):
    """One input's result, in OpenAI's shape plus ``plguard``."""

    flagged: bool
    categories: dict[str, bool]
    category_scores: dict[str, float]
    category_applied_input_types: dict[str, list[Literal["text"]]]
    plguard: ModerationInfo


class ModerationResponse(BaseModel):
    """The answer: one result per input, in input order."""

    id: str
    model: str
    results: list[ModerationResult]


router = APIRouter()


@router.post("/v1/moderations", response_model=None,
             responses={200: {"model": ModerationResponse},
                        **error_responses(400, 401, 404, 413, 422, 500, 503)})
async def moderations(body: ModerationRequest, request: Request) -> JSONResponse:
    """Judge each input against the policy; nothing is generated."""
    state = request.app.state
    settings, guard = state.settings, state.guard
    bad = sorted(POLICY_FIELDS & set(body.model_extra or {}))
    if bad:
        raise ApiError(400, f"'{bad[0]}' cannot be set by a request: the policy and its "
                       "thresholds are fixed when the server starts", param=bad[0],
                       code="policy_fixed")
    if body.model is not None and body.model != settings.model_name:
        raise ApiError(404, f"model {body.model!r} is not served here; this server serves "
                       f"{settings.model_name!r} (server.model_name)", param="model",
                       code="model_not_found")
    inputs = _inputs(body.input)
    try:
        items = parse_inputs(inputs)
        if any(it.response is None for it in items):
            check_request_side(guard.policy)
    except InputError as exc:
        raise ApiError(400, str(exc).replace("inputs", "input", 1), param="input",
                       code="invalid_input") from None
    try:
        # OpenAI's API takes a list of any length (the body size bounds it): judged in
        # chunks of server.max_batch_size, the most one guard call is sized for, between
        # the chat batches.
        step = settings.max_batch_size
        results = []
        for i in range(0, len(inputs), step):
            chunk = inputs[i:i + step]
            results += await state.batcher.call(lambda c=chunk: guard.moderate(c),
                                                "a moderation")
    except (GuardUnavailable, GuardFailed) as exc:
        raise unanswered(exc) from None
    out = ModerationResponse(id=f"modr-{uuid.uuid4().hex[:24]}", model=settings.model_name,
                             results=[_result(m) for m in results])
    return JSONResponse(out.model_dump(mode="json"))


def register(app: FastAPI) -> None:
    """Add ``POST /v1/moderations`` to the server app."""
    app.include_router(router)


def _inputs(value: Any) -> list[Any]:
    """What :func:`plguard.moderation.moderate` takes: texts and conversations."""
    if isinstance(value, str):
        return [value]
    if value and isinstance(value[0], ChatMessage):
        return [[m.as_dict() for m in value]]
    if value and isinstance(value[0], ContentPart):
        return ["".join(p.text for p in value)]
    return list(value)


def _result(m: Moderation) -> ModerationResult:
    d = m.decision
    scores = dict(d.category_scores)
    names = {code: category_key(NAMES[code]) for code in scores}
    info = ModerationInfo(
        scope=m.scope, action=d.action, reason=d.reason, codes=list(d.categories),
        code_scores=scores, llama_guard=d.llama_guard,
        strongest_unsafe=RuleScore(rule=d.strongest_unsafe[0], p=d.strongest_unsafe[1]),
        strongest_content=RuleScore(rule=d.strongest_content[0], p=d.strongest_content[1]),
        # The P the rules were scored with: the calibration's moderation maps applied.
        predicates={**m.grounding.probs, **m.mapped}, rules=dict(m.policy.probs),
        policy=m.policy.policy,
        grounding_model=m.grounding.model, input_truncated=m.grounding.truncated,
        dropped_turns=list(m.grounding.dropped_turns),
        timings_s=dict(m.timings_s))
    return ModerationResult(
        flagged=m.flagged,
        categories={names[c]: c in d.categories for c in scores},
        category_scores={names[c]: p for c, p in scores.items()},
        category_applied_input_types={names[c]: ["text"] for c in scores},
        plguard=info)
