"""Hidden-state features for learned heads: extracted once, cached on disk, resumable.

A head reads the grounding model's hidden state where the zero-shot reading reads its
logits: at the answer position after a predicate's question (``question`` readout), or
at the end of the data block with no question at all (``prefix`` readout: one forward
serves every predicate of a scope), or averaged over the data block's tokens in that same
forward (``pool`` readout: what the data is about rather than where it ends). All come
from the same prefix-shared forwards as P(True) (``TransformersBackend.true_false_states``),
with the grounding prompts and token ids the Grounder uses, so a head fitted here reads
at inference exactly what it was fitted on.

The store is one SQLite file (WAL, one committed transaction per batch): a stopped
extraction loses at most the batch in flight and a rerun skips what is stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from plguard.backends.base import states_backend
from plguard.config import GroundingConfig
from plguard.errors import ConfigError
from plguard.types import PredicateSpec, Scope
from plguard_lab.training.corpus import CorpusItem

PREFIX = "\x00prefix"  # the question slot of a prefix-end (no question) state
PAIR_PREFIX = "\x00pair_prefix"  # a request's state at its block's end in the pair prompt
POOL = "\x00pool"  # the mean state over the data block's tokens (the prefix forward's)
LAYER_FRACTIONS = (0.33, 0.5, 0.67, 0.83, 1.0)
ITEMS_PER_BATCH = 8


def default_layers(n_layers: int) -> tuple[int, ...]:
    """The layers whose states are kept: a spread from a third of the depth to the top."""
    return tuple(sorted({max(1, round(f * n_layers)) for f in LAYER_FRACTIONS}))


def parse_layers(spec: str | None, n_layers: int) -> tuple[int, ...]:
    """The layers a ``--layers`` setting names: ``all``, or numbers and ranges (``4-9,28``).

    None or empty: :func:`default_layers`. Layers count from 1 (the first block's output)
    to ``n_layers`` (the last).
    """
    if spec is None or not spec.strip():
        return default_layers(n_layers)
    if spec.strip() == "all":
        return tuple(range(1, n_layers + 1))
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(f"--layers: {part.strip()!r} is not a layer number or range "
                              "(e.g. 4-9,28, or all)") from None
        if not 1 <= a <= b <= n_layers:
            raise ConfigError(f"--layers: {part.strip()!r} is outside this model's layers "
                              f"1-{n_layers}")
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def model_key(backend: Any) -> str:
    """What identifies a backend's weights in feature keys: content hash, else bare id."""
    from plguard.grounding import backend_identity

    ident = backend_identity(backend)
    return ident["model_sha256"] or str(ident["model_id"]).split(":")[0]


def default_store_path(backend: Any) -> Path:
    """``<plguard cache dir>/features/<model key>.sqlite``: features are per model."""
    from plguard.models import cache_dir

    return cache_dir() / "features" / f"{model_key(backend)[:16]}.sqlite"


def feature_key(model: str, template_version: str, max_data_tokens: int,
                layers: Sequence[int], question: str, request: str,
                response: str | None) -> str:
    """sha256 of one state's identity: model, template, budget, layers, question, data."""
    h = hashlib.sha256()
    for part in ("f1", model, template_version, str(max_data_tokens),
                 ",".join(map(str, layers)), question, request,
                 "\x00" if response is None else "R" + response):
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Feature:
    """One stored state: ``[n_layers, d]`` float32 and the question's zero-shot log-probs."""

    states: np.ndarray
    logprob_true: float
    logprob_false: float


class FeatureStore:
    """Key -> :class:`Feature` in one SQLite file (states kept as float16).

    A row whose states do not fit float16 (Gemma-3's residual stream reaches beyond its
    65,504) is kept as float32; a row's dtype is read back from its blob's size (``n * d``
    values of 2 or 4 bytes), so stores written before hold and read as they were.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = sqlite3.connect(self.path, timeout=30)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("CREATE TABLE IF NOT EXISTS feats (key TEXT PRIMARY KEY, "
                          "lt REAL, lf REAL, n INTEGER, d INTEGER, states BLOB)")
        self._con.commit()

    def has(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` are stored."""
        out: set[str] = set()
        for i in range(0, len(keys), 500):
            chunk = list(keys[i:i + 500])
            q = f"SELECT key FROM feats WHERE key IN ({','.join('?' * len(chunk))})"
            out.update(r[0] for r in self._con.execute(q, chunk))
        return out

    def get(self, keys: Sequence[str]) -> dict[str, Feature]:
        """The stored features of ``keys`` (absent ones left out)."""
        out: dict[str, Feature] = {}
        for i in range(0, len(keys), 500):
            chunk = list(keys[i:i + 500])
            q = (f"SELECT key, lt, lf, n, d, states FROM feats "
                 f"WHERE key IN ({','.join('?' * len(chunk))})")
            for k, lt, lf, n, d, blob in self._con.execute(q, chunk):
                dt = np.float16 if len(blob) == 2 * n * d else np.float32
                arr = np.frombuffer(blob, dtype=dt).astype(np.float32).reshape(n, d)
                out[k] = Feature(arr, float(lt), float(lf))
        return out

    def put(self, rows: dict[str, Feature]) -> None:
        """Store rows in one committed transaction."""
        with self._con:
            self._con.executemany(
                "INSERT OR REPLACE INTO feats VALUES (?, ?, ?, ?, ?, ?)",
                [(k, f.logprob_true, f.logprob_false, *f.states.shape, _blob(f.states))
                 for k, f in rows.items()])

    def __len__(self) -> int:
        return int(self._con.execute("SELECT COUNT(*) FROM feats").fetchone()[0])

    def close(self) -> None:
        """Close the connection."""
        self._con.close()


F16_MAX = float(np.finfo(np.float16).max)


def _blob(states: np.ndarray) -> bytes:
    """float16 bytes, or float32 where a finite value would overflow float16."""
    a = np.asarray(states)
    if a.size and float(np.nanmax(np.abs(a))) >= F16_MAX:
        return a.astype(np.float32).tobytes()
    return a.astype(np.float16).tobytes()


def unique_specs(specs: Sequence[PredicateSpec], cfg: GroundingConfig) -> list[PredicateSpec]:
    """One spec per distinct (scope, question block): heads of equal questions share states."""
    from plguard.grounding import ANSWER_WORDS, question_block

    seen: set[tuple[str, str]] = set()
    out: list[PredicateSpec] = []
    for s in specs:
        sig = (s.scope, question_block(s, s.question, ANSWER_WORDS[cfg.answer_words],
                                       cfg.examples))
        if sig not in seen:
            seen.add(sig)
            # Two bundles may give one name to different questions: names here are only
            # the Grounder's handles; states are keyed by the question text.
            out.append(replace(s, name=f"q{len(out)}.{s.name}"))
    return out


class Extractor:
    """Builds grounding prompts of corpus items and stores their states.

    Each item is read as the Grounder reads its first view (the same prompt text, data
    escaping and budget); only each predicate's main question is asked (paraphrases add
    no state a head reads).

    ``questions=False`` keeps each item's prefix state alone (no question is asked: the
    forward is the data block only, as the Grounder forwards a request whose predicates
    all have prefix heads), and ``pairs=False`` skips the pair reads: a large model
    affords prefix heads for every predicate of a scope at one forward per item.
    ``questions`` may also name the scopes whose questions are asked (``("response",)``:
    a pair's question states, a request's prefix alone), because the augmented requests
    outnumber the pairs and a question forward of each would cost the most.
    """

    def __init__(self, backend: Any, specs: Sequence[PredicateSpec], cfg: GroundingConfig,
                 store: FeatureStore, layers: Sequence[int], *,
                 questions: bool | Collection[str] = True,
                 pairs: bool = True, pool: bool = False) -> None:
        from plguard.grounding import Grounder

        # Refused unless its capabilities declare hidden states (ConfigError).
        self.backend = states_backend(backend)
        self.cfg = cfg.model_copy(update={"paraphrases": False, "calibration": None,
                                          "heads": None, "cache": None, "screen": "off"})
        self.specs = unique_specs([replace(s, paraphrases=()) for s in specs], self.cfg)
        self.grounder = Grounder(backend, self.specs, self.cfg)
        self.store = store
        self.layers = tuple(layers)
        self.model_key = model_key(backend)
        self.question_scopes: frozenset[str] = frozenset(
            ("request", "response") if questions is True else (questions or ()))
        self.with_questions = bool(self.question_scopes)
        self.with_pairs = pairs
        self.with_pool = pool

    def asks(self, scope: str) -> bool:
        """Whether the questions of ``scope`` are asked (their answer states extracted)."""
        return scope in self.question_scopes

    def questions(self, scope: Scope) -> list[str]:
        """The question blocks asked of a scope, in spec order."""
        return [self.grounder.question_block(s, s.question) for s in self.specs
                if s.scope == scope]

    def _key(self, question: str, item: CorpusItem) -> str:
        return feature_key(self.model_key, self.grounder.template_version,
                           self.cfg.max_data_tokens, self.layers, question, item.request,
                           item.response)

    def keys(self, item: CorpusItem) -> list[str]:
        """The keys of an item's states: its prefix, then each question of its scope.

        Without questions of its scope, the prefix key alone (the same key either way: a
        store filled with questions serves a prefix-only run).
        """
        if not self.asks(item.scope):
            return [self._key(PREFIX, item)]
        return [self._key(q, item) for q in (PREFIX, *self.questions(item.scope))]

    def question_key(self, item: CorpusItem, block: str) -> str:
        """The key of the answer state of question ``block`` asked of ``item``.

        The same key whichever specs this extractor asks: one that asks a subset fills the
        keys a full one reads.
        """
        return self._key(block, item)

    def pair_key(self, item: CorpusItem) -> str:
        """The key of a request item's ``pair_prefix`` state."""
        return self._key(PAIR_PREFIX, item)

    def pool_key(self, item: CorpusItem) -> str:
        """The key of an item's ``pool`` state (stored with its prefix forward)."""
        return self._key(POOL, item)

    def state_key(self, item: CorpusItem, readout: str) -> str:
        """The key of an item's question-free state for ``readout``.

        ``prefix``, ``pool`` (both from the item's own prompt) or ``pair_prefix``.
        """
        if readout == "prefix":
            return self._key(PREFIX, item)
        if readout == "pool":
            return self.pool_key(item)
        if readout == "pair_prefix":
            return self.pair_key(item)
        raise ValueError(f"readout {readout!r} has no question-free state")

    def _wanted(self, item: CorpusItem) -> list[str]:
        return self.keys(item) + ([self.pool_key(item)] if self.with_pool else [])

    def run(self, items: Sequence[CorpusItem], progress: bool = True) -> int:
        """Extract what is not stored yet; returns how many items were forwarded."""
        # A store filled before pool states existed re-forwards its items once for them.
        todo = [it for it in items
                if len(self.store.has(want := self._wanted(it))) < len(want)]
        with _bar(len(todo), "features", progress) as bar:
            for chunk in _chunks(todo, ITEMS_PER_BATCH):
                reqs = [self._prompt(it) for it in chunk]
                outs = self.backend.true_false_states(reqs, self.layers)
                rows: dict[str, Feature] = {}
                for it, out in zip(chunk, outs, strict=True):
                    keys = self.keys(it)
                    rows[keys[0]] = Feature(out.prefix_state, 0.0, 0.0)
                    if self.with_pool:
                        rows[self.pool_key(it)] = Feature(out.pool_state, 0.0, 0.0)
                    if len(keys) == 1:  # prefix only: no answer state was asked for
                        continue
                    for k, s, st in zip(keys[1:], out.scores, out.answer_states, strict=True):
                        rows[k] = Feature(st, s.logprob_true, s.logprob_false)
                self.store.put(rows)
                bar.update(len(chunk))
        return len(todo) + (self._run_pairs(items, progress) if self.with_pairs else 0)

    def _prompt(self, item: CorpusItem) -> Any:
        req = self.grounder.prompts(item.request, item.response)
        # No suffix: the prefix forward alone, which yields the prefix state.
        return req if self.asks(item.scope) else replace(req, suffixes=())

    def _run_pairs(self, items: Sequence[CorpusItem], progress: bool) -> int:
        # The pair read is one short forward with no question: its own pass, so stores
        # filled before it existed gain it without a full re-extraction.
        reqs = [it for it in items if it.response is None]
        have = self.store.has([self.pair_key(it) for it in reqs])
        todo = [it for it in reqs if self.pair_key(it) not in have]
        with _bar(len(todo), "pair reads", progress) as bar:
            for chunk in _chunks(todo, ITEMS_PER_BATCH):
                outs = self.backend.true_false_states(
                    [self.grounder.request_end_prompt(it.request) for it in chunk], self.layers)
                self.store.put({self.pair_key(it): Feature(out.prefix_state, 0.0, 0.0)
                                for it, out in zip(chunk, outs, strict=True)})
                bar.update(len(chunk))
        return len(todo)


def _bar(total: int, desc: str, progress: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="item", disable=not progress or not total,
                file=sys.stderr, dynamic_ncols=True)


def _chunks(xs: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(xs), n):
        yield xs[i:i + n]


__all__ = ["LAYER_FRACTIONS", "POOL", "PREFIX", "Extractor", "Feature", "FeatureStore",
           "default_layers", "default_store_path", "feature_key", "model_key", "parse_layers",
           "unique_specs"]
