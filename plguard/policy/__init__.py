"""Policy bundles: loading, compile-once probabilistic reasoning, and vetting tools.

>>> from plguard.policy import load_policy
>>> policy = load_policy("minimal")
>>> result = policy.evaluate({p: 0.5 for p in policy.predicate_names})
>>> sorted(result.probs) == sorted(policy.queries)
True
"""

from plguard.policy.bounds import MAX_FREE_PREDICATES, Bounds, bounds, free_predicates
from plguard.policy.bundle import bundle_names, load_policy, resolve_bundle
from plguard.policy.cases import (
    Case,
    CaseResult,
    CasesReport,
    GeneratedCase,
    cases_yaml,
    check_cases,
    generate_cases,
    run_cases,
)
from plguard.policy.compiled import CompiledProgram
from plguard.policy.core import (
    AGGREGATES,
    CONTENT,
    OVER_REFUSAL,
    SAFE,
    UNSAFE,
    Policy,
    rule_kind,
)
from plguard.policy.diff import DecisionDiff, DiffReport, diff
from plguard.policy.explain import RuleExplanation, explain, explain_text
from plguard.policy.lint import Finding, LintReport, lint

__all__ = [
    "AGGREGATES",
    "CONTENT",
    "MAX_FREE_PREDICATES",
    "OVER_REFUSAL",
    "SAFE",
    "UNSAFE",
    "Bounds",
    "Case",
    "CaseResult",
    "CasesReport",
    "CompiledProgram",
    "DecisionDiff",
    "DiffReport",
    "Finding",
    "GeneratedCase",
    "LintReport",
    "Policy",
    "RuleExplanation",
    "bounds",
    "bundle_names",
    "cases_yaml",
    "check_cases",
    "diff",
    "explain",
    "explain_text",
    "free_predicates",
    "generate_cases",
    "lint",
    "load_policy",
    "resolve_bundle",
    "rule_kind",
    "run_cases",
]
