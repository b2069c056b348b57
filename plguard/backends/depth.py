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


def states_to(model: Any, layers: Sequence[int], **inputs: Any) -> dict[int, Any]:
    """``{layer: hidden state [batch, seq, d]}`` of ``model(**inputs)`` at ``layers``.

    Hidden state ``x`` is the output of decoder layer ``x`` (0: the embeddings), as in
    transformers' ``hidden_states``. Call under ``torch.inference_mode()``; the logits of
    a stopped forward are never computed (ask for none you would read).
    """
    want = sorted(set(layers))
    if not can_stop(model, want):
        out = model(**inputs, output_hidden_states=True)
        return {x: out.hidden_states[x] for x in want}
    blocks = decoder_layers(model)
    assert blocks is not None
    got: dict[int, Any] = {}
    deepest = want[-1]

    def keep(x: int) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            got[x] = output[0] if isinstance(output, tuple) else output
            if x == deepest:
                raise _Enough
        return hook

    handles = [blocks[x - 1].register_forward_hook(keep(x)) for x in want]
    try:
        model(**inputs)
    except _Enough:
        pass  # the layers above the deepest read are skipped (module docstring)
    finally:
        for h in handles:
            h.remove()
    return got


__all__ = ["can_stop", "decoder_layers", "states_to"]
