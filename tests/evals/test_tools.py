"""calibrate, sweep and ablate on small inputs (scripted backend; one tiny real-model run)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plguard.cli import main
from plguard.config import GroundingConfig, Thresholds
from plguard.decide import decide
from plguard.errors import InputError
from plguard.grounding import Grounder, load_calibration
from plguard.policy import load_policy
from plguard.records.store import read_jsonl
from plguard.types import PolicyResult
from plguard_lab.labels.xstest import load_completions, load_prompts
from plguard_lab.studies.quality.platt import apply_platt, brier, ece, fit_platt
from plguard_lab.studies.tuning.ablation import ablate, base_records
from plguard_lab.studies.tuning.sweep import SweepData, best_thresholds, load_source, outcome, sweep
from tests.scripted import ScriptedBackend


def random_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return SweepData("t", rng.random(n), rng.random(n), rng.random(n) < 0.4, rng.random(n) < 0.3)


@pytest.mark.parametrize("tu,to", [(0.5, 0.5), (0.2, 0.8), (0.9, 0.1), (0.0, 1.0)])
def test_sweep_outcome_matches_decide(tu, to):
    d = random_data()
    unsafe_ok, over = [], []
    for pu, po, bad, ref in zip(d.p_unsafe, d.p_over, d.unsafe_prompt, d.refuses, strict=True):
        act = decide(PolicyResult("p", {"u": pu, "o": po}), ["u"], ["o"],
                     Thresholds(unsafe=tu, over_refusal=to)).action
        refusal = act == "refuse" or (act == "allow" and ref)
        (unsafe_ok if bad else over).append(not refusal if bad else refusal)
    assert outcome(d, tu, to) == pytest.approx((np.mean(unsafe_ok), np.mean(over)))


def test_best_thresholds_respects_ceiling():
    s = sweep(random_data(200, 1))
    for ceiling in (0.0, 0.2, 0.5):
        c = best_thresholds(s, ceiling)
        assert c.feasible and c.unsafe_rate <= ceiling + 1e-12
        assert c.over_rate == pytest.approx(s.over_rate[s.unsafe_rate <= ceiling].min())
    s0 = sweep(random_data(200, 1))
    assert best_thresholds(s0, 1.0).over_rate == pytest.approx(s0.over_rate.min())


def labelled_folder(tmp_path, n=30, policy="minimal"):
    """A fake guard-labelled folder over real completion uids (predictive scores)."""
    items = load_completions()[::75][:n]
    rng = np.random.default_rng(0)
    recs = []
    for c in items:
        harm = 0.7 if c.label == "unsafe" else 0.3
        ref = 0.8 if c.final_label != "1_full_compliance" else 0.4
        p = {"request_is_harmful": harm, "request_is_benign_sensitive_context": 1 - harm,
             "response_provides_harmful_instructions": float(rng.random()),
             "response_refuses": ref}
        recs.append({"id": c.uid, "error": None, "predicates": p,
                     "strongest_unsafe": ["u", harm * (1 - ref)],
                     "strongest_over_refusal": ["o", (1 - harm) * ref]})
    d = tmp_path / "labelled"
    d.mkdir()
    (d / "guard.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "guard-labelled.json").write_text(json.dumps({"meta": {"policy": f"{policy}@x",
                                                                "model": "scripted"}}))
    return d


def test_sweep_cli_on_labelled_folder(tmp_path, capsys):
    d = labelled_folder(tmp_path)
    assert main(["sweep", "--run", str(d), "--max-unsafe", "0.1",
                 "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "labelled:minimal" in out and "unsafe compliance <= 0.1" in out
    assert (d / "report" / "sweep.png").stat().st_size > 1000
    best = json.loads((tmp_path / "s.json").read_text())["labelled:minimal"]["best"]
    assert best["unsafe_rate"] <= 0.1


def test_fit_platt_recovers_parameters():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2, 4000)
    p_raw = 1 / (1 + np.exp(-x))
    y = rng.random(4000) < 1 / (1 + np.exp(-(0.5 * x - 1.0)))
    a, b = fit_platt(p_raw, y)
    assert a == pytest.approx(0.5, abs=0.08) and b == pytest.approx(-1.0, abs=0.12)
    cal = apply_platt(p_raw, a, b)
    assert ece(cal, y) < ece(p_raw, y) and brier(cal, y) < brier(p_raw, y)
    assert ece([0.2, 0.8], [0, 1]) == pytest.approx(0.2)


def test_calibrate_labelled_is_removed_with_a_pointer_to_the_new_command(tmp_path):
    d = labelled_folder(tmp_path)
    out = tmp_path / "cal.json"
    with pytest.raises(SystemExit, match=r"--labelled was removed.*plguard calibrate --model"):
        main(["calibrate", "--labelled", str(d), "--out-file", str(out)])
    assert not out.exists()


def test_a_legacy_calibration_file_still_loads_with_a_warning(tmp_path):
    from plguard.calibration import load_calibration as load_file

    out = tmp_path / "cal.json"  # what the removed writer wrote
    out.write_text(json.dumps({"format": "plguard-calibration/1", "model": "scripted",
                               "predicates": {"response_refuses": {"a": 2.0, "b": -0.5}}}))
    with pytest.warns(UserWarning, match="legacy calibration file.*not the grounding template"):
        cal = load_file(out)
    assert cal.legacy and cal.predicates["response_refuses"] == (2.0, -0.5)
    with pytest.warns(UserWarning, match="legacy"):
        params = load_calibration(out)
    spec = load_policy("minimal").predicate("response_refuses")
    with pytest.warns(UserWarning, match="legacy"):
        g = Grounder(ScriptedBackend(lambda c: "", lambda a, b: 0.8), [spec],
                     GroundingConfig(calibration=str(out)))
    s = g.ground([("q", "r")])[0].scores[0]
    assert s.p_true == pytest.approx(float(apply_platt([0.8], *params["response_refuses"])[0]))


def run_folder(tmp_path, n=6):
    """A fake XSTest run folder: base drafts of safe and unsafe prompts."""
    prompts = load_prompts()
    chosen = [p for p in prompts if p.label == "safe"][:n // 2] + \
        [p for p in prompts if p.label == "unsafe"][:n // 2]
    d = tmp_path / "run"
    d.mkdir()
    recs = [{"id": p.id, "method": "base", "type": p.type, "label": p.label,
             "prompt": p.prompt, "response": "I can't help." if i % 3 == 0 else "Sure: step 1",
             "error": None, "regex": "2_full_refusal" if i % 3 == 0 else "1_full_compliance"}
            for i, p in enumerate(chosen)]
    (d / "base.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def test_ablation_grounds_shared_predicates_once(tmp_path):
    run = run_folder(tmp_path)
    backend = ScriptedBackend(lambda c: "", lambda a, b: 0.7 if "step 1" in a else 0.2)
    pols = ["moderate", "detailed"]
    qs = {n: {q.strip() for p in load_policy(n).predicates for q in (p.question, *p.paraphrases)}
          for n in pols}
    shared = qs["moderate"] & qs["detailed"]
    assert shared  # the two bundles share questions

    def calls(questions):  # request-scope: once per distinct request; response: per pair
        return sum(6 for q in questions)  # 6 distinct requests and 6 pairs here

    s = ablate(run, pols, limit=6, cache=str(tmp_path / "c.sqlite"), generator=backend,
               progress=False)
    assert sum(backend.score_calls) == calls(qs["moderate"] | qs["detailed"])
    assert backend.score_calls[1] == calls(qs["detailed"] - shared)
    assert s["policies"]["detailed"]["questions_scored_per_example"] == len(qs["detailed"]
                                                                            - shared)
    md = (run / "report" / "ablation.md").read_text()
    assert "| moderate |" in md and "| detailed |" in md and "ablation.png" in md
    q = s["policies"]["detailed"]["questions_per_pair"]
    specs = load_policy("detailed").predicates
    assert q["request"] + q["response"] == len(qs["detailed"]) and q["response"] == sum(
        1 + len(p.paraphrases) for p in specs if p.scope == "response")
    assert f"| detailed | {len(specs)} | {q['request']} + {q['response']} |" in md
    assert (run / "report" / "ablation.png").stat().st_size > 1000
    u = s["policies"]["moderate"]["unsafe_compliance"]
    assert u["n"] == 3 and u["lo"] <= u["rate"] <= u["hi"]
    # Rerun: records are resumed and nothing is re-grounded.
    n = len(backend.score_calls)
    ablate(run, pols, limit=6, cache=str(tmp_path / "c.sqlite"), generator=backend,
           progress=False)
    assert len(backend.score_calls) == n
    # A fresh report folder re-grounds entirely from the cache: still no model calls.
    import shutil

    shutil.rmtree(run / "report")
    ablate(run, pols, limit=6, cache=str(tmp_path / "c.sqlite"), generator=backend,
           progress=False, plot=False)
    assert len(backend.score_calls) == n
    names = [d.name for d in load_source(run)]
    assert names == ["xstest:detailed", "xstest:moderate"]


def test_ablation_isolates_a_failing_pair_and_retries_it_on_resume(tmp_path):
    run = run_folder(tmp_path)
    bad = base_records(run)[1]
    state = {"down": True}

    def p_true(prefix, suffix):
        if bad["prompt"] in prefix and state["down"]:
            raise RuntimeError("grounder down")
        return 0.7 if "step 1" in prefix else 0.2

    backend = ScriptedBackend(lambda c: "", p_true)
    kw = dict(limit=6, cache=str(tmp_path / "c.sqlite"), generator=backend, progress=False,
              plot=False)
    s = ablate(run, ["minimal"], **kw)["policies"]["minimal"]
    assert (s["n"], s["errors"]) == (6, 1)
    path = run / "report" / "ablation" / "minimal.jsonl"
    recs = {r["id"]: r for r in read_jsonl(path)}
    failed = recs[bad["id"]]  # the error record keeps what the report groups it by
    assert "grounder down" in failed["error"] and failed["label"] == bad["label"]
    ok = [r for r in recs.values() if r["id"] != bad["id"]]
    assert len(ok) == 5 and all(r["error"] is None and r["wall_s"] > 0 for r in ok)
    calls = len(backend.score_calls)
    state["down"] = False
    s = ablate(run, ["minimal"], **kw)["policies"]["minimal"]
    assert (s["n"], s["errors"]) == (6, 0)
    assert len(backend.score_calls) > calls  # the failed pair alone was grounded again
    retried = {r["id"]: r for r in read_jsonl(path)}[bad["id"]]
    assert retried["error"] is None and retried["action"] and retried["wall_s"] > 0
    assert retried["questions_scored"] is not None
    assert len(path.read_text().splitlines()) == 7  # the retry is appended
    n = len(backend.score_calls)
    ablate(run, ["minimal"], **kw)
    assert len(backend.score_calls) == n  # nothing left to redo


def test_ablation_at_an_over_refusal_threshold_that_is_off(tmp_path):
    import shutil

    from plguard.config import GuardConfig

    run = run_folder(tmp_path)
    # every refusal question says yes, every other question no: the harmless-request rule
    # fires on every pair (0.95 x 0.9), no unsafe rule does
    backend = ScriptedBackend(lambda c: "", lambda a, b: 0.9 if "refus" in b.lower() else 0.05)
    acts = {}
    out = run / "report"
    for name, over in (("on", 0.5), ("off", None)):
        cfg = GuardConfig.from_dict({"generator": {"path": "/nonexistent/scripted"},
                                     "thresholds": {"over_refusal": over}})
        if name == "off":  # decisions made at other thresholds are not reused
            with pytest.raises(InputError, match="other thresholds"):
                ablate(run, ["minimal"], config=cfg, limit=6, cache=None, generator=backend,
                       progress=False, plot=False)
            shutil.rmtree(out)
        s = ablate(run, ["minimal"], config=cfg, limit=6, cache=None, generator=backend,
                   progress=False, plot=False)
        acts[name] = s["policies"]["minimal"]["actions"]
        assert s["policies"]["minimal"]["thresholds"]["over_refusal"] == over
        md = (out / "ablation.md").read_text()
    assert acts["on"]["rewrite"] == 6 and acts["off"] == {"allow": 6, "refuse": 0, "rewrite": 0}
    assert "| 0.500 / off |" in md


def test_guard_labelled_reports_an_over_refusal_threshold_that_is_off(tmp_path):
    from plguard.config import GuardConfig
    from plguard_lab.studies.xstest.labelled import guard_labelled

    cfg = GuardConfig.from_dict({"generator": {"path": "/nonexistent/scripted"},
                                 "policy": "minimal", "thresholds": {"over_refusal": None}})
    backend = ScriptedBackend(lambda c: "", lambda a, b: 0.9 if "refus" in b.lower() else 0.05)
    md = guard_labelled(cfg, tmp_path, limit=40, judge=False, progress=False,
                        generator=backend).read_text()
    res = json.loads((tmp_path / "guard-labelled.json").read_text())  # strict JSON
    over = [v for k, v in res["results"].items() if "over-refusal" in k]
    assert over and over[0]["threshold"] is None and over[0]["positives"] > 0
    assert over[0]["recall"] == 0  # the rule fires everywhere, but off flags nothing
    assert "| off |" in md


def test_base_records_alternate_labels(tmp_path):
    recs = base_records(run_folder(tmp_path), limit=4)
    assert [r["label"] for r in recs] == ["safe", "unsafe", "safe", "unsafe"]


def test_ablate_cli_with_embedded_model(tmp_path, capsys):
    run = run_folder(tmp_path, n=2)
    assert main(["ablate", "--run", str(run), "--policies", "minimal", "--limit", "2",
                 "--cache", str(tmp_path / "c.sqlite"), "--no-progress",
                 "--set", "generator.dtype=float32",
                 "--set", "grounding.heads=null"]) == 0  # zero-shot: every question asked
    out = capsys.readouterr().out
    assert "| minimal | 4 |" in out
    recs = [json.loads(x) for x in (run / "report" / "ablation" / "minimal.jsonl").open()]
    assert len(recs) == 2 and all(r["error"] is None for r in recs)
    assert all(0 <= r["strongest_unsafe"][1] <= 1 for r in recs)
    assert recs[0]["questions_scored"] == 6  # 4 request variants + 2 response questions


def test_sweep_reads_an_xstest_run(tmp_path):
    run = run_folder(tmp_path, n=4)
    base = [json.loads(x) for x in (run / "base.jsonl").open()]
    recs = [{"id": r["id"], "label": r["label"], "error": None,
             "details": {"policy": "minimal@x", "strongest_unsafe": ["u", 0.6 * i / 3],
                         "strongest_over_refusal": ["o", 0.2]}} for i, r in enumerate(base)]
    (run / "plguard.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    [d] = load_source(run)
    assert d.name == "xstest:minimal" and len(d) == 4
    assert list(d.refuses) == [r["regex"] != "1_full_compliance" for r in base]
    # unsafe drafts: ids 2, 3 (p_unsafe 0.4, 0.6) both comply; threshold 0.5 refuses one.
    assert outcome(d, 0.5, 0.5)[0] == pytest.approx(0.5)
