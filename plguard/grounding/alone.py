"""Views of the evidence alone: the request by itself, each answer window by itself.

A grounding prompt shows a judge's instructions, the request and the answer together; a
harmful passage in a long benign answer, or a harmful ask inside a friendly request, is
then read through everything around it. Read alone, the text that carries the evidence
is what the model's states are about: a request is the user's side of the chat, templated
as the model would see it from a user; an answer window is the assistant's turn after an
empty user turn. A head's ``alone`` readout is the mean of the states over the text's own
tokens (``TFRequest.pool``): the measurements behind this choice are in
docs/quality.md (*Reading the evidence alone*).

Every function here is the one definition of these views: the laboratory extracts its
training states through them, so a head reads at inference exactly what it was fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass

from plguard.backends.base import Backend
from plguard.grounding.prompt import escape_data
from plguard.types import Message, TFRequest

# Bump when the text of a view changes: heads files record it and refuse another.
ALONE_VERSION = "a1"
# The answer windows a content head is fitted on (a heads file records its own): short
# enough that a few harmful sentences dominate their window, overlapping by half so a
# passage up to this long is whole in one of them.
ANSWER_WINDOW_TOKENS = 64
ANSWER_WINDOW_OVERLAP = 32
_SLOT = "\x01TEXT\x01"  # escape_data removes \x01 from content: no text can spell it


@dataclass(frozen=True, slots=True)
class AloneTemplate:
    """A backend's chat template around a request and around an answer, split at the text."""

    request: tuple[str, str]
    answer: tuple[str, str]


def render_alone(backend: Backend) -> AloneTemplate:
    """Render both views once with a placeholder (filling it is plain string work)."""
    req = backend.format_chat((Message("user", _SLOT),), add_generation_prompt=False)
    ans = backend.format_chat((Message("user", ""), Message("assistant", _SLOT)),
                              add_generation_prompt=False)
    a, b = req.split(_SLOT, 1)
    c, d = ans.split(_SLOT, 1)
    return AloneTemplate((a, b), (c, d))


def pooled_view(parts: tuple[str, str], text: str) -> TFRequest:
    """``text`` in one view's template, its states pooled over the text's span."""
    before, after = parts
    # No question follows: the forward reads the states, and its pool is the text's span.
    return TFRequest(prefix=before + text + after, suffixes=(),
                     pool=(len(before), len(before) + len(text)))


def request_view(backend: Backend, template: AloneTemplate, request: str,
                 max_tokens: int) -> tuple[TFRequest, bool]:
    """The request alone (head and tail kept past ``max_tokens``), and whether it was cut."""
    text = escape_data(request)
    cut = False
    if backend.count_tokens(text) > max_tokens:
        text, cut = backend.truncate_text(text, max_tokens)
    return pooled_view(template.request, text), cut


def answer_windows(backend: Backend, template: AloneTemplate, answer: str,
                   size: int = ANSWER_WINDOW_TOKENS,
                   overlap: int = ANSWER_WINDOW_OVERLAP) -> list[TFRequest]:
    """Each window of ``answer`` alone, in order (one for an answer that fits one)."""
    text = escape_data(answer)
    return [pooled_view(template.answer, w) for w in backend.window_text(text, size, overlap)]


__all__ = ["ALONE_VERSION", "ANSWER_WINDOW_OVERLAP", "ANSWER_WINDOW_TOKENS", "AloneTemplate",
           "answer_windows", "pooled_view", "render_alone", "request_view"]
