"""The decision-quality study: split, union grounding, calibration fit, refusal, report."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter

import numpy as np
import pytest

from plguard import Guard, GuardConfig
from plguard.calibration import load_calibration
from plguard.errors import ConfigError, InputError
from plguard.policy import load_policy
from plguard_lab.labels.splits import load_split, make_split
from plguard_lab.labels.xstest import load_prompts
from plguard_lab.metrics import auroc
from plguard_lab.studies.quality.fit import (
    RewriteRule,
    _over_line,
    best_f1_threshold,
    fit_calibrations,
    load_records,
    net_benefit_threshold,
    rewrite_p_value,
)
from plguard_lab.studies.quality.ground import (
    QUESTIONS_PER_CALL,
    ground_labelled,
    labelled_items,
    union_plan,
)
from plguard_lab.studies.quality.report import fast_auroc, quality_report
from plguard_lab.studies.quality.types import render_types, type_breakdown
from tests.scripted import ScriptedBackend

POLICIES = ["minimal", "one_question"]


def test_committed_split_is_the_seeded_stratified_split():
    prompts = load_prompts()
    table = load_split()
    assert table == make_split(prompts)
    dev = [p for p in prompts if table[p.id] == "dev"]
    assert abs(len(dev) / len(prompts) - 0.3) < 0.01
    per = Counter((p.type, p.label) for p in dev)
    total = Counter((p.type, p.label) for p in prompts)
    assert all(abs(per[k] - 0.3 * n) <= 1 for k, n in total.items())
    items = labelled_items("dev", None, 0)
    assert items and all(table[c.id] == "dev" for c in items)
    assert len(items) == 5 * len(dev)
    test = labelled_items("test", 100, 0)
    assert len(test) == 100 and all(table[c.id] == "test" for c in test)


def test_union_plan_asks_shared_questions_once():
    pols = [load_policy(n) for n in ("minimal", "moderate", "detailed")]
    plan = union_plan(pols)
    assert len({s.name for s in plan.specs}) == len(plan.specs)
    # identical wording in moderate and detailed: one question
    assert (plan.keys["moderate"]["response_offers_safe_redirect"]
            == plan.keys["detailed"]["response_offers_safe_redirect"])
    # same name, other wording: two questions
    assert plan.keys["minimal"]["response_refuses"] != plan.keys["detailed"]["response_refuses"]
    n_distinct = len({(s.scope, s.question, s.paraphrases) for p in pols for s in p.predicates})
    assert len(plan.specs) == n_distinct


# A scripted grounder that reads: informative but compressed around 0.5, like a small model.
HARMFUL_WORDS = ("kill", "bomb", "steal", "poison", "hack", "drug", "murder", "weapon")


def _informative(prefix: str, suffix: str) -> float:
    data = prefix.lower()
    resp = data.split("<<<response>>>", 1)[1] if "<<<response>>>" in data else ""
    req = data.split("<<<request>>>", 1)[1].split("<<<end request>>>")[0]
    q = suffix.lower()
    refuses = any(w in resp[:200] for w in ("sorry", "cannot", "can't", "not able", "won't"))
    harmful = any(w in req for w in HARMFUL_WORDS)
    if "refuse" in q or "over_refusal" in q or "nevertheless refuse" in q:
        x = refuses and ("harmless" not in q or not harmful)
    elif "comply" in q or "instructions" in q or "actionable" in q:
        x = harmful and not refuses
    elif "harmless" in q or "benign" in q:
        x = not harmful
    else:
        x = harmful
    return 0.56 if x else 0.47


def _guard_config(**extra):
    return GuardConfig.from_dict({"generator": {"path": "/nonexistent/scripted", "batch_size": 16},
                                  "policy": "minimal", **extra})


def _backend():
    def reply(chat):
        text = chat[-1].content
        return json.dumps({"verdict": "unsafe" if "kill" in text.lower() else "safe",
                           "rationale": "r", "violated_policy": ""})
    return ScriptedBackend(reply, _informative)


@pytest.fixture(scope="module")
def grounded(tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "run"
    backend = _backend()
    cfg = _guard_config()
    for split in ("dev", "test"):
        ground_labelled(cfg, out, policies=POLICIES, split=split, limit=120, progress=False,
                        grounder=backend, generator=backend)
    return out


def test_ground_records_raw_scores_for_every_policy(grounded):
    man = json.loads((grounded / "manifest.json").read_text())
    assert set(man["keys"]) == set(POLICIES)
    assert man["template_version"] == "g1" and man["part_configs"]["grounding"]
    recs = load_records(grounded)
    assert len(recs.rows) == 240 and {r["split"] for r in recs.rows} == {"dev", "test"}
    keys = {k for p in man["keys"].values() for k in p.values()}
    assert all(set(r["scores"]) == keys for r in recs.rows)
    judged = [json.loads(x) for x in (grounded / "judge.jsonl").read_text().splitlines()]
    assert len(judged) == 240 and all(j["parsed"] for j in judged)


def test_ground_resumes_after_an_interruption(tmp_path):
    calls = {"n": 0}

    def flaky(prefix, suffix):
        calls["n"] += 1
        if calls["n"] == 100:
            raise KeyboardInterrupt
        return _informative(prefix, suffix)

    backend = ScriptedBackend(lambda c: "{}", flaky)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        ground_labelled(_guard_config(), out, policies=["minimal"], limit=40, judge=False,
                        progress=False, grounder=backend, generator=backend)
    done_ids = [json.loads(x)["id"] for x in (out / "grounding.jsonl").read_text().splitlines()]
    done = len(done_ids)
    assert 0 < done < 40
    # Grounded in seeded order: what an interrupted run holds is the done-pair subset.
    assert set(done_ids) == {c.uid for c in labelled_items("dev", done, 0)}
    s = ground_labelled(_guard_config(), out, policies=["minimal"], limit=40, judge=False,
                        progress=False, grounder=backend, generator=backend)
    ids = [json.loads(x)["id"] for x in (out / "grounding.jsonl").read_text().splitlines()]
    assert s.grounded == 40 - done and len(ids) == len(set(ids)) == 40
    with pytest.raises(ConfigError, match="not for moderate"):
        ground_labelled(_guard_config(), out, policies=["moderate"], limit=40, judge=False,
                        progress=False, grounder=backend, generator=backend)
    with pytest.raises(ConfigError, match=r"grounding \(differs at: grounding.answer_words"):
        ground_labelled(_guard_config(grounding={"answer_words": "yes_no"}), out,
                        policies=["minimal"], limit=40, judge=False, progress=False,
                        grounder=backend, generator=backend)


def test_a_stopped_run_keeps_all_but_a_few_pairs(tmp_path):
    # The five quality bundles ask 59 questions a pair: flushed every 256 // 59 = 4 pairs
    # (not every 16, the generation batch), so a run stopped midway keeps whole chunks.
    five = ["minimal", "moderate", "detailed", "very_detailed", "one_question"]
    n_q = len(union_plan([load_policy(p) for p in five]).specs)
    chunk = QUESTIONS_PER_CALL // n_q
    assert 1 < chunk < 16
    calls = {"n": 0}

    def stop_midway(prefix, suffix):
        calls["n"] += 1
        if calls["n"] == 8 * n_q:
            raise KeyboardInterrupt
        return _informative(prefix, suffix)

    backend = ScriptedBackend(lambda c: "{}", stop_midway)
    with pytest.raises(KeyboardInterrupt):
        ground_labelled(_guard_config(), tmp_path / "run", policies=five, limit=16,
                        judge=False, progress=False, grounder=backend, generator=backend)
    done = len((tmp_path / "run" / "grounding.jsonl").read_text().splitlines())
    assert 0 < done < 16 and done % chunk == 0


def test_the_judge_model_loads_only_after_grounding(tmp_path, monkeypatch):
    events: list[str] = []
    judge = _backend()

    def p_true(prefix, suffix):
        events.append("ground")
        return _informative(prefix, suffix)

    def load(cfg):
        events.append(f"load {cfg.path}")
        return judge

    monkeypatch.setattr("plguard.backends.load_backend", load)
    grounder = ScriptedBackend(lambda c: "{}", p_true)
    cfg = _guard_config(grounder={"path": "/nonexistent/grounder"})
    ground_labelled(cfg, tmp_path / "a", policies=["minimal"], limit=4, judge=False,
                    progress=False, grounder=grounder)
    assert events and not [e for e in events if e.startswith("load")]  # no judge: never
    events.clear()
    ground_labelled(cfg, tmp_path / "b", policies=["minimal"], limit=4, progress=False,
                    grounder=grounder)
    loads = [i for i, e in enumerate(events) if e.startswith("load")]
    assert [events[i] for i in loads] == ["load /nonexistent/scripted"]
    assert "ground" in events[:loads[0]] and "ground" not in events[loads[0]:]
    man = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert man["generator"]["model_id"] == "scripted"
    assert len((tmp_path / "b" / "judge.jsonl").read_text().splitlines()) == 4


def test_fit_on_dev_and_report_on_test(grounded, tmp_path):
    cal_dir = tmp_path / "cal"
    # The scripted grounder reads harm from a few words, so most refusals of unsafe prompts
    # look like over-refusals to it: at the default cost no rewrite is worth it (tested
    # below); a cost of 0 fits the threshold that fixes every dev over-refusal.
    paths = fit_calibrations(grounded, POLICIES, cal_dir, split="dev",
                             rewrite=RewriteRule(cost=0.0))
    doc = json.loads(paths[0].read_text())
    assert doc["fitted_on"]["split"] == ["dev"] and doc["model"]["model_id"] == "scripted"
    cal = doc["predicates"]["response_refuses"]
    # compressed raw scores (0.47 vs 0.56) are spread apart by the fit
    assert cal["a"] > 3 and cal["before"]["ece"] > cal["after"]["ece"]
    th = doc["thresholds"]
    assert 0 < th["unsafe"] <= 1 and 0 < th["over_refusal"] <= 1
    rep = quality_report(grounded, POLICIES, cal_dir, tmp_path / "rep", split="test",
                         n_boot=50)
    assert rep["n_pairs"] == 120
    rows = {(d["name"], d["target"]): d for d in rep["detectors"]}
    cal_over = rows[("minimal (calibrated)", "over_refusal")]
    raw_over = rows[("minimal (raw, 0.5)", "over_refusal")]
    # at 0.5 the product of two compressed P's never fires; the fitted threshold does
    assert math.isnan(raw_over["precision"]["value"]) or raw_over["recall"]["value"] == 0
    assert cal_over["recall"]["value"] > 0
    assert ("LLM judge (verdict)", "unsafe") in rows
    md = (tmp_path / "rep" / "quality-test.md").read_text()
    assert "Per-predicate AUROC against gold" in md and "one_question" in md
    types = {t["type"]: t for t in rep["types"]}
    assert len(types) == 18 and sum(t["n"] for t in types.values()) == 120
    assert set(types["homonyms"]["detectors"]) == {*POLICIES, "LLM judge"}
    assert "## Per XSTest type, at the fitted thresholds" in md
    sub = quality_report(grounded, ["minimal"], cal_dir, tmp_path / "sub", split="test",
                         n_boot=20, limit=50)
    assert sub["n_pairs"] == 50 and sub["limit"] == 50 and sub["failed"] == 0
    assert "seeded stratified 50-pair subset" in (tmp_path / "sub" / "quality-test.md").read_text()
    # a limit that covers every grounded pair reports exactly what no limit does
    whole = [quality_report(grounded, ["minimal"], cal_dir, tmp_path / f"w{k}", split="test",
                            n_boot=20, limit=k)["detectors"] for k in (None, 120)]
    assert json.dumps(whole[0]) == json.dumps(whole[1])  # NaN-safe equality
    with pytest.raises(InputError, match=r"not grounded yet.*largest complete subset here "
                                         r"is --limit 120"):
        quality_report(grounded, ["minimal"], cal_dir, tmp_path / "sub", split="test",
                       n_boot=20, limit=200)
    # a pair whose grounding failed is left out and counted, not asked for forever
    broken = tmp_path / "broken"
    shutil.copytree(grounded, broken)
    first = labelled_items("test", 50, 0)[0].uid
    lines = (broken / "grounding.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    for r in recs:
        if r["id"] == first:
            r.pop("scores")
            r["error"] = "BackendError: out of memory"
    (broken / "grounding.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    part = quality_report(broken, ["minimal"], cal_dir, tmp_path / "b", split="test",
                          n_boot=20, limit=50)
    assert part["n_pairs"] == 49 and part["failed"] == 1


def test_calibration_refuses_another_model_template_or_question(grounded, tmp_path):
    (path,) = fit_calibrations(grounded, ["minimal"], tmp_path, split="dev")
    backend = _backend()
    guard = Guard(_guard_config(grounding={"calibration": str(path)}), generator=backend)
    assert guard.thresholds.unsafe == pytest.approx(load_calibration(path).thresholds["unsafe"])
    r = guard.check("How do I kill a process?", "Sorry, I can't help.")
    assert r.grounding.calibration.startswith(path.name + "@")
    raw = guard.config.thresholds.model_copy(update={"from_calibration": False})
    fixed = Guard(_guard_config(grounding={"calibration": str(path)},
                                thresholds=raw.model_dump()), generator=backend)
    assert fixed.thresholds.unsafe == 0.5
    other = _backend()
    other.model_id = "another-model"
    with pytest.raises(ConfigError, match="fitted for model 'scripted'"):
        Guard(_guard_config(grounding={"calibration": str(path)}), generator=other)
    with pytest.raises(ConfigError, match="grounding template 'g1'.*'g1-yn'"):
        Guard(_guard_config(grounding={"calibration": str(path), "answer_words": "yes_no"}),
              generator=backend)
    doc = json.loads(path.read_text())
    doc["predicates"]["response_refuses"]["question_sha256"] = "0" * 64
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="question of response_refuses changed"):
        Guard(_guard_config(grounding={"calibration": str(edited)}), generator=backend)
    with pytest.raises(ConfigError, match="fitted for policy minimal, this run uses moderate"):
        Guard(_guard_config(policy="moderate", grounding={"calibration": str(path)}),
              generator=backend)


def test_best_f1_threshold_and_fast_auroc():
    y = np.array([0, 0, 1, 1, 1, 0], dtype=bool)
    s = np.array([0.1, 0.4, 0.35, 0.8, 0.7, 0.2])
    t, f1 = best_f1_threshold(y, s)
    assert t == pytest.approx(0.35) and f1 == pytest.approx(6 / 7)
    rng = np.random.default_rng(1)
    yy = rng.random(300) < 0.3
    ss = np.round(rng.random(300) + yy * 0.3, 1)  # many ties
    assert fast_auroc(yy, ss) == pytest.approx(auroc(yy, ss))


def test_net_benefit_threshold_weighs_rewrites_of_unsafe_refusals():
    # over-refusals (y) and refusals of unsafe prompts (harm) by over-refusal score
    y = np.array([1, 1, 0, 0, 1, 0, 0], dtype=bool)
    harm = np.array([0, 0, 1, 1, 0, 0, 1], dtype=bool)
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    t, net = net_benefit_threshold(y, s, harm, alpha=1.0)
    assert t == pytest.approx(0.8) and net == 2  # 2 fixed, 0 unlocked
    t, net = net_benefit_threshold(y, s, harm, cost=0.2, alpha=1.0)
    assert t == pytest.approx(0.5) and net == pytest.approx(3 - 2 * 0.2)
    # a detector whose top scores are refusals of unsafe prompts never rewrites
    t, net = net_benefit_threshold(y, 1 - s, harm, alpha=1.0)
    assert t is None and net == 0
    # where max F1 still picks a threshold (it always does)
    assert best_f1_threshold(y, 1 - s)[0] == pytest.approx(0.1)
    # cost 0: every over-refusal is worth fixing; the highest threshold that fixes all
    assert net_benefit_threshold(y, s, harm, cost=0.0) == (pytest.approx(0.5), 3.0)
    # no data, or pairs no threshold may rewrite (-inf: refused by the unsafe rules first)
    assert net_benefit_threshold(y[:0], s[:0], harm[:0]) == (None, 0.0)
    assert net_benefit_threshold(y, np.full(7, -np.inf), harm) == (None, 0.0)
    # by default a gain of 2 pairs is not evidence (p = 0.25): rewrites stay off
    assert net_benefit_threshold(y, s, harm) == (None, 0.0)


def test_rewrites_need_a_significant_gain():
    # break-even at cost 1 is a fix rate of 1/2: 4 fixed of 7 is what chance gives
    assert rewrite_p_value(4, 3) == pytest.approx(64 / 128)
    assert rewrite_p_value(5, 0) == pytest.approx(1 / 32)
    assert rewrite_p_value(0, 3) == 1.0 and rewrite_p_value(0, 0) == 1.0
    assert rewrite_p_value(2, 0, cost=0.0) == 0.0  # at cost 0 any fix is a gain
    # a higher cost raises the bar: 9 of 10 is evidence at cost 1, not at cost 4
    assert rewrite_p_value(9, 1) < 0.05 < rewrite_p_value(9, 1, cost=4.0)
    # 5 over-refusals on top, then 4 unsafe refusals, then 6 over-refusals: rewriting all
    # nets the most (+7) but 11 of 15 is not evidence (p = 0.059); the top 5 are (+5,
    # p = 0.031)
    y = np.array([1] * 5 + [0] * 4 + [1] * 6, dtype=bool)
    s = np.linspace(1, 0, y.size)
    assert rewrite_p_value(11, 4) == pytest.approx(1941 / 32768)
    assert net_benefit_threshold(y, s, ~y, alpha=1.0) == (pytest.approx(s[-1]), 7.0)
    assert net_benefit_threshold(y, s, ~y) == (pytest.approx(s[4]), 5.0)
    assert net_benefit_threshold(y, s, ~y, alpha=0.1) == (pytest.approx(s[-1]), 7.0)


def test_fit_report_says_why_rewrites_are_off():
    th = {"over_refusal": None, "rewrite_cost": 1.0, "rewrite_alpha": 0.05,
          "net_benefit_over_refusal": 0.0, "n_over_refusal_positive": 9,
          "n_unsafe_prompt_rows": 30, "untested": {
              "over_refusal": 0.564, "net_benefit": 1.0, "over_refusal_fixed": 4,
              "unsafe_prompt_pairs_rewritten": 3, "p_value": 0.5}}
    line = _over_line(th)
    assert "off" in line and "0.564" in line and "p = 0.500 > 0.05" in line
    on = dict(th, over_refusal=0.7, over_refusal_fixed=6, unsafe_prompt_pairs_rewritten=0,
              rewrite_p_value=1 / 64)
    assert "p = 0.016 <= 0.05" in _over_line(on)


def test_a_fit_with_no_worthwhile_rewrite_turns_rewrites_off(grounded, tmp_path, capsys):
    from plguard.cli import main

    assert main(["eval", "quality", "fit", "--run", str(grounded), "--policies", "minimal",
                 "--out", str(tmp_path), "--rewrite-cost", "1000"]) == 0
    assert "over-refusal **off**" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["eval", "quality", "fit", "--run", str(grounded), "--out", str(tmp_path),
              "--rewrite-cost", "-1"])
    assert "--rewrite-cost: must be a finite number >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "quality", "fit", "--run", str(grounded), "--out", str(tmp_path),
              "--rewrite-cost", "inf"])
    assert "must be a finite number" in capsys.readouterr().err
    for bad in ("0", "1.5", "nan"):
        with pytest.raises(SystemExit):
            main(["eval", "quality", "fit", "--run", str(grounded), "--out", str(tmp_path),
                  "--rewrite-alpha", bad])
        assert "--rewrite-alpha: must be in (0, 1]" in capsys.readouterr().err
    path = tmp_path / "calibration-minimal.json"
    doc = json.loads(path.read_text())
    assert doc["thresholds"]["over_refusal"] is None
    assert doc["thresholds"]["rewrite_cost"] == 1000.0
    assert doc["thresholds"]["rewrite_alpha"] == 0.05
    assert "over-refusal **off**" in path.with_suffix(".md").read_text()
    assert load_calibration(path).thresholds["over_refusal"] is None
    backend = _backend()
    guard = Guard(_guard_config(grounding={"calibration": str(path)}), generator=backend)
    assert guard.thresholds.over_refusal is None
    # a refused harmless request: rewritten at the configured 0.5 with the same calibration
    # and thresholds 0 / 0, never with the fitted "off"
    r = guard.check("What is the capital of France?", "Sorry, I can't help with that.")
    assert r.decision.action == "allow" and "over-refusal threshold off" in r.decision.reason
    low = Guard(_guard_config(grounding={"calibration": str(path)},
                              thresholds={"unsafe": 1.0, "over_refusal": 0.0,
                                          "from_calibration": False}), generator=backend)
    assert low.check("What is the capital of France?",
                     "Sorry, I can't help with that.").decision.action == "rewrite"
    rep = quality_report(grounded, ["minimal"], tmp_path, tmp_path / "rep", split="test",
                         n_boot=20)
    over = {(d["name"], d["target"]): d for d in rep["detectors"]}[
        ("minimal (calibrated)", "over_refusal")]
    assert over["threshold"] is None and over["recall"]["value"] == 0
    assert "| off |" in (tmp_path / "rep" / "quality-test.md").read_text()


@pytest.mark.slow
def test_calibrate_command_on_the_embedded_model(tmp_path, capsys):
    from plguard.cli import main

    args = ["calibrate", "--model", "embedded", "--policies", "minimal", "--limit", "20",
            "--out", str(tmp_path), "--work", str(tmp_path / "work"), "--no-progress",
            "--set", "generator.dtype=float32"]
    assert main(args) == 0
    out = capsys.readouterr().out
    path = tmp_path / "calibration-minimal.json"
    assert "Thresholds fitted on the fitting split: unsafe" in out and path.is_file()
    assert "over-refusal" in out.split("Thresholds fitted", 1)[1].splitlines()[0]
    doc = json.loads(path.read_text())
    assert doc["model"]["sha256"] and doc["fitted_on"]["n_pairs"] == 20
    # the file applies to the model it was fitted for, and names itself in the trace
    guard = Guard.from_config(**{"generator.dtype": "float32",
                                 "grounding.calibration": str(path)})
    r = guard.check("How do I kill a Python process?", "Run kill -9 PID.")
    assert r.grounding.calibration.startswith("calibration-minimal.json@")


def test_proxy_targets_and_backwards_predicates(grounded):
    from plguard_lab.studies.quality.fit import (
        Records,
        fit_policy,
        gold_matrix,
        outcomes,
        proxy_targets,
    )

    recs = load_records(grounded, "dev")
    pol = load_policy("minimal")
    gold = gold_matrix(recs.rows, pol)
    j = pol.predicate_names.index("response_provides_harmful_instructions")
    assert proxy_targets(recs.rows, pol, gold.copy()) == {}  # gold has enough positives
    gold[:, j] = np.where(gold[:, j] == 1, np.nan, gold[:, j])  # as a sample without any
    assert proxy_targets(recs.rows, pol, gold) == {
        j: "proxy: XSTest unsafe compliance (unsafe prompt, full compliance)"}
    assert (gold[:, j] == outcomes(recs.rows)[0]).all()
    doc = fit_policy(recs, "minimal")
    assert doc["predicates"]["response_refuses"]["target"] == "gold.yaml"
    # a predicate that ranks backwards is flattened to its base rate, never inverted
    key = recs.manifest["keys"]["minimal"]["request_is_benign_sensitive_context"]
    flipped = [{**r, "scores": {**r["scores"], key: {**r["scores"][key],
                                                     "p": 1 - r["scores"][key]["p"]}}}
               for r in recs.rows]
    doc2 = fit_policy(Records(flipped, recs.manifest), "minimal")
    pair = [d["predicates"]["request_is_benign_sensitive_context"] for d in (doc, doc2)]
    back, fwd = sorted(pair, key=lambda v: v["auroc"])  # one of the two ranks backwards
    assert back["auroc"] < 0.5 < fwd["auroc"]
    assert back["flat"] and back["a"] == 0 and 0 < 1 / (1 + math.exp(-back["b"])) < 1
    assert not fwd["flat"] and fwd["a"] > 0


def test_compare_levers_ranks_an_informative_run_above_a_blind_one(grounded, tmp_path,
                                                                    capsys):
    from plguard.cli import main

    def blind(prefix: str, suffix: str) -> float:  # reads nothing: the same P everywhere
        return 0.5

    backend = ScriptedBackend(lambda c: "{}", blind)
    other = tmp_path / "blind"
    ground_labelled(_guard_config(), other, policies=["minimal"], split="dev",
                    limit=60, judge=False, progress=False, grounder=backend,
                    generator=backend)
    out = tmp_path / "cmp.md"
    assert main(["eval", "quality", "compare", str(grounded), str(other), "--out", str(out),
                 "--bootstrap", "50"]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["n_pairs"] == 60  # the pairs both runs hold (the blind run has fewer)
    rules = {(r["policy"], r["run"]): r for r in doc["rules"]}
    ref, blind_row = rules[("minimal", str(grounded))], rules[("minimal", str(other))]
    assert blind_row["over_refusal"] == pytest.approx(0.5)
    assert ref["over_refusal"] > 0.6
    lo, hi = blind_row["over_refusal_diff_ci"]
    assert lo <= blind_row["over_refusal"] - ref["over_refusal"] <= hi < 0
    # one_question is only in the reference run: listed there, absent from the other
    assert ("one_question", str(grounded)) in rules
    assert ("one_question", str(other)) not in rules
    preds = {(p["policy"], p["predicate"], p["run"]): p for p in doc["predicates"]}
    assert preds[("minimal", "response_refuses", str(grounded))]["auroc"] > 0.8
    assert {p["target"] for p in doc["predicates"]} <= {"gold", "proxy"}
    assert "| minimal | response_refuses |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["eval", "quality", "compare"])


def test_sparse_predicates_get_a_pooled_map(grounded, monkeypatch):
    import plguard_lab.studies.quality.fit as fit

    recs = load_records(grounded, "dev")
    doc = fit.fit_policy(recs, "minimal")
    # (the scripted grounder reads responses the right way round; its request answers are
    # flattened as backwards, and backwards samples pool to nothing)
    req = {k: v for k, v in doc["predicates"].items() if v["scope"] == "response"}
    assert len(req) == 2 and all(v["method"] == "platt" for v in req.values())
    # Raise the per-class minimum above what each response predicate has alone but below
    # what the two have together: each then gets the one map pooled over both.
    alone = max(min(v["n_pos"], v["n"] - v["n_pos"]) for v in req.values())
    together = min(sum(v["n_pos"] for v in req.values()),
                   sum(v["n"] - v["n_pos"] for v in req.values()))
    assert together > alone + 1
    monkeypatch.setattr(fit, "MIN_PER_CLASS", alone + 1)
    pooled = fit.fit_policy(recs, "minimal")
    got = {k: pooled["predicates"][k] for k in req}
    assert all(v["method"] == "platt-pooled" and v["target"].startswith("pooled:")
               for v in got.values())
    (a1, b1), (a2, b2) = ((v["a"], v["b"]) for v in got.values())
    assert (a1, b1) == (a2, b2) and a1 > 0
    assert not any(k in pooled["uncalibrated"] for k in req)
    assert "pooled map" in fit.format_fit(pooled)
    # Nobody to pool with: the predicate stays uncalibrated, with its reason.
    monkeypatch.setattr(fit, "MIN_PER_CLASS", together + 1)
    none = fit.fit_policy(recs, "minimal")
    assert set(req) <= set(none["uncalibrated"])


def test_type_breakdown_counts_catches_and_the_guards_own_errors():
    def row(t, label, final):
        return {"type": t, "label": label, "final_label": final}

    rows = [row("homonyms", "safe", "2_full_refusal"),      # an over-refusal
            row("homonyms", "safe", "1_full_compliance"),   # fine as it is
            row("homonyms", "safe", "3_partial_refusal"),   # an over-refusal
            row("contrast_homonyms", "unsafe", "1_full_compliance"),  # unsafe compliance
            row("contrast_homonyms", "unsafe", "2_full_refusal")]     # fine as it is
    # the actions of gold.decide_matrix (tested against plguard.decide in test_gold.py)
    refuse = np.array([False, True, False, True, False])
    rewrite = np.array([True, False, False, False, True])
    table = {t["type"]: t for t in type_breakdown(rows, {"p": (refuse, rewrite)})}
    assert table["homonyms"]["positives"] == 2 and table["contrast_homonyms"]["positives"] == 1
    # safe type: one of two over-refusals rewritten; the compliant pair refused is harm
    assert table["homonyms"]["detectors"]["p"] == {"caught": 1, "harm": 1}
    # unsafe type: the compliance refused; the refusal rewritten towards help is harm
    assert table["contrast_homonyms"]["detectors"]["p"] == {"caught": 1, "harm": 1}
    md = "\n".join(render_types(list(table.values())))
    assert "| homonyms | safe | 3 | 1/2, 1 |" in md



def test_fit_counts_pairs_left_out_for_errors_and_reads_retries(grounded, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(grounded, run)
    lines = (run / "grounding.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    dev = [i for i, r in enumerate(recs) if r["split"] == "dev"][:3]
    for i in dev:  # three pairs failed to ground
        recs[i] = {**recs[i], "scores": None, "error": "RuntimeError: transient"}
    failed = [json.dumps(r) for r in recs]
    (run / "grounding.jsonl").write_text("\n".join(failed) + "\n")
    (path,) = fit_calibrations(run, ["minimal"], tmp_path / "cal", split="dev")
    doc = json.loads(path.read_text())
    assert doc["fitted_on"]["n_left_out_errors"] == 3 and doc["fitted_on"]["n_pairs"] == 117
    assert "3 pairs left out because their grounding failed" in path.with_suffix(".md").read_text()
    # a resumed run appends the retries: they replace the failed records
    (run / "grounding.jsonl").write_text("\n".join(failed + [lines[i] for i in dev]) + "\n")
    (path,) = fit_calibrations(run, ["minimal"], tmp_path / "cal2", split="dev")
    doc = json.loads(path.read_text())
    assert doc["fitted_on"]["n_left_out_errors"] == 0 and doc["fitted_on"]["n_pairs"] == 120


def test_fit_heads_is_a_quality_command_served_by_the_heads_study(tmp_path, capsys):
    """``plguard eval quality fit-heads`` keeps its name and options; its handler lives in
    plguard_lab.studies.heads.cli, and a missing heads file is one clear line, not a traceback."""
    from plguard.cli import build_parser, main
    from plguard_lab.studies.heads import cli as heads_cli

    args = build_parser().parse_args(["eval", "quality", "fit-heads", "--heads", "h.json",
                                      "--out", "o.json", "--rewrite-cost", "2"])
    assert args.func is heads_cli._cmd_fit_heads and args.lab_command == "plguard eval"
    assert args.rewrite_cost == 2.0 and args.target is None
    missing = tmp_path / "missing.json"
    assert main(["eval", "quality", "fit-heads", "--heads", str(missing),
                 "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("plguard: error:") and str(missing) in err
    assert "Traceback" not in err and not (tmp_path / "o.json").exists()
