"""The unsafe-content study: its items, threshold rule, pairwise accuracy and a real run."""

import json

import pytest

from plguard_lab.labels.xstest import load_prompts
from plguard_lab.studies.content.items import SOURCES, hh_split, hh_turns, load_items
from plguard_lab.studies.content.study import (
    MAX_BENIGN_FLAGS,
    flag_rates,
    pairwise_accuracy,
    pick_threshold,
    report,
)


def test_items_are_split_and_harmful_answers_follow_innocent_requests():
    dev, test = load_items("dev"), load_items("test")
    assert {it.source for it in dev} == set(SOURCES) == {it.source for it in test}
    assert not {it.uid for it in dev} & {it.uid for it in test}
    safe = {p.prompt for p in load_prompts() if p.label == "safe"}
    innocent = [it for it in dev if it.source == "harmful_innocent"]
    asked = {it.uid.removesuffix("/asked"): it for it in dev if it.source == "harmful_asked"}
    assert innocent and all(it.request in safe and it.kind == "harmful" for it in innocent)
    for it in innocent:  # the same answer, after its own (unsafe) request
        own = asked[it.uid.removesuffix("/innocent")]
        assert own.answer == it.answer and own.request not in safe


def test_draws_are_nested_and_keep_hh_pairs_whole():
    small, big = load_items("dev", 3), load_items("dev", 6)
    assert {it.uid for it in small} <= {it.uid for it in big}
    hh = [it for it in small if it.source.startswith("hh_")]
    pairs = {it.pair for it in hh}
    assert len(pairs) == 3 and all(sum(it.pair == p for it in hh) == 2 for p in pairs)


def test_hh_turns_and_split_are_deterministic():
    text = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how do I x?\n\nAssistant: like so."
    assert hh_turns(text) == [("Human", "hi"), ("Assistant", "hello"),
                              ("Human", "how do I x?"), ("Assistant", "like so.")]
    assert hh_split("abc") == hh_split("abc") and {hh_split(str(i)) for i in range(20)} == \
        {"dev", "test"}


def _rec(source, split, p, pair="", action="allow"):
    return {"source": source, "split": split, "pair": pair, "action": action,
            "strongest_content": ["unsafe_content_x", p]}


def test_threshold_is_the_lowest_that_keeps_every_benign_dev_source_cheap():
    recs = [_rec("xstest_safe", "dev", 0.1 * (i % 3)) for i in range(30)]  # 0, .1, .2
    recs += [_rec("coconot_chosen", "dev", 0.0) for _ in range(30)]
    recs += [_rec("xstest_safe", "test", 0.99) for _ in range(30)]  # test never counts
    # 1/3 of xstest_safe is at 0.2: only a threshold above it keeps that source under 5%
    assert pick_threshold(recs) == 0.25
    assert flag_rates(recs, 0.25)[("xstest_safe", "dev")] == (0.0, 30)
    recs.append(_rec("coconot_chosen", "dev", 0.97))  # 1 of 31: still under the limit
    assert 1 / 31 <= MAX_BENIGN_FLAGS and pick_threshold(recs) == 0.25
    # hh-harmless chosen replies count as benign (the one source no head saw)
    recs += [_rec("hh_chosen", "dev", 0.5 if i < 4 else 0.0, f"p{i}") for i in range(20)]
    assert pick_threshold(recs) == 0.55
    recs += [_rec("hh_rejected", "dev", 0.99, f"p{i}") for i in range(20)]  # never a cost
    assert pick_threshold(recs) == 0.55


def test_pairwise_accuracy_counts_whole_pairs_and_ties_half():
    recs = [_rec("hh_rejected", "dev", 0.9, "a"), _rec("hh_chosen", "dev", 0.1, "a"),
            _rec("hh_rejected", "dev", 0.2, "b"), _rec("hh_chosen", "dev", 0.2, "b"),
            _rec("hh_rejected", "dev", 0.9, "c")]  # c has no chosen reply: left out
    assert pairwise_accuracy(recs, "dev") == (0.75, 2)


@pytest.mark.slow
def test_content_run_on_the_embedded_model(tmp_path):
    from plguard.cli import main

    out = tmp_path / "content"
    args = ["eval", "content", "--per-source", "1", "--splits", "dev", "--no-progress",
            "--out", str(out)]
    assert main(args) == 0
    recs = [json.loads(line) for line in (out / "minimal.jsonl").read_text().splitlines()]
    assert {r["source"] for r in recs} == set(SOURCES) and not any(r["error"] for r in recs)
    assert all(r["strongest_content"][0] == "unsafe_content_actionable_harm" for r in recs)
    assert json.loads((out / "manifest.json").read_text())["per_source"] == 1
    text = (out / "report.md").read_text()
    assert "| minimal | 0.75 | dev |" in text and text == report(out, [0.75])
    assert main(args) == 0  # resumed: nothing is redone
    assert len((out / "minimal.jsonl").read_text().splitlines()) == len(recs)
