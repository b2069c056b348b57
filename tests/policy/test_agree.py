"""Redundant drafts compared by their compiled circuits (plguard.policy.agree, issue 55)."""

from __future__ import annotations

import pytest

from plguard.errors import PolicyError
from plguard.policy.agree import agreement, world_text
from plguard.policy.drafting.schema import DraftPredicate, DraftRule
from plguard.policy.drafting.write import write_bundle

P = {n: DraftPredicate(name=n, question=f"Does the text {n.replace('_', ' ')}?",
                       meaning=n.replace("_", " "), view=v)
     for n, v in (("asks_for_essay", "request"), ("is_graded_work", "request"),
                  ("writes_full_essay", "answer"), ("refuses", "answer"))}


def draft(tmp_path, k: int, rules: list[tuple[str, str]], preds=tuple(P)):
    return write_bundle(tmp_path / f"d{k}", "# Homework helper\n",
                        [P[n] for n in preds],
                        [DraftRule(head=h, body=b, span=1) for h, b in rules], {1: "L1"})


def by(rows, draft, head):
    return next(r for r in rows if r.draft == draft and r.head == head)


def test_rules_that_are_the_same_function_agree_whatever_their_text(tmp_path):
    a = draft(tmp_path, 0, [("unsafe_compliance_essay", "asks_for_essay, writes_full_essay"),
                            ("over_refusal_help", "\\+ is_graded_work, refuses")])
    b = draft(tmp_path, 1, [("unsafe_compliance_ghostwriting",
                             "writes_full_essay, \\+ \\+ asks_for_essay"),
                            ("over_refusal_refused", "refuses, \\+ is_graded_work")])
    c = draft(tmp_path, 2, [("unsafe_compliance_essay",
                             "asks_for_essay, (writes_full_essay ; is_graded_work)"),
                            ("over_refusal_help", "\\+ is_graded_work, refuses")])
    rows = agreement([a, b, c])
    essay = by(rows, 0, "unsafe_compliance_essay")
    assert essay.agreed_by == (0, 1) and essay.share == pytest.approx(2 / 3)
    (d,) = essay.disagreements
    assert d.draft == 2 and d.nearest == "unsafe_compliance_essay"
    # They differ exactly when the essay is asked for, graded work, and not written:
    # 1 world in 8 of the three predicates (the fourth, refuses, is free).
    assert d.share == pytest.approx(1 / 8)
    assert d.world["asks_for_essay"] and d.world["is_graded_work"]
    assert not d.world["writes_full_essay"] and d.this_fires is False
    assert all(r.share == 1.0 for r in rows if r.kind == "over_refusal")


def test_a_draft_without_a_rule_of_that_kind_disagrees_with_a_world_where_it_fires(tmp_path):
    a = draft(tmp_path, 0, [("unsafe_compliance_essay", "asks_for_essay, writes_full_essay")])
    b = draft(tmp_path, 1, [("over_refusal_help", "refuses")])
    rows = agreement([a, b])
    (d,) = by(rows, 0, "unsafe_compliance_essay").disagreements
    assert d.nearest is None and d.this_fires
    assert d.world["asks_for_essay"] and d.world["writes_full_essay"]
    text = world_text(d.world, {"asks_for_essay": "the user asks for an essay"})
    assert text.startswith("where the user asks for an essay")


def test_a_predicate_one_draft_lacks_is_free_so_rules_on_it_do_not_agree(tmp_path):
    a = draft(tmp_path, 0, [("unsafe_content_essay", "writes_full_essay")])
    b = draft(tmp_path, 1, [("unsafe_content_essay", "refuses")],
              preds=("asks_for_essay", "refuses"))
    rows = agreement([a, b])
    assert by(rows, 0, "unsafe_content_essay").agreed_by == (0,)
    assert by(rows, 0, "unsafe_content_essay").disagreements[0].share == pytest.approx(0.5)


def test_a_rule_over_an_undeclared_predicate_is_a_located_error(tmp_path):
    with pytest.raises(PolicyError) as e:
        draft(tmp_path, 0, [("unsafe_compliance_xy", "asks_for_essay, writes_essays")])
    assert "writes_essays" in str(e.value) and "policy.pl:" in str(e.value)
