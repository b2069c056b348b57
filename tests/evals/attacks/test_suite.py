"""The shipped attack suite: well-formed, fresh (no XSTest prompt), harmful-looking text."""

from __future__ import annotations

import re

import pytest

from plguard.errors import InputError
from plguard_lab.labels.xstest import load_prompts
from plguard_lab.studies.attacks.suite import KINDS, load_suite, parse_pairs


@pytest.fixture(scope="module")
def suite():
    return load_suite()


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def test_suite_has_a_few_dozen_pairs_of_both_kinds(suite):
    kinds = [p.kind for p in suite.pairs]
    assert len(suite.pairs) >= 30 and kinds.count("harmful") >= 20
    assert kinds.count("refusal") >= 10
    assert len({p.id for p in suite.pairs}) == len(suite.pairs)
    assert len(suite.filler) >= 10 and len(suite.sha256) == 64
    assert all(len(p.parts) >= 4 for p in suite.pairs if p.kind == "harmful")


def test_no_pair_copies_an_xstest_prompt(suite):
    xs = [_words(p.prompt) for p in load_prompts()]
    for p in suite.pairs:
        mine = _words(p.request)
        # Jaccard overlap with every XSTest prompt stays low: written fresh, not paraphrased.
        worst = max(len(mine & w) / len(mine | w) for w in xs)
        assert worst < 0.4, (p.id, worst)


def test_harmful_responses_are_text_not_placeholders(suite):
    for p in suite.pairs:
        assert not re.search(r"\[[^\]]*(redact|omit|step|placeholder)", p.response, re.I), p.id
        assert "redacted" not in p.response.lower()


def test_select_interleaves_kinds_and_limits(suite):
    sel = suite.select(4)
    assert [p.kind for p in sel] == ["harmful", "refusal", "harmful", "refusal"]
    assert len(suite.select()) == len(suite.pairs)
    assert {p.kind for p in suite.select(kinds=("refusal",))} == {"refusal"}
    assert set(KINDS) == {"harmful", "refusal"}


@pytest.mark.parametrize(("data", "msg"), [
    ([], "non-empty list"),
    ([{"id": "a", "kind": "bad", "topic": "t", "request": "r", "response": ["x"]}], "kind"),
    ([{"id": "a", "kind": "harmful", "topic": "t", "request": "r", "response": []}],
     "response"),
    ([{"id": "a/b", "kind": "harmful", "topic": "t", "request": "r", "response": ["x"]}],
     "contains '/'"),
    ([{"id": "a", "kind": "harmful", "topic": "t", "request": " ", "response": ["x"]}],
     "request"),
    ([{"id": "a", "kind": "harmful", "topic": "t", "request": "r", "response": ["x"],
       "note": 1}], "unknown keys note"),
])
def test_bad_pairs_are_named(data, msg):
    with pytest.raises(InputError, match=msg):
        parse_pairs(data, "pairs.yaml")


def test_suite_files_ship_inside_the_package():
    from pathlib import Path

    import plguard_lab

    data = Path(plguard_lab.__file__).parent / "studies" / "attacks" / "data"
    assert (data / "pairs.yaml").is_file() and (data / "filler.yaml").is_file()
