"""Expected outcomes of a policy: load and run ``cases.yaml``, and generate new cases.

``cases.yaml`` holds ``cases:`` (or a bare list), each with ``given`` (predicate to
probability), ``expect`` (query to probability) and optionally ``name``, ``default`` (the
probability of predicates not in ``given``; 0 unless set, top-level ``default`` too) and
``tol`` (1e-9 unless set)::

    cases:
      - name: harmful request answered with instructions
        given: {request_is_harmful: 1, response_provides_harmful_instructions: 1}
        expect: {unsafe_compliance: 1}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from plguard.errors import PolicyCaseError, PolicyError, did_you_mean
from plguard.policy.case import DEFAULT_TOL, Case
from plguard.policy.core import Policy
from plguard.policy.located_yaml import LocDict, LocList, load_yaml, pos_of
from plguard.policy.search import Oracle, minimal_case

_CASE_FIELDS = ("name", "given", "expect", "default", "tol")


@dataclass(frozen=True, slots=True)
class CaseResult:
    """A case and what the policy computed for it."""

    case: Case
    actual: Mapping[str, float]
    failures: tuple[tuple[str, float, float], ...] = ()  # (query, expected, actual)

    @property
    def passed(self) -> bool:
        """Whether every expectation held."""
        return not self.failures


@dataclass(frozen=True, slots=True)
class CasesReport:
    """The outcome of running a bundle's cases."""

    policy: str
    results: tuple[CaseResult, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """Whether every case passed."""
        return all(r.passed for r in self.results)

    @property
    def n_failed(self) -> int:
        """How many cases failed."""
        return sum(not r.passed for r in self.results)


def load_cases(path: Path, predicates: Sequence[str], queries: Sequence[str]) -> tuple[Case, ...]:
    """Parse and check a cases file against the policy's predicate and query names."""
    file = str(path)
    data = load_yaml(path)
    top_default = 0.0
    if data is None:
        return ()
    if isinstance(data, LocDict):
        unknown = [k for k in data if k not in ("cases", "default")]
        if unknown:
            line, col = data.pos(unknown[0])
            raise PolicyError(f"unknown key '{unknown[0]}' in cases file; use 'cases' and "
                              "optionally 'default'", file=file, line=line, col=col,
                              name=str(unknown[0]))
        top_default = _prob(data.get("default", 0.0), file, *data.pos("default"), "default")
        data = data.get("cases") or LocList()
    if not isinstance(data, list):
        raise PolicyError("cases file must be a list of cases or 'cases:' holding one",
                          file=file, line=1, col=1)
    out = []
    for i, entry in enumerate(data):
        line, col = pos_of(data, i)
        if not isinstance(entry, LocDict):
            raise PolicyError("each case must be a mapping with 'given' and 'expect'",
                              file=file, line=line, col=col)
        out.append(_case(entry, i, file, top_default, predicates, queries))
    return tuple(out)


def _case(entry: LocDict, i: int, file: str, top_default: float, predicates: Sequence[str],
          queries: Sequence[str]) -> Case:
    for k in entry:
        if k not in _CASE_FIELDS:
            line, col = entry.pos(k)
            raise PolicyError(f"unknown case field '{k}'{did_you_mean(str(k), _CASE_FIELDS)}",
                              file=file, line=line, col=col, name=str(k))
    name = str(entry.get("name", f"case {i + 1}"))
    given = _named_probs(entry, "given", predicates, "predicate", file)
    expect = _named_probs(entry, "expect", queries, "query", file)
    if not expect:
        line, col = entry.pos()
        raise PolicyError(f"case '{name}' expects nothing; add 'expect: {{query: value}}'",
                          file=file, line=line, col=col)
    default = _prob(entry.get("default", top_default), file, *entry.pos("default"), "default")
    tol = entry.get("tol", DEFAULT_TOL)
    if isinstance(tol, bool) or not isinstance(tol, int | float) or tol < 0:
        raise PolicyError(f"tol must be a non-negative number, got {tol!r}", file=file,
                          line=entry.pos("tol")[0], col=entry.pos("tol")[1])
    return Case(name=name, given=given, expect=expect, default=default, tol=float(tol),
                file=file, line=entry.pos()[0] or 0)


def _named_probs(entry: LocDict, key: str, known: Sequence[str], what: str,
                 file: str) -> dict[str, float]:
    raw = entry.get(key) or {}
    if not isinstance(raw, Mapping):
        line, col = entry.pos(key)
        raise PolicyError(f"'{key}' must map {what} names to probabilities", file=file,
                          line=line, col=col)
    out = {}
    for name, value in raw.items():
        line, col = pos_of(raw, name)
        if name not in known:
            raise PolicyError(f"unknown {what} '{name}' in '{key}'{did_you_mean(str(name), known)}",
                              file=file, line=line, col=col, name=str(name))
        out[str(name)] = _prob(value, file, line, col, str(name))
    return out


def _prob(value: Any, file: str, line: int | None, col: int | None, name: str) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise PolicyError(f"value of '{name}' must be a probability in [0, 1] (or "
                          f"true/false), got {value!r}", file=file, line=line, col=col,
                          name=name)
    return float(value)


def run_cases(policy: Policy, cases: Sequence[Case] | None = None) -> CasesReport:
    """Evaluate each case with ProbLog's evaluator and compare with its expectations."""
    results = []
    for case in policy.cases if cases is None else cases:
        probs = {p: case.given.get(p, case.default) for p in policy.predicate_names}
        actual = dict(policy.evaluate(probs).probs)
        failures = tuple((q, e, actual[q]) for q, e in case.expect.items()
                         if abs(actual[q] - e) > case.tol)
        results.append(CaseResult(case=case, actual=actual, failures=failures))
    return CasesReport(policy=policy.id, results=tuple(results))


def check_cases(policy: Policy) -> CasesReport:
    """:func:`run_cases`, raising :class:`PolicyCaseError` on the first failing case."""
    report = run_cases(policy)
    for r in report.results:
        if r.failures:
            q, e, a = r.failures[0]
            raise PolicyCaseError(f"case '{r.case.name}': expected {q} = {e:g}, got {a:.6g}",
                                  file=r.case.file, line=r.case.line, name=q)
    return report


@dataclass(frozen=True, slots=True)
class GeneratedCase:
    """A minimal partial assignment that forces ``query`` to ``value``."""

    query: str
    value: bool
    given: Mapping[str, int]

    def as_case(self) -> dict[str, Any]:
        """The case as a cases.yaml entry."""
        verb = "holds" if self.value else "fails"
        return {"name": f"{self.query} {verb} (minimal)", "given": dict(self.given),
                "expect": {self.query: int(self.value)}}


def generate_cases(policy: Policy, queries: Sequence[str] | None = None) -> list[GeneratedCase]:
    """For each query, a minimal assignment making it true and one making it false.

    Each assignment forces the query whatever the unlisted predicates are, so it holds
    under any ``default``. A query that can never be true (or false) gets no case for that
    value (lint reports it).
    """
    oracle = Oracle(policy.compiled)
    out = []
    for q in queries or policy.queries:
        if q not in policy.queries:
            raise PolicyError(f"unknown query '{q}'{did_you_mean(q, policy.queries)}", name=q)
        for value in (True, False):
            cube = minimal_case(policy.program, oracle, q, value)
            if cube is not None:
                given = {p: int(cube[p]) for p in policy.predicate_names if p in cube}
                out.append(GeneratedCase(query=q, value=value, given=given))
    return out


def cases_yaml(cases: Sequence[GeneratedCase]) -> str:
    """YAML text of generated cases, ready to paste under ``cases:``."""
    body = [c.as_case() for c in cases]
    return yaml.safe_dump({"cases": body}, sort_keys=False, default_flow_style=None, width=100)
