"""``plguard policy lint``: errors that stop a bundle from loading, and warnings about its logic.

Errors: anything :func:`load_policy` rejects (parse errors, undefined atoms and queries,
malformed files), a missing ``unsafe_compliance`` aggregate, an aggregate that is defined
but not queried. Warnings: declared but unused predicates; response predicates without a
``windows:`` rule for long responses; queries that are false (or true)
in every world; queries no response predicate can change; a world where the unsafe and
over-refusal aggregates hold together; an aggregate that is not the disjunction of its
rule-level queries. Semantic checks are exact: they ask the compiled circuit, never 2^n.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from plguard.errors import PolicyError
from plguard.policy.bundle import load_policy
from plguard.policy.compiled import CompiledProgram
from plguard.policy.core import AGGREGATES, OVER_REFUSAL, SAFE, UNSAFE, Policy
from plguard.policy.search import Oracle
from plguard.policy.syntax import Atom, Formula, Not, Or, atoms, render

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One lint result."""

    severity: Severity
    code: str
    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    name: str | None = None
    example: Mapping[str, int] | None = None  # a world showing the problem, when one exists

    def render(self) -> str:
        """``file:line:col: severity [code] message``."""
        loc = ":".join(str(x) for x in (self.file, self.line, self.col) if x is not None)
        text = f"{loc + ': ' if loc else ''}{self.severity} [{self.code}] {self.message}"
        if self.example:
            shown = ", ".join(f"{k}={v}" for k, v in self.example.items())
            text += f"\n    e.g. {shown} (all other predicates 0)"
        return text


@dataclass(frozen=True, slots=True)
class LintReport:
    """All findings for one bundle."""

    policy: str
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def errors(self) -> tuple[Finding, ...]:
        """Findings of severity error."""
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Findings of severity warning."""
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not self.errors


def lint(name_or_path: str | Path | Policy) -> LintReport:
    """Lint a bundle; never raises for bundle problems (they become error findings)."""
    if isinstance(name_or_path, Policy):
        policy = name_or_path
    else:
        try:
            policy = load_policy(name_or_path)
            policy.compiled  # noqa: B018 - compile errors are lint errors too
        except PolicyError as exc:
            return LintReport(str(name_or_path), (Finding(
                "error", "load", exc.message, exc.file, exc.line, exc.col, exc.name),))
    return LintReport(policy.id, tuple(_structure(policy) + _semantics(policy)))


def _pl(policy: Policy) -> str:
    return str(policy.path / "policy.pl")


def _structure(policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    defs = policy.program.definitions()
    if UNSAFE not in policy.queries:
        out.append(Finding("error", "missing-aggregate",
                           f"no query({UNSAFE}): every policy needs the unsafe-compliance "
                           "aggregate the decision is based on", _pl(policy), name=UNSAFE))
    for agg in AGGREGATES:
        if agg in defs and agg not in policy.queries:
            rule = defs[agg][0]
            out.append(Finding("error", "unqueried-aggregate",
                               f"aggregate '{agg}' is defined but not queried; add "
                               f"query({agg}).", _pl(policy), rule.line, rule.col, agg))
    used = {a.name for r in policy.program.rules for a in atoms(r.body)}
    used |= set(policy.queries)
    for p in policy.predicates:
        if p.name not in used:
            line, col = policy.predicate_pos.get(p.name, (None, None))
            out.append(Finding("warning", "unused-predicate",
                               f"predicate '{p.name}' is declared but no rule uses it (it is "
                               "still grounded, at a cost)", str(policy.path / "predicates.yaml"),
                               line, col, p.name))
        if p.scope == "response" and p.windows is None:
            line, col = policy.predicate_pos.get(p.name, (None, None))
            out.append(Finding("warning", "window-rule-unset",
                               f"response predicate '{p.name}' declares no 'windows:' rule; a "
                               "long response's windows are combined by 'max' (any window). "
                               "Set 'windows: max', 'all', 'first' or 'mean'",
                               str(policy.path / "predicates.yaml"), line, col, p.name))
    return out


def _semantics(policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    oracle = Oracle(policy.compiled)
    response = {p.name for p in policy.predicates if p.scope == "response"}
    qpos = {q.name: (q.line, q.col) for q in policy.program.queries}
    for q in policy.queries:
        line, col = qpos[q]
        if not oracle.satisfiable(q):
            out.append(Finding("warning", "constant-query", f"query '{q}' is false in every "
                               "world: no predicate values make it true", _pl(policy),
                               line, col, q))
        elif oracle.forces(q, {}, True):
            out.append(Finding("warning", "constant-query", f"query '{q}' is true in every "
                               "world", _pl(policy), line, col, q))
        elif not policy.compiled.support(q) & response:
            out.append(Finding("warning", "request-only-query",
                               f"query '{q}' depends on no response predicate, so no response "
                               "(nor any repair) can change it", _pl(policy), line, col, q))
    out += _aggregate_checks(policy)
    return out


def _aggregate_checks(policy: Policy) -> list[Finding]:
    """Overlap of the unsafe and over-refusal sides, and aggregates vs their rule lists."""
    defs = policy.program.definitions()
    unsafe_rules = [q for q in policy.queries if q.startswith(UNSAFE + "_")]
    over_rules = [q for q in policy.queries if q.startswith(OVER_REFUSAL + "_")]

    def side(agg: str, rules: list[str]) -> Formula | None:
        if agg in defs:
            return Atom(agg)
        return Or(tuple(Atom(r) for r in rules)) if rules else None

    checks: dict[str, Formula] = {}
    u, o = side(UNSAFE, unsafe_rules), side(OVER_REFUSAL, over_rules)
    if u is not None and o is not None:
        checks["plguard_lint_overlap"] = Or((_and(u, o),))
    expected: dict[str, Formula] = {}
    if UNSAFE in defs and unsafe_rules:
        expected[UNSAFE] = Or(tuple(Atom(r) for r in unsafe_rules))
    if OVER_REFUSAL in defs and over_rules:
        expected[OVER_REFUSAL] = Or(tuple(Atom(r) for r in over_rules))
    if SAFE in defs and u is not None:
        parts = [Not(u)] + ([Not(o)] if o is not None else [])
        expected[SAFE] = _and(*parts)
    for agg, formula in expected.items():
        checks[f"plguard_lint_mismatch_{agg}"] = Or((_and(Atom(agg), Not(formula)),
                                                    _and(Not(Atom(agg)), formula)))
    if not checks:
        return []
    extra = "".join(f"{h} :- {render(f)}.\nquery({h}).\n" for h, f in checks.items())
    aux = CompiledProgram(policy.source + extra, policy.predicate_names)
    oracle = Oracle(aux)
    out: list[Finding] = []
    for head in checks:
        world = oracle.witness(head)
        if world is None:
            continue
        example = {k: 1 for k, v in world.items() if v}
        if head == "plguard_lint_overlap":
            out.append(Finding("warning", "aggregate-overlap",
                               "unsafe compliance and over-refusal can both be true in the "
                               "same world", _pl(policy), name=UNSAFE, example=example))
        else:
            agg = head.removeprefix("plguard_lint_mismatch_")
            what = ("the negation of unsafe compliance and over-refusal" if agg == SAFE
                    else "the disjunction of its rule-level queries")
            rule = defs[agg][0]
            out.append(Finding("warning", "aggregate-mismatch",
                               f"aggregate '{agg}' is not equivalent to {what}", _pl(policy),
                               rule.line, rule.col, agg, example))
    return out


def _and(*parts: Formula) -> Formula:
    from plguard.policy.syntax import And

    return parts[0] if len(parts) == 1 else And(tuple(parts))
