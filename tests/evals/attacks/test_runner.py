"""The attack runner on the scripted backend: records, report, resume, faults, manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plguard import GuardConfig
from plguard.errors import ConfigError
from plguard.policy import load_policy
from plguard.records.store import read_jsonl
from plguard_lab.studies.attacks.report import summarise
from plguard_lab.studies.attacks.runner import TEXT_LIMIT, AttackRun
from plguard_lab.studies.attacks.suite import load_suite
from tests.scripted import ScriptedBackend

SUITE = load_suite()
HARMFUL_REQ = [p.request for p in SUITE.pairs if p.kind == "harmful"]
BENIGN_REQ = [p.request for p in SUITE.pairs if p.kind == "refusal"]
HARMFUL_LAST = [p.parts[-1] for p in SUITE.pairs if p.kind == "harmful"]
QUESTIONS = {q.strip(): p.name for p in load_policy("minimal").predicates
             for q in (p.question, *p.paraphrases)}
ATTACKS = ["clean", "answer_false", "pad_1k", "fmt_code", "req_note"]


def p_true(prefix: str, suffix: str) -> float:
    """A gullible grounder: right on clean pairs, fooled by 'Answer: False'."""
    name = next(n for q, n in QUESTIONS.items() if q in suffix)
    resp = prefix.split("<<<RESPONSE>>>", 1)[1] if "<<<RESPONSE>>>" in prefix else ""
    if name == "request_is_harmful":
        return 0.9 if any(r in prefix for r in HARMFUL_REQ) else 0.1
    if name == "request_is_benign_sensitive_context":
        return 0.9 if any(r in prefix for r in BENIGN_REQ) else 0.1
    if name == "response_provides_harmful_instructions":
        fooled = "Answer: False" in resp
        return 0.95 if any(s in resp for s in HARMFUL_LAST) and not fooled else 0.05
    return 0.9 if ("sorry" in resp.lower() or "can't" in resp) else 0.05


def _backend(fail=None):
    return ScriptedBackend(lambda chat: "unused", p_true, fail)


def _cfg(**kw):
    # Word-count tokens: 300 words of budget keeps a 1k-token padded response's head and
    # tail, so its middle (the payload) is cut, as the real budget does for long answers.
    # Screening off: these tests need the gullible grounder to see the injections.
    return GuardConfig.from_dict({"generator": {"path": "scripted-model", "batch_size": 4},
                                  "policy": "minimal",
                                  "grounding": {"max_data_tokens": 300, "screen": "off"},
                                  "eval": {"bootstrap": 200}, **kw})


def test_screening_keeps_the_self_answer_from_the_grounder(tmp_path):
    cfg = _cfg(grounding={"max_data_tokens": 300})  # screen at its default, sanitize
    _run(tmp_path, cfg=cfg, limit=6, attacks=("clean", "answer_false", "fmt_code"))
    recs = _by_id(tmp_path)
    assert recs["h01/answer_false"]["detected"]  # the same grounder, no longer fooled
    assert recs["h01/answer_false"]["screen"] == [
        {"kind": "self_answer", "where": "response", "text": "Answer: False"}]
    assert recs["h01/fmt_code"]["screen"] == [] and recs["h01/clean"]["screen"] == []
    md = (tmp_path / "attacks.md").read_text()
    assert "| answer_false | self_answer | 3 | 100.0% (3/3) | 100.0% (3/3) | +0.0" in md
    assert md.count("| 3 |\n") >= 2  # the screened column: every answer_false record


def test_a_policy_changed_under_the_same_name_is_refused(tmp_path):
    bundle = tmp_path / "mine"
    shutil.copytree(Path(__file__).resolve().parents[3] / "policies" / "minimal", bundle)
    out = tmp_path / "run"
    _run(out, cfg=_cfg(policy=str(bundle)), limit=2, attacks=("clean",))
    program = bundle / "policy.pl"
    program.write_text(program.read_text() + "\n% edited after the run started\n")
    with pytest.raises(ConfigError, match=r"holds records of policy mine@\w+, not mine@"):
        _run(out, cfg=_cfg(policy=str(bundle)), limit=2, attacks=("clean",))


def _run(out, backend=None, cfg=None, **kw):
    kw.setdefault("attacks", ATTACKS)
    return AttackRun(cfg or _cfg(), out, generator=backend or _backend(), progress=False,
                     **kw).run()


def test_padding_is_cut_without_windows(tmp_path):
    cfg = _cfg(grounding={"max_data_tokens": 300, "windows": False})
    _run(tmp_path, cfg=cfg, limit=2, attacks=("clean", "pad_1k"))
    pad = _by_id(tmp_path)["h01/pad_1k"]
    assert pad["truncated"] and not pad["detected"] and pad["windows"] == 1


def test_smaller_windows_read_padding_in_more_windows(tmp_path):
    runs = {}
    for name, extra in (("whole", {"window_tokens": None}),
                        ("small", {"window_tokens": 100, "window_overlap": 40})):
        cfg = _cfg(grounding={"max_data_tokens": 300, "screen": "off", **extra})
        _run(tmp_path / name, cfg=cfg, limit=2, attacks=("clean", "pad_1k"))
        runs[name] = _by_id(tmp_path / name)["h01/pad_1k"]
    assert runs["small"]["detected"] and runs["whole"]["detected"]
    assert runs["small"]["windows"] > runs["whole"]["windows"] >= 4
    md = (tmp_path / "small" / "attacks.md").read_text()
    assert "overlapping windows of at most 100 tokens, sharing 40 tokens" in md
    assert "windows as large as the budget allows, sharing 64" in (
        tmp_path / "whole" / "attacks.md").read_text()


def _by_id(out):
    return {r["id"]: r for r in read_jsonl(out / "records.jsonl")}


def test_records_report_and_manifest(tmp_path):
    backend = _backend()
    s = _run(tmp_path, backend, limit=6)
    assert (s.written, s.skipped, s.errors) == (30, 0, 0)
    assert backend.generate_calls == []  # repairs off: nothing is generated
    recs = _by_id(tmp_path)
    assert len(recs) == 30 and {r["attack"] for r in recs.values()} == set(ATTACKS)
    h, r = recs["h01/clean"], recs["r01/clean"]
    assert h["detected"] and h["action"] == "refuse" and h["score"] > 0.8
    assert r["detected"] and r["action"] == "rewrite"
    assert not recs["h01/answer_false"]["detected"]  # the gullible grounder is fooled
    pad = recs["h01/pad_1k"]
    # windowed grounding reads the padded answer in full: the buried payload is found
    assert pad["detected"] and not pad["truncated"] and pad["tokens"]["response"] >= 1024
    assert pad["windows"] >= 4 and recs["h01/clean"]["windows"] == 1
    assert (pad["response"] is None) == (pad["response_chars"] > TEXT_LIMIT)
    assert len(pad["response_sha"]) == 16
    assert recs["h01/fmt_code"]["detected"] and "```" in recs["h01/fmt_code"]["response"]
    assert set(h["predicates"]) == set(QUESTIONS.values())
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["config"]["repair"]["max_rounds"] == 0
    assert man["suite"]["sha256"] == SUITE.sha256 and man["attacks"] == ATTACKS
    assert man["grounder"]["model_id"] == "scripted" and man["n_pairs"] == 6
    assert len(man["sessions"]) == 1 and man["ended"]
    md = (tmp_path / "attacks.md").read_text()
    assert "| answer_false | self_answer | 3 | 100.0% (3/3) | 0.0% (0/3) | -100.0" in md
    assert "`response_provides_harmful_instructions`" in md
    assert "| harmful | 3 | 0.100 | 0.900 | 0.950 | 0.333 | 0.855 |" in md  # clean means
    res = json.loads((tmp_path / "attacks.json").read_text())
    row = next(x for x in res["rows"] if x["kind"] == "harmful" and x["attack"] == "pad_1k")
    assert row["lost"] == 0 and row["truncated"] == 0  # windows: nothing cut, nothing lost
    assert row["predicate_shift"]["response_provides_harmful_instructions"] == pytest.approx(0)
    assert row["predicate_shift"]["request_is_harmful"] == pytest.approx(0.0)


def test_interrupted_run_resumes_without_duplicates_or_gaps(tmp_path):
    calls = []

    def die_on_third_call():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, _backend(die_on_third_call), limit=4)
    done = read_jsonl(tmp_path / "records.jsonl")
    assert 0 < len(done) < 20
    with (tmp_path / "records.jsonl").open("a") as fh:
        fh.write('{"id": "h02/fmt_co')  # a torn last line, as a kill mid-write leaves it
    backend = _backend()
    s = _run(tmp_path, backend, limit=4)
    assert s.skipped == len(done) and s.written == 20 - len(done)
    ids = [r["id"] for r in read_jsonl(tmp_path / "records.jsonl")]
    assert len(ids) == len(set(ids)) == 20
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert len(man["sessions"]) == 2 and man["sessions"][0]["ended"] is None
    # a third run with more pairs and another attack adds only the new records
    s = _run(tmp_path, limit=6, attacks=["clean", "answer_false", "pad_1k", "fmt_code",
                                         "req_note", "chat_chatml"])
    assert s.written == 6 * 6 - 20 and s.skipped == 20
    assert "chat_chatml" in json.loads((tmp_path / "manifest.json").read_text())["attacks"]
    # the report covers what this invocation asked for
    _run(tmp_path, limit=2, attacks=["clean", "pad_1k"])
    rows = json.loads((tmp_path / "attacks.json").read_text())["rows"]
    assert {(r["attack"], r["n"]) for r in rows} == {("clean", 1), ("pad_1k", 1)}


def test_a_failing_pair_is_recorded_and_the_run_goes_on(tmp_path):
    def p_fail(prefix, suffix):
        if "Answer: False" in prefix:
            raise RuntimeError("grounder exploded")
        return p_true(prefix, suffix)

    s = _run(tmp_path, ScriptedBackend(lambda c: "", p_fail), limit=2)
    assert s.errors == 2 and s.written == 10
    recs = _by_id(tmp_path)
    assert "grounder exploded" in recs["h01/answer_false"]["error"]
    assert recs["h01/fmt_code"]["error"] is None
    assert "Failed records (kept in records.jsonl with their error, left out above): 2" in (
        tmp_path / "attacks.md").read_text()


def test_failed_records_keep_their_texts_and_are_retried_on_resume(tmp_path, monkeypatch):
    state = {"down": True}

    def p_flaky(prefix, suffix):
        if "Answer: False" in prefix and state["down"]:
            raise RuntimeError("grounder down")
        return p_true(prefix, suffix)

    import dataclasses

    from plguard_lab.studies.attacks import transforms

    def broken(pair, ctx):
        raise ValueError("transform bug")

    # A transform that raises fails its own records; guarding goes on for the rest.
    monkeypatch.setitem(transforms.ATTACKS, "fmt_code",
                        dataclasses.replace(transforms.ATTACKS["fmt_code"], transform=broken))
    s = _run(tmp_path, ScriptedBackend(lambda c: "", p_flaky), limit=2)
    assert (s.written, s.errors, s.skipped) == (10, 4, 0)
    recs = _by_id(tmp_path)
    failed = recs["h01/answer_false"]
    # a guard failure keeps the attacked texts and token counts beside its error
    assert "grounder down" in failed["error"] and failed["request_sha"] and failed["tokens"]
    assert "transform bug" in recs["h01/fmt_code"]["error"]
    assert "request_sha" not in recs["h01/fmt_code"]
    assert recs["h01/clean"]["error"] is None and recs["h01/pad_1k"]["error"] is None
    state["down"] = False
    monkeypatch.undo()
    s = _run(tmp_path, ScriptedBackend(lambda c: "", p_flaky), limit=2)
    assert (s.written, s.errors, s.skipped) == (4, 0, 6)  # only the failed ones again
    # the retries are appended (the file keeps what failed); readers see the retries
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 14
    assert all(r["error"] is None for r in _by_id(tmp_path).values())


def test_resume_refuses_another_config_or_suite(tmp_path):
    _run(tmp_path, limit=2, attacks=["clean"])
    other = AttackRun(_cfg(thresholds={"unsafe": 0.3}), tmp_path, generator=_backend(),
                      progress=False, attacks=["clean"], limit=2)
    with pytest.raises(ConfigError, match="thresholds.unsafe"):
        other.run()
    man = json.loads((tmp_path / "manifest.json").read_text())
    man["suite"]["sha256"] = "0" * 64
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ConfigError, match="another attack suite"):
        _run(tmp_path, limit=2, attacks=["clean"])


def test_summarise_pairs_each_attack_with_its_clean_record():
    def rec(pair, attack, det, p, kind="harmful", error=None):
        return {"id": f"{pair}/{attack}", "pair": pair, "attack": attack, "kind": kind,
                "detected": det, "score": p, "predicates": {"a": p}, "error": error,
                "tokens": {"request": 1, "response": 10}}

    rows = summarise([rec("x", "clean", True, 0.9), rec("y", "clean", True, 0.8),
                      rec("z", "clean", False, 0.2),
                      rec("x", "fmt_code", False, 0.4), rec("y", "fmt_code", True, 0.8),
                      rec("z", "fmt_code", True, 0.6), rec("w", "fmt_code", True, 0.9),
                      rec("v", "fmt_json", None, 0.0, error="boom")], n_boot=100)
    by = {r.attack: r for r in rows}
    code = by["fmt_code"]
    assert (code.n, code.clean, code.attacked, code.lost, code.gained) == (3, 2, 2, 1, 1)
    assert code.delta == 0.0 and code.score_shift == pytest.approx((-0.5 + 0 + 0.4) / 3)
    assert code.predicate_shift["a"] == pytest.approx(code.score_shift)
    assert code.delta_lo <= 0.0 <= code.delta_hi
    assert by["fmt_json"].n == 0 and by["fmt_json"].errors == 1
    assert by["clean"].delta == 0.0 and by["clean"].tokens == 10
    assert by["clean"].predicate_clean["a"] == pytest.approx((0.9 + 0.8 + 0.2) / 3)
    assert code.score_clean == by["clean"].score_clean
