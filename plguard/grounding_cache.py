"""An on-disk cache of grounding scores, shared across policies, runs and processes.

One row per scored question: the key hashes the model identity, the grounding template
version, the data budget, the question text and the request and response text, so a
predicate that two policies share (same question) is scored once, and a paraphrase is
cached on its own (turning paraphrases off reuses the main question's rows). Rows keep
the raw True/False log-probabilities; combining and calibration happen after lookup, so
changing either never invalidates the cache.

SQLite in WAL mode: readers never block the writer, several processes may write (a busy
timeout waits for the lock), and every ``put_many`` is one short committed transaction,
so an interrupted run loses at most the batch in flight.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from plguard.types import TFScore

SCHEMA_VERSION = 1
_BUSY_TIMEOUT_MS = 30_000


def default_cache_path() -> Path:
    """``<plguard cache dir>/grounding.sqlite``."""
    from plguard.models import cache_dir

    return cache_dir() / "grounding.sqlite"


def resolve_cache_path(setting: str) -> Path:
    """The file for a ``grounding.cache`` setting: ``default``/``auto`` or a path."""
    if setting in ("default", "auto"):
        return default_cache_path()
    return Path(setting).expanduser()


def cache_key(model: str, template_version: str, max_data_tokens: int, question: str,
              request: str, response: str | None) -> str:
    """The sha256 key of one scored question (``response`` None: request scope)."""
    h = hashlib.sha256()
    # Length-prefixed fields: no concatenation of two different tuples can collide.
    for part in (f"v{SCHEMA_VERSION}", model, template_version, str(max_data_tokens),
                 question.strip(), request, "\x00" if response is None else "R" + response):
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class GroundingCache:
    """Key -> :class:`TFScore` in one SQLite file; safe to share between processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection per thread (a connection must not be used by two at once); all
        # are tracked so close() can close the ones other threads opened.
        self._local = threading.local()
        self._open: set[sqlite3.Connection] = set()
        self._open_lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        con = self._con()
        con.execute("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, "
                    "logprob_true REAL NOT NULL, logprob_false REAL NOT NULL, "
                    "truncated INTEGER NOT NULL, model TEXT, question TEXT)")
        con.commit()

    def _con(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None or con not in self._open:
            con = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000,
                                  check_same_thread=False)
            con.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            con.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable across process crashes in WAL mode; only an OS crash can
            # drop the last commits, which a rerun simply recomputes.
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con = con
            with self._open_lock:
                self._open.add(con)
        return con

    def get_many(self, keys: Sequence[str]) -> dict[str, TFScore]:
        """The cached scores of ``keys`` (absent keys are left out)."""
        out: dict[str, TFScore] = {}
        con = self._con()
        uniq = list(dict.fromkeys(keys))
        for start in range(0, len(uniq), 500):  # stay under SQLite's variable limit
            chunk = uniq[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, lt, lf, tr in con.execute(
                    f"SELECT key, logprob_true, logprob_false, truncated FROM scores "
                    f"WHERE key IN ({marks})", chunk):
                out[key] = TFScore(float(lt), float(lf), bool(tr))
        self._hits += len(out)
        self._misses += len(uniq) - len(out)
        return out

    @property
    def hits(self) -> int:
        """Distinct keys :meth:`get_many` found, summed over its calls."""
        return self._hits

    @property
    def misses(self) -> int:
        """Questions a backend had to score (lookups missed plus :meth:`count_forwarded`)."""
        return self._misses

    def count_forwarded(self, n: int) -> None:
        """Count ``n`` questions scored without a lookup as misses.

        The heads path forwards every question (heads read hidden states, which the cache
        does not hold), so ``misses`` still counts the questions a backend scored.
        """
        if n < 0:
            raise ValueError(f"count_forwarded needs n >= 0, got {n}")
        self._misses += n

    def put_many(self, rows: Mapping[str, tuple[TFScore, str, str]]) -> None:
        """Store ``key -> (score, model, question)`` in one committed transaction."""
        if not rows:
            return
        con = self._con()
        with con:  # commits on success, rolls back on error
            con.executemany(
                "INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?, ?)",
                [(k, s.logprob_true, s.logprob_false, int(s.truncated), m, q)
                 for k, (s, m, q) in rows.items()])

    def __len__(self) -> int:
        return int(self._con().execute("SELECT COUNT(*) FROM scores").fetchone()[0])

    def keys(self) -> Iterable[str]:
        """Every stored key."""
        return [r[0] for r in self._con().execute("SELECT key FROM scores")]

    def close(self) -> None:
        """Close every thread's connection; a later call opens a new one."""
        with self._open_lock:
            cons, self._open = list(self._open), set()
        for con in cons:
            con.close()


__all__ = ["GroundingCache", "cache_key", "default_cache_path", "resolve_cache_path"]
