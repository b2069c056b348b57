"""The :class:`Policy`: a validated bundle whose program is compiled once, on first use."""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from plguard.categories import policy_codes
from plguard.errors import InputError, did_you_mean
from plguard.policy.case import Case
from plguard.policy.compiled import CompiledProgram
from plguard.policy.syntax import Program
from plguard.types import PolicyResult, PredicateSpec

UNSAFE = "unsafe_compliance"
# Unsafe whatever the request: the answer's content alone (a harmful passage after an
# innocent-looking request, injected text, a drifting upstream). Its own prefix and
# threshold: it is a different question from the paper's unsafe compliance.
CONTENT = "unsafe_content"
OVER_REFUSAL = "over_refusal"
SAFE = "safe_response"
AGGREGATES = (UNSAFE, OVER_REFUSAL, SAFE)
_SLACK = 1e-12  # float noise tolerated at the ends of [0, 1]


def instructions_text(text: str) -> str:
    """The natural-language policy a model should read: policy.md before its first ``##``.

    Bundles document themselves for people in later sections (how the policy is checked,
    lint notes); those describe the ProbLog program, not the behaviour asked of the model,
    and would only lengthen every prompt.
    """
    head = re.split(r"(?m)^## ", text, maxsplit=1)[0]
    return head.strip() or text.strip()


def rule_kind(query: str) -> str | None:
    """The kind of a query: ``'unsafe'``, ``'content'``, ``'over_refusal'``, ``'aggregate'``.

    None for a query that is none of these (a helper a bundle chose to query).
    """
    if query in AGGREGATES:
        return "aggregate"
    if query.startswith(CONTENT + "_"):
        return "content"
    if query.startswith(UNSAFE + "_"):
        return "unsafe"
    if query.startswith(OVER_REFUSAL + "_"):
        return "over_refusal"
    return None


class Policy:
    """A loaded policy bundle. Build it with :func:`plguard.policy.load_policy`.

    Attributes:
        name: the bundle's folder name.
        path: the bundle folder.
        id: ``name@`` and the first 8 hex digits of the program text's SHA-256.
        text: the natural-language policy (policy.md).
        predicates: the declared predicates, in predicates.yaml order.
        queries: every query, in program order.
        unsafe_rules: rule-level ``unsafe_compliance_*`` queries (the aggregate if none).
        over_refusal_rules: rule-level ``over_refusal_*`` queries (the aggregate if none).
        content_rules: ``unsafe_content_*`` queries: unsafe whatever the request, compared
            with ``thresholds.content`` (no aggregate; empty when the bundle has none).
        priors: declared prior probabilities, for tools that need gold-ish values.
        program: the parsed rules and queries.
        source: the ProbLog program compiled (policy.pl plus the injected facts).
        cases: the expected outcomes from cases.yaml.
        categories: unsafe rule -> its hazard category codes (categories.yaml; empty when
            the bundle has none), see :mod:`plguard.categories`.
        category_codes: every code the categories name, in taxonomy order.
    """

    @property
    def instructions(self) -> str:
        """The policy text that prompts show a model (see :func:`instructions_text`)."""
        return instructions_text(self.text)

    def __init__(self, *, name: str, path: Path, text: str, predicates: Sequence[PredicateSpec],
                 priors: Mapping[str, float], program: Program, user_program: str,
                 cases: Sequence[Case] = (),
                 predicate_pos: Mapping[str, tuple[int, int]] | None = None,
                 backend: str = "auto",
                 categories: Mapping[str, Sequence[str]] | None = None) -> None:
        self.name = name
        self.path = path
        self.text = text
        self.predicates = tuple(predicates)
        self.priors = dict(priors)
        self.program = program
        self.user_program = user_program
        # Facts go after the user's text so ProbLog offsets and lines map onto policy.pl as is.
        facts = "".join(f"0.5::{p.name}.\n" for p in self.predicates)
        self.source = f"{user_program.rstrip()}\n\n% injected by plguard from predicates.yaml\n" \
                      f"{facts}"
        self.id = f"{name}@{hashlib.sha256(self.source.encode()).hexdigest()[:8]}"
        self.queries = tuple(q.name for q in program.queries)
        self.cases = tuple(cases)
        self.predicate_pos = dict(predicate_pos or {})
        self.backend = backend
        self.unsafe_rules = self._rules("unsafe", UNSAFE)
        self.over_refusal_rules = self._rules("over_refusal", OVER_REFUSAL)
        self.content_rules = tuple(q for q in self.queries if rule_kind(q) == "content")
        self.categories = {r: tuple(c) for r, c in (categories or {}).items()}
        self.category_codes = policy_codes(self.categories)
        self._compiled: CompiledProgram | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Policy({self.id!r}, {len(self.predicates)} predicates, " \
               f"{len(self.queries)} queries)"

    def _rules(self, kind: str, aggregate: str) -> tuple[str, ...]:
        rules = tuple(q for q in self.queries if rule_kind(q) == kind)
        if rules:
            return rules
        return (aggregate,) if aggregate in self.queries else ()

    @property
    def predicate_names(self) -> tuple[str, ...]:
        """Declared predicate names, in predicates.yaml order."""
        return tuple(p.name for p in self.predicates)

    def predicate(self, name: str) -> PredicateSpec:
        """The spec of one predicate; KeyError with a hint if unknown."""
        for p in self.predicates:
            if p.name == name:
                return p
        raise KeyError(f"no predicate '{name}' in policy {self.name}"
                       f"{did_you_mean(name, self.predicate_names)}")

    @property
    def compiled(self) -> CompiledProgram:
        """The compiled program (compiled on first use, then cached)."""
        if self._compiled is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = CompiledProgram(
                        self.source, self.predicate_names, file=str(self.path / "policy.pl"),
                        user_text=self.user_program, backend=self.backend)
        return self._compiled

    # -- evaluation -------------------------------------------------------------------------

    def evaluate(self, probs: Mapping[str, float]) -> PolicyResult:
        """Every query's probability for one example, on the circuit compiled once.

        Weighted model counting over the flattened SDD (see :mod:`.compiled`); it agrees
        with :meth:`evaluate_problog` within 1e-9 and is tested to.

        Args:
            probs: P(True) of every declared predicate; extra keys are ignored.

        Raises:
            InputError: a declared predicate is missing, not a number, or outside [0, 1].
        """
        result = self.compiled.evaluate_one(self._check_probs(probs))
        return PolicyResult(policy=self.id, probs={q: result[q] for q in self.queries})

    def evaluate_problog(self, probs: Mapping[str, float]) -> PolicyResult:
        """:meth:`evaluate` through ProbLog's own ``evaluate(weights=...)`` (the reference)."""
        result = self.compiled.evaluate(self._check_probs(probs))
        return PolicyResult(policy=self.id, probs={q: result[q] for q in self.queries})

    def evaluate_batch(self, probs: Sequence[Mapping[str, float]]) -> list[PolicyResult]:
        """:meth:`evaluate` for many examples at once (vectorised over the circuit)."""
        if not probs:
            return []
        names = self.predicate_names
        matrix = np.array([[self._check_probs(p, row=i)[n] for n in names]
                           for i, p in enumerate(probs)], dtype=np.float64)
        out = self.compiled.evaluate_matrix(matrix)
        return [PolicyResult(policy=self.id, probs={q: float(out[q][i]) for q in self.queries})
                for i in range(len(probs))]

    def evaluate_matrix(self, matrix: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Every query's probability for each row of ``matrix``.

        Args:
            matrix: shape (examples, len(names)), P(True) per predicate.
            names: the predicate of each column; must cover every declared predicate.

        Returns:
            Query name to a float64 vector with one probability per row, in query order.
        """
        m = np.asarray(matrix, dtype=np.float64)
        names = list(names)
        if m.ndim != 2 or m.shape[1] != len(names):
            raise InputError(f"matrix must be 2-D with one column per name; got shape "
                             f"{m.shape} for {len(names)} names")
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InputError(f"predicate '{dup}' names more than one column")
        index = {n: i for i, n in enumerate(names)}
        known = set(self.predicate_names)
        cols = []
        for p in self.predicate_names:
            if p not in index:
                raise InputError(f"no column for predicate '{p}' of policy {self.name}"
                                 f"{did_you_mean(p, [n for n in names if n not in known])}")
            col = m[:, index[p]]
            bad = ~np.isfinite(col) | (col < -_SLACK) | (col > 1 + _SLACK)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise InputError(f"probability of predicate '{p}' must be in [0, 1]; "
                                 f"row {row} has {col[row]!r}")
            cols.append(np.clip(col, 0.0, 1.0))
        ordered = np.stack(cols, axis=1) if cols else np.zeros((m.shape[0], 0))
        out = self.compiled.evaluate_matrix(ordered)
        return {q: out[q] for q in self.queries}

    def _check_probs(self, probs: Mapping[str, float], row: int | None = None) -> dict[str, float]:
        where = f" (example {row})" if row is not None else ""
        if not isinstance(probs, Mapping):
            raise InputError(f"predicate probabilities must be a mapping{where}, "
                             f"got {type(probs).__name__}")
        out: dict[str, float] = {}
        for p in self.predicate_names:
            if p not in probs:
                raise InputError(f"missing probability for predicate '{p}' of policy "
                                 f"{self.name}{where}{did_you_mean(p, map(str, probs))}")
            v = probs[p]
            if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
                raise InputError(f"probability of predicate '{p}' must be a number{where}, "
                                 f"got {v!r}")
            x = float(v)
            if not math.isfinite(x) or x < -_SLACK or x > 1 + _SLACK:
                raise InputError(f"probability of predicate '{p}' must be in [0, 1]{where}, "
                                 f"got {v!r}")
            out[p] = min(1.0, max(0.0, x))
        return out
