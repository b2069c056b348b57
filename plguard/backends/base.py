"""The one Backend protocol every model runtime implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore


@dataclass(frozen=True, slots=True)
class StatedScores:
    """One :class:`TFRequest`'s scores and the hidden states learned heads read.

    ``answer_states``: ``[n_suffixes, n_layers, d]`` float32, each suffix's state at its
    last token; ``prefix_state``: ``[n_layers, d]``, the prefix's at its last token (None
    without a prefix or when no layers were asked for). Backends that can return hidden
    states offer ``true_false_states(requests, layers) -> list[StatedScores]``.
    """

    scores: list[TFScore]
    answer_states: Any = None
    prefix_state: Any = None


@runtime_checkable
class Backend(Protocol):
    """A loaded model that can generate and score True/False continuations.

    ``model_id`` names the weights (path or hub id plus dtype) and keys caches;
    ``max_context`` is the context window in tokens. A backend whose calls cost tokens
    elsewhere (a remote server) may also offer ``usage() -> dict[str, int]``, the calling
    thread's running token counts; the Guard traces its change over each phase.
    """

    model_id: str
    max_context: int

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        """Render a chat with the model's chat template, as text."""
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` encodes to (no special tokens added)."""
        ...

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """Cut ``text`` to at most ``max_tokens`` tokens; say whether it was cut."""
        ...

    def window_text(self, text: str, size: int, overlap: int) -> list[str]:
        """Split ``text`` into windows of at most ``size`` tokens sharing ``overlap``."""
        ...

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        """Generate one completion per chat, batched."""
        ...

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        """For each request, score every suffix after the shared prefix."""
        ...
