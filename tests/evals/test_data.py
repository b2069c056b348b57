"""XSTest loading: the vendored files, and clear errors for bad CSVs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from plguard.errors import InputError
from plguard_lab.labels.xstest import (
    data_dir,
    load_completions,
    load_prompts,
    seeded_subset,
)


def test_vendored_prompts_are_complete():
    prompts = load_prompts()
    assert len(prompts) == 450
    assert Counter(p.label for p in prompts) == {"safe": 250, "unsafe": 200}
    assert all((p.label == "unsafe") == p.type.startswith("contrast_") for p in prompts)
    assert prompts[0].id == "1" and prompts[0].focus == "kill"
    assert load_prompts(limit=5)[-1].id == "5"


def test_vendored_completions_join_labels_and_strmatch():
    comps = load_completions()
    assert len(comps) == 2250
    assert len({c.uid for c in comps}) == 2250
    assert Counter(c.final_label for c in comps) == {
        "1_full_compliance": 1091, "2_full_refusal": 983, "3_partial_refusal": 176}
    assert all(c.strmatch_label is not None for c in comps)
    unsafe_mi = [c for c in comps if c.model == "mistralinstruct" and c.label == "unsafe"]
    assert Counter(c.final_label for c in unsafe_mi)["1_full_compliance"] == 128


def test_data_dir_is_the_checkout_and_env_overrides(tmp_path, monkeypatch):
    assert (data_dir() / "completions").is_dir()
    (tmp_path / "xstest_prompts.csv").write_text("id,prompt,type,label\n1,hi,homonyms,safe\n")
    monkeypatch.setenv("PLGUARD_XSTEST_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    assert [p.prompt for p in load_prompts()] == ["hi"]


def _write(tmp_path: Path, text: str, name: str = "p.csv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_missing_column_names_file_and_column(tmp_path):
    p = _write(tmp_path, "id,prompt,type\n1,hi,homonyms\n")
    with pytest.raises(InputError, match=r"p\.csv: missing column\(s\) label"):
        load_prompts(p)


def test_bad_label_names_file_row_and_column(tmp_path):
    p = _write(tmp_path, "id,prompt,type,label\n1,hi,homonyms,safe\n2,yo,homonyms,unsure\n")
    with pytest.raises(InputError, match=r"p\.csv: row 2, column 'label': bad label 'unsure'"):
        load_prompts(p)


def test_duplicate_id_and_empty_prompt(tmp_path):
    p = _write(tmp_path, "id,prompt,type,label\n1,hi,homonyms,safe\n1,yo,homonyms,safe\n")
    with pytest.raises(InputError, match="row 2, column 'id': duplicate id"):
        load_prompts(p)
    p = _write(tmp_path, "id,prompt,type,label\n1,,homonyms,safe\n", "e.csv")
    with pytest.raises(InputError, match="row 1, column 'prompt': empty prompt"):
        load_prompts(p)


def test_missing_file_and_unreadable_csv(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_prompts(tmp_path / "nope.csv")
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="bin.csv"):
        load_prompts(p)


def test_bad_final_label_in_completions(tmp_path):
    root = tmp_path / "completions"
    root.mkdir()
    _write(tmp_path, "id,prompt,type,label\n1,hi,homonyms,safe\n", "xstest_prompts.csv")
    header = "id,type,prompt,completion,annotation_1,annotation_2,agreement,final_label\n"
    (root / "xstest_v2_completions_gpt4.csv").write_text(
        header + 'v2-1,homonyms,hi,"Hello, there",1_full_compliance,1_full_compliance,'
        "TRUE,4_maybe\n")
    with pytest.raises(InputError, match=r"gpt4\.csv: row 1, column 'final_label': bad label "
                       r"'4_maybe'"):
        load_completions(root, models=["gpt4"])
    (root / "xstest_v2_completions_gpt4.csv").write_text(
        header + "v2-9,homonyms,hi,x,1_full_compliance,1_full_compliance,TRUE,"
        "1_full_compliance\n")
    with pytest.raises(InputError, match="id 'v2-9' is not in the prompts file"):
        load_completions(root, models=["gpt4"])


def test_seeded_subset_is_stratified_and_reproducible():
    comps = load_completions()
    a = seeded_subset(comps, 100, 0)
    assert len(a) == 100 and a == seeded_subset(comps, 100, 0)
    assert a != seeded_subset(comps, 100, 1)
    assert {c.model for c in a} == {"gpt4", "llama2new", "llama2orig", "mistralguard",
                                    "mistralinstruct"}
    assert abs(Counter(c.label for c in a)["safe"] - 100 * 250 / 450) <= 1
    assert seeded_subset(comps, None, 0) == comps
    assert set(seeded_subset(comps, 16, 0)) <= set(a)  # prefix-stable: reruns reuse results
