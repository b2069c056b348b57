"""The viewer's HTTP routes, in process through httpx's ASGI transport."""

from __future__ import annotations

import json
import shutil

import pytest

from plguard.config import Thresholds
from plguard.decide import decide_for
from plguard.policy import load_policy
from plguard_lab.view.app import build_view_app
from plguard_lab.view.state import ViewState

from .conftest import RUN, TRACES, call


@pytest.fixture(scope="module")
def app():
    return build_view_app(RUN)


@pytest.fixture(scope="module")
def manifest():
    return json.loads((RUN / "manifest.json").read_text())


def _guarded(app):
    rows = call(app, "GET", "/api/records").json()
    return [r for r in rows if r["method"] == "plguard"]


def test_page_and_overview(app, manifest):
    page = call(app, "GET", "/")
    assert page.status_code == 200 and 'id="plguard-data">null</script>' in page.text
    run = call(app, "GET", "/api/run").json()
    assert run["kind"] == "run" and run["manifest"]["policy"] == manifest["policy"]
    assert set(run["filters"]["method"]) == {"base", "policy_prompting", "llm_judge", "plguard"}
    assert set(run["filters"]["label"]) == {"safe", "unsafe"}
    policy_ok = load_policy("detailed").id == manifest["policy"]["id"]
    assert (run["problems"] == []) == policy_ok


def test_record_has_explanations_and_replays_exactly(app, manifest):
    key = _guarded(app)[0]["key"]
    rec = call(app, "GET", "/api/record", params={"key": key}).json()
    assert rec["prompt"] and rec["draft"] is not None and rec["response"] is not None
    assert rec["thresholds_used"] == {**manifest["config"]["thresholds"], "source": "run config"}
    su, so = rec["strongest_unsafe"][0], rec["strongest_over_refusal"][0]
    assert rec["policy"]["rules"][su]["text"].startswith("Unsafe compliance")
    assert rec["policy"]["rules"][so]["text"].startswith("Over-refusal")
    assert rec["whatif"]["available"]
    if rec["policy"]["id"] == manifest["policy"]["id"]:
        assert rec["replay"]["matches_action"] and rec["replay"]["max_rule_diff"] < 1e-9


def test_whatif_is_the_guards_own_evaluation(app, manifest):
    policy = load_policy(manifest["config"]["policy"])
    th = Thresholds(**manifest["config"]["thresholds"])
    for row in _guarded(app):
        rec = call(app, "GET", "/api/record", params={"key": row["key"]}).json()
        probs = {p["name"]: p["p"] for p in rec["predicates"]}
        probs[policy.predicate_names[0]] = 0.77
        got = call(app, "POST", "/api/whatif", json={"key": row["key"], "probs": probs}).json()
        ref = policy.evaluate(probs)
        assert got["rules"] == dict(ref.probs)
        d = decide_for(policy, ref, th)
        assert got["decision"]["action"] == d.action and got["decision"]["reason"] == d.reason
        flip = got["smallest_flip"]
        if flip is not None:  # applying the reported change really flips the decision
            probs[flip["predicate"]] = flip["new"]
            again = call(app, "POST", "/api/whatif", json={"key": row["key"], "probs": probs})
            assert again.json()["decision"]["action"] == flip["action"] != d.action


def test_errors_are_answers_not_crashes(app):
    key = _guarded(app)[0]["key"]
    assert call(app, "GET", "/api/record", params={"key": "nope/1"}).status_code == 404
    r = call(app, "POST", "/api/whatif", json={"key": key, "probs": {"x": 0.5}})
    assert r.status_code == 400 and "unknown predicate" in r.json()["error"]
    r = call(app, "POST", "/api/whatif", json={"key": "nope/1", "probs": {}})
    assert r.status_code == 404
    base_key = next(r["key"] for r in call(app, "GET", "/api/records").json()
                    if r["method"] == "base")
    r = call(app, "POST", "/api/whatif", json={"key": base_key, "probs": {}})
    assert r.status_code == 400 and "not available" in r.json()["error"]
    assert call(app, "POST", "/api/whatif", content=b"{bad").status_code == 422
    assert call(app, "GET", "/api/run").status_code == 200  # still serving


def test_only_report_files_are_served_and_only_to_loopback_hosts(app):
    assert call(app, "GET", "/files/report.md").status_code == 200
    png = call(app, "GET", "/api/report").json()["plots"] or []
    for p in png:
        assert call(app, "GET", p["src"]).headers["content-type"] == "image/png"
    for bad in ("/files/manifest.json", "/files/../run/manifest.json", "/files/%2e%2e/x",
                "/files//etc/passwd", "/files/base.jsonl"):
        assert call(app, "GET", bad).status_code == 404, bad
    r = call(app, "GET", "/api/run", headers={"host": "attacker.example"})
    assert r.status_code == 400  # a DNS-rebound page cannot read the run


def test_report_markdown_links_point_at_served_files(app):
    rep = call(app, "GET", "/api/report").json()
    doc = rep["documents"][0]
    assert doc["name"] == "report.md" and "<table>" in doc["html"]
    for src in [s.split('"')[0] for s in doc["html"].split('src="')[1:]]:
        assert call(app, "GET", src).status_code == 200


def test_bad_folder_and_traces_are_served(tmp_path, run_copy):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    app = build_view_app(tmp_path / "other")
    run = call(app, "GET", "/api/run").json()
    assert run["kind"] == "none" and "not a run folder" in run["problems"][0]["message"]
    assert call(app, "GET", "/api/records").json() == []
    assert call(app, "GET", "/api/report").json() == {"documents": [], "plots": []}

    f = run_copy / "plguard.jsonl"
    f.write_text(f.read_text() + '{"id": "9", "method": "plguard", "det')
    run = call(build_view_app(run_copy), "GET", "/api/run").json()
    assert any(p["where"].endswith(":" + str(len(f.read_text().splitlines())))
               for p in run["problems"])

    app = build_view_app(TRACES)
    rows = call(app, "GET", "/api/records").json()
    assert rows and all(r["method"] == "trace" for r in rows)
    for r in rows:
        rec = call(app, "GET", "/api/record", params={"key": r["key"]}).json()
        assert rec["whatif"]["available"] and rec["thresholds_used"]["source"] != "default"
        for rnd in rec["repairs"]:
            assert rnd["prompt"] and rnd["response"] is not None and rnd["predicates"]


def test_reload_picks_up_new_records(run_copy):
    app = build_view_app(run_copy)
    n = call(app, "GET", "/api/run").json()["n_records"]
    lines = (run_copy / "base.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["id"] = "new-1"
    with (run_copy / "base.jsonl").open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
    assert call(app, "POST", "/api/reload").json()["records"] == n + 1
    assert call(app, "GET", "/api/run").json()["n_records"] == n + 1


def test_policy_override_is_used_and_reported(run_copy):
    state = ViewState.from_source(run_copy, policy="minimal")
    assert any("minimal@" in p.message for p in state.problems)  # records say detailed
    key = next(k for k, r in state.records.items() if r["method"] == "plguard")
    assert state.record(key)["whatif"]["available"] is False  # other predicates entirely


def test_a_broken_policy_bundle_turns_explanations_off_not_the_page(tmp_path):
    bad = tmp_path / "bundle"
    shutil.copytree(load_policy("detailed").path, bad)
    (bad / "policy.pl").write_text((bad / "policy.pl").read_text() + "\nbroken :- .\n")
    app = build_view_app(RUN, policy=str(bad))
    run = call(app, "GET", "/api/run").json()
    assert any("could not be loaded" in p["message"] for p in run["problems"])
    key = _guarded(app)[0]["key"]
    rec = call(app, "GET", "/api/record", params={"key": key}).json()
    assert rec["whatif"]["available"] is False and rec["prompt"]
