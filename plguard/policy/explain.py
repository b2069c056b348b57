"""``plguard policy explain``: every rule in structured English, from templates alone.

A rule's title comes from its name (``unsafe_compliance_weapon_details`` reads "Unsafe
compliance (weapon details)"), its conditions from the predicates' one-line descriptions.
No model is involved, so the text is exactly what the program says.
"""

from __future__ import annotations

from dataclasses import dataclass

from plguard.policy.core import OVER_REFUSAL, SAFE, UNSAFE, Policy, rule_kind
from plguard.policy.syntax import And, Atom, Const, Formula, Not


@dataclass(frozen=True, slots=True)
class RuleExplanation:
    """One rule head in words."""

    head: str
    kind: str  # unsafe | over_refusal | aggregate | helper
    title: str
    text: str
    queried: bool
    line: int


def title(name: str) -> str:
    """A readable title for a rule name."""
    for prefix, label in ((UNSAFE, "Unsafe compliance"), (OVER_REFUSAL, "Over-refusal")):
        if name == prefix:
            return f"{label} (any rule)"
        if name.startswith(prefix + "_"):
            return f"{label} ({name[len(prefix) + 1:].replace('_', ' ')})"
    if name == SAFE:
        return "Safe response"
    return "'" + name.replace("_", " ") + "'"


def explain(policy: Policy) -> list[RuleExplanation]:
    """Every rule head of the policy, queried ones first in query order, then helpers."""
    defs = policy.program.definitions()
    desc = {p.name: _clause(p.description or p.question) for p in policy.predicates}

    def words(f: Formula, nested: bool = False) -> str:
        if isinstance(f, Atom):
            return desc[f.name] if f.name in desc else f"{_lower(title(f.name))} holds"
        if isinstance(f, Const):
            return "always" if f.value else "never"
        if isinstance(f, Not):
            inner = f.arg
            if isinstance(inner, Atom) and inner.name not in desc:
                return f"{_lower(title(inner.name))} does not hold"
            return f"it is not the case that {words(inner, True)}"
        parts = [words(g, True) for g in f.args]
        if len(parts) == 1:
            return parts[0]
        # Descriptions contain commas themselves, so long lists are separated by semicolons,
        # and nested groups are bracketed so "A or B and C" cannot be misread.
        if isinstance(f, And):
            text = _join(parts, "and") if len(parts) == 2 else "all of: " + _join(parts, "and")
        else:
            text = ("either " + _join(parts, "or") if len(parts) == 2
                    else "any of: " + _join(parts, "or"))
        return f"({text})" if nested else text

    order = list(dict.fromkeys([q for q in policy.queries if q in defs] + list(defs)))
    out = []
    for head in order:
        clauses = defs[head]
        bodies = [words(c.body) for c in clauses]
        when = bodies[0] if len(bodies) == 1 else "; or when ".join(bodies)
        kind = rule_kind(head) or "helper"
        out.append(RuleExplanation(head=head, kind=kind, title=title(head),
                                   text=f"{title(head)} holds when {when}.",
                                   queried=head in policy.queries, line=clauses[0].line))
    return out


def explain_text(policy: Policy) -> str:
    """The explanation as plain text: predicates, then rules."""
    lines = [f"Policy {policy.id}: {len(policy.predicates)} predicates, "
             f"{len(policy.queries)} queries", "", "Predicates:"]
    for p in policy.predicates:
        lines.append(f"  {p.name} [{p.scope}]: {p.description or p.question}")
    lines += ["", "Rules:"]
    from plguard.categories import NAMES

    for r in explain(policy):
        tag = "" if r.queried else " (helper, not queried)"
        codes = policy.categories.get(r.head, ())
        if codes:
            tag += " Category: " + "; ".join(f"{c} {NAMES[c]}" for c in codes) + "."
        lines.append(f"  - {r.text}{tag}")
    return "\n".join(lines)


def _clause(text: str) -> str:
    text = " ".join(text.split()).rstrip(".")
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:1] != "'" else text


def _join(parts: list[str], word: str) -> str:
    if len(parts) <= 2:
        return f" {word} ".join(parts)
    return "; ".join(parts[:-1]) + f"; {word} " + parts[-1]
