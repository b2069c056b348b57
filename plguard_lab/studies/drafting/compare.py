"""A drafted bundle against a hand-written reference: rules matched by their circuits.

Drafted predicates are named by the drafting model, so each is first mapped to the
reference predicate of the same scope whose name, question and description read most alike
(:func:`plguard.policy.drafting.unify.similarity`, the one that unifies drafts), when at
least :data:`MAP_AT`; the drafted rules are
rewritten over the reference names and both bundles go through
:func:`plguard.policy.agree.agreement` (the circuits ``policy diff`` uses). A reference
rule is *matched* when the mapped draft has a rule of the same kind with the same truth
value in every world; a kept drafted rule equivalent to no reference rule is *invented*
(to be judged by hand in the policy's review file: it may still be right). The mapping is
in the result, for review.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from plguard.policy import load_policy
from plguard.policy.agree import agreement
from plguard.policy.core import Policy
from plguard.policy.drafting.draft import rename_body
from plguard.policy.drafting.unify import similarity

# Low on purpose: each drafted predicate maps to its most alike reference predicate of the
# same scope, and a wrong mapping only counts as a match if the rules line up by circuit
# too; the mapping is in every record, for review. Not lower: at 0.2 the 1.5B's
# "sends the customer to the pharmacist" (0.27) mapped to "advises combining prescription
# medicines" and a wrong rule counted as matched (pharmacy_assistant, slot form).
MAP_AT = 0.3
KINDS = ("unsafe_compliance_", "unsafe_content_", "over_refusal_")


@dataclass(frozen=True, slots=True)
class Comparison:
    """How one drafted bundle compares with its reference."""

    reference_rules: tuple[str, ...]
    matched: tuple[str, ...]  # reference rules the draft has (by circuit)
    drafted_rules: tuple[str, ...]
    invented: tuple[str, ...]  # drafted rules equivalent to no reference rule
    mapping: tuple[tuple[str, str, float], ...]  # (drafted, reference or "", similarity)

    @property
    def recall(self) -> float:
        """Share of the reference rules matched."""
        return len(self.matched) / max(1, len(self.reference_rules))

    @property
    def precision(self) -> float:
        """Share of the drafted rules that match a reference rule (1.0 when none)."""
        if not self.drafted_rules:
            return 1.0
        return 1 - len(self.invented) / len(self.drafted_rules)


def compare(draft: Policy | None, reference: Policy) -> Comparison:
    """Map ``draft``'s predicates onto ``reference``'s, then compare their rules."""
    ref_rules = tuple(q for q in reference.queries if q.startswith(KINDS))
    if draft is None:
        return Comparison(ref_rules, (), (), (), ())
    ref = {p.name: p for p in reference.predicates}
    refs = list(reference.predicates)
    sims = similarity([f"{p.name} {p.question} {p.description}" for p in draft.predicates],
                      [f"{r.name} {r.question} {r.description}" for r in refs])
    mapping, rename = [], {}
    for p, row in zip(draft.predicates, sims, strict=True):
        best = max(((v, r.name) for v, r in zip(row, refs, strict=True)
                    if r.scope == p.scope), default=(0.0, ""))
        name = best[1] if best[0] >= MAP_AT else ""
        mapping.append((p.name, name, round(best[0], 3)))
        if name:
            rename[p.name] = name
    # The whole program renamed (helper heads and aggregates included), declared over the
    # reference's predicates where mapped and the draft's own elsewhere.
    program = rename_body(draft.user_program, rename)
    drafted = tuple(q for q in draft.queries if q.startswith(KINDS))
    entries = [{"name": r.name, "scope": r.scope, "question": r.question,
                "description": r.description} for r in reference.predicates]
    entries += [{"name": p.name, "scope": p.scope, "question": p.question,
                 "description": p.description} for p in draft.predicates
                if p.name not in rename and p.name not in ref]
    with tempfile.TemporaryDirectory(prefix="plguard-compare-") as tmp:
        folder = Path(tmp) / "mapped"
        folder.mkdir()
        (folder / "policy.md").write_text(draft.text, encoding="utf-8")
        (folder / "predicates.yaml").write_text(yaml.safe_dump(entries, sort_keys=False),
                                                encoding="utf-8")
        (folder / "policy.pl").write_text(program, encoding="utf-8")
        rows = agreement([reference, load_policy(folder)])
    matched = tuple(r.head for r in rows if r.draft == 0 and 1 in r.agreed_by)
    invented = tuple(r.head for r in rows if r.draft == 1 and r.agreed_by == (1,))
    return Comparison(ref_rules, matched, drafted, invented, tuple(mapping))


__all__ = ["MAP_AT", "Comparison", "compare"]
