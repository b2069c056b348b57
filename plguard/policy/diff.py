"""``plguard policy diff A B``: where two policies decide differently.

Both programs are joined into one auxiliary ProbLog program (rule heads renamed apart), with
the decision at 0/1 facts and the default thresholds written as rules: refuse when some
unsafe rule holds, rewrite when none does but some over-refusal rule holds, else allow.
Predicates only one bundle declares are fixed false. For each pair of differing actions the
circuit says exactly which share of the 2^n assignments of the shared predicates lands
there (its probability with every predicate at 1/2) and gives an example by self-reduction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from plguard.config import Thresholds
from plguard.policy.compiled import CompiledProgram
from plguard.policy.core import Policy
from plguard.policy.search import Oracle
from plguard.policy.syntax import render

ACTIONS = ("refuse", "rewrite", "allow")


@dataclass(frozen=True, slots=True)
class DecisionDiff:
    """One kind of assignment on which the two policies act differently."""

    action_a: str
    action_b: str
    share: float  # fraction of the shared predicates' 0/1 assignments of this kind
    example: Mapping[str, int]  # the predicates set true; every other shared one is false


@dataclass(frozen=True, slots=True)
class DiffReport:
    """How policy A and policy B compare."""

    a: str
    b: str
    shared: tuple[str, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    differences: tuple[DecisionDiff, ...] = field(default_factory=tuple)

    @property
    def same(self) -> bool:
        """Whether the two decide alike on every assignment of the shared predicates."""
        return not self.differences

    def render(self) -> str:
        """A readable summary."""
        lines = [f"diff {self.a} -> {self.b}",
                 f"  shared predicates: {len(self.shared)}; only in A: "
                 f"{', '.join(self.only_a) or '-'}; only in B: {', '.join(self.only_b) or '-'}",
                 "  (unshared predicates are taken as false; decisions at 0/1 facts, "
                 "default thresholds)"]
        if self.same:
            lines.append("  the decisions agree on every assignment")
        for d in self.differences:
            ex = ", ".join(f"{k}=1" for k in d.example) or "all shared predicates 0"
            lines.append(f"  A {d.action_a} / B {d.action_b}: {d.share:.2%} of assignments, "
                         f"e.g. {ex}")
        return "\n".join(lines)


def renamed_rules(policy: Policy, prefix: str, keep: set[str]) -> str:
    """The policy's rules, heads prefixed, its predicates outside ``keep`` fixed false.

    Renamed apart from another program's rules; shared with :mod:`plguard.policy.agree`,
    so diff and the agreement of drafts read one circuit.
    """
    rename = _renaming(policy, prefix, keep)
    return "".join(f"{rename[r.head]} :- {render(r.body, rename)}.\n"
                   for r in policy.program.rules)


def _renaming(policy: Policy, prefix: str, keep: set[str]) -> dict[str, str]:
    rename = {h: prefix + h for h in policy.program.definitions()}
    rename.update({p: "fail" for p in policy.predicate_names if p not in keep})
    return rename


def _decision_rules(policy: Policy, prefix: str, keep: set[str],
                    thresholds: Thresholds) -> str:
    """The policy's rules renamed apart, plus refuse/rewrite/allow heads."""
    rename = _renaming(policy, prefix, keep)
    lines = [renamed_rules(policy, prefix, keep).rstrip("\n")]

    def fires(rules: tuple[str, ...], threshold: float | None) -> str:
        # At 0/1 facts a rule's probability is 0 or 1, so ">= threshold" is the rule itself.
        if not rules or threshold is None or threshold > 1:
            return "fail"
        if threshold <= 0:
            return "true"
        return "(" + "; ".join(rename.get(r, r) for r in rules) + ")"

    lines.append(f"{prefix}refuse :- {fires(policy.unsafe_rules, thresholds.unsafe)}.")
    lines.append(f"{prefix}rewrite :- \\+{prefix}refuse, "
                 f"{fires(policy.over_refusal_rules, thresholds.over_refusal)}.")
    lines.append(f"{prefix}allow :- \\+{prefix}refuse, \\+{prefix}rewrite.")
    return "\n".join(lines) + "\n"


def diff(a: Policy, b: Policy, thresholds: Thresholds | None = None) -> DiffReport:
    """Compare the decisions of two policies over the predicates they share."""
    thresholds = thresholds or Thresholds.model_validate({})
    names_a, names_b = set(a.predicate_names), set(b.predicate_names)
    shared = tuple(p for p in a.predicate_names if p in names_b)
    src = _decision_rules(a, "plguard_a__", names_b, thresholds)
    src += _decision_rules(b, "plguard_b__", names_a, thresholds)
    pairs = [(x, y) for x in ACTIONS for y in ACTIONS if x != y]
    for x, y in pairs:
        src += f"plguard_{x}_{y} :- plguard_a__{x}, plguard_b__{y}.\nquery(plguard_{x}_{y}).\n"
    src += "".join(f"0.5::{p}.\n" for p in shared)
    oracle = Oracle(CompiledProgram(src, shared, file="<diff>"))
    out = []
    for x, y in pairs:
        q = f"plguard_{x}_{y}"
        share = float(oracle.probs(q, [{}])[0])
        if share <= oracle.tol:
            continue
        world = oracle.witness(q) or {}
        out.append(DecisionDiff(x, y, share, {k: 1 for k, v in world.items() if v}))
    return DiffReport(a=a.id, b=b.id, shared=shared,
                      only_a=tuple(p for p in a.predicate_names if p not in names_b),
                      only_b=tuple(p for p in b.predicate_names if p not in names_a),
                      differences=tuple(out))
