"""JSON-schema-constrained decoding for the transformers backend, with xgrammar.

xgrammar was chosen over lm-format-enforcer and outlines-core by correctness on the
judge's and evaluator's schemas, then speed (scripts/bench_structured.py,
docs/benchmarks.md). A schema's grammar is compiled once per backend and reused; the
logits processor holds per-row matcher state, so each ``generate`` call gets a new one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from plguard.errors import BackendError


class SchemaConstraint:
    """Compiles JSON schemas for one tokenizer and makes logits processors from them."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_ids = sorted(stop_ids)
        self._compiler: Any = None
        self._grammars: dict[str, Any] = {}
        self._lock = threading.Lock()

    def processor(self, schema: str) -> Any:
        """A fresh transformers logits processor holding decoding to ``schema``."""
        import xgrammar as xgr

        with self._lock:
            grammar = self._grammars.get(schema)
            if grammar is None:
                if self._compiler is None:
                    info = xgr.TokenizerInfo.from_huggingface(
                        self._tokenizer, vocab_size=self._vocab_size,
                        stop_token_ids=self._stop_ids)
                    self._compiler = xgr.GrammarCompiler(info)
                try:
                    # Compact JSON: with free whitespace a small model spent its token
                    # budget on blanks and was cut off mid-rationale (3 of 8 judge runs).
                    grammar = self._compiler.compile_json_schema(schema,
                                                                 any_whitespace=False)
                except (RuntimeError, ValueError, TypeError) as exc:
                    raise BackendError(f"GenerationParams.json_schema is not a JSON schema "
                                       f"xgrammar can compile: {exc} (schema: "
                                       f"{schema[:200]})") from exc
                self._grammars[schema] = grammar
        return xgr.contrib.hf.LogitsProcessor(grammar)


__all__ = ["SchemaConstraint"]
