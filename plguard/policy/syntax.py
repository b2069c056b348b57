"""The propositional rule language of ``policy.pl``, parsed into a small formula tree.

plguard policies are propositional: every atom has arity 0. We parse ``policy.pl`` with
ProbLog's own parser (so the syntax is exactly ProbLog's) and convert its terms into the
frozen records below. The lint, explain, cases and diff tools work on these records; the
probabilities always come from ProbLog's compiled circuit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from plguard.errors import PolicyError

_IDENT = re.compile(r"[a-z][A-Za-z0-9_]*\Z")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FALSE_ATOMS = frozenset({"fail", "false"})
# Names ProbLog treats specially; a predicate or rule with one of them would silently misbehave.
RESERVED = frozenset({"true", "fail", "false", "query", "evidence", "call", "not", "is"})


@dataclass(frozen=True, slots=True)
class Atom:
    """A reference to a predicate or a derived rule."""

    name: str
    line: int = field(default=0, compare=False)
    col: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Not:
    r"""Negation as failure (``\+``)."""

    arg: Formula


@dataclass(frozen=True, slots=True)
class And:
    """Conjunction (``,``)."""

    args: tuple[Formula, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """Disjunction (``;``)."""

    args: tuple[Formula, ...]


@dataclass(frozen=True, slots=True)
class Const:
    """``true`` or ``fail``."""

    value: bool


Formula = Atom | Not | And | Or | Const


@dataclass(frozen=True, slots=True)
class Rule:
    """One clause ``head :- body.`` with the head's position in policy.pl."""

    head: str
    body: Formula
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class QueryDecl:
    """One ``query(name).`` line."""

    name: str
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class Program:
    """The rules and queries of one policy.pl, in file order."""

    rules: tuple[Rule, ...]
    queries: tuple[QueryDecl, ...]

    def definitions(self) -> dict[str, tuple[Rule, ...]]:
        """Rule head to its clauses, in file order."""
        out: dict[str, list[Rule]] = {}
        for r in self.rules:
            out.setdefault(r.head, []).append(r)
        return {k: tuple(v) for k, v in out.items()}


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a 0-based character offset into ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def word_at(text: str, line: int, col: int) -> str | None:
    """The identifier at or just after ``line:col`` (used to name a parse error's token)."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    m = _WORD.search(lines[line - 1], max(0, col - 1))
    return m.group(0) if m else None


def location_of(location: Any, text: str) -> tuple[int | None, int | None]:
    """Map a ProbLog location to (line, col) in ``text``.

    ProbLog reports either ``(file, line, col)`` (parse errors) or ``(file, offset)``
    (terms), sometimes a bare offset; we accept all three.
    """
    if isinstance(location, tuple):
        if len(location) == 3 and location[1] is not None:
            return int(location[1]), int(location[2])
        if len(location) == 2 and isinstance(location[1], int):
            return line_col(text, location[1])
        return None, None
    if isinstance(location, int):
        return line_col(text, location)
    return None, None


def is_identifier(name: str) -> bool:
    """Whether ``name`` is usable as a propositional ProbLog atom."""
    return bool(_IDENT.match(name)) and name not in RESERVED


def parse_program(text: str, file: str) -> Program:
    """Parse policy.pl text; every problem is a :class:`PolicyError` with file:line:col."""
    from problog.errors import ProbLogError
    from problog.logic import Clause, Term
    from problog.program import PrologString

    rules: list[Rule] = []
    queries: list[QueryDecl] = []

    def where(term: Any) -> tuple[int | None, int | None]:
        return location_of(getattr(term, "location", None), text)

    try:
        for clause in PrologString(text):
            if isinstance(clause, Clause):
                head = clause.head
                line, col = where(head)
                if head.functor == "_directive":
                    line, col = where(clause)
                    raise PolicyError("directives (':- ...') are not supported in policy.pl",
                                      file=file, line=line, col=col)
                _check_atom(head, file, line, col, what="rule head")
                rules.append(Rule(head.functor, _convert(clause.body, text, file),
                                  line or 0, col or 0))
            elif isinstance(clause, Term) and clause.functor == "query" and clause.arity == 1:
                target = clause.args[0]
                line, col = where(clause)
                _check_atom(target, file, line, col, what="query")
                queries.append(QueryDecl(str(target.functor), line or 0, col or 0))
            elif isinstance(clause, Term) and type(clause) is Term:
                line, col = where(clause)
                loc = getattr(clause, "location", None)
                if isinstance(loc, tuple) and len(loc) == 2 and isinstance(loc[1], int):
                    # A probabilistic fact's offset is its '::'; point at the name instead.
                    start = text.find(str(clause.functor), loc[1])
                    if start >= 0:
                        line, col = line_col(text, start)
                raise PolicyError(
                    f"'{clause}' is a fact; policy.pl holds rules and query(...) lines only. "
                    "Declare grounded predicates in predicates.yaml (the loader adds their "
                    "probabilistic facts)",
                    file=file, line=line, col=col, name=str(clause.functor))
            else:
                line, col = where(clause)
                raise PolicyError(f"unsupported construct in policy.pl: {clause}",
                                  file=file, line=line, col=col)
    except ProbLogError as exc:
        line, col = location_of(getattr(exc, "location", None), text)
        msg = str(exc)
        # ProbLog appends its own ' at L:C.'; we print the location in front instead.
        msg = re.sub(r"\s+at \d+:\d+\.?$", "", msg)
        raise PolicyError(f"ProbLog syntax error: {msg}", file=file, line=line, col=col,
                          name=word_at(text, line, col) if line and col else None) from None
    return Program(tuple(rules), tuple(queries))


def _check_atom(term: Any, file: str, line: int | None, col: int | None, what: str) -> None:
    from problog.logic import Term

    if not isinstance(term, Term) or term.arity != 0 or term.probability is not None:
        raise PolicyError(f"{what} '{term}' must be a plain atom: plguard policies are "
                          "propositional (no arguments, no probabilities)",
                          file=file, line=line, col=col, name=str(getattr(term, "functor", term)))
    if not is_identifier(str(term.functor)):
        raise PolicyError(f"{what} '{term}' is not a usable name (lowercase identifier, "
                          f"not one of {sorted(RESERVED)})",
                          file=file, line=line, col=col, name=str(term.functor))


def _convert(term: Any, text: str, file: str) -> Formula:
    from problog.logic import And as PAnd
    from problog.logic import Not as PNot
    from problog.logic import Or as POr

    line, col = location_of(getattr(term, "location", None), text)
    if isinstance(term, PAnd):
        return And(_flatten(term, PAnd, text, file))
    if isinstance(term, POr):
        return Or(_flatten(term, POr, text, file))
    if isinstance(term, PNot):
        return Not(_convert(term.args[0], text, file))
    functor = str(getattr(term, "functor", term))
    if getattr(term, "arity", None) == 0 and functor == "true":
        return Const(True)
    if getattr(term, "arity", None) == 0 and functor in _FALSE_ATOMS:
        return Const(False)
    _check_atom(term, file, line, col, what="body atom")
    return Atom(functor, line or 0, col or 0)


def _flatten(term: Any, kind: type, text: str, file: str) -> tuple[Formula, ...]:
    out: list[Formula] = []
    for side in (term.op1, term.op2):
        if isinstance(side, kind):
            out.extend(_flatten(side, kind, text, file))
        else:
            out.append(_convert(side, text, file))
    return tuple(out)


def atoms(f: Formula) -> list[Atom]:
    """All atom occurrences in ``f``, left to right."""
    if isinstance(f, Atom):
        return [f]
    if isinstance(f, Not):
        return atoms(f.arg)
    if isinstance(f, And | Or):
        return [a for g in f.args for a in atoms(g)]
    return []


def render(f: Formula, rename: dict[str, str] | None = None) -> str:
    """ProbLog text of ``f``; ``rename`` maps atom names (to build auxiliary programs)."""
    rename = rename or {}
    if isinstance(f, Atom):
        return rename.get(f.name, f.name)
    if isinstance(f, Not):
        return f"\\+({render(f.arg, rename)})"
    if isinstance(f, And):
        return "(" + ", ".join(render(g, rename) for g in f.args) + ")"
    if isinstance(f, Or):
        return "(" + "; ".join(render(g, rename) for g in f.args) + ")"
    return "true" if f.value else "fail"
