"""The review files of the drafting study: a person's verdict on every invented rule.

A drafted rule that matches no reference rule by circuit (``compare.Comparison.invented``)
may still be right: the policy may say more than its reference, or say it another way. The
issue counts such a rule as correct only where a person judged it so. Each policy has one
file, ``OUT/review/<policy>.yaml``, keyed by the rule as drafted (its clauses, one line:
a verdict is about the text that was judged, and the same rule drafted at K = 1 and K = 3
is judged once), each with ``verdict`` (``correct`` or ``wrong``) and ``why``.
:func:`update` adds the rules not yet listed with an empty verdict and keeps every verdict
already written; :func:`verdicts` reads back the judged ones.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from plguard.policy.core import Policy
from plguard.policy.syntax import render

VERDICTS = ("correct", "wrong")


def clauses(policy: Policy, head: str) -> list[str]:
    """The clauses of ``head`` in the policy's program, one line each."""
    return [f"{head} :- {render(r.body)}" for r in policy.program.definitions().get(head, [])]


def rule_text(policy: Policy, head: str) -> str:
    """The rule ``head`` as drafted: its clauses on one line (the review files' key)."""
    return " ".join(f"{c}." for c in clauses(policy, head))


def _load(path: Path) -> dict[str, dict[str, str]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    return data or {}


def update(path: Path, policy: Policy, heads: list[str]) -> None:
    """List each of ``heads`` in the review file, keeping the verdicts already there."""
    data = _load(path)
    new = {rule_text(policy, h) for h in heads} - set(data)
    for key in new:
        data[key] = {"verdict": "", "why": ""}
    if new or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=True, width=100, allow_unicode=True),
                        encoding="utf-8")


def verdicts(path: Path, policy: Policy, heads: list[str]) -> dict[str, str]:
    """Head -> verdict for those of ``heads`` whose rule, as drafted, has been judged.

    Raises ValueError naming the file and rule when a verdict is neither of VERDICTS.
    """
    data = _load(path)
    out: dict[str, str] = {}
    for head in heads:
        key = rule_text(policy, head)
        v = (data.get(key) or {}).get("verdict", "")
        if v and v not in VERDICTS:
            raise ValueError(f"{path}: {key}: verdict {v!r} is not one of {VERDICTS}")
        if v:
            out[head] = v
    return out


__all__ = ["VERDICTS", "clauses", "rule_text", "update", "verdicts"]
