"""Compile a ProbLog program once; evaluate it per example or for a whole batch at once.

ProbLog's own ``evaluate(weights=...)`` conjoins and walks the circuit in Python once per
query, about 1.4 ms per example on a 35-predicate policy. For batches we flatten the compiled
SDD once into index arrays and do weighted model counting for all rows with numpy: every
node's value is a vector over the batch. Because each variable's two literal weights sum to
one (p and 1 - p), the SDD needs no smoothing and a decision node's value is simply
``sum(prime * sub)`` over its elements.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plguard.errors import MissingDependencyError, PolicyError
from plguard.policy.syntax import location_of, word_at


@dataclass(frozen=True, slots=True)
class _Circuit:
    """A flattened SDD: rows of a (node x batch) value table, filled level by level."""

    n_nodes: int
    lit_rows: np.ndarray  # rows holding literals
    lit_cols: np.ndarray  # fact column of each literal
    lit_pos: np.ndarray  # True for a positive literal
    true_rows: np.ndarray
    levels: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]
    # per level: (target rows, segment starts, prime rows, sub rows), elements sorted by target
    roots: Mapping[str, int]  # query -> row; -1 false, -2 true
    supports: Mapping[str, frozenset[int]]  # query -> fact columns its SDD mentions


class CompiledProgram:
    """A ProbLog program over probabilistic facts, compiled once.

    Args:
        source: the full ProbLog program (rules, queries and one ``0.5::f.`` per fact).
        facts: the fact names, which define the column order of ``evaluate_matrix``.
        file: the user's file that ``source`` starts with, for error locations.
        user_text: the part of ``source`` the user wrote (it comes first, so offsets match).
        backend: ``"auto"`` (SDD, else d-DNNF), ``"sdd"`` or ``"ddnnf"``.
    """

    def __init__(self, source: str, facts: Sequence[str], *, file: str = "<program>",
                 user_text: str | None = None, backend: str = "auto") -> None:
        from problog.errors import ProbLogError
        from problog.formula import LogicFormula
        from problog.logic import Term
        from problog.program import PrologString

        self.facts = tuple(facts)
        self._col = {f: i for i, f in enumerate(self.facts)}
        self._lock = threading.Lock()  # ProbLog's evaluator mutates shared state
        self.backend = _pick_backend(backend)
        text = source if user_text is None else user_text
        try:
            ground = LogicFormula.create_from(PrologString(source), label_all=True)
            # An atom node carries the name of one label only (a query that is just the fact
            # renames it), so look facts up through the formula's name table instead.
            nodes = {f: _node_of(ground, Term(f)) for f in self.facts}
            self._engine = _evaluatable(self.backend).create_from(ground)
        except ProbLogError as exc:
            line, col = location_of(getattr(exc, "location", None), text)
            inside = line is not None and line <= text.count("\n") + 1
            raise PolicyError(
                f"ProbLog could not compile the policy: {exc}",
                file=file if inside else None, line=line if inside else None,
                col=col if inside else None,
                name=word_at(text, line, col) if inside and line and col else None,
            ) from None
        self.queries = tuple(str(q) for q, _ in self._engine.queries())
        # Weights are keyed by node index, not by Term: a rule that is just one fact takes
        # over that fact's name, and the compiled formula renumbers nodes.
        keys = {f: _engine_key(ground, self._engine, f, n) for f, n in nodes.items()
                if n is not None}
        self._keys = {f: k for f, k in keys.items() if k is not None}
        # Facts no query depends on are pruned; ProbLog raises KeyError for their weights.
        self.present = tuple(f for f in self.facts if f in self._keys)
        missing = set(getattr(self._engine, "atom2var", {})) - set(self._keys.values())
        if missing:
            # A variable we cannot weight would silently keep its placeholder 0.5.
            raise PolicyError("internal error: the compiled policy has facts plguard cannot "
                              f"re-weight (nodes {sorted(missing)})")
        self._circuit = (_flatten_sdd(self._engine, self._keys, self._col)
                         if self.backend == "sdd" else None)

    def evaluate(self, probs: Mapping[str, float]) -> dict[str, float]:
        """Every query's probability through ProbLog's own evaluator (the reference path)."""
        weights = {self._keys[f]: float(probs[f]) for f in self.present}
        with self._lock:
            result = self._engine.evaluate(weights=weights)
        return {str(k): float(v) for k, v in result.items()}

    def evaluate_one(self, probs: Mapping[str, float]) -> dict[str, float]:
        """Every query's probability for one example, on the flattened circuit if any.

        About 30x faster than ProbLog's evaluator on a 35-predicate policy.
        """
        if self._circuit is None:
            return self.evaluate(probs)
        row = np.array([[float(probs[f]) for f in self.facts]], dtype=np.float64)
        return {q: float(v[0]) for q, v in _wmc(self._circuit, row).items()}

    def evaluate_matrix(self, matrix: np.ndarray) -> dict[str, np.ndarray]:
        """Every query's probability for each row of ``matrix`` (columns = ``facts``)."""
        matrix = np.asarray(matrix, dtype=np.float64)
        if self._circuit is None:
            rows = [self.evaluate(dict(zip(self.facts, r, strict=True))) for r in matrix]
            return {q: np.array([r[q] for r in rows], dtype=np.float64) for q in self.queries}
        return _wmc(self._circuit, matrix)

    def support(self, query: str) -> frozenset[str]:
        """The facts a query's compiled circuit mentions (for a canonical SDD: depends on)."""
        if self._circuit is None:
            return frozenset(self.present)
        return frozenset(self.facts[c] for c in self._circuit.supports[query])


def _pick_backend(backend: str) -> str:
    if backend not in ("auto", "sdd", "ddnnf"):
        raise ValueError(f"unknown backend {backend!r}; use auto, sdd or ddnnf")
    if backend in ("auto", "sdd"):
        try:
            import pysdd  # noqa: F401
        except ImportError:
            if backend == "sdd":
                raise MissingDependencyError("pysdd", "SDD compilation of policies",
                                             "pip install pysdd") from None
            return "ddnnf"
        return "sdd"
    return backend


def _node_of(formula: Any, term: Any) -> int | None:
    """The formula node of a named fact; None when ProbLog pruned it."""
    try:
        node = formula.get_node_by_name(term)
    except KeyError:
        return None
    return node if isinstance(node, int) and node > 0 else None


def _evaluatable(backend: str) -> Any:
    from problog import get_evaluatable

    return get_evaluatable(backend)


def _engine_key(ground: Any, engine: Any, fact: str, node: int) -> int | None:
    """The compiled formula's node for a fact, found through any name the fact's node has.

    None when the compiled formula dropped it (no query's circuit needs it).
    """
    from problog.logic import Term

    names = [Term(fact)] + [n for n, k in ground.get_names() if k == node]
    for name in names:
        key = _node_of(engine, name)
        if key is not None:
            return key
    return None


def _flatten_sdd(engine: Any, keys: Mapping[str, int],
                 col_of: Mapping[str, int]) -> _Circuit | None:
    """Turn the SDD of every query into level-ordered index arrays; None if not applicable."""
    if not engine.get_constraint_inode().is_true():
        return None  # constraints (cycles, evidence) need normalisation: use ProbLog's path
    var_col: dict[int, int] = {}
    for name, node in keys.items():
        if node in engine.atom2var:
            var_col[engine.atom2var[node]] = col_of[name]
    if len(var_col) != len(engine.atom2var):
        return None  # variables that are not our facts: leave them to ProbLog's evaluator

    row_of: dict[int, int] = {}
    kind: list[tuple[Any, ...]] = []
    depth: list[int] = []

    def visit(node: Any) -> int:
        # Iterative post-order: SDDs of large policies are deep enough to hurt recursion.
        stack: list[tuple[Any, bool]] = [(node, False)]
        while stack:
            n, expanded = stack.pop()
            if n.id in row_of:
                continue
            if n.is_decision() and not expanded:
                stack.append((n, True))
                stack.extend((c, False) for pair in n.elements() for c in pair
                             if c.id not in row_of)
                continue
            row_of[n.id] = len(kind)
            if n.is_true():
                kind.append(("true",))
                depth.append(0)
            elif n.is_false():
                kind.append(("false",))
                depth.append(0)
            elif n.is_literal():
                kind.append(("lit", var_col[abs(n.literal)], n.literal > 0))
                depth.append(0)
            else:
                elems = [(row_of[p.id], row_of[s.id]) for p, s in n.elements()]
                kind.append(("dec", elems))
                depth.append(1 + max(max(depth[p], depth[s]) for p, s in elems))
        return row_of[node.id]

    roots: dict[str, int] = {}
    supports: dict[str, frozenset[int]] = {}
    for q, node in engine.queries():
        name = str(q)
        if node is None:
            roots[name], supports[name] = -1, frozenset()
        elif node == 0:
            roots[name], supports[name] = -2, frozenset()
        else:
            roots[name] = visit(engine.get_inode(node))
            supports[name] = _support(roots[name], kind)

    lits = [(r, k[1], k[2]) for r, k in enumerate(kind) if k[0] == "lit"]
    levels = []
    for lvl in range(1, max(depth, default=0) + 1):
        elems = sorted((r, p, s) for r, k in enumerate(kind)
                       if k[0] == "dec" and depth[r] == lvl for p, s in k[1])
        targets = np.array(sorted({e[0] for e in elems}), dtype=np.intp)
        tgt = np.array([e[0] for e in elems], dtype=np.intp)
        starts = np.searchsorted(tgt, targets).astype(np.intp)
        levels.append((targets, starts, np.array([e[1] for e in elems], dtype=np.intp),
                       np.array([e[2] for e in elems], dtype=np.intp)))
    return _Circuit(
        n_nodes=len(kind),
        lit_rows=np.array([x[0] for x in lits], dtype=np.intp),
        lit_cols=np.array([x[1] for x in lits], dtype=np.intp),
        lit_pos=np.array([x[2] for x in lits], dtype=bool),
        true_rows=np.array([r for r, k in enumerate(kind) if k[0] == "true"], dtype=np.intp),
        levels=tuple(levels), roots=roots, supports=supports,
    )


def _support(root: int, kind: list[tuple[Any, ...]]) -> frozenset[int]:
    seen, stack, cols = {root}, [root], set()
    while stack:
        k = kind[stack.pop()]
        if k[0] == "lit":
            cols.add(k[1])
        elif k[0] == "dec":
            for pair in k[1]:
                for c in pair:
                    if c not in seen:
                        seen.add(c)
                        stack.append(c)
    return frozenset(cols)


def _wmc(c: _Circuit, matrix: np.ndarray) -> dict[str, np.ndarray]:
    batch = matrix.shape[0]
    values = np.zeros((c.n_nodes, batch), dtype=np.float64)
    if c.lit_rows.size:
        cols = matrix[:, c.lit_cols].T
        values[c.lit_rows] = np.where(c.lit_pos[:, None], cols, 1.0 - cols)
    values[c.true_rows] = 1.0
    for targets, starts, primes, subs in c.levels:
        values[targets] = np.add.reduceat(values[primes] * values[subs], starts, axis=0)
    out: dict[str, np.ndarray] = {}
    for q, row in c.roots.items():
        if row == -1:
            out[q] = np.zeros(batch)
        elif row == -2:
            out[q] = np.ones(batch)
        else:
            out[q] = values[row].copy()
    return out
