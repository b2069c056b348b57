"""The OpenAI chat-completion shape of a guarded outcome, shared by the chat and stream routes."""

from __future__ import annotations

import time
import uuid

from plguard.server.batching import BatchOutcome, GenKey
from plguard.server.schemas import (
    AssistantMessage,
    ChatCompletion,
    Choice,
    FinishReason,
    Mode,
    PlguardInfo,
    RuleScore,
    Usage,
)
from plguard.server.upstream import UpstreamDraft


def build_completion(model: str, o: BatchOutcome, key: GenKey, mode: Mode,
                timings: dict[str, float], up: UpstreamDraft | None = None) -> ChatCompletion:
    """The chat completion of one guarded outcome, its plguard trace attached."""
    r = o.result
    d = r.decision
    finish: FinishReason = "stop"
    # A supplied answer (check mode) was not generated here, so it never ran out of tokens;
    # an upstream draft ran out only if the upstream says so.
    if d.action == "refuse":
        finish = "content_filter"
    elif r.repaired:
        pass
    elif up is not None:
        finish = "length" if up.finish_reason == "length" else "stop"
    elif mode == "local" and o.completion_tokens >= key.max_new_tokens:
        finish = "length"
    n_prompt, n_new = o.prompt_tokens, o.completion_tokens
    if up is not None:
        # The upstream's own counts where it gave them: its tokenizer may not be ours.
        n_prompt = up.prompt_tokens if up.prompt_tokens is not None else n_prompt
        if not r.repaired and up.completion_tokens is not None:
            n_new = up.completion_tokens
    info = PlguardInfo(
        action=d.action, reason=d.reason, repaired=r.repaired, fallback_used=r.fallback_used,
        rechecked_action=r.repairs[-1].decision.action if r.repairs else None,
        strongest_unsafe=RuleScore(rule=d.strongest_unsafe[0], p=d.strongest_unsafe[1]),
        strongest_over_refusal=RuleScore(rule=d.strongest_over_refusal[0],
                                         p=d.strongest_over_refusal[1]),
        strongest_content=RuleScore(rule=d.strongest_content[0], p=d.strongest_content[1]),
        categories=list(d.categories), category_scores=dict(d.category_scores),
        llama_guard=d.llama_guard, predicates=r.grounding.probs, rules=dict(r.policy.probs),
        policy=r.policy.policy,
        grounding_model=r.grounding.model, input_truncated=r.grounding.truncated,
        dropped_turns=list(r.grounding.dropped_turns),
        mode=mode, batch_size=o.batch_size,
        timings_s={**r.timings_s, **timings, "queue": o.queue_s},
    )
    return ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}", created=int(time.time()), model=model,
        choices=[Choice(message=AssistantMessage(content=r.final), finish_reason=finish)],
        usage=Usage(prompt_tokens=n_prompt, completion_tokens=n_new,
                    total_tokens=n_prompt + n_new),
        plguard=info,
    )


__all__ = ["build_completion"]
