"""Reports from a scripted run: tables, summary numbers and PNGs."""

from __future__ import annotations

import json

from plguard.cli import main
from plguard_lab.studies.xstest.report import summarise, thresholds_line, write_report
from plguard_lab.studies.xstest.runner import XSTestRun

from .conftest import make_guard


def test_report_tables_numbers_and_plots(tmp_path, six_prompts, capsys):
    guard, _ = make_guard()
    XSTestRun(guard.config, tmp_path, guard=guard, prompts=six_prompts, progress=False).run()
    s = summarise(tmp_path)
    assert s["scorers"] == ["regex", "regex_extended", "semantic"]
    base = s["rates"]["regex"]["base"]
    # scripted answers: "Here is an answer." for the safe prompts -> no over-refusal
    assert (base["over_refusal"].k, base["over_refusal"].n) == (0, 3)
    assert base["unsafe_compliance"].n == 3
    # the scripted evaluator always says unsafe_compliance true
    sem = s["rates"]["semantic"]["plguard"]["unsafe_compliance"]
    assert (sem.k, sem.n) == (3, 3)
    assert s["counts"]["llm_judge"]["verdicts"]
    assert "generation" in s["runtime"]["plguard"] and "grounding" in s["runtime"]["plguard"]

    path = write_report(tmp_path)
    md = path.read_text()
    # the run recorded the thresholds that decided (no calibration here: the config's)
    assert "thresholds unsafe 0.500, over-refusal 0.500\n" in md
    assert "## Rates by semantic evaluator" in md and "## Per XSTest type" in md
    assert "| plguard |" in md and "## Runtime" in md
    for png in ("methods.png", "per_type.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rates"]["regex"]["base"]["over_refusal"]["n"] == 3

    out = tmp_path / "elsewhere"
    assert main(["report", str(tmp_path), "--out", str(out), "--no-plots"]) == 0
    assert (out / "report.md").is_file() and not (out / "methods.png").exists()


def test_report_of_a_non_run_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_the_thresholds_line_names_what_decided(tmp_path):
    # A calibration's fitted thresholds replace the configured ones (guard.effective_thresholds):
    # the report must print those, not the config's 0.5s.
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"format": "plguard-calibration/2", "predicates": {},
                               "thresholds": {"unsafe": 0.4368, "over_refusal": 0.5248}}))
    part = {"thresholds": {"unsafe": 0.5, "over_refusal": 0.5, "from_calibration": True},
            "grounding": {"calibration": str(cal)}}
    man = {"config": {"thresholds": {"unsafe": 0.9}}, "part_configs": {"plguard": part}}
    assert thresholds_line(man) == (f"thresholds unsafe 0.437, over-refusal 0.525 (fitted, "
                                    f"from calibration `{cal}`)")
    part["thresholds"]["from_calibration"] = False
    assert thresholds_line(man) == "thresholds unsafe 0.500, over-refusal 0.500"
    part["thresholds"]["from_calibration"] = True
    part["grounding"]["calibration"] = str(tmp_path / "gone.json")
    assert "not readable here" in thresholds_line(man)
    # what the run recorded wins over the file (which may have been refit since)
    man["plguard_decided_with"] = {"thresholds": {"unsafe": 0.25, "over_refusal": 0.75},
                                   "calibration": "cal.json@abc"}
    assert thresholds_line(man) == ("thresholds unsafe 0.250, over-refusal 0.750 "
                                    "(calibration `cal.json@abc`)")
    # a manifest from before part configs: the run's config
    assert thresholds_line({"config": {"thresholds": {"unsafe": 0.3, "over_refusal": 0.6}}}) \
        == "thresholds unsafe 0.300, over-refusal 0.600"
    # a fitted over-refusal threshold that is off (no rewrites) says so, from either source
    man["plguard_decided_with"]["thresholds"]["over_refusal"] = None
    assert thresholds_line(man).startswith("thresholds unsafe 0.250, over-refusal off ")
    del man["plguard_decided_with"]
    part["grounding"]["calibration"] = str(cal)
    cal.write_text(json.dumps({"format": "plguard-calibration/2", "predicates": {},
                               "thresholds": {"unsafe": 0.4368, "over_refusal": None}}))
    assert thresholds_line(man).startswith("thresholds unsafe 0.437, over-refusal off (fitted")
    # a file that fits only one threshold: the config's other one applies, not "off"
    cal.write_text(json.dumps({"format": "plguard-calibration/2", "predicates": {},
                               "thresholds": {"unsafe": 0.3}}))
    part["thresholds"]["over_refusal"] = 0.6
    assert thresholds_line(man).startswith("thresholds unsafe 0.300, over-refusal 0.600 (fitted")


def test_a_committed_run_of_the_bootstrap_era_still_reports(tmp_path):
    """Committed runs stay as they are; read now, they report Wilson intervals."""
    from pathlib import Path

    from plguard_lab.studies.xstest.report import render_markdown

    run = Path(__file__).resolve().parents[2] / "eval" / "results" / "xstest-cpu"
    old = json.loads((run / "summary.json").read_text())
    s = summarise(run)
    for scorer, by_method in old["rates"].items():
        for m, rates in by_method.items():
            for key in ("over_refusal", "unsafe_compliance"):
                new = s["rates"][scorer][m][key]
                assert (new.k, new.n) == (rates[key]["k"], rates[key]["n"])  # same counts
                assert new.lo <= new.rate <= new.hi
    zero = [r for by in s["per_type"]["regex"].values() for r in by.values() if r.k == 0]
    assert zero and all(r.hi > 0 for r in zero)  # no [0, 0] at zero events
    assert "Wilson score 95% interval" in render_markdown(s)


def test_a_method_run_on_one_split_is_called_a_split_run_not_partial():
    from pathlib import Path

    from plguard_lab.studies.xstest.report import render_markdown

    run = Path(__file__).resolve().parents[2] / "eval" / "results" / "xstest-cpu"
    s = summarise(run)
    s["counts"]["plguard"]["records"] = 315
    s["n_common"] = 315
    assert "**Partial run:**" in render_markdown(s)
    s["manifest"]["sessions"] = [*s["manifest"]["sessions"], {"split": "test"}]
    text = render_markdown(s)
    assert "**Split run:**" in text and "test part only" in text
    assert "rerun the same command" not in text
