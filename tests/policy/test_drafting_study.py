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
    drafted = draft_policy(model(good), tmp_path / "P.md", tmp_path / "out", drafts=1).policy
    c = compare(drafted, load_policy(POLICIES / "homework_helper" / "reference"))
    # The scripted drafter wrote two of the reference's five rules, under other names.
    assert set(c.matched) == {"unsafe_compliance_graded_work", "over_refusal_explain_topic"}
    assert c.invented == () and c.recall == pytest.approx(2 / 5)
    assert ("asks_for_graded_essay", "asks_for_graded_work") == c.mapping[0][:2]


def test_a_different_policy_matches_little_and_its_own_rules_are_invented():
    c = compare(load_policy("minimal"), load_policy("detailed"))
    assert c.recall < 0.2 and "over_refusal_harmless_request" in c.invented
    assert compare(None, load_policy("minimal")).matched == ()
