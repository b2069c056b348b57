"""Text deltas of a streamed generation that join to exactly what ``generate`` returns.

``generate`` returns the decoded answer stripped of surrounding whitespace; a stream must
deliver the same text in pieces (the guard checks, and the server sends, the joined
pieces). :class:`Deltas` is fed the cumulative text so far and gives the part that is
safe to release: leading whitespace is dropped, trailing whitespace is held back until
text follows it (at the end it is dropped), and a tail ending in U+FFFD (the decode of an
incomplete multi-byte character) is held back until the next token completes it.
"""

from __future__ import annotations

_INCOMPLETE = "\ufffd"


class Deltas:
    """Turn cumulative text into the deltas of its stripped form."""

    def __init__(self) -> None:
        self.sent = ""

    def push(self, text: str) -> str:
        """The new releasable part, given everything generated so far (may be empty)."""
        safe = text.lstrip()
        if safe.endswith(_INCOMPLETE):
            safe = safe.rstrip(_INCOMPLETE)
        safe = safe.rstrip()
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            # A shorter or different re-decode (a merge of byte pieces) is never unsent:
            # what went out stays, and the rest is released once it extends it again.
            return ""
        delta = safe[len(self.sent):]
        self.sent = safe
        return delta


__all__ = ["Deltas"]
