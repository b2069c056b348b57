"""A per-token content score for streams: the content heads on the newest tokens.

A stream's windows are its full check, but a window releases text only once it is whole
(``stream.window_tokens``), so a reader waited window by window. :class:`TokenMeter` reads
the answer as it arrives: after every step it scores each response predicate that has an
answer-alone head (the content heads of issue 53) on the mean state of the newest
``window`` tokens (the size those heads were fitted on), read alone in the answer's
template, exactly as the windows read the answer (``stream.token_read: alone``, the
default), or in one incremental forward of the whole answer so far with its KV cache
(:class:`~plguard.backends.incremental.IncrementalStates`, ``token_read: context``). The
stream (plguard.streaming) then releases text a few tokens behind that score while the
policy's unsafe and content rules, with these scores and the request's, and every other
response predicate at its worst, stay clearly below their thresholds (``Guard.gate``, the
check pipeline's ``gate``); the windows and the final check still judge everything, every
predicate, before the stream ends.

The in-context read is about as cheap as one forward over the answer, but each token's
state carries the whole answer before it, which the heads never saw in fitting: ~950
tokens into a stream it read harmful passages at 0.00-0.09 and let 4 of 20 refused
passages of the unseen set out before a window caught them. What each read costs and
catches: docs/benchmarks.md (*Token check*), ``scripts/bench_token_check.py``,
eval/results/token_lag-alone and eval/results/stream_holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from plguard.backends.incremental import IncrementalStates
from plguard.grounding.alone import ANSWER_WINDOW_TOKENS, render_alone
from plguard.grounding.prompt import escape_data
from plguard.heads.artefact import HeadsFile

TokenRead = Literal["alone", "context"]


def metered(heads: HeadsFile | None, response: Sequence[str]) -> list[str]:
    """The response predicates of ``response`` that ``heads`` reads alone (in order).

    A head that adds the zero-shot logit (mode ``both``) needs a question: not metered.
    """
    if heads is None:
        return []
    return [n for n in response if n in heads.heads and heads.heads[n].readout == "alone"
            and heads.heads[n].mode != "both"]


class TokenMeter:
    """Each metered predicate's P on the newest window of a growing answer.

    ``read``: ``alone`` (the default) reads the newest ``window`` tokens by themselves in
    the answer's chat template, exactly the view the heads were fitted on and the windows
    read, one forward of the window's tokens per step behind the template's cached keys
    and values; ``context`` reads them from one incremental forward
    over the whole answer (the KV cache), cheaper, but its states carry everything before:
    on ~950 tokens of benign text a harmful passage read 0.00-0.09 where its windows read
    over the threshold (docs/benchmarks.md, *Token check*).
    """

    def __init__(self, backend: Any, heads: HeadsFile, names: Sequence[str],
                 read: TokenRead = "alone") -> None:
        self.backend, self.heads = backend, heads
        self.names = list(names)
        self.window = int(heads.alone.get("window_tokens", ANSWER_WINDOW_TOKENS))
        self.layers = sorted({heads.heads[n].layer for n in self.names})
        self.layer_at = {x: i for i, x in enumerate(self.layers)}
        self.read = read
        # Both reads keep the template's KV cache: in context the answer grows behind it;
        # alone each step's newest window replaces the last one behind it (the cache is
        # cut back to the tokens they share, the template at least: a causal model's
        # states of the template are the same whatever window follows, so only the
        # window's tokens are forwarded; 1.66x one forward over the answer before, when
        # each step forwarded the template again).
        self.reader = IncrementalStates(backend, render_alone(backend).answer[0], self.layers)

    @property
    def tokens_forwarded(self) -> int:
        """Tokens forwarded so far, the template's once (a whole answer read once: its count)."""
        return self.reader.forwarded

    def update(self, answer: str) -> dict[str, float] | None:
        """The scores on the newest window of ``answer``; None once the reader stopped."""
        import numpy as np

        text = escape_data(answer)
        last: int | None = self.window
        if self.read == "alone":  # the newest window replaces the text behind the template
            ids = self.backend.encode(text)
            text, last = (self.backend.tokenizer.decode(ids[-self.window:]) if ids else ""), None
        states = self.reader.feed(text, last=last)
        if states is None:
            return None
        mean = states.mean(axis=0) if len(states) else None
        if mean is None:
            return {n: 0.0 for n in self.names}
        out = {}
        for n in self.names:
            h = self.heads.heads[n]
            out[n] = h.score(np.asarray(mean[self.layer_at[h.layer]], dtype=np.float64))
        return out


__all__ = ["TokenMeter", "TokenRead", "metered"]
