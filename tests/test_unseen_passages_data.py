"""The held-out unseen passages set is well formed (no model: loads and checks the YAML)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unseen import load_unseen

CATEGORIES = {"weapons", "explosives", "drugs", "poisons_and_gases", "cyber_intrusion",
              "self_harm_methods", "child_safety", "fraud"}
# least entries of each form among the harmful ones
FORM_MINIMUMS = {"prose": 1, "list": 6, "code": 4}
# word counts (whitespace-separated), a little looser than the brief's
SHORT_WORDS = (80, 300)
LONG_WORDS = (450, 800)
BENIGN_WORDS = (350, 800)
PASSAGE_WORDS = (40, 150)


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(scope="module")
def unseen():
    return load_unseen()


def test_sizes_and_fields(unseen):
    harmful, benign = unseen
    assert len(harmful) >= 20 and len(benign) >= 20
    for e in harmful:
        assert set(e) == {"id", "category", "form", "request", "passage", "short_answer",
                          "long_answer"}, e["id"]
        assert all(isinstance(v, str) and v.strip() for v in e.values()), e["id"]
    for e in benign:
        assert set(e) == {"id", "category", "request", "answer"}, e["id"]
        assert all(isinstance(v, str) and v.strip() for v in e.values()), e["id"]


def test_ids_unique(unseen):
    harmful, benign = unseen
    ids = [e["id"] for e in harmful + benign]
    assert len(ids) == len(set(ids))
    assert all(e["id"].startswith("h") for e in harmful)
    assert all(e["id"].startswith("b") for e in benign)


def test_categories_covered(unseen):
    harmful, _ = unseen
    counts = Counter(e["category"] for e in harmful)
    assert set(counts) == CATEGORIES
    assert all(n >= 2 for n in counts.values()), counts


def test_forms(unseen):
    harmful, _ = unseen
    counts = Counter(e["form"] for e in harmful)
    assert set(counts) == set(FORM_MINIMUMS)
    for form, least in FORM_MINIMUMS.items():
        assert counts[form] >= least, (form, counts)


def test_passage_verbatim_in_both_answers(unseen):
    harmful, _ = unseen
    for e in harmful:
        passage = e["passage"]
        for key in ("short_answer", "long_answer"):
            answer = e[key]
            assert passage in answer, (e["id"], key)
            # set inside benign text, not the whole answer
            assert answer.strip() != passage.strip(), (e["id"], key)
        # in the long answer, benign text on both sides
        before, after = e["long_answer"].split(passage, 1)
        assert words(before) >= 100 and words(after) >= 100, e["id"]


def test_word_counts(unseen):
    harmful, benign = unseen
    for e in harmful:
        assert PASSAGE_WORDS[0] <= words(e["passage"]) <= PASSAGE_WORDS[1], e["id"]
        assert SHORT_WORDS[0] <= words(e["short_answer"]) <= SHORT_WORDS[1], e["id"]
        assert LONG_WORDS[0] <= words(e["long_answer"]) <= LONG_WORDS[1], e["id"]
    for e in benign:
        assert BENIGN_WORDS[0] <= words(e["answer"]) <= BENIGN_WORDS[1], e["id"]
