"""The one Backend protocol every model runtime implements, and what each one offers.

What a backend can do beyond the protocol is declared in its ``capabilities``
(:class:`Capabilities`), so callers ask the declaration, not ``hasattr``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from plguard.errors import ConfigError
from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore


@dataclass(frozen=True, slots=True)
class StatedScores:
    """One :class:`TFRequest`'s scores and the hidden states learned heads read.

    ``answer_states``: ``[n_suffixes, n_layers, d]`` float32, each suffix's state at its
    last token; ``prefix_state``: ``[n_layers, d]``, the prefix's at its last token (None
    without a prefix or when no layers were asked for); ``mark_states``:
    ``[n_marks, n_layers, d]``, the state at each of the request's ``marks`` (None without
    marks); ``pool_state``: ``[n_layers, d]``, the mean over the tokens of the request's
    ``pool`` span (None without one). Backends that can return hidden states declare
    ``capabilities.hidden_states`` and offer ``true_false_states`` (:class:`StatesBackend`).
    """

    scores: list[TFScore]
    answer_states: Any = None
    prefix_state: Any = None
    mark_states: Any = None
    pool_state: Any = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend offers beyond :class:`Backend`, declared by each backend class.

    ``hidden_states``: it has ``true_false_states`` (:class:`StatesBackend`), the stated
    forwards learned heads read.
    """

    hidden_states: bool = False


@runtime_checkable
class StreamingBackend(Protocol):
    """The optional streaming method a generator backend may offer (``Guard.stream``).

    ``stream_generate(chat, params, cancel) -> Iterator[str]`` yields the draft of one
    chat as text deltas. Deltas are decoded so that they concatenate to exactly the text
    ``generate`` would return for the same chat and params: a delta never ends inside a
    UTF-8 character or a sub-word token's piece of a word that later tokens change, and no
    separators are added between them. Generation stops promptly (within a token or so)
    once ``cancel`` is set, and closing the iterator (``close()``, or leaving a ``for``
    early) cancels generation and releases its thread, request or connection. It is not in
    :class:`Backend`: a backend without it still serves ``Guard.stream``, which then drafts
    with ``generate`` and streams the checked answer.
    """

    def stream_generate(self, chat: Chat, params: GenerationParams,
                        cancel: threading.Event) -> Iterator[str]:
        """Yield ``chat``'s completion as text deltas until done or ``cancel`` is set."""
        ...


def can_stream(backend: object) -> bool:
    """Whether ``backend`` offers ``stream_generate`` (see :class:`StreamingBackend`)."""
    return callable(getattr(backend, "stream_generate", None))


@runtime_checkable
class Backend(Protocol):
    """A loaded model that can generate and score True/False continuations.

    ``model_id`` names the weights (path or hub id plus dtype) and keys caches;
    ``max_context`` is the context window in tokens; ``capabilities`` declares what the
    backend offers beyond this protocol (:class:`Capabilities`). A backend whose calls cost tokens
    elsewhere (a remote server) may also offer ``usage() -> dict[str, int]``, the calling
    thread's running token counts; the Guard traces its change over each phase. Optional
    methods, outside this protocol so every backend satisfies it without them:
    ``true_false_states`` (see :class:`StatesBackend`, declared by
    ``capabilities.hidden_states``) and ``stream_generate`` (see :class:`StreamingBackend`).
    """

    model_id: str
    max_context: int
    capabilities: Capabilities

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


class StatesBackend(Backend, Protocol):
    """A backend that declares ``capabilities.hidden_states``: scores with hidden states."""

    def true_false_states(self, requests: Sequence[TFRequest], layers: Sequence[int]
                          ) -> list[StatedScores]:
        """Each request's scores with the hidden states of ``layers`` (:class:`StatedScores`)."""
        ...


def capabilities_of(backend: Any) -> Capabilities:
    """What ``backend`` declares (nothing beyond the protocol where it declares nothing).

    A backend written before ``capabilities`` existed, or a test double, still works: it
    is read as offering no hidden states.
    """
    declared = getattr(backend, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else Capabilities()


def states_backend(backend: Backend) -> StatesBackend:
    """``backend`` as a :class:`StatesBackend`, if its capabilities declare hidden states."""
    if not capabilities_of(backend).hidden_states:
        raise ConfigError(f"backend of {backend.model_id} cannot return hidden states; "
                          "heads need the transformers backend")
    return cast(StatesBackend, backend)
