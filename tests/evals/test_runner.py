"""The runner: records, resume, per-record faults, torn lines, manifest (scripted model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plguard import Guard, GuardConfig
from plguard.errors import ConfigError
from plguard.records.loop import run_safely
from plguard.records.store import JsonlStore, read_jsonl
from plguard_lab.studies.xstest.runner import XSTestRun
from tests.scripted import ScriptedBackend

from .conftest import make_guard, p_true, scripted_reply

METHODS = ("base", "policy_prompting", "llm_judge", "plguard")


def _run(guard, out, prompts, **kw):
    kw.setdefault("scorers", ("regex", "regex_extended", "semantic"))
    return XSTestRun(guard.config, out, guard=guard, prompts=prompts, progress=False,
                     **kw).run()


def test_full_scripted_run_writes_every_record(tmp_path, six_prompts):
    guard, backend = make_guard()
    s = _run(guard, tmp_path, six_prompts)
    assert s.written == {m: 6 for m in METHODS}
    assert s.errors == {m: 0 for m in METHODS} and s.scored == {m: 6 for m in METHODS}
    ids = sorted(p.id for p in six_prompts)
    for m in METHODS:
        recs = read_jsonl(tmp_path / f"{m}.jsonl")
        assert sorted(r["id"] for r in recs) == ids
        assert all(r["error"] is None and r["times"]["total"] > 0 for r in recs)
        assert sorted(r["id"] for r in read_jsonl(tmp_path / "semantic" / f"{m}.jsonl")) == ids
    base = {r["id"]: r for r in read_jsonl(tmp_path / "base.jsonl")}
    judge = read_jsonl(tmp_path / "llm_judge.jsonl")
    plg = read_jsonl(tmp_path / "plguard.jsonl")
    for r in judge + plg:  # the shared draft and its generation time
        assert r["details"]["draft"] == base[r["id"]]["response"]
        assert r["times"]["generation"] == base[r["id"]]["times"]["generation"]
    kill = [r for r in judge if "Step 1" in r["details"]["draft"]]
    assert kill and all(r["details"]["verdict"] == "unsafe" and r["details"]["repaired"]
                        and r["response"] == "I can't help with that." for r in kill)
    assert {"grounding", "reasoning", "repair"} <= set(plg[0]["times"])
    assert {"action", "predicates", "rules"} <= set(plg[0]["details"])
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["config"]["policy"] == "minimal" and man["policy"]["name"] == "minimal"
    assert man["generator"]["model_id"] == "scripted" and man["generator"]["sha256"] is None
    assert man["versions"]["numpy"] and "commit" in man["git"]
    assert man["started"] and man["ended"] and len(man["sessions"]) == 1


def test_rerun_resumes_and_skips_finished_ids(tmp_path, six_prompts):
    guard, backend = make_guard()
    _run(guard, tmp_path, six_prompts[:3], scorers=("regex",))
    calls = len(backend.generate_calls)
    s = _run(guard, tmp_path, six_prompts[:3], scorers=("regex",))
    assert s.written == {m: 0 for m in METHODS} and s.skipped == {m: 3 for m in METHODS}
    assert len(backend.generate_calls) == calls  # nothing regenerated
    s = _run(guard, tmp_path, six_prompts, scorers=("regex",))
    assert s.written == {m: 3 for m in METHODS}
    for m in METHODS:
        ids = [r["id"] for r in read_jsonl(tmp_path / f"{m}.jsonl")]
        assert sorted(ids) == sorted(p.id for p in six_prompts) and len(set(ids)) == 6
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert len(man["sessions"]) == 3


def test_a_failing_example_is_recorded_and_the_run_goes_on(tmp_path, six_prompts):
    bad = six_prompts[1].prompt

    def reply(chat):
        if chat[-1].content == bad:
            raise RuntimeError("backend exploded")
        from .conftest import scripted_reply
        return scripted_reply(chat)

    guard, _ = make_guard(reply)
    s = _run(guard, tmp_path, six_prompts)
    assert s.errors["base"] == 1 and s.written["base"] == 6
    base = {r["id"]: r for r in read_jsonl(tmp_path / "base.jsonl")}
    failed = base[six_prompts[1].id]
    assert failed["response"] is None and "backend exploded" in failed["error"]
    assert sum(r["error"] is None for r in base.values()) == 5
    judge = {r["id"]: r for r in read_jsonl(tmp_path / "llm_judge.jsonl")}
    assert "no base draft" in judge[six_prompts[1].id]["error"]
    # the failed record is not scored, the others are
    assert s.scored["base"] == 5


def test_torn_last_line_is_cut_and_redone(tmp_path, six_prompts):
    guard, _ = make_guard()
    _run(guard, tmp_path, six_prompts[:2], scorers=("regex",))
    path = tmp_path / "base.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b'{"id": "3", "method": "base", "resp')  # killed mid-write
    store = JsonlStore(path)
    assert store.torn_bytes > 0 and len(store) == 2 and path.read_bytes() == good
    _run(guard, tmp_path, six_prompts[:3], scorers=("regex",))
    ids = [r["id"] for r in read_jsonl(path)]
    assert sorted(ids) == sorted(p.id for p in six_prompts[:3])


def test_resume_with_another_config_is_refused(tmp_path, six_prompts):
    guard, _ = make_guard()
    _run(guard, tmp_path, six_prompts[:1], methods=("plguard",), scorers=("regex",))
    other, _ = make_guard(thresholds={"unsafe": 0.3})
    with pytest.raises(ConfigError, match=r"plguard \(differs at: thresholds.unsafe\)"):
        _run(other, tmp_path, six_prompts[:1], methods=("plguard",), scorers=("regex",))


def test_resume_with_another_policy_under_the_same_name_is_refused(tmp_path, six_prompts):
    # The config names the policy (a folder here); its rules can change under that name.
    bundle = tmp_path / "mine"
    shutil.copytree(Path(__file__).resolve().parents[2] / "policies" / "minimal", bundle)

    def guard():
        cfg = GuardConfig.from_dict({"generator": {"path": "scripted-model", "batch_size": 2},
                                     "policy": str(bundle)})
        return Guard(cfg, generator=ScriptedBackend(scripted_reply, p_true))

    out = tmp_path / "run"
    first = guard()
    _run(first, out, six_prompts[:1], methods=("plguard",), scorers=("regex",))
    program = bundle / "policy.pl"
    program.write_text(program.read_text() + "\n% edited after the run started\n")
    second = guard()
    assert second.policy.id != first.policy.id
    with pytest.raises(ConfigError, match=r"plguard \(differs at: policy_id\)"):
        _run(second, out, six_prompts[:1], methods=("plguard",), scorers=("regex",))
    program.write_text(program.read_text().replace("\n% edited after the run started\n", ""))
    assert guard().policy.id == first.policy.id  # restored: it resumes again
    _run(guard(), out, six_prompts[:2], methods=("plguard",), scorers=("regex",))


def test_resume_with_a_calibration_refit_under_the_same_path_is_refused(tmp_path, six_prompts):
    # The config names the calibration file; a refit rewrites it in place.
    cal = tmp_path / "calibration.json"

    def write(over):
        cal.write_text(json.dumps({"model": "scripted", "predicates": {},
                                   "thresholds": {"unsafe": 0.5, "over_refusal": over}}))

    write(0.5)
    out = tmp_path / "run"
    guard, _ = make_guard(grounding={"calibration": str(cal)})
    _run(guard, out, six_prompts[:1], methods=("plguard",), scorers=("regex",))
    write(None)
    refit, _ = make_guard(grounding={"calibration": str(cal)})
    assert refit.thresholds.over_refusal is None
    with pytest.raises(ConfigError, match=r"plguard \(differs at: calibration_id\)"):
        _run(refit, out, six_prompts[:1], methods=("plguard",), scorers=("regex",))
    write(0.5)  # the same content again: it resumes
    _run(make_guard(grounding={"calibration": str(cal)})[0], out, six_prompts[:2],
         methods=("plguard",), scorers=("regex",))


def test_guard_settings_may_change_after_the_drafts_exist(tmp_path, six_prompts):
    # base records depend on the generator only: plguard may be run later with thresholds
    # chosen on dev, reusing the drafts; base itself must not change.
    guard, _ = make_guard()
    _run(guard, tmp_path, six_prompts[:2], methods=("base",), scorers=("regex",))
    tuned, _ = make_guard(thresholds={"unsafe": 0.3})
    s = _run(tuned, tmp_path, six_prompts[:2], methods=("plguard",), scorers=("regex",))
    assert s.written["plguard"] == 2 and s.written["base"] == 0
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["part_configs"]["plguard"]["thresholds"]["unsafe"] == 0.3
    assert "thresholds" not in man["part_configs"]["base"]
    longer, _ = make_guard(generation={"max_new_tokens": 99})
    with pytest.raises(ConfigError, match=r"base \(differs at: generation.max_new_tokens"):
        _run(longer, tmp_path, six_prompts[:2], methods=("base",), scorers=("regex",))


def test_unknown_method_and_scorer(tmp_path, six_prompts):
    guard, _ = make_guard()
    with pytest.raises(ConfigError, match="did you mean 'plguard'"):
        _run(guard, tmp_path, six_prompts, methods=("plgaurd",))
    with pytest.raises(ConfigError, match="unknown scorer"):
        _run(guard, tmp_path, six_prompts, scorers=("bleu",))


def test_judge_alone_implies_base(tmp_path, six_prompts):
    guard, _ = make_guard()
    s = _run(guard, tmp_path, six_prompts[:2], methods=("llm_judge",), scorers=("regex",))
    assert set(s.written) == {"base", "llm_judge"}


def test_interleaved_order_alternates_types(six_prompts):
    from plguard_lab.studies.xstest.runner import interleave_by_type

    order = interleave_by_type(six_prompts)
    assert [p.label for p in order] == ["safe", "unsafe"] * 3
    assert sorted(p.id for p in order) == sorted(p.id for p in six_prompts)


def test_run_safely_isolates_the_bad_item():
    def fn(xs):
        if 3 in xs:
            raise ValueError("three")
        return [x * 2 for x in xs]

    out = run_safely(fn, [1, 2, 3, 4])
    assert out[:2] == [2, 4] and isinstance(out[2], ValueError) and out[3] == 8


def test_run_safely_stops_on_a_dead_backend():
    from plguard.errors import BackendDeadError

    calls = []

    def fn(xs):
        calls.append(list(xs))
        raise BackendDeadError("engine stopped")

    with pytest.raises(BackendDeadError):
        run_safely(fn, [1, 2, 3])
    assert calls == [[1, 2, 3]]  # not retried item by item, nothing recorded as failed


def test_a_dead_vllm_engine_is_told_apart_from_a_failed_call():
    from plguard.backends._vllm_errors import call_error
    from plguard.errors import BackendDeadError

    class EngineDeadError(Exception):  # the name vLLM raises once its engine is gone
        pass

    dead = call_error(EngineDeadError("x"), "generation", "m")
    assert isinstance(dead, BackendDeadError) and "rerun to resume" in str(dead)
    other = call_error(ValueError("bad prompt"), "grounding", "m")
    assert not isinstance(other, BackendDeadError) and "bad prompt" in str(other)


def test_a_failed_example_is_retried_on_resume(tmp_path, six_prompts):
    bad, state = six_prompts[1].prompt, {"fail": True}

    def reply(chat):
        if chat[-1].content == bad and state["fail"]:
            raise RuntimeError("transient backend error")
        return scripted_reply(chat)

    guard, _ = make_guard(reply)
    s = _run(guard, tmp_path, six_prompts, scorers=("regex",))
    assert s.errors["base"] == 1
    state["fail"] = False  # the backend is back
    s = _run(guard, tmp_path, six_prompts, scorers=("regex",))
    assert s.written["base"] == 1 and s.skipped["base"] == 5 and s.errors["base"] == 0
    base = read_jsonl(tmp_path / "base.jsonl")  # the retry replaces the failed record
    assert len(base) == 6 and all(r["error"] is None for r in base)
    store = JsonlStore(tmp_path / "base.jsonl")
    assert six_prompts[1].id in store and store.superseded == 1 and not store.failed


def test_store_indexes_errors_as_not_done(tmp_path):
    path = tmp_path / "s.jsonl"
    store = JsonlStore(path)
    store.append({"id": "a", "error": "boom"})
    store.append({"id": "b", "error": None, "x": 1})
    again = JsonlStore(path)
    assert "a" not in again and "b" in again and again.failed == ["a"]
    again.append({"id": "a", "error": "boom again"})  # a failed retry may fail again
    again.append({"id": "a", "error": None, "x": 2})
    with pytest.raises(ValueError, match="already recorded"):
        again.append({"id": "a", "error": None})
    third = JsonlStore(path)
    assert third.get("a") == {"id": "a", "error": None, "x": 2} and third.superseded == 2
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b"]
    third.compact()
    assert len(path.read_text().splitlines()) == 2 and JsonlStore(path).superseded == 0


def test_map_into_isolates_a_failing_item_and_retries_it_on_resume(tmp_path):
    from plguard.records.loop import map_into

    store, calls, broken = JsonlStore(tmp_path / "m.jsonl"), [], {"c"}

    def fn(xs):
        calls.append(list(xs))
        if broken & set(xs):
            raise RuntimeError("transient")
        return [x.upper() for x in xs]

    def record(x, out):
        if isinstance(out, BaseException):
            return {"id": x, "error": str(out)}
        return {"id": x, "error": None, "out": out}

    items = ["a", "b", "c", "d", "e"]
    n = map_into(store, items, str, fn, record, chunk=2, desc="t", progress=False)
    assert (n.written, n.errors, n.skipped, n.retried) == (5, 1, 0, 0)
    assert ["c"] in calls and ["d"] in calls  # the failed chunk was redone item by item
    broken.clear()
    again = JsonlStore(tmp_path / "m.jsonl")
    n = map_into(again, items, str, fn, record, chunk=2, desc="t", progress=False)
    assert (n.written, n.errors, n.skipped, n.retried) == (1, 0, 4, 1)
    assert [r["out"] for r in read_jsonl(tmp_path / "m.jsonl")] == list("ABCDE")


def test_ray_shards_are_written_once_and_failed_records_retried(tmp_path, six_prompts,
                                                                monkeypatch):
    """Shards as Ray returns them: out of order, one redone after its actor died."""
    from plguard import scale
    from plguard.scale import RayOptions

    bad, state = six_prompts[1].prompt, {"fail": True}

    def reply(chat):
        if chat[-1].content == bad and state["fail"]:
            raise RuntimeError("transient backend error")
        return scripted_reply(chat)

    guard, backend = make_guard(reply)
    # The actors' workers, built by their real factories, over the scripted models.
    monkeypatch.setattr("plguard.guard.Guard", lambda cfg: guard)
    monkeypatch.setattr("plguard.backends.load_backend", lambda cfg: backend)
    shipped = []

    def fake_ray(factory, config, payloads, opts):
        work = scale.build_worker(factory, config)
        done = [work(json.loads(json.dumps(p))) for p in payloads]
        shipped.append(len(done))
        yield from reversed(done)
        yield done[0]  # its actor died after finishing: Ray redoes the shard

    monkeypatch.setattr(scale, "run_shards_ray", fake_ray)

    def run():
        return XSTestRun(guard.config, tmp_path, guard=guard, prompts=six_prompts,
                         progress=False, ray=RayOptions()).run()

    s = run()
    assert shipped == [3, 4]  # 6 prompts 2 a shard, then one scoring shard per method
    assert s.written == {m: 6 for m in METHODS}
    assert s.errors == {"base": 1, "policy_prompting": 0, "llm_judge": 1, "plguard": 1}
    for m in METHODS:  # the redone shard added no line
        assert len((tmp_path / f"{m}.jsonl").read_text().splitlines()) == 6
    assert s.scored["base"] == 5
    state["fail"] = False  # the backend is back: only what failed runs again
    s = run()
    assert s.written == {"base": 1, "policy_prompting": 0, "llm_judge": 1, "plguard": 1}
    assert s.skipped == {"base": 5, "policy_prompting": 6, "llm_judge": 5, "plguard": 5}
    assert s.errors == {m: 0 for m in METHODS}
    assert s.scored == {"base": 1, "policy_prompting": 0, "llm_judge": 1, "plguard": 1}
    for m in METHODS:
        recs = read_jsonl(tmp_path / f"{m}.jsonl")
        assert len(recs) == 6 and all(r["error"] is None for r in recs)
        sem = read_jsonl(tmp_path / "semantic" / f"{m}.jsonl")
        assert sorted(r["id"] for r in sem) == sorted(p.id for p in six_prompts)
