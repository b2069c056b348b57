"""The one resumable map loop: skip done ids, chunk, progress, isolate failures, append.

Every study (and ``plguard batch``) maps a model call over items into a record store.
The loop is written once here, so all of them resume, fail and retry alike:

* items whose id the store holds as finished are skipped; ids whose record is an error
  are retried (:class:`~plguard.records.store.JsonlStore` does not count them as done);
* the rest go to ``fn`` a chunk at a time; a chunk that raises is redone item by item
  (:func:`run_safely`), so one bad item fails alone and is recorded with its error;
* each record is appended (flushed and fsync'd) before the next chunk starts, so a
  killed run loses at most one chunk.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from plguard.errors import BackendDeadError
from plguard.records.store import JsonlStore, is_error

T = TypeVar("T")
U = TypeVar("U")


def run_safely(fn: Callable[[Sequence[T]], Sequence[U]], items: Sequence[T]
               ) -> list[U | BaseException]:
    """``fn(items)``; on an exception, each item on its own, so one bad item fails alone.

    KeyboardInterrupt, SystemExit and a dead backend propagate: the records already
    written stay, and no remaining example is recorded as failed for a reason of the run's.
    """
    try:
        out = fn(items)
        if len(out) != len(items):
            raise RuntimeError(f"{len(out)} results for {len(items)} inputs")
        return list(out)
    except BackendDeadError:
        raise
    except Exception as exc:  # a fault in one example must not lose the others
        if len(items) == 1:
            return [exc]
        results: list[U | BaseException] = []
        for it in items:
            results.extend(run_safely(fn, [it]))
        return results


def error_text(exc: BaseException) -> str:
    """An exception as one bounded line for a record."""
    return f"{type(exc).__name__}: {exc}"[:2000]


@dataclass
class MapCounts:
    """What one :func:`map_into` call did."""

    skipped: int = 0  # finished before
    retried: int = 0  # failed before, tried again
    written: int = 0
    errors: int = 0  # written with an error this time


def map_into(store: JsonlStore, items: Sequence[T], key: Callable[[T], str],
             fn: Callable[[Sequence[T]], Sequence[U]],
             record: Callable[[T, U | BaseException], dict[str, Any]], *, chunk: int,
             desc: str, unit: str = "rec", progress: bool = True) -> MapCounts:
    """Map ``fn`` over the unfinished ``items`` into ``store``; see the module doc.

    ``record(item, result_or_exception)`` builds the stored record (its ``id`` must be
    ``key(item)``; an exception's record carries an ``error``).
    """
    from tqdm import tqdm

    todo = [it for it in items if key(it) not in store]
    counts = MapCounts(skipped=len(items) - len(todo),
                       retried=sum(key(it) in store.records for it in todo))
    size = max(1, chunk)
    with tqdm(total=len(todo), desc=desc, unit=unit, disable=not progress or not todo,
              file=sys.stderr, dynamic_ncols=True) as bar:
        for start in range(0, len(todo), size):
            part = todo[start:start + size]
            for it, out in zip(part, run_safely(fn, part), strict=True):
                rec = record(it, out)
                store.append(rec)
                counts.written += 1
                counts.errors += is_error(rec)
            bar.update(len(part))
    return counts


__all__ = ["MapCounts", "error_text", "map_into", "run_safely"]
