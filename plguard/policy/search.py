"""Symbolic search over a policy's Boolean structure, checked against its compiled circuit.

Two tools serve lint, cases and diff without enumerating 2^n worlds:

* :func:`forcing_cubes` walks the rule graph and proposes partial assignments ("cubes") that
  force a rule true or false whatever the other predicates are; a beam keeps only the
  smallest few at each node, so wide conjunctions of negated disjunctions stay tractable.
* The compiled circuit decides exactly: with the cube's predicates at 0/1 and every other
  predicate at 1/2, a query's probability is 1 (or 0) iff the cube forces it, and it is
  positive iff some world extends the cube. That gives verification, greedy minimisation,
  and a witness by self-reduction (fix one predicate at a time, keep the branch that stays
  satisfiable) when the beam comes back empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from plguard.policy.compiled import CompiledProgram
from plguard.policy.syntax import And, Atom, Const, Formula, Not, Or, Program

Cube = frozenset[tuple[str, bool]]
BEAM = 32


def _key(c: Cube) -> tuple[int, list[tuple[str, bool]]]:
    return len(c), sorted(c)


def _prune(cubes: Iterable[Cube], beam: int) -> list[Cube]:
    """Smallest ``beam`` cubes, without duplicates or supersets of kept ones."""
    kept: list[Cube] = []
    for c in sorted(set(cubes), key=_key):
        if not any(k <= c for k in kept):
            kept.append(c)
            if len(kept) >= beam:
                break
    return kept


def _consistent(c: Cube) -> bool:
    names = [n for n, _ in c]
    return len(names) == len(set(names))


def forcing_cubes(program: Program, query: str, value: bool, beam: int = BEAM) -> list[Cube]:
    """Partial assignments that force ``query`` to ``value``, smallest first (a beam)."""
    defs = program.definitions()
    memo: dict[tuple[str, bool], list[Cube]] = {}

    def head(name: str, v: bool) -> list[Cube]:
        if (name, v) not in memo:
            memo[(name, v)] = form(Or(tuple(r.body for r in defs[name])), v)
        return memo[(name, v)]

    def cross(parts: Sequence[list[Cube]]) -> list[Cube]:
        acc: list[Cube] = [frozenset()]
        # Most constrained first: fewer alternatives keep the beam honest.
        for part in sorted(parts, key=len):
            acc = _prune((a | b for a in acc for b in part if _consistent(a | b)), beam)
            if not acc:
                break
        return acc

    def form(f: Formula, v: bool) -> list[Cube]:
        if isinstance(f, Atom):
            return head(f.name, v) if f.name in defs else [frozenset({(f.name, v)})]
        if isinstance(f, Const):
            return [frozenset()] if f.value == v else []
        if isinstance(f, Not):
            return form(f.arg, not v)
        parts = [form(g, v) for g in f.args]
        # An And is true (an Or false) only if every part is; otherwise one part suffices.
        if isinstance(f, And) == v:
            return cross(parts)
        return _prune((c for p in parts for c in p), beam)

    return head(query, value) if query in defs else [frozenset({(query, value)})]


class Oracle:
    """Exact questions about queries of a compiled program, answered through its circuit."""

    def __init__(self, compiled: CompiledProgram, facts: Sequence[str] | None = None) -> None:
        self.compiled = compiled
        self.facts = tuple(facts if facts is not None else compiled.facts)
        # 2^-n is the smallest world weight at 1/2 each; stay well above float noise.
        self.tol = min(1e-12, 2.0 ** -(len(self.facts) + 3))

    def probs(self, query: str, cubes: Sequence[Mapping[str, bool]]) -> np.ndarray:
        """P(query) for each partial assignment, free predicates at 1/2."""
        col = {f: i for i, f in enumerate(self.compiled.facts)}
        m = np.full((max(1, len(cubes)), len(self.compiled.facts)), 0.5)
        for i, cube in enumerate(cubes):
            for name, val in cube.items():
                m[i, col[name]] = 1.0 if val else 0.0
        return self.compiled.evaluate_matrix(m)[query][: len(cubes)]

    def forces(self, query: str, cube: Mapping[str, bool], value: bool) -> bool:
        """Whether every world extending ``cube`` gives ``query`` the truth ``value``."""
        p = float(self.probs(query, [cube])[0])
        return p >= 1 - self.tol if value else p <= self.tol

    def satisfiable(self, query: str, cube: Mapping[str, bool] | None = None) -> bool:
        """Whether some world extending ``cube`` makes ``query`` true."""
        return float(self.probs(query, [dict(cube or {})])[0]) > self.tol

    def witness(self, query: str, fixed: Mapping[str, bool] | None = None,
                prefer: bool = False) -> dict[str, bool] | None:
        """A full assignment of ``facts`` making ``query`` true (``prefer`` tried first)."""
        cube = dict(fixed or {})
        if not self.satisfiable(query, cube):
            return None
        for f in self.facts:
            if f in cube:
                continue
            cube[f] = prefer
            if not self.satisfiable(query, cube):
                cube[f] = not prefer
        return cube

    def minimise(self, query: str, cube: Mapping[str, bool], value: bool) -> dict[str, bool]:
        """Drop values from a forcing ``cube`` while it still forces ``query`` to ``value``."""
        current = dict(cube)
        changed = True
        while changed:
            changed = False
            trials = [{k: v for k, v in current.items() if k != drop} for drop in current]
            if not trials:
                break
            p = self.probs(query, trials)
            ok = p >= 1 - self.tol if value else p <= self.tol
            if ok.any():
                current = trials[int(np.flatnonzero(ok)[0])]
                changed = True
        return current


def minimal_case(program: Program, oracle: Oracle, query: str, value: bool,
                 beam: int = BEAM) -> dict[str, bool] | None:
    """A smallest-found partial assignment forcing ``query`` to ``value``; None if impossible.

    Candidates come from the rule structure; each is checked and minimised on the circuit.
    When the beam yields nothing valid, a circuit witness is minimised instead.
    """
    candidates = [dict(c) for c in forcing_cubes(program, query, value, beam)]
    if candidates:
        p = oracle.probs(query, candidates)
        ok = p >= 1 - oracle.tol if value else p <= oracle.tol
        candidates = [c for c, good in zip(candidates, ok, strict=True) if good]
    if not candidates:
        world = oracle.witness(query) if value else _false_witness(oracle, query)
        if world is None:
            return None
        candidates = [world]
    best = [oracle.minimise(query, c, value) for c in candidates[:8]]
    return min(best, key=lambda c: (len(c), sorted(c.items())))


def _false_witness(oracle: Oracle, query: str) -> dict[str, bool] | None:
    cube: dict[str, bool] = {}
    if oracle.forces(query, cube, True):
        return None
    for f in oracle.facts:
        cube[f] = False
        if oracle.forces(query, cube, True):
            cube[f] = True
    return cube
