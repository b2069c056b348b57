"""Hidden states from a forward that stops after the deepest layer read.

Learned heads read a few hidden states (the content heads of the embedded model read layer
15 of 30) and, on a question-free read, nothing of the logits: the layers above the
deepest one read would be computed only to be thrown away, and on a small model they are
most of a forward's cost. :func:`states_to` hooks the decoder layers read and stops the
forward after the deepest; the states are those of the whole forward (the same
operations on the same inputs run up to there). A KV cache passed in then holds those
first layers only, which is all a later forward stopped at the same depth reads.

Transformers causal LMs with ``model.model.layers`` (Llama, Qwen2, Phi-3, ...); another
model, a read of the embeddings (0) or of the last layer (which the model returns
normalised) runs the whole forward with ``output_hidden_states``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any


class _Enough(Exception):
    """Raised by the hook on the deepest layer read: the rest of the forward is skipped."""


def decoder_layers(model: Any) -> Any | None:
    """The decoder layers of a transformers causal LM (``model.model.layers``), or None."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return layers if hasattr(layers, "__len__") and hasattr(layers, "__getitem__") else None


def can_stop(model: Any, layers: Sequence[int]) -> bool:
    """Whether a forward reading ``layers`` may stop early (module docstring)."""
    blocks = decoder_layers(model)
    return (blocks is not None and bool(layers) and min(layers) >= 1
            and max(layers) < len(blocks))


class _Read(threading.local):
    """This thread's forward in :func:`states_to`, if any (what the hooks serve)."""

    model: Any = None
    want: frozenset[int] = frozenset()
    deepest = 0
    got: dict[int, Any] | None = None


_READ = _Read()
_HOOKED: weakref.WeakSet[Any] = weakref.WeakSet()
_HOOKING = threading.Lock()


def _hook(model: Any, x: int) -> Any:
    def hook(_module: Any, _args: Any, output: Any) -> None:
        r = _READ
        if r.model is not model or r.got is None:
            return  # another thread's forward (a stream's draft), or no read: untouched
        if x in r.want:
            r.got[x] = output[0] if isinstance(output, tuple) else output
        if x == r.deepest:
            raise _Enough
    return hook


def _install(model: Any, blocks: Any) -> None:
    """One hook per decoder layer, once per model.

    No hook is then added or removed while another thread (a draft generating on the
    same model) runs a forward through them.
    """
    with _HOOKING:
        if model in _HOOKED:
            return
        for i, block in enumerate(blocks):
            block.register_forward_hook(_hook(model, i + 1))
        _HOOKED.add(model)


def states_to(model: Any, layers: Sequence[int], **inputs: Any) -> dict[int, Any]:
    """``{layer: hidden state [batch, seq, d]}`` of ``model(**inputs)`` at ``layers``.

    Hidden state ``x`` is the output of decoder layer ``x`` (0: the embeddings), as in
    transformers' ``hidden_states``. Call under ``torch.inference_mode()``; the logits of
    a stopped forward are never computed (ask for none you would read). The hooks act
    only on this thread's forward, so a draft generating on the same model in another
    thread runs through them untouched.
    """
    want = sorted(set(layers))
    if not can_stop(model, want):
        out = model(**inputs, output_hidden_states=True)
        return {x: out.hidden_states[x] for x in want}
    _install(model, decoder_layers(model))
    got: dict[int, Any] = {}
    r = _READ
    r.model, r.want, r.deepest, r.got = model, frozenset(want), want[-1], got
    try:
        model(**inputs)
    except _Enough:
        pass  # the layers above the deepest read are skipped (module docstring)
    finally:
        r.model, r.got = None, None
    return got


__all__ = ["can_stop", "decoder_layers", "states_to"]
