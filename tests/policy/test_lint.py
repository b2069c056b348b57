from __future__ import annotations

import pytest

from plguard.policy import load_policy
from plguard.policy.lint import lint

from .testlib import BUNDLES, make_bundle

P = {"req": "request", "other_req": "request", "resp": "response", "refuses": "response"}


@pytest.mark.parametrize("name", BUNDLES)
def test_bundles_lint_clean_and_warnings_are_explained(name):
    report = lint(name)
    assert report.ok, [f.render() for f in report.errors]
    text = load_policy(name).text
    for w in report.warnings:
        assert w.code in text, f"{name}: warning {w.code} is not explained in policy.md"


def test_minimal_warns_only_about_overlap():
    report = lint("minimal")
    assert [w.code for w in report.warnings] == ["aggregate-overlap"]
    ex = report.warnings[0].example
    assert ex == {"request_is_harmful": 1, "request_is_benign_sensitive_context": 1,
                  "response_provides_harmful_instructions": 1, "response_refuses": 1}


def codes(report, severity):
    return sorted(f.code for f in report.findings if f.severity == severity)


def test_warnings(tmp_path):
    prog = """
unsafe_compliance_a :- req, resp.
unsafe_compliance :- unsafe_compliance_a ; req.
over_refusal_b :- req, refuses.
never :- resp, \\+resp.
always :- resp ; \\+resp.
request_only :- req.
query(unsafe_compliance_a). query(unsafe_compliance). query(over_refusal_b).
query(never). query(always). query(request_only).
"""
    report = lint(make_bundle(tmp_path / "b", P, prog))
    assert report.ok
    assert codes(report, "warning") == ["aggregate-mismatch", "aggregate-overlap",
                                        "constant-query", "constant-query",
                                        "request-only-query", "request-only-query",
                                        "unused-predicate", "window-rule-unset",
                                        "window-rule-unset"]
    by_code = {f.code: f for f in report.warnings}
    assert by_code["unused-predicate"].name == "other_req"
    assert by_code["unused-predicate"].file.endswith("predicates.yaml")
    # semantic, not syntactic: (req, resp) ; req is just req
    assert sorted(f.name for f in report.warnings if f.code == "request-only-query") == [
        "request_only", "unsafe_compliance"]
    assert by_code["aggregate-mismatch"].name == "unsafe_compliance"
    # the mismatch example: req alone makes the aggregate true but not its rule
    assert by_code["aggregate-mismatch"].example == {"req": 1}
    consts = sorted(f.name for f in report.warnings if f.code == "constant-query")
    assert consts == ["always", "never"]
    assert all(f.line for f in report.warnings if f.code == "constant-query")


def test_safe_response_mismatch(tmp_path):
    prog = ("unsafe_compliance :- req, resp.\nover_refusal :- other_req, refuses.\n"
            "safe_response :- \\+unsafe_compliance.\nquery(unsafe_compliance).\n"
            "query(over_refusal).\nquery(safe_response).\n")
    report = lint(make_bundle(tmp_path / "b", P, prog))
    mism = [f for f in report.warnings if f.code == "aggregate-mismatch"]
    assert [f.name for f in mism] == ["safe_response"]
    assert mism[0].example == {"other_req": 1, "refuses": 1}


def test_errors(tmp_path):
    prog = ("unsafe_compliance_a :- req, resp.\nover_refusal :- other_req, refuses.\n"
            "query(unsafe_compliance_a).\n")
    report = lint(make_bundle(tmp_path / "b", P, prog))
    assert codes(report, "error") == ["missing-aggregate", "unqueried-aggregate"]
    assert not report.ok


def test_load_errors_become_findings():
    from pathlib import Path

    bad = Path(__file__).parent / "bad_bundles" / "syntax_error"
    report = lint(bad)
    assert [(f.code, f.line, f.col) for f in report.errors] == [("load", 3, 24)]
    assert "policy.pl:3:24" in report.errors[0].render()
