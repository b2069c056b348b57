"""The one Backend protocol every model runtime implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore


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
