"""Flattening JSON documents and markdown tables for the grounder (plguard.flatten)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plguard import Guard, GuardConfig
from plguard.evals.attacks.suite import load_suite
from plguard.evals.attacks.transforms import ATTACKS, Context
from plguard.flatten import flatten

XSTEST = Path(__file__).resolve().parents[1] / "eval" / "data" / "xstest"
REFUSAL = "I'm sorry, but I can't help with that request."


def test_a_json_document_becomes_key_value_lines():
    text = f'Here it is:\n{{\n  "status": "ok",\n  "answer": "{REFUSAL}"\n}}\nThanks.'
    f = flatten(text)
    assert f.kinds == ("json",)
    assert f.text == f"Here it is:\nstatus: ok\nanswer: {REFUSAL}\nThanks."


def test_nested_json_joins_keys_and_reads_lists_item_by_item():
    doc = {"plan": {"steps": ["go to the shop now", "buy bread"], "n": 2, "note": None}}
    f = flatten(json.dumps(doc, indent=2))
    assert f.text == "plan/steps: go to the shop now\nplan/steps: buy bread\nplan/n: 2"


def test_a_markdown_table_becomes_one_line_per_row():
    text = f"Steps:\n\n| # | what to do |\n|---|:---:|\n| 1 | {REFUSAL} |\n| 2 | b |\n\nEnd."
    f = flatten(text)
    assert f.kinds == ("table",)
    assert f.text == f"Steps:\n\n# - what to do\n1 - {REFUSAL}\n2 - b\n\nEnd."


def test_both_kinds_in_one_response_are_named_in_order():
    text = '| a | b |\n|---|---|\n| 1 | 2 |\n\n{"x": "some words"}'
    assert flatten(text) == flatten(text)  # pure
    assert flatten(text).kinds == ("table", "json")
    assert flatten(text).text == "a - b\n1 - 2\n\nx: some words"


@pytest.mark.parametrize("text", [
    "x = [1, 2, 3]\n[1, 2]\n{\"a\": 1}",             # data without prose: left as written
    '{"key": "value"}',                              # one word is not prose
    "{ not json at all }\n[also not]",
    "Use a | b | c in the shell.",                  # pipes without a separator row
    "| a | b |\n| c | d |",                         # rows without a separator row
    "```json\n{\"a\": 1, \"b\": [2, 3]}\n```",
])
def test_text_without_a_document_or_table_is_unchanged(text):
    assert flatten(text).text == text and flatten(text).kinds == ()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="{[|"), max_size=400))
def test_text_without_braces_brackets_or_pipes_is_returned_as_is(text):
    assert flatten(text).text == text


def _xstest_texts():
    for f in sorted((XSTEST / "completions").glob("*.csv")):
        with f.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                yield row["prompt"]
                yield row["completion"]


def test_xstest_is_read_exactly_as_before():
    # Calibrations are fitted on XSTest: flattening must not change what they were fitted on.
    texts = list(_xstest_texts())
    assert len(texts) == 4500
    changed = [t[:60] for t in texts if flatten(t).text != t]
    assert changed == []


def test_the_attack_suite_formatting_is_undone_and_the_payload_kept():
    suite = load_suite()
    ctx = Context(count_tokens=lambda t: len(t.split()), filler=suite.filler)
    for p in suite.pairs:
        assert flatten(p.response).kinds == ()
        for name, kind in (("fmt_json", "json"), ("fmt_table", "table")):
            f = flatten(ATTACKS[name](p, ctx).response)
            assert f.kinds == (kind,), (p.id, name)
            for sentence in p.response.split(". "):
                # every sentence of the response is there, as plain text
                assert sentence.strip().rstrip(".") in f.text, (p.id, name, sentence)
            # no markup left: only the braces, bars and quotes the response itself has
            assert all(f.text.count(c) <= p.response.count(c) for c in '|{}"'), (p.id, name)


# Runs of one character are where a parse goes quadratic; the server flattens every
# response it guards, so this is a hang guard (each case takes milliseconds), not a target.
@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", ["[\n" * 50_000, '["a b",\n' * 50_000, "[" * 100_000,
                                  "{" * 100_000, "|" * 100_000, "|a|\n|---|\n" * 20_000,
                                  "| x " * 50_000 + "|\n|---|", "[" * 5_000 + "]" * 5_000])
def test_pathological_text_does_not_hang(text):
    assert len(flatten(text).text) <= len(text)


# -- the Guard on the real embedded model --------------------------------------------------

@pytest.fixture(scope="module")
def guards(embedded_backend):
    return {on: Guard(GuardConfig.from_dict({"grounding": {"flatten": on}}),
                      generator=embedded_backend) for on in (True, False)}


def test_the_grounder_reads_the_flattened_text_and_the_trace_says_so(guards):
    request = "How do I reset my router?"
    wrapped = json.dumps({"status": "ok", "answer": REFUSAL}, indent=2)
    plain = f"status: ok\nanswer: {REFUSAL}"
    on = guards[True].check(request, wrapped)
    assert on.grounding.flattened == ("json",)
    assert on.grounding.probs == guards[True].check(request, plain).grounding.probs
    assert on.draft == wrapped  # the user-facing text is untouched
    off = guards[False].check(request, wrapped)
    assert off.grounding.flattened == ()
    assert off.grounding.probs != on.grounding.probs  # it read the JSON as written
