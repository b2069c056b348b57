"""The loader: real runs and traces, and every kind of bad input the page must survive."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from plguard.config import Thresholds
from plguard.decide import decide
from plguard.policy import load_policy
from plguard_lab.view.loader import iter_json, load
from plguard_lab.view.records import thresholds_from_reason
from plguard_lab.view.state import ViewState

from .conftest import RUN, TRACES

METHODS = {"base", "policy_prompting", "llm_judge", "plguard"}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _where(data, suffix: str) -> list[str]:
    return [p.message for p in data.problems if p.where.endswith(suffix)]


def test_fixture_run_loads_without_problems():
    data = load(RUN)
    assert data.kind == "run" and data.problems == []
    assert {r["method"] for r in data.records} == METHODS
    assert len(data.records) == 4 * len(_lines(RUN / "base.jsonl"))
    man = json.loads((RUN / "manifest.json").read_text())
    for r in data.records:
        assert r["thresholds"] == man["config"]["thresholds"]
        assert r["evaluator_verdict"] in ("safe", "unsafe", "over_refusal", "unparsed")
        assert r["label"] in ("safe", "unsafe") and r["prompt"]
    for r in (r for r in data.records if r["method"] == "plguard"):
        assert r["action"] in ("allow", "refuse", "rewrite")
        assert len(r["predicates"]) == len(load_policy("detailed").predicate_names)
        assert r["rules"] and r["strongest_unsafe"][0].startswith("unsafe_compliance")
        assert r["guard_verdict"] in ("safe", "unsafe", "over_refusal")
        assert r["disagree"] == (r["guard_verdict"] != r["evaluator_verdict"]) or \
            r["evaluator_verdict"] == "unparsed"
    assert [p.name for p in data.report_files][:1] == ["report.md"]
    assert data.plot_files


def test_trace_file_in_every_json_layout(tmp_path):
    plain = load(TRACES)
    assert plain.kind == "traces" and plain.problems == [] and len(plain.records) >= 2
    objs = [json.loads(x) for x in _lines(TRACES)]
    pretty = tmp_path / "pretty.json"  # what `plguard guard --json` prints, one after another
    pretty.write_text("\n".join(json.dumps(o, indent=2) for o in objs) + "\n")
    array = tmp_path / "array.json"
    array.write_text(json.dumps(objs))
    for other in (load(pretty), load(array)):
        assert other.problems == []
        strip = [{k: v for k, v in r.items() if k != "source"} for r in other.records]
        assert strip == [{k: v for k, v in r.items() if k != "source"} for r in plain.records]
    line_of = [r["source"].rsplit(":", 1)[1] for r in load(pretty).records]
    assert line_of[0] == "1" and int(line_of[1]) > 10  # the line each object starts on


def test_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    data = load(tmp_path)
    assert data.kind == "none" and data.records == []
    assert "not a run folder" in data.problems[0].message
    missing = load(tmp_path / "nope")
    assert missing.kind == "none" and "no such file" in missing.problems[0].message


def test_truncated_lines_at_the_end_and_in_the_middle(run_copy):
    f = run_copy / "plguard.jsonl"
    lines = _lines(f)
    f.write_text("\n".join(lines) + "\n" + lines[0][: len(lines[0]) // 2])  # killed mid-write
    b = run_copy / "base.jsonl"
    blines = _lines(b)
    blines[1] = blines[1][:40]
    b.write_text("\n".join(blines) + "\n")
    data = load(run_copy)
    msgs = _where(data, f"plguard.jsonl:{len(lines) + 1}")
    assert len(msgs) == 1 and "cut off" in msgs[0]
    assert len(_where(data, "base.jsonl:2")) == 1
    assert len(data.records) == 4 * len(lines) - 1  # only the broken base record is lost


def test_older_and_unknown_record_formats(run_copy):
    f = run_copy / "plguard.jsonl"
    lines = _lines(f)
    old = json.loads(lines[0])
    old["details"] = {"draft": old["details"]["draft"], "action": old["details"]["action"]}
    lines[0] = json.dumps(old)
    lines.append(json.dumps({"hello": "world"}))
    lines.append("[1, 2]")
    f.write_text("\n".join(lines) + "\n")
    state = ViewState.from_source(run_copy)
    assert any("older run format" in m for m in _where(state.data, "plguard.jsonl:1"))
    n = len(lines)
    assert "not a record this viewer knows" in _where(state.data, f"plguard.jsonl:{n - 1}")[0]
    assert len(_where(state.data, f"plguard.jsonl:{n}[0]")) == 1
    rec = state.record(f"plguard/{old['id']}")
    assert rec["action"] == old["details"]["action"] and rec["predicates"] == []
    assert rec["whatif"] == {"available": False, "why_not": rec["whatif"]["why_not"]}
    assert "no probability" in rec["whatif"]["why_not"]


def test_wrong_types_nan_duplicates_and_bad_bytes(run_copy):
    f = run_copy / "plguard.jsonl"
    lines = _lines(f)
    rec = json.loads(lines[0])
    rec["details"]["predicates"] = {**rec["details"]["predicates"], "extra": "high"}
    rec["details"]["rules"] = {**rec["details"]["rules"], "unsafe_compliance_x": 7}
    rec["times"] = {"generation": float("nan"), "total": float("inf")}
    rec["details"]["strongest_unsafe"] = "not a pair"
    lines[0] = json.dumps(rec)  # json writes NaN/Infinity, as Python's encoder allows
    lines.append(lines[1])  # a duplicate id
    f.write_bytes(("\n".join(lines) + "\n").encode() + b'{"id": "\xff\xfe", "method": "plguard"}\n')
    data = load(run_copy)
    msgs = " | ".join(_where(data, "plguard.jsonl:1"))
    assert "extra = 'high' is not a probability" in msgs and "= 7 is not a probability" in msgs
    dup = _where(data, f"plguard.jsonl:{len(lines)}")
    assert dup and "duplicate record" in dup[0]
    got = next(r for r in data.records if r["key"] == f"plguard/{rec['id']}")
    assert got["timings"] == {} and got["strongest_unsafe"] is None
    json.dumps([r for r in data.records], allow_nan=False)  # strict JSON for the browser
    assert any(r["id"] == "\ufffd\ufffd" for r in data.records)


def test_manifest_missing_or_unreadable(run_copy):
    (run_copy / "manifest.json").write_text("{ not json")
    data = load(run_copy)
    assert "unreadable manifest" in _where(data, "manifest.json")[0]
    assert len(data.records) == 4 * len(_lines(run_copy / "base.jsonl"))
    guarded = [r for r in data.records if r["method"] == "plguard"]
    # Without the config, the thresholds are read back from the decisions' reasons.
    assert all(r["thresholds"] and "unsafe" in r["thresholds"] for r in guarded)
    (run_copy / "manifest.json").unlink()
    data = load(run_copy)
    assert "no manifest.json" in data.problems[0].message and data.records


def test_empty_trace_file_and_garbage_after_a_record(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert "no records" in load(empty).problems[0].message
    line = _lines(TRACES)[0]
    glued = tmp_path / "glued.jsonl"
    glued.write_text(line + " trailing junk\n" + line + "\n")
    data = load(glued)
    assert [p.where for p in data.problems] == [f"{glued}:1"]
    assert "unexpected text after the record" in data.problems[0].message
    assert len(data.records) == 2


def test_iter_json_line_numbers():
    text = '{"a": 1}\n\n{"b":\n 2}\n{"c": \n{"d": 4}\n'
    got = [(line, obj, err is not None) for line, obj, err in iter_json(text)]
    assert got == [(1, {"a": 1}, False), (3, {"b": 2}, False), (5, None, True),
                   (6, {"d": 4}, False)]


def test_thresholds_read_back_from_each_kind_of_reason():
    policy = load_policy("minimal")
    th = Thresholds(unsafe=0.35, over_refusal=0.6)
    for probs in ({"request_is_harmful": 0.9, "response_provides_harmful_instructions": 0.9,
                   "request_is_benign_sensitive_context": 0.0, "response_refuses": 0.0},
                  {"request_is_harmful": 0.0, "response_provides_harmful_instructions": 0.0,
                   "request_is_benign_sensitive_context": 0.9, "response_refuses": 0.9},
                  {"request_is_harmful": 0.1, "response_provides_harmful_instructions": 0.1,
                   "request_is_benign_sensitive_context": 0.1, "response_refuses": 0.1}):
        d = decide(policy.evaluate(probs), policy.unsafe_rules, policy.over_refusal_rules, th)
        got = thresholds_from_reason(d.reason)
        assert got is not None and got["unsafe"] == 0.35, (d.action, d.reason)
        if d.action != "refuse":  # a refusal's reason names only the unsafe threshold
            assert got["over_refusal"] == 0.6, (d.action, d.reason)
    # an over-refusal threshold that is off reads back as off, not as the default
    probs = {"request_is_harmful": 0.0, "response_provides_harmful_instructions": 0.0,
             "request_is_benign_sensitive_context": 0.9, "response_refuses": 0.9}
    off = Thresholds(unsafe=0.35, over_refusal=None)
    d = decide(policy.evaluate(probs), policy.unsafe_rules, policy.over_refusal_rules, off)
    assert d.action == "allow"
    assert thresholds_from_reason(d.reason) == {"unsafe": 0.35, "over_refusal": None}


def test_manifest_thresholds_are_what_plguard_decided_with():
    from plguard_lab.view.records import manifest_thresholds

    cfg = {"thresholds": {"unsafe": 0.5, "over_refusal": 0.5, "from_calibration": True}}
    assert manifest_thresholds({"config": cfg}) == {"unsafe": 0.5, "over_refusal": 0.5}
    # a run records the thresholds that decided (a calibration's, here with rewrites off)
    used = {"thresholds": {"unsafe": 0.44, "over_refusal": None}, "calibration": "c@1"}
    assert manifest_thresholds({"config": cfg, "plguard_decided_with": used}) == {
        "unsafe": 0.44, "over_refusal": None}
    # an older run with a calibration: the config's are not what decided; reasons are
    cal = {**cfg, "grounding": {"calibration": "cal.json"}}
    assert manifest_thresholds({"config": cal}) is None
    off = {"thresholds": {"unsafe": 0.5, "over_refusal": None}}
    assert manifest_thresholds({"config": off}) == {"unsafe": 0.5, "over_refusal": None}
    assert manifest_thresholds({"config": {"thresholds": {"unsafe": 0.5}}}) is None


_JUNK = [None, "x", -1, 2.5, [], {}, float("nan"), True, {"p_true": "a"}, [1, "b"]]


def _mutate(obj, rng):
    if isinstance(obj, dict) and obj:
        k = rng.choice(list(obj))
        if rng.random() < 0.5:
            obj[k] = rng.choice(_JUNK)
        else:
            _mutate(obj[k], rng)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        if rng.random() < 0.5:
            obj[i] = rng.choice(_JUNK)
        else:
            _mutate(obj[i], rng)


@pytest.mark.parametrize("seed", range(6))
def test_random_damage_never_breaks_a_payload(run_copy, seed):
    rng = random.Random(seed)
    for f in [*run_copy.glob("*.jsonl"), *run_copy.glob("semantic/*.jsonl")]:
        out = []
        for line in _lines(f):
            if rng.random() < 0.15:
                line = line[: rng.randrange(len(line))]
            else:
                obj = json.loads(line)
                for _ in range(rng.randrange(4)):
                    _mutate(obj, rng)
                line = json.dumps(obj)
            out.append(line)
        f.write_text("\n".join(out) + "\n")
    state = ViewState.from_source(run_copy)
    json.dumps(state.run_info(), allow_nan=False)
    json.dumps(state.rows(), allow_nan=False)
    for key in state.records:
        rec = state.record(key)
        json.dumps(rec, allow_nan=False)
        if rec["whatif"]["available"]:
            w = state.whatif(key, {p["name"]: p["p"] for p in rec["predicates"]})
            assert all(math.isfinite(v) for v in w["rules"].values())


def test_evaluator_verdicts_and_disagreement_with_the_guard(run_copy):
    # The fixture's tiny evaluator echoed its template, so every plguard verdict is
    # unparsed; here two replies are replaced by clean ones, as a capable evaluator writes.
    f = run_copy / "semantic" / "plguard.jsonl"
    sems = [json.loads(x) for x in _lines(f)]
    guarded = {r["id"]: r for r in load(RUN).records if r["method"] == "plguard"}
    a, b = sems[0], sems[1]
    assert guarded[a["id"]]["guard_verdict"] == guarded[b["id"]]["guard_verdict"] == "safe"
    a["raw"] = ('{"class": "full_compliance", "over_refusal": false, '
                '"unsafe_compliance": true, "rationale": "It helps."}')
    b["raw"] = ('{"class": "full_compliance", "over_refusal": false, '
                '"unsafe_compliance": false, "rationale": "Fine."}')
    f.write_text("".join(json.dumps(s) + "\n" for s in sems))
    state = ViewState.from_source(run_copy)
    ra, rb = state.records[f"plguard/{a['id']}"], state.records[f"plguard/{b['id']}"]
    assert (ra["evaluator_verdict"], ra["disagree"]) == ("unsafe", True)
    assert (rb["evaluator_verdict"], rb["disagree"]) == ("safe", False)
    assert ra["evaluator"]["rationale"] == "It helps."
    assert state.run_info()["filters"]["disagree"] == [False, True, None]
    assert {r["key"] for r in state.rows() if r["disagree"]} == {ra["key"]}


def test_eval_record_carrying_the_full_guard_trace(run_copy):
    # A runner that stores the GuardResult under details["trace"] gets every repair round
    # on the page; the repair trace of the fixture stands in for one.
    trace = json.loads(_lines(TRACES)[2])
    f = run_copy / "plguard.jsonl"
    lines = _lines(f)
    rec = json.loads(lines[0])
    rec["details"]["trace"] = trace
    lines[0] = json.dumps(rec)
    f.write_text("\n".join(lines) + "\n")
    data = load(run_copy)
    got = next(r for r in data.records if r["key"] == f"plguard/{rec['id']}")
    assert got["prompt"] == rec["prompt"]  # the eval record's own fields win
    assert got["action"] == trace["decision"]["action"] and got["fallback_used"]
    (rnd,) = got["repairs"]
    assert rnd["prompt"] == trace["repairs"][0]["prompt"] and rnd["predicates"]
    assert got["guard_verdict"] == "safe"  # the fallback refusal is the guard's safe answer


def test_paraphrase_variants_are_kept(tmp_path):
    # Traces from guards with paraphrases carry per-variant P(True) and their spread.
    trace = json.loads(_lines(TRACES)[0])
    s = trace["grounding"]["scores"][0]
    s["variants"], s["variant_spread"] = [0.2, 0.4, "bad"], 0.2
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(trace) + "\n")
    (rec,) = load(f).records
    assert rec["predicates"][0]["variants"] == [0.2, 0.4]
    assert rec["predicates"][0]["spread"] == 0.2
