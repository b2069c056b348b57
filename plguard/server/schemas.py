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

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from plguard.types import Action

#: Request fields that try to set what the server fixes at start; they are rejected (400).
POLICY_FIELDS: frozenset[str] = frozenset({
    "policy", "policies", "policy_path", "thresholds", "threshold", "plguard", "guard",
    "guard_config", "config", "repair", "grounding", "predicates", "rules",
})

FinishReason = Literal["stop", "length", "content_filter"]
Mode = Literal["local", "upstream", "check"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Request):
    """One part of a list-valued message content; only text parts are supported."""

    type: str
    text: str | None = None


class ChatMessage(_Request):
    """One message of a chat request (``developer`` is read as ``system``)."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    @field_validator("content")
    @classmethod
    def _text_only(cls, v: str | list[ContentPart] | None) -> str | list[ContentPart] | None:
        if isinstance(v, list):
            bad = [p.type for p in v if p.type != "text" or p.text is None]
            if bad:
                raise ValueError(f"only text content parts are supported, got {bad[0]!r}")
        return v

    def text(self) -> str:
        """The content as one string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)

    def as_dict(self) -> dict[str, str]:
        """The message as the Guard (and an upstream server) takes it."""
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": self.text()}


class ChatCompletionRequest(_Request):
    """``POST /v1/chat/completions``."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="Only one choice per request is supported.")

    @property
    def requested_tokens(self) -> int | None:
        """``max_completion_tokens`` (newer clients) or ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


class GuardCheckRequest(_Request):
    """``POST /v1/guard/check``: guard a given response; nothing is generated."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    response: str


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
    predicates: dict[str, float]
    rules: dict[str, float]
    policy: str
    grounding_model: str
    input_truncated: bool
    mode: Mode
    batch_size: int
    timings_s: dict[str, float]


class Usage(BaseModel):
    """Token counts, as the guard's tokenizer counts them."""

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
