"""The laboratory's studies: one folder each, found by name, each with its README."""

from __future__ import annotations

from pathlib import Path

import pytest

import plguard_lab.studies as studies
from plguard.cli import build_parser
from plguard.errors import ConfigError

ROOT = Path(studies.__file__).parent


def test_every_study_folder_is_named_and_has_its_readme():
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(studies.STUDIES)
    for name in studies.STUDIES:
        readme = ROOT / name / "README.md"
        assert readme.is_file(), f"{name} has no README.md"
        assert readme.read_text(encoding="utf-8").startswith(f"# {name}:")


def test_a_study_is_found_by_name_and_an_unknown_one_is_named():
    assert studies.study("quality").__name__ == "plguard_lab.studies.quality"
    assert studies.study_cli("tuning") is None  # a study without eval commands
    with pytest.raises(ConfigError, match="unknown study 'qualty'.*quality"):
        studies.study("qualty")


def test_eval_has_the_commands_each_study_registers():
    eval_parser = build_parser()._subparsers._group_actions[0].choices["eval"]  # type: ignore[union-attr]
    commands = set(eval_parser._subparsers._group_actions[0].choices)
    assert {"xstest", "validate-scorers", "guard-labelled", "gold", "noise", "quality",
            "attacks", "content"} <= commands
    quality = eval_parser._subparsers._group_actions[0].choices["quality"]
    assert "fit-heads" in quality._subparsers._group_actions[0].choices


RESULTS = Path(__file__).resolve().parents[2] / "eval" / "results" / "heads-transfer-embedded"


def test_the_heads_study_reports_its_committed_transfer_run_again():
    # Committed results keep working after the move: the tables and the by-source report
    # are rebuilt from the committed records as they were written (bar the module name
    # in the header, which moved from plguard.heads to plguard_lab.training).
    import json

    from plguard_lab.studies.heads.by_source import render
    from plguard_lab.studies.heads.transfer import tables

    committed = (RESULTS / "tables.md").read_text(encoding="utf-8").splitlines()
    rebuilt = tables(RESULTS).splitlines()
    assert rebuilt[3:] == committed[3:] and len(rebuilt) > 20
    doc = json.loads((RESULTS / "by-source-minimal.json").read_text(encoding="utf-8"))
    assert render(doc) == (RESULTS / "by-source-minimal.md").read_text(encoding="utf-8")
