"""JSON-schema-constrained decoding for the transformers backend, with outlines-core.

outlines-core was chosen over xgrammar and lm-format-enforcer by correctness on the
judge's schema (8/8 valid outputs against xgrammar's 6/8 on the embedded model; the
evaluator's schema 8/8 for both), see scripts/bench_structured.py and
docs/benchmarks.md; it is also a small Rust wheel, where xgrammar pulls in triton. A
schema becomes a regex (outlines-core's, whose whitespace is one optional blank, so a small
model's token budget is not spent on layout), the regex an :class:`outlines_core.Index`
over the tokenizer's vocabulary, built once per backend and schema; each ``generate``
call gets a fresh logits processor with one :class:`outlines_core.Guide` per row.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from plguard.errors import BackendError


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte (transformers 5 no longer exports it)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def token_bytes(tokenizer: Any, skip: Iterable[int] = ()) -> dict[bytes, list[int]]:
    """The bytes each token id decodes to, as outlines-core's Vocabulary wants them.

    Byte-level BPE tokens (GPT-2, SmolLM, Llama 3, Qwen) map through the byte alphabet;
    SentencePiece tokens (Llama 2, Mistral) turn the word marker into a blank and
    ``<0xNN>`` into its byte. Special tokens and ``skip`` (the stop ids) are left out:
    only the end-of-sequence token may close an output, and only once the JSON is whole.
    """
    left_out = set(tokenizer.all_special_ids) | set(skip)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    byte_level = "ByteLevel" in str(getattr(backend, "decoder", "") or "")
    dec = _byte_decoder()
    out: dict[bytes, list[int]] = {}
    for tok, i in tokenizer.get_vocab().items():
        if i in left_out:
            continue
        if byte_level and all(c in dec for c in tok):
            b = bytes(dec[c] for c in tok)
        elif len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
            b = bytes([int(tok[3:5], 16)])
        else:
            b = tok.replace("\u2581", " ").encode("utf-8")
        out.setdefault(b, []).append(i)
    return out


class SchemaConstraint:
    """Compiles JSON schemas for one tokenizer and makes logits processors from them."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        stops = sorted(stop_ids)
        eos = tokenizer.eos_token_id
        self._eos = int(eos) if eos is not None else (stops[0] if stops else None)
        self._stop_ids = stops
        self._vocabulary: Any = None
        self._indexes: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _index(self, schema: str) -> Any:
        from outlines_core import Index, Vocabulary
        from outlines_core.json_schema import build_regex_from_schema

        with self._lock:
            index = self._indexes.get(schema)
            if index is not None:
                return index
            if self._eos is None:
                raise BackendError("constrained decoding needs an end-of-sequence token; "
                                   "this tokenizer has none")
            if self._vocabulary is None:
                self._vocabulary = Vocabulary(self._eos, token_bytes(self._tokenizer,
                                                                     self._stop_ids))
            try:
                index = Index(build_regex_from_schema(schema), self._vocabulary)
            except (TypeError, ValueError) as exc:
                raise BackendError(f"GenerationParams.json_schema is not a JSON schema "
                                   f"outlines-core can compile: {exc} (schema: "
                                   f"{schema[:200]})") from exc
            self._indexes[schema] = index
            return index

    def processor(self, schema: str) -> Any:
        """A fresh transformers logits processor holding decoding to ``schema``."""
        return _GuideProcessor(self._index(schema), self._vocab_size, int(self._eos or 0))


class _GuideProcessor:
    """Masks each row's logits to the tokens its Guide allows next.

    Called by ``model.generate`` once per step with the ids so far. A row that ended (its
    guide is finished) gets only end-of-sequence, which transformers then pads.
    """

    def __init__(self, index: Any, vocab_size: int, eos: int) -> None:
        self._index = index
        self._vocab_size = vocab_size
        self._eos = eos
        self._guides: list[Any] | None = None
        self._start = 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch
        from outlines_core import Guide

        if self._guides is None:
            self._guides = [Guide(self._index) for _ in range(input_ids.shape[0])]
            self._start = input_ids.shape[1]
        elif input_ids.shape[1] > self._start:
            for g, t in zip(self._guides, input_ids[:, -1].tolist(), strict=True):
                if not g.is_finished():
                    g.advance(t)
        n = scores.shape[1]
        words = torch.zeros((1, (max(n, self._vocab_size) + 31) // 32), dtype=torch.int32)
        shifts = torch.arange(32, dtype=torch.int32)
        allowed = torch.zeros(scores.shape, dtype=torch.bool)
        for r, g in enumerate(self._guides):
            if g.is_finished():
                allowed[r, self._eos] = True
                continue
            words.zero_()
            # Bit j of word i allows token 32 i + j (outlines_core.kernels.torch's layout).
            g.write_mask_into(words.data_ptr(), words.numel(), words.element_size())
            allowed[r] = ((words.unsqueeze(-1) >> shifts) & 1).bool().view(-1)[:n]
            if not bool(allowed[r].any()):  # no way on (cannot happen under a schema): end
                allowed[r, self._eos] = True
        return scores.masked_fill(~allowed.to(scores.device), float("-inf"))


__all__ = ["SchemaConstraint", "token_bytes"]
