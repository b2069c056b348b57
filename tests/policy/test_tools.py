from __future__ import annotations

import json
import time

import numpy as np
import pytest
import yaml

from plguard.policy import cases_yaml, generate_cases, load_policy, run_cases
from plguard.policy.cases import Case, load_cases
from plguard.policy.cli import run
from plguard.policy.diff import diff
from plguard.policy.explain import explain, explain_text
from plguard.policy.search import forcing_cubes

from .testlib import BUNDLES, copy_bundle

# -- cases.yaml ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", BUNDLES)
def test_bundle_cases_pass(name):
    policy = load_policy(name)
    report = run_cases(policy)
    assert len(report.results) >= 6
    assert report.passed, [(r.case.name, r.failures) for r in report.results if not r.passed]
    # 0/1 facts and fractional cases both present
    assert any(0 < v < 1 for c in policy.cases for v in c.expect.values())


def test_failing_case_is_reported(tmp_path):
    folder = copy_bundle("minimal", tmp_path / "m")
    (folder / "cases.yaml").write_text(
        "cases:\n  - name: wrong\n    given: {request_is_harmful: 1}\n"
        "    expect: {unsafe_compliance: 1}\n")
    report = run_cases(load_policy(folder))
    assert not report.passed and report.n_failed == 1
    assert report.results[0].failures == (("unsafe_compliance", 1.0, 0.0),)
    assert run(["policy", "test", str(folder)]) == 1


# -- symbolic cases -----------------------------------------------------------------------

@pytest.mark.parametrize("name", BUNDLES)
def test_generated_cases_force_and_are_minimal(name):
    policy = load_policy(name)
    start = time.perf_counter()
    generated = generate_cases(policy)
    elapsed = time.perf_counter() - start
    assert elapsed < 30
    assert {(g.query, g.value) for g in generated} == {
        (q, v) for q in policy.queries for v in (True, False)}
    for g in generated:
        given = {k: float(v) for k, v in g.given.items()}
        for default in (0.0, 1.0):
            case = Case("g", given, {g.query: float(g.value)}, default=default)
            assert run_cases(policy, [case]).passed, (g, default)
        # irredundant: dropping any value lets the query go either way
        for drop in given:
            rest = {k: v for k, v in given.items() if k != drop}
            outs = {round(policy.evaluate({p: rest.get(p, d) for p in policy.predicate_names})
                          .probs[g.query], 12) for d in (0.0, 1.0, 0.5)}
            assert outs != {float(g.value)}, (g, drop)


def test_generated_cases_are_small():
    policy = load_policy("very_detailed")
    gen = {(g.query, g.value): g.given for g in generate_cases(policy)}
    assert gen[("unsafe_compliance_weapon_details", True)] == {
        "request_seeks_weapons": 1, "response_gives_specific_materials_or_parameters": 1}
    assert len(gen[("safe_response", False)]) == 2
    assert len(gen[("unsafe_compliance", True)]) == 2


def test_generated_yaml_is_a_valid_cases_file(tmp_path):
    policy = load_policy("detailed")
    text = cases_yaml(generate_cases(policy))
    path = tmp_path / "cases.yaml"
    path.write_text(text)
    cases = load_cases(path, policy.predicate_names, policy.queries)
    assert run_cases(policy, cases).passed


def test_structural_search_handles_wide_policies_without_enumeration():
    policy = load_policy("very_detailed")
    start = time.perf_counter()
    cubes = forcing_cubes(policy.program, "safe_response", True)
    assert time.perf_counter() - start < 5
    assert cubes and all(len(c) < len(policy.predicates) for c in cubes)


# -- explain ------------------------------------------------------------------------------

def test_explain_minimal():
    rules = {r.head: r for r in explain(load_policy("minimal"))}
    assert rules["unsafe_compliance_actionable_harm"].text == (
        "Unsafe compliance (actionable harm) holds when the request seeks help with "
        "real-world harm or dangerous wrongdoing and the response gives actionable "
        "instructions or details that enable harm.")
    assert rules["unsafe_compliance"].text == (
        "Unsafe compliance (any rule) holds when unsafe compliance (actionable harm) holds.")


@pytest.mark.parametrize("name", BUNDLES)
def test_explain_covers_every_query(name):
    policy = load_policy(name)
    rules = explain(policy)
    assert [r.head for r in rules if r.queried] == list(policy.queries)
    text = explain_text(policy)
    for p in policy.predicates:
        assert p.name in text


def test_explain_nesting_is_bracketed():
    rules = {r.head: r for r in explain(load_policy("very_detailed"))}
    assert rules["withheld"].text.startswith("'withheld' holds when (either the response "
                                             "refuses or declines the request or ")


def test_explain_negation_and_helpers():
    rules = {r.head: r for r in explain(load_policy("detailed"))}
    text = rules["over_refusal_figurative"].text
    assert text == ("Over-refusal (figurative) holds when all of: the request uses alarming "
                    "words only figuratively or technically; 'harmful request' does not hold; "
                    "and 'response declines' holds.")
    assert rules["response_declines"].text == (
        "'response declines' holds when either the response refuses or declines the request "
        "or the response redirects to a safer alternative instead of answering.")
    assert rules["safe_response"].text == (
        "Safe response holds when unsafe compliance (any rule) does not hold and "
        "over-refusal (any rule) does not hold.")
    assert not rules["harmful_request"].queried


# -- diff ---------------------------------------------------------------------------------

def _action(policy, probs):
    res = policy.evaluate(probs).probs
    if max(res[q] for q in policy.unsafe_rules) >= 0.5:
        return "refuse"
    if policy.over_refusal_rules and max(res[q] for q in policy.over_refusal_rules) >= 0.5:
        return "rewrite"
    return "allow"


def test_diff_identical():
    p = load_policy("moderate")
    report = diff(p, p)
    assert report.same and report.shared == p.predicate_names


def test_diff_finds_changed_rule(tmp_path):
    folder = copy_bundle("moderate", tmp_path / "moderate_v2")
    pl = (folder / "policy.pl").read_text().replace(
        "over_refusal_harmless_request :- \\+ harmful_request, response_declines.",
        "over_refusal_harmless_request :- \\+ harmful_request, response_refuses.")
    (folder / "policy.pl").write_text(pl)
    a, b = load_policy("moderate"), load_policy(folder)
    report = diff(a, b)
    assert [(d.action_a, d.action_b) for d in report.differences] == [("rewrite", "allow")]
    d = report.differences[0]
    # no harmful category (1/8), redirect without refusal (1/4), and neither educational nor
    # fictional (1/4), or B's unchanged context rules would rewrite too
    assert d.share == pytest.approx(1 / 128)
    world = {p: float(d.example.get(p, 0)) for p in a.predicate_names}
    assert (_action(a, world), _action(b, world)) == ("rewrite", "allow")
    assert run(["policy", "diff", "moderate", str(folder), "--exit-code"]) == 1
    assert run(["policy", "diff", "moderate", "moderate", "--exit-code"]) == 0


@pytest.mark.parametrize("a,b", [("minimal", "moderate"), ("detailed", "very_detailed"),
                                 ("moderate", "minimal")])
def test_diff_across_bundles_examples_hold(a, b):
    pa, pb = load_policy(a), load_policy(b)
    report = diff(pa, pb)
    assert set(report.shared) == set(pa.predicate_names) & set(pb.predicate_names)
    for d in report.differences:
        wa = {p: float(d.example.get(p, 0)) for p in pa.predicate_names}
        wb = {p: float(d.example.get(p, 0)) for p in pb.predicate_names}
        assert (_action(pa, wa), _action(pb, wb)) == (d.action_a, d.action_b)


def test_diff_detects_threshold_free_difference(tmp_path):
    # minimal vs a copy without its sensitive-context over-refusal rule: they differ only
    # where the harmless-request rule does not cover it, a request also graded harmful
    folder = copy_bundle("minimal", tmp_path / "m2")
    pl = (folder / "policy.pl").read_text()
    pl = pl.replace("query(over_refusal_benign_sensitive).\n", "")
    (folder / "policy.pl").write_text(pl)
    (folder / "cases.yaml").unlink()
    report = diff(load_policy("minimal"), load_policy(folder))
    assert [(d.action_a, d.action_b) for d in report.differences] == [("rewrite", "allow")]
    assert report.differences[0].example == {"request_is_benign_sensitive_context": 1,
                                             "request_is_harmful": 1, "response_refuses": 1}


# -- CLI ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BUNDLES)
def test_cli_commands(name, capsys):
    assert run(["policy", "lint", name]) == 0
    assert run(["policy", "test", name]) == 0
    assert "passed, 0 failed" in capsys.readouterr().out
    assert run(["policy", "explain", name]) == 0
    assert "Rules:" in capsys.readouterr().out
    assert run(["policy", "cases", name, "--query", "unsafe_compliance"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["cases"][0]["expect"] == {"unsafe_compliance": 1}


def test_cli_json(capsys):
    assert run(["policy", "lint", "minimal", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["warnings"][0]["code"] == "aggregate-overlap"
    assert run(["policy", "test", "moderate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    assert run(["policy", "explain", "minimal", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rules"][0]["kind"] == "unsafe"
    assert run(["policy", "diff", "minimal", "moderate", "--json"]) == 0
    assert "differences" in json.loads(capsys.readouterr().out)
    assert run(["policy", "cases", "minimal", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["cases"]) == 10


def test_cli_errors(capsys):
    assert run(["policy", "lint", "no_such_policy"]) == 1
    assert run(["policy", "test", "no_such_policy"]) == 1
    assert "not found" in capsys.readouterr().err
    assert run(["policy", "explain", "no_such_policy", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["name"] == "no_such_policy"


def test_add_policy_commands_wires_into_a_parent_parser():
    import argparse

    from plguard.policy.cli import add_policy_commands

    parser = argparse.ArgumentParser(prog="plguard")
    add_policy_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["policy", "diff", "minimal", "moderate", "--json"])
    assert (args.a, args.b, args.json) == ("minimal", "moderate", True)
    assert callable(args.func)


def test_evaluate_batch_matches_matrix():
    policy = load_policy("very_detailed")
    rng = np.random.default_rng(11)
    rows = [dict(zip(policy.predicate_names, rng.uniform(size=len(policy.predicates)),
                     strict=True)) for _ in range(10)]
    batch = policy.evaluate_batch(rows)
    for row, res in zip(rows, batch, strict=True):
        ref = policy.evaluate_problog(row)
        assert res.policy == ref.policy
        for q in policy.queries:
            assert abs(res.probs[q] - ref.probs[q]) <= 1e-9
