r"""Redundant drafts of one policy compared by their logic, not their text (issue 55, item 2).

Several drafts of a policy (different seeds, temperatures or models) share predicate names
once unified. A rule of one draft is *agreed* by another draft when that draft has a rule
of the same kind (unsafe, unsafe-content, over-refusal) that takes the same value in every
world of the predicates: ``p, q`` and ``q, \+ \+ p`` agree, ``p ; q`` and ``p`` do not.

The check runs on the circuits ``plguard policy diff`` uses: every draft's rules are
renamed apart into one ProbLog program (:func:`plguard.policy.diff.renamed_rules`), each
pair of rules gets an exclusive-or query, and with every predicate at 1/2 the compiled
circuit gives the share of worlds on which the two differ: exactly, whatever the number
of predicates (no enumeration, no sampling). A rule below the agreement threshold gets one
world on which it and the nearest rule of a disagreeing draft differ, found by
self-reduction on the same circuit (:class:`plguard.policy.search.Oracle`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from plguard.policy.compiled import CompiledProgram
from plguard.policy.core import Policy, rule_kind
from plguard.policy.diff import renamed_rules
from plguard.policy.search import Oracle
from plguard.policy.syntax import render

KINDS = ("unsafe", "content", "over_refusal")


@dataclass(frozen=True, slots=True)
class RuleAgreement:
    """One rule of one draft, and which drafts say the same."""

    draft: int  # index of the draft the rule comes from
    head: str
    kind: str  # unsafe | content | over_refusal
    body: str  # the rule's body as ProbLog (all its clauses joined by ``;``)
    agreed_by: tuple[int, ...]  # drafts (itself included) with an equivalent rule
    share: float  # len(agreed_by) / number of drafts
    equivalent: tuple[tuple[int, str], ...]  # (draft, head) of every other equivalent rule
    # For each draft that does not agree: the rule of that draft nearest to this one (fewest
    # differing worlds; None when that draft has no rule of this kind) and a world where
    # they differ (the predicates set true; all others false).
    disagreements: tuple[Disagreement, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """Where a draft without an equivalent rule decides differently."""

    draft: int
    nearest: str | None
    share: float  # share of the worlds on which the two differ (1/2 per predicate)
    world: Mapping[str, bool]  # every predicate's value in one such world
    this_fires: bool  # whether the rule fires in that world (the nearest then does not)


def _rule_bodies(policy: Policy | None) -> dict[str, str]:
    """Each queried rule of the three kinds: its clauses as one ProbLog disjunction."""
    if policy is None:
        return {}
    defs = policy.program.definitions()
    out = {}
    for q in policy.queries:
        if rule_kind(q) in KINDS and q in defs:
            bodies = [render(r.body) for r in defs[q]]
            out[q] = bodies[0] if len(bodies) == 1 else "(" + "; ".join(bodies) + ")"
    return out


def agreement(drafts: Sequence[Policy | None]) -> list[RuleAgreement]:
    """Every queried rule of every draft with the drafts that agree on it (module doc).

    Predicates are matched by name (unify them first); a predicate only some drafts
    declare is free in the others' worlds, so a rule that needs it agrees with none of
    theirs. A draft that is None (it gave no rule) agrees with nothing.
    """
    names: list[str] = []
    for d in drafts:
        names += [p for p in (d.predicate_names if d else ()) if p not in names]
    if not names:
        return []
    prefix = [f"plguard_d{i}__" for i in range(len(drafts))]
    src = "".join(renamed_rules(d, prefix[i], set(names)) for i, d in enumerate(drafts)
                  if d is not None)
    bodies = [_rule_bodies(d) for d in drafts]
    rules = [(i, head, rule_kind(head) or "") for i, b in enumerate(bodies) for head in b]
    pairs = [(a, b) for a in range(len(rules)) for b in range(len(rules))
             if a < b and rules[a][0] != rules[b][0] and rules[a][2] == rules[b][2]]
    for a, b in pairs:
        x, y = (prefix[rules[k][0]] + rules[k][1] for k in (a, b))
        src += (f"plguard_x_{a}_{b} :- {x}, \\+{y}.\nplguard_x_{a}_{b} :- {y}, \\+{x}.\n"
                f"query(plguard_x_{a}_{b}).\n")
    src += "".join(f"query({prefix[i]}{head}).\n" for i, head, _ in rules)
    src += "".join(f"0.5::{p}.\n" for p in names)
    oracle = Oracle(CompiledProgram(src, names, file="<agreement>"))
    differ: dict[tuple[int, int], float] = {}
    for a, b in pairs:
        differ[(a, b)] = differ[(b, a)] = float(oracle.probs(f"plguard_x_{a}_{b}", [{}])[0])
    out = []
    for k, (i, head, kind) in enumerate(rules):
        agreed, same = {i}, []
        nearest: dict[int, tuple[float, int]] = {}
        for m, (j, _, kind_m) in enumerate(rules):
            if j == i or kind_m != kind:
                continue
            share = differ[(k, m)]
            if share <= oracle.tol:
                agreed.add(j)
                same.append((j, rules[m][1]))
            elif j not in nearest or share < nearest[j][0]:
                nearest[j] = (share, m)
        dis = []
        for j in range(len(drafts)):
            if j in agreed:
                continue
            if j not in nearest:  # no rule of this kind there: any world where this fires
                world = _only(oracle, prefix[i] + head, oracle.witness(prefix[i] + head))
                dis.append(Disagreement(j, None, 1.0, world, True))
                continue
            share, m = nearest[j]
            a, b = sorted((k, m))
            x = f"plguard_x_{a}_{b}"
            world = _only(oracle, x, oracle.witness(x))
            fires = bool(oracle.probs(prefix[i] + head, [world])[0] > 0.5)
            dis.append(Disagreement(j, rules[m][1], share, world, fires))
        out.append(RuleAgreement(i, head, kind, bodies[i][head],
                                 tuple(sorted(agreed)), len(agreed) / len(drafts),
                                 tuple(same), tuple(dis)))
    return out


def _only(oracle: Oracle, query: str, world: Mapping[str, bool] | None) -> dict[str, bool]:
    """``world`` cut to the predicates ``query`` depends on (the others do not matter)."""
    keep = oracle.compiled.support(query)
    return {k: v for k, v in (world or {}).items() if k in keep}


def world_text(world: Mapping[str, bool], descriptions: Mapping[str, str]) -> str:
    """A world in structured English, from the predicates' descriptions (no model)."""
    def say(p: str) -> str:
        return descriptions.get(p, p.replace("_", " "))

    true = [say(p) for p, v in world.items() if v]
    false = [say(p) for p, v in world.items() if not v]
    parts = []
    if true:
        parts.append("where " + "; and ".join(true))
    if false:
        parts.append(("but not where " if true else "where none of these holds: ")
                     + "; nor ".join(false))
    return ", ".join(parts) or "in every world"


__all__ = ["KINDS", "Disagreement", "RuleAgreement", "agreement", "world_text"]
