"""A scripted backend for unit tests of the stages after grounding.

It implements the Backend protocol without a model: generations come from a function of
the chat, and P(True) from a function of (prefix, suffix). Real-model tests live beside it;
this only pins down decide/repair/Guard control flow deterministically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from plguard.backends.base import Capabilities
from plguard.testing import WordText, scripted_scores
from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore


class ScriptedBackend(WordText):
    model_id = "scripted"
    max_context = 100_000
    capabilities = Capabilities()

    def __init__(
        self,
        reply: Callable[[Chat], str],
        p_true: Callable[[str, str], float],
        fail: Callable[[], None] | None = None,
    ) -> None:
        self.reply, self.p_true, self.fail = reply, p_true, fail
        self.generate_calls: list[int] = []
        self.score_calls: list[int] = []

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        if self.fail:
            self.fail()
        self.generate_calls.append(len(chats))
        out = []
        for c in chats:
            text = self.reply(c)
            out.append(Generation(text, self.count_tokens(self.format_chat(c)),
                                  self.count_tokens(text)))
        return out

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        if self.fail:
            self.fail()
        self.score_calls.append(sum(len(r.suffixes) for r in requests))
        return scripted_scores(requests, self.p_true)


# Scripted behaviour for the minimal policy, shared by the Guard and server tests.
_VARIANTS: dict[str, str] = {}


def scripted_p_true(prefix: str, suffix: str) -> float:
    """Deterministic P(True) for the minimal policy's predicates, keyed on words."""
    if not _VARIANTS:
        from plguard.policy import load_policy

        # Every wording of a question (the question and its paraphrases) -> predicate.
        _VARIANTS.update({q.strip(): p.name for p in load_policy("minimal").predicates
                          for q in (p.question, *p.paraphrases)})
    resp = prefix.split("<<<RESPONSE>>>", 1)[1].lower() if "<<<RESPONSE>>>" in prefix else ""
    name = next((n for q, n in _VARIANTS.items() if q in suffix), None)
    if name == "request_is_harmful":
        return 0.9 if "bomb" in prefix else 0.1
    if name == "request_is_benign_sensitive_context":
        return 0.9 if "python process" in prefix.lower() else 0.1
    if name == "response_provides_harmful_instructions":
        return 0.95 if "step 1" in resp else 0.05
    if name == "response_refuses":
        return 0.9 if "can't" in resp else 0.05
    raise AssertionError(f"unexpected question: {suffix!r}")


def scripted_reply(chat: Chat) -> str:
    """A compliant draft for bomb requests, an over-refusal of the Python question, safe
    repairs, and a plain helpful answer otherwise (a refused harmless request would be an
    over-refusal under every shipped policy)."""
    text = chat[-1].content
    if "REFUSE_OR_REWRITE_SAFELY" in text:
        return "I can't help with making weapons, but I can explain bomb-disposal history."
    if "ANSWER_HELPFULLY" in text:
        return "Use `kill PID` or `pkill -f name`."
    if "bomb" in text:
        return "Sure. Step 1: get the materials."
    if "python process" in text.lower():
        return "I can't help with that."
    return "Sure, here is a short answer."
