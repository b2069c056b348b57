"""Request and response models of the server, shaped like the OpenAI chat API.

Requests are validated strictly (``"16"`` is not an integer) so a wrong type is a 422
rather than a silent coercion. Unknown request fields are accepted and ignored, because
OpenAI clients send many optional fields (``user``, ``top_p``, ``stream_options`` ...) that a
drop-in proxy must tolerate; the one exception is :data:`POLICY_FIELDS`: a request that
tries to choose the policy or its thresholds is rejected, since the policy is fixed when
the server starts and silently ignoring such a field would let a caller believe it had
loosened the guard.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from plguard.messages import lone_surrogate
from plguard.types import Action

#: Request fields that try to set what the server fixes at start; they are rejected (400).
POLICY_FIELDS: frozenset[str] = frozenset({
    "policy", "policies", "policy_path", "thresholds", "threshold", "plguard", "guard",
    "guard_config", "config", "repair", "grounding", "predicates", "rules",
})

FinishReason = Literal["stop", "length", "content_filter"]
Mode = Literal["local", "upstream", "check"]


def _unicode(value: str) -> str:
    problem = lone_surrogate(value)
    if problem:
        raise ValueError(problem)
    return value


#: A request string: lone surrogates (\ud800 escapes in JSON) are refused where they arrive,
#: since the model's tokenizer cannot take them and a batch that holds one would fail.
Text = Annotated[str, AfterValidator(_unicode)]

#: JSON Schema of a message list with at least one user message (the guard judges the last).
_HAS_USER: dict[str, Any] = {"contains": {"type": "object", "required": ["role"],
                                          "properties": {"role": {"const": "user"}}}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


#: JSON Schema of a top-level request body: any field but the policy ones.
_NO_POLICY_FIELDS: dict[str, Any] = {"propertyNames": {"not": {"enum": sorted(POLICY_FIELDS)}}}


class ContentPart(_Request):
    """One part of a list-valued message content; only text parts are supported."""

    type: Literal["text"]
    text: Text


_TOOL_ROLES = frozenset({"tool", "function"})


class ChatMessage(_Request):
    """One message of a chat request (``developer`` is read as ``system``).

    Only text is guarded: image, audio and file parts, and tool or function results, are
    refused (422) rather than dropped, since the guard would pass them on unread.
    """

    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[ContentPart] | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _no_tool_roles(cls, v: Any) -> Any:
        if isinstance(v, str) and v in _TOOL_ROLES:
            raise ValueError(f"role {v!r} is not supported: plguard guards text chats of "
                             "system, developer, user and assistant messages, and cannot "
                             "guard tool or function results")
        return v

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, v: Any) -> Any:
        if isinstance(v, list):
            for part in v:
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str) and kind != "text":
                    raise ValueError(f"only text content parts are supported, got {kind!r}: "
                                     "plguard cannot guard images, audio or files")
        return v

    def text(self) -> str:
        """The content as one string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)

    def as_dict(self) -> dict[str, str]:
        """The message as the Guard (and an upstream server) takes it."""
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": self.text()}


class ChatCompletionRequest(_Request):
    """``POST /v1/chat/completions``."""

    model_config = ConfigDict(json_schema_extra=_NO_POLICY_FIELDS)

    model: Text
    messages: list[ChatMessage] = Field(min_length=1, json_schema_extra=_HAS_USER)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="Only one choice per request is supported.")

    @field_validator("max_tokens", "max_completion_tokens", "n", mode="before")
    @classmethod
    def _whole_number(cls, v: Any) -> Any:
        # JSON has one number type: 16.0 is the integer 16 (as JSON Schema's "integer"
        # says too); 16.5 and "16" stay wrong types.
        return int(v) if isinstance(v, float) and v.is_integer() else v

    @field_validator("n", mode="before")
    @classmethod
    def _one_choice(cls, v: Any) -> Any:
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 1:
            raise ValueError("only n=1 is supported: the guard decides one answer per request")
        return v

    @property
    def requested_tokens(self) -> int | None:
        """``max_completion_tokens`` (newer clients) or ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


class GuardCheckRequest(_Request):
    """``POST /v1/guard/check``: guard a given response; nothing is generated."""

    model_config = ConfigDict(json_schema_extra=_NO_POLICY_FIELDS)

    model: Text | None = None
    messages: list[ChatMessage] = Field(min_length=1, json_schema_extra=_HAS_USER)
    response: Text


class RuleScore(BaseModel):
    """A rule and its probability."""

    rule: str
    p: float


class PlguardInfo(BaseModel):
    """The guard's trace for one answer, attached to every completion."""

    action: Action
    reason: str
    repaired: bool
    rechecked_action: Action | None = Field(
        None, description="The decision on the last repair, when the draft was repaired.")
    fallback_used: bool
    strongest_unsafe: RuleScore
    strongest_over_refusal: RuleScore
    strongest_content: RuleScore = Field(
        default_factory=lambda: RuleScore(rule="", p=0.0), description="The strongest "
        "unsafe-content rule (the answer's content alone, whatever the request), compared "
        "with the content threshold; rule '' when the policy has none.")
    categories: list[str] = Field(
        default_factory=list, description="Hazard category codes (S1-S14, X1, X2) at or above "
        "the threshold of their rule (unsafe or content), in taxonomy order.")
    category_scores: dict[str, float] = Field(
        default_factory=dict, description="Every category code the policy tags -> its "
        "probability (the highest of its unsafe rules).")
    llama_guard: str = Field(
        "safe", description="The verdict in Llama Guard's text form: 'safe', or 'unsafe' "
        "and a second line of codes such as 'S1,S10'.")
    predicates: dict[str, float]
    rules: dict[str, float]
    policy: str
    grounding_model: str
    input_truncated: bool
    dropped_turns: list[int] = Field(
        default_factory=list, description="Turns of the conversation (indices into its "
        "messages) left out of what the request predicates read, for the token budget "
        "grounding.conversation_tokens.")
    mode: Mode
    batch_size: int
    timings_s: dict[str, float]


class Usage(BaseModel):
    """Token counts: the upstream's own where it reported them, else the guard's tokenizer's."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    """The answer message."""

    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    """One choice of a completion (there is always exactly one)."""

    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletion(BaseModel):
    """A completion plus the guard's trace."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    plguard: PlguardInfo


class Delta(BaseModel):
    """The increment carried by one streamed chunk."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    """One choice of a streamed chunk."""

    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    plguard: PlguardInfo | None = None
    usage: Usage | None = None


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "plguard"


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    """The OpenAI error object."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """``{"error": {...}}``, the body of every non-2xx answer."""

    error: ErrorBody


class Health(BaseModel):
    """``GET /health``."""

    status: Literal["ok"] = "ok"
    model: str
    policy: str
    mode: Literal["local", "upstream"]
    batches: int
    requests: int
    failed_batches: int
    max_batch_size: int


def error_json(message: str, *, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return ErrorResponse(error=ErrorBody(message=message, type=type, param=param,
                                         code=code)).model_dump()
