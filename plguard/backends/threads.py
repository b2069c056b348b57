"""Threads for in-process models: one forward at a time, torch's pool sized from the cores.

Two things made a chat through ``plguard serve`` 10x slower on two cores shared with other
work (issue 54): torch's intra-op pool had a thread per core, so every parallel region
waited at its barrier for a core another process held; and a stream drafted and grounded
at once, two pools on the same cores. Here:

- :func:`apply_threads` sets the intra-op threads once per load: the model config's
  ``threads``, else ``OMP_NUM_THREADS`` where the user set it, else the cores this process
  may use minus one (at least 1), leaving a core for the server, the draft's decoding and
  whatever else runs there;
- :func:`serialise` puts every top-level forward of a model behind :data:`FORWARD`, one
  process-wide FIFO lock, so no two forwards (of any in-process model) run at once: a
  stream's draft and its window checks take turns token by token, in arrival order.

The measurement is ``scripts/bench_threads.py`` (docs/benchmarks.md, *Threads*).
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Intra-op threads when nothing is configured: usable cores minus one, at least 1."""
    return max(1, usable_cores() - 1)


def apply_threads(requested: int | None) -> int:
    """Set torch's intra-op threads (module docstring) and return how many it now has."""
    import torch

    if requested is None and "OMP_NUM_THREADS" in os.environ:
        return int(torch.get_num_threads())  # the user's choice, read by torch itself
    n = requested if requested is not None else default_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


class FairLock:
    """A re-entrant lock handed to its waiters in arrival order.

    ``threading.Lock`` lets the releasing thread take it straight back: a drafting stream
    would starve the window check waiting between two of its tokens.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiters: deque[tuple[int, threading.Event]] = deque()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        """Wait for the lock (at once if this thread holds it already)."""
        me = threading.get_ident()
        with self._guard:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is None and not self._waiters:
                self._owner, self._depth = me, 1
                return
            turn = threading.Event()
            self._waiters.append((me, turn))
        turn.wait()  # release() made this thread the owner before setting it

    def release(self) -> None:
        """Release once; the last release hands the lock to the longest waiter."""
        with self._guard:
            if self._owner != threading.get_ident():
                raise RuntimeError("FairLock released by a thread that does not hold it")
            self._depth -= 1
            if self._depth:
                return
            if self._waiters:
                self._owner, turn = self._waiters.popleft()
                self._depth = 1
                turn.set()
            else:
                self._owner = None

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


#: Held by every top-level forward of an in-process model (see :func:`serialise`).
FORWARD = FairLock()


def serialise(model: Any) -> Any:
    """``model`` with its ``forward`` behind :data:`FORWARD` (idempotent); returns it.

    ``generate`` calls the model once per token, so a drafting stream releases the lock
    between tokens and a waiting check goes next. ``functools.wraps`` keeps the forward's
    signature visible to ``generate`` (it reads which arguments the model takes).
    """
    if getattr(model, "_plguard_serialised", False):
        return model
    inner = model.forward

    @functools.wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with FORWARD:
            return inner(*args, **kwargs)

    model.forward = forward
    model._plguard_serialised = True
    return model


__all__ = ["FORWARD", "FairLock", "apply_threads", "default_threads", "serialise",
           "usable_cores"]
