"""Drafted predicates and rules written as a normal bundle, and loaded to check them.

The bundle is what a hand-written one is: ``policy.md`` (the source document),
``predicates.yaml`` (questions, one-line meanings as descriptions; a predicate reading the
request alone has scope ``request``, one reading the answer or the pair ``response``) and
``policy.pl`` (each rule under a comment citing its span). Loading it with
:func:`plguard.policy.load_policy` parses, validates and compiles it: any error is a
:class:`~plguard.errors.PolicyError` with file:line:col, which the refinement loop feeds back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from plguard.policy.core import OVER_REFUSAL, UNSAFE, Policy
from plguard.policy.drafting.schema import DraftPredicate, DraftRule


def scope_of(view: str) -> str:
    """A predicate's bundle scope from the text it reads."""
    return "request" if view == "request" else "response"


def render_program(rules: Sequence[DraftRule], cites: dict[int, str]) -> str:
    """policy.pl for ``rules``: each under its span's citation, then one query per head."""
    lines = ["% Drafted by `plguard policy draft` from policy.md; vet before use (README.md)."]
    heads: list[str] = []
    for r in rules:
        lines += ["", f"% span {r.span} ({cites.get(r.span, '?')})", f"{r.head} :- {r.body}."]
        if r.head not in heads:
            heads.append(r.head)
    # The aggregates the decision and lint expect: any rule of the kind (fail when none).
    unsafe = [h for h in heads if h.startswith(UNSAFE + "_")]
    over = [h for h in heads if h.startswith(OVER_REFUSAL + "_")]
    lines += ["", "% aggregates: any rule of the kind",
              f"{UNSAFE} :- {' ; '.join(unsafe) or 'fail'}."]
    if over:
        lines.append(f"{OVER_REFUSAL} :- {' ; '.join(over)}.")
    lines.append("")
    lines += [f"query({h})." for h in [*heads, UNSAFE, *([OVER_REFUSAL] if over else [])]]
    return "\n".join(lines) + "\n"


REFUSES_NAME = "answer_refuses"  # the slot form's fixed refusal predicate (slots.REFUSES)


def write_bundle(out: Path, source: str, predicates: Sequence[DraftPredicate],
                 rules: Sequence[DraftRule], cites: dict[int, str]) -> Policy:
    """Write the bundle into ``out`` (created) and load it; PolicyError when it is wrong."""
    from plguard.policy import load_policy

    out.mkdir(parents=True, exist_ok=True)
    (out / "policy.md").write_text(source, encoding="utf-8")
    entries: list[dict[str, str]] = []
    for p in predicates:
        entry = {"name": p.name, "scope": scope_of(p.view), "question": p.question,
                 "description": p.meaning}
        if entry["scope"] == "response":
            # A long answer read in windows: refusing shows in its opening, anything else
            # the answer does counts wherever it is (what the shipped bundles declare).
            entry["windows"] = "first" if p.name == REFUSES_NAME else "max"
        entries.append(entry)
    (out / "predicates.yaml").write_text(
        yaml.safe_dump(entries, sort_keys=False, width=96), encoding="utf-8")
    (out / "policy.pl").write_text(render_program(rules, cites), encoding="utf-8")
    return load_policy(out)


__all__ = ["render_program", "scope_of", "write_bundle"]
