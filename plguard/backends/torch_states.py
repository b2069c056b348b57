"""Torch helpers of the transformers backend: dtypes, pooled and last states, KV caches.

Pure functions over tensors (and one stopping criterion), kept apart so the backend module
holds only what a backend does.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bf16 matmul (AMX or AVX512-BF16)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"amx_bf16", "avx512_bf16"})
    except OSError:
        pass
    return False


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """Map a config dtype ('auto' included) to a torch dtype for ``device``."""
    import torch

    if dtype != "auto":
        return {"float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}[dtype]
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_supports_bf16() else torch.float32




class Cancelled:
    """A stopping criterion: stop every row once either event is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        """A stop flag per row: all set once an event is."""
        import torch

        stop = any(e.is_set() for e in self.events)
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool,
                          device=input_ids.device)


def mean_states(hidden: Any, positions: list[int], layers: tuple[int, ...]) -> Any:
    """``[n_layers, d]`` float32: the mean state over ``positions`` of batch row 0."""
    import torch

    at = torch.tensor(positions, device=hidden[layers[0]].device)
    return torch.stack([hidden[i][0, at].float().mean(0) for i in layers]).cpu().numpy()


def states_at_last(hidden: Any, layers: tuple[int, ...]) -> Any:
    """``[batch, len(layers), d]`` float32 numpy: each row's last-token state per layer."""
    import torch

    return torch.stack([hidden[i][:, -1] for i in layers], dim=1).float().cpu().numpy()


def repeat_cache(cache: Any, k: int) -> Any:
    """A batch-``k`` copy of a batch-1 KV cache, leaving ``cache`` reusable.

    Plain dynamic layers get broadcast views: the forward's own concatenation writes the
    k copies once, instead of a repeat writing them and the concatenation again.
    """
    layers = getattr(cache, "layers", None)
    if layers and all(type(layer).__name__ == "DynamicLayer" for layer in layers):
        out = copy.copy(cache)
        out.layers = []
        for layer in layers:
            view = copy.copy(layer)
            view.keys = layer.keys.expand(k, -1, -1, -1)
            view.values = layer.values.expand(k, -1, -1, -1)
            out.layers.append(view)
        return out
    out = copy.deepcopy(cache)
    out.batch_repeat_interleave(k)
    return out


def finite(x: float) -> float:
    """``x``, or a floor far below any real log-probability where it is not finite."""
    # -inf would poison renormalisation and JSON traces; the floor is far below any real
    # log-probability.
    return x if math.isfinite(x) else -1e4


__all__ = ["Cancelled", "cpu_supports_bf16", "finite", "mean_states", "repeat_cache",
           "resolve_dtype", "states_at_last"]
