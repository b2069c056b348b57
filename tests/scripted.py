"""A scripted backend for unit tests of the stages after grounding.

It implements the Backend protocol without a model: generations come from a function of
the chat, and P(True) from a function of (prefix, suffix). Real-model tests live beside it;
this only pins down decide/repair/Guard control flow deterministically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore


class ScriptedBackend:
    model_id = "scripted"
    max_context = 100_000

    def __init__(
        self,
        reply: Callable[[Chat], str],
        p_true: Callable[[str, str], float],
        fail: Callable[[], None] | None = None,
    ) -> None:
        self.reply, self.p_true, self.fail = reply, p_true, fail
        self.generate_calls: list[int] = []
        self.score_calls: list[int] = []

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        body = "".join(f"<|{m.role}|>\n{m.content}\n" for m in chat)
        return body + ("<|assistant|>\n" if add_generation_prompt else "")

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, bool]:
        words = text.split()
        if len(words) <= max_tokens:
            return text, False
        return " ".join(words[:max_tokens]), True

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
        out = []
        for r in requests:
            row = []
            for s in r.suffixes:
                p = min(max(self.p_true(r.prefix, s), 1e-9), 1 - 1e-9)
                row.append(TFScore(math.log(p), math.log1p(-p)))
            out.append(row)
        return out
