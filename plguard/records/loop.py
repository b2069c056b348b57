"""The one resumable map loop: skip done ids, chunk, progress, isolate failures, append.

Every study (and ``plguard batch``) maps a model call over items into a record store.
The loop is written once here, so all of them resume, fail and retry alike:

* items whose id the store holds as finished are skipped; ids whose record is an error
  are retried (:class:`~plguard.records.store.JsonlStore` does not count them as done);
* the rest go to ``fn`` a chunk at a time; a chunk that raises is redone item by item
  (:func:`run_safely`), so one bad item fails alone and is recorded with its error;
* each record is appended (flushed and fsync'd) before the next chunk starts, so a
  killed run loses at most one chunk.

:func:`map_into` runs the chunks here. A run whose chunks are computed elsewhere (Ray
actors build whole records: the XSTest runner, ``plguard batch``) uses its parts:
:func:`unfinished` and :func:`append_shards`, which writes each finished shard's records
to their stores, in whatever order shards finish, and drops a record its store already
holds as finished or this call already wrote (a shard redone after an actor died adds
nothing twice, not even a second copy of a failed record).

A store is anything with the :class:`RecordStore` methods: a :class:`JsonlStore`, or
``plguard batch``'s trace sink, whose Parquet output journals to a side file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from plguard.errors import BackendDeadError
from plguard.records.store import is_error

T = TypeVar("T")
U = TypeVar("U")


class RecordStore(Protocol):
    """What the loop needs of a store (:class:`JsonlStore` has it)."""

    def __contains__(self, rid: object) -> bool:
        """Whether ``rid`` is finished (a failed id is not: it is retried)."""
        ...

    @property
    def failed(self) -> Collection[str]:
        """Ids whose current record is an error."""
        ...

    def append(self, record: dict[str, Any]) -> None:
        """Write one record durably."""
        ...


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


def unfinished(store: RecordStore, items: Sequence[T], key: Callable[[T], str]
               ) -> tuple[list[T], MapCounts]:
    """The items ``store`` does not hold as finished (failed ones are retried), and counts."""
    todo = [it for it in items if key(it) not in store]
    failed = set(store.failed)
    return todo, MapCounts(skipped=len(items) - len(todo),
                           retried=sum(key(it) in failed for it in todo))


def append_shards(shards: Iterable[Sequence[dict[str, Any]]],
                  stores: Mapping[str, RecordStore], route: Callable[[dict[str, Any]], str],
                  counts: Mapping[str, MapCounts], *, total: int, desc: str,
                  unit: str = "rec", progress: bool = True,
                  on_append: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Append every record of each finished shard to ``stores[route(record)]``.

    Only this loop writes, so a run's files look the same however its shards were
    computed. ``counts`` (same keys as ``stores``) gets each write and error;
    ``on_append`` sees each written record.
    """
    from tqdm import tqdm

    seen: set[tuple[str, str]] = set()  # (store, id) written by this call
    with tqdm(total=total, desc=desc, unit=unit, disable=not progress or not total,
              file=sys.stderr, dynamic_ncols=True) as bar:
        for records in shards:
            for rec in records:
                k, rid = route(rec), str(rec["id"])
                # A shard redone after an actor died: a finished first copy stands, and so
                # does a failed one against a failed redo (one record, one error counted);
                # a redo that succeeded replaces the failed copy, as a retry would.
                again = (k, rid) in seen
                if rid in stores[k] or (again and is_error(rec)):
                    continue
                seen.add((k, rid))
                stores[k].append(rec)
                if again:
                    counts[k].errors -= 1
                else:
                    counts[k].written += 1
                counts[k].errors += is_error(rec)
                if on_append is not None:
                    on_append(rec)
            bar.update(len(records))


def map_into(store: RecordStore, items: Sequence[T], key: Callable[[T], str],
             fn: Callable[[Sequence[T]], Sequence[U]],
             record: Callable[[T, U | BaseException], dict[str, Any]], *, chunk: int,
             desc: str, unit: str = "rec", progress: bool = True) -> MapCounts:
    """Map ``fn`` over the unfinished ``items`` into ``store``; see the module doc.

    ``record(item, result_or_exception)`` builds the stored record (its ``id`` must be
    ``key(item)``; an exception's record carries an ``error``).
    """
    todo, counts = unfinished(store, items, key)
    size = max(1, chunk)
    # A generator: each chunk runs only once the previous one's records are written.
    shards = ([record(it, out) for it, out in zip(part, run_safely(fn, part), strict=True)]
              for part in (todo[i:i + size] for i in range(0, len(todo), size)))
    append_shards(shards, {"": store}, lambda _: "", {"": counts}, total=len(todo),
                  desc=desc, unit=unit, progress=progress)
    return counts


__all__ = ["MapCounts", "RecordStore", "append_shards", "error_text", "map_into", "run_safely",
           "unfinished"]
