"""Tokenizer-side text handling shared by every backend built on a Hugging Face tokenizer.

Both backends must build identical token ids for identical text (grounding scores and
caches depend on it), so the chat rendering, truncation and True/False answer ids live here
once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plguard.errors import ModelError
from plguard.types import Chat

MARKER = " [...] "
DEFAULT_ANSWERS: tuple[str, str] = ("True", "False")


def spellings(word: str) -> tuple[str, str]:
    """The spellings of an answer word that are scored: with and without a leading space."""
    return (f" {word}", word)


class TokenizerText:
    """Mixin over ``self.tokenizer``: encode, render chats, count and truncate."""

    tokenizer: Any
    _answer_memo: dict[tuple[str, str], tuple[tuple[int, ...], tuple[int, ...]]]

    def answer_ids(self, answers: tuple[str, str] = DEFAULT_ANSWERS
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Token ids of the positive and negative answer's spellings (first pieces)."""
        memo = self.__dict__.setdefault("_answer_memo", {})
        if answers in memo:
            return memo[answers]

        def first_ids(words: Sequence[str]) -> tuple[int, ...]:
            ids = []
            for w in words:
                enc = self.encode(w)
                if not enc:
                    raise ModelError(f"tokenizer encodes {w!r} to nothing")
                ids.append(int(enc[0]))  # a split word is scored on its first piece
            return tuple(dict.fromkeys(ids))

        t, f = first_ids(spellings(answers[0])), first_ids(spellings(answers[1]))
        if set(t) & set(f):
            raise ModelError(f"this tokenizer cannot tell {answers[0]} from {answers[1]} by "
                             f"their first token ({answers[0]} ids {t}, {answers[1]} ids "
                             f"{f}); use other answer words or another model for grounding")
        memo[answers] = (t, f)
        return t, f

    def _answer_ids(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.answer_ids(DEFAULT_ANSWERS)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        """Render a chat with the model's chat template, as text."""
        msgs = [{"role": m.role, "content": m.content} for m in chat]
        if getattr(self.tokenizer, "chat_template", None):
            return str(self.tokenizer.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=add_generation_prompt))
        # Base models without a template still get a deterministic, readable layout.
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n\n" for m in msgs)
        return text + ("Assistant:" if add_generation_prompt else "")

    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` encodes to (no special tokens added)."""
        return len(self.encode(text))

    def window_text(self, text: str, size: int, overlap: int) -> list[str]:
        """``text`` as overlapping windows of at most ``size`` tokens (one if it fits)."""
        from plguard.windows import window_spans

        ids = self.encode(text)
        if len(ids) <= size:
            return [text]
        out: list[str] = []
        for start, end in window_spans(len(ids), size, overlap):
            chunk = ids[start:end]
            piece = self.tokenizer.decode(chunk)
            # Re-tokenising a decoded piece can merge or split at its seams; trim until it
            # fits (a few tokens at most, well inside the overlap with the next window).
            while self.count_tokens(piece) > size and len(chunk) > 1:
                chunk = chunk[:-1]
                piece = self.tokenizer.decode(chunk)
            out.append(piece)
        return out

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """Keep the head and tail of ``text`` around a ``[...]`` marker, within budget."""
        ids = self.encode(text)
        if len(ids) <= max_tokens:
            return text, False
        budget = max(max_tokens - self.count_tokens(MARKER), 2)
        while True:
            head = budget - budget // 2
            tail = budget // 2
            out = (self.tokenizer.decode(ids[:head]) + MARKER
                   + (self.tokenizer.decode(ids[-tail:]) if tail else ""))
            # Re-tokenising at the seams can merge or split pieces; shrink until it fits.
            if self.count_tokens(out) <= max_tokens or budget <= 2:
                return out, True
            budget -= max(1, budget // 20)
