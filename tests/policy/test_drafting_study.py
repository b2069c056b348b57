"""The drafting study's comparison with a reference (plguard_lab.studies.drafting.compare)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plguard.policy import load_policy
from plguard_lab.studies.drafting.compare import compare

POLICIES = Path(__file__).resolve().parents[2] / "plguard_lab" / "studies" / "drafting" / \
    "policies"


@pytest.mark.parametrize("name", ["homework_helper", "pharmacy_assistant", "support_refunds"])
def test_each_reference_bundle_loads_and_matches_itself(name):
    ref = load_policy(POLICIES / name / "reference")
    c = compare(ref, ref)
    assert c.recall == 1.0 and c.precision == 1.0 and len(c.reference_rules) == 5
    assert (POLICIES / name / "POLICY.md").read_text().count("\n- ") >= 4


def test_rules_are_matched_by_circuit_after_mapping_the_names(tmp_path):
    from plguard.policy.drafting.run import draft_policy
    from tests.policy.test_drafting import DOC, good, model

    (tmp_path / "P.md").write_text(DOC, encoding="utf-8")
    drafted = draft_policy(model(good), tmp_path / "P.md", tmp_path / "out", drafts=1,
                           form="free").policy
    c = compare(drafted, load_policy(POLICIES / "homework_helper" / "reference"))
    # The scripted drafter wrote two of the reference's five rules, under other names.
    assert set(c.matched) == {"unsafe_compliance_graded_work", "over_refusal_explain_topic"}
    assert c.invented == () and c.recall == pytest.approx(2 / 5)
    assert ("asks_for_graded_essay", "asks_for_graded_work") == c.mapping[0][:2]


def test_a_different_policy_matches_little_and_its_own_rules_are_invented():
    c = compare(load_policy("minimal"), load_policy("detailed"))
    assert c.recall < 0.2 and "over_refusal_harmless_request" in c.invented
    assert compare(None, load_policy("minimal")).matched == ()


def test_review_files_list_invented_rules_and_keep_verdicts_by_the_rule_judged(tmp_path):
    import shutil

    import yaml

    from plguard_lab.studies.drafting import review

    ref = load_policy(POLICIES / "homework_helper" / "reference")
    path = tmp_path / "review" / "homework_helper.yaml"
    heads = ["unsafe_compliance_copying", "over_refusal_feedback"]
    review.update(path, ref, heads)
    data = yaml.safe_load(path.read_text())
    key = "unsafe_compliance_copying :- (asks_to_copy_work, answer_helps_copying)."
    assert set(data) == {key, "over_refusal_feedback :- (asks_for_feedback, answer_refuses)."}
    assert review.verdicts(path, ref, heads) == {}  # listed, not judged yet
    data[key]["verdict"] = "correct"
    path.write_text(yaml.safe_dump(data))
    review.update(path, ref, heads)  # a rerun keeps what a person wrote
    assert review.verdicts(path, ref, heads) == {"unsafe_compliance_copying": "correct"}
    # The same head drafted with other clauses is another rule: not judged.
    other = tmp_path / "other"
    shutil.copytree(POLICIES / "homework_helper" / "reference", other)
    pl = other / "policy.pl"
    pl.write_text(pl.read_text().replace("asks_to_copy_work, answer_helps_copying",
                                         "asks_to_copy_work"))
    assert review.verdicts(path, load_policy(other), heads) == {}
    data[key]["verdict"] = "maybe"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="homework_helper.yaml.*'maybe'"):
        review.verdicts(path, ref, heads)
