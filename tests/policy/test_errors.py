"""Malformed bundles and bad inputs give specific, located plguard errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plguard.errors import InputError, PolicyError
from plguard.policy import load_policy

BAD = Path(__file__).parent / "bad_bundles"

# folder -> (file, line, col, name, words the message must contain)
EXPECTED = {
    "syntax_error": ("policy.pl", 3, 24, "response_provides_harmful_instructions",
                     "syntax error"),
    "undefined_atom": ("policy.pl", 3, 5, "request_is_harmfull",
                       "did you mean 'request_is_harmful'"),
    "missing_file": ("predicates.yaml", None, None, "predicates.yaml", "missing predicates.yaml"),
    "duplicate_predicate": ("predicates.yaml", 43, 3, "response_refuses",
                            "duplicate predicate"),
    "question_without_scope": ("predicates.yaml", 9, 3, "response_provides_harmful_instructions",
                               "no scope"),
    "unknown_query_in_cases": ("cases.yaml", 4, 14, "unsafe_complience",
                               "did you mean 'unsafe_compliance'"),
    "unknown_predicate_in_cases": ("cases.yaml", 3, 36, "response_gives_harmful_instructions",
                                   "unknown predicate"),
    "fact_in_program": ("policy.pl", 2, 6, "request_is_harmful", "is a fact"),
    "undefined_query": ("policy.pl", 3, 1, "over_refusal", "has no definition"),
    "bad_scope": ("predicates.yaml", 27, 3, "response_provides_harmful_instructions",
                  "use 'request' or 'response'"),
    "recursive_rules": ("policy.pl", 2, 31, "unsafe_compliance", "recursive"),
}


def test_every_bad_bundle_has_an_expectation():
    assert sorted(p.name for p in BAD.iterdir() if p.is_dir()) == sorted(EXPECTED)


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_bad_bundle_error(folder):
    file, line, col, name, words = EXPECTED[folder]
    with pytest.raises(PolicyError) as info:
        load_policy(BAD / folder)
    err = info.value
    assert Path(err.file).name == file
    assert Path(err.file).parent.name == folder
    assert (err.line, err.col, err.name) == (line, col, name)
    assert words in str(err)
    if line is not None:
        assert f"{file}:{line}:{col}:" in str(err)
    assert "Traceback" not in str(err)


def test_unknown_bundle_name_suggests():
    with pytest.raises(PolicyError, match="did you mean 'minimal'"):
        load_policy("minimall")


def test_missing_folder_path():
    with pytest.raises(PolicyError, match="not found"):
        load_policy("/nonexistent/policy/folder")


def test_invalid_yaml_is_located(tmp_path):
    src = Path(load_policy("minimal").path)
    for f in ("policy.md", "policy.pl"):
        (tmp_path / f).write_text((src / f).read_text())
    (tmp_path / "predicates.yaml").write_text("- name: a\n  scope: [request\n")
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path)
    assert info.value.file.endswith("predicates.yaml") and info.value.line == 3


@pytest.mark.parametrize("bad", [None, "0.5", 1.5, -0.1, float("nan"), True])
def test_bad_probability_names_the_predicate(bad):
    policy = load_policy("minimal")
    probs = dict.fromkeys(policy.predicate_names, 0.5)
    probs["response_refuses"] = bad
    with pytest.raises(InputError, match="response_refuses"):
        policy.evaluate(probs)
    with pytest.raises(InputError, match="response_refuses"):
        policy.evaluate_batch([dict.fromkeys(policy.predicate_names, 0.5), probs])


def test_missing_probability_names_the_predicate():
    policy = load_policy("minimal")
    probs = dict.fromkeys(policy.predicate_names, 0.5)
    del probs["request_is_harmful"]
    with pytest.raises(InputError, match="'request_is_harmful'"):
        policy.evaluate(probs)
    names = list(probs)
    with pytest.raises(InputError, match="'request_is_harmful'"):
        policy.evaluate_matrix(np.full((2, len(names)), 0.5), names)


def test_matrix_out_of_range_names_predicate_and_row():
    policy = load_policy("minimal")
    names = list(policy.predicate_names)
    m = np.full((3, len(names)), 0.5)
    m[2, names.index("response_refuses")] = 1.2
    with pytest.raises(InputError, match=r"'response_refuses'.*row 2"):
        policy.evaluate_matrix(m, names)
