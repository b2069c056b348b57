"""The hazards study's arithmetic: worst-answer category scores, detection metrics, items."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from plguard_lab.studies.hazards.items import BENIGN, sample
from plguard_lab.studies.hazards.items import test_items as study_items
from plguard_lab.studies.hazards.metrics import category_matrix, detection, worst_case_matrix


@pytest.fixture(scope="module")
def hazards():
    from plguard.policy import load_policy

    return load_policy("hazards")


def test_batched_worst_case_equals_moderations(hazards):
    from plguard.moderation import worst_case
    from plguard.types import Grounding, PredicateScore

    names = [p.name for p in hazards.predicates if p.scope == "request"]
    rng = np.random.default_rng(0)
    probs = rng.uniform(size=(5, len(names)))
    probs[:2] = 0.0
    probs[1, names.index("request_seeks_hate")] = 0.97
    rules = worst_case_matrix(hazards, probs, names)
    want = worst_case(hazards, [Grounding("m", tuple(
        PredicateScore(n, float(p), 0.0, 0.0, "request") for n, p in zip(names, row, strict=True)))
        for row in probs])
    for q in hazards.unsafe_rules:
        np.testing.assert_allclose(rules[q], [w.probs[q] for w in want], atol=1e-12)
    codes, scores = category_matrix(hazards, rules)
    assert codes[0] == "S1" and len(codes) == 16
    # The hate request's own category is its strongest one.
    assert codes[int(np.argmax(scores[1]))] == "S10"


def test_detection_metrics_on_scripted_scores():
    codes = ["S1", "S2", "S3", "S14"]
    groups = ["S1", "S1", "S2", "S2", "xstest_safe", "coconot_contrast"]
    scores = np.array([[0.9, 0.1, 0.0, 0.95],  # S1, ranked S14 (which no prompt has)
                       [0.2, 0.8, 0.0, 0.0],    # S1, ranked S2
                       [0.1, 0.7, 0.0, 0.0],    # S2, right
                       [0.3, 0.6, 0.0, 0.0],    # S2, right
                       [0.25, 0.05, 0.0, 0.0],
                       [0.0, 0.65, 0.0, 0.0]])
    flagged = np.array([1, 1, 1, 1, 0, 1], dtype=bool)
    d = detection(codes, scores, groups, flagged, n_boot=50, seed=0)
    assert set(d["categories"]) == {"S1", "S2"}  # S3 and S14 have no prompt of their own
    # S1 vs benign: positives 0.9, 0.2 against 0.25, 0.0: 3 of 4 pairs ordered.
    assert d["categories"]["S1"]["vs_benign"]["value"] == pytest.approx(0.75)
    # S1 vs S2's prompts (0.1, 0.3): 0.9 beats both, 0.2 beats 0.1 only.
    assert d["categories"]["S1"]["vs_other"]["value"] == pytest.approx(0.75)
    # S2 (0.7, 0.6) vs benign (0.05, 0.65): 0.6 is below the contrast request only.
    assert d["categories"]["S2"]["vs_benign"]["value"] == pytest.approx(0.75)
    assert d["top1"] == pytest.approx(2 / 4) and d["n_hazardous"] == 4
    assert d["top1_present"] == pytest.approx(3 / 4)  # ranking S1 and S2 only
    assert d["confusion"] == {"S1": {"S14": 1, "S2": 1}, "S2": {"S2": 2}}
    assert d["flagged"]["xstest_safe"] == {"n": 1, "rate": 0.0}
    assert d["flagged"]["coconot_contrast"]["rate"] == 1.0
    assert d["flagged_hazardous"] == 1.0
    assert not math.isnan(d["categories"]["S1"]["vs_benign"]["lo"])
    assert d["flagged_uncategorised"] == {}


def test_harmful_prompts_of_no_category_count_in_flag_rates_only():
    codes = ["S1", "S2"]
    groups = ["S1", "S2", "xstest_unsafe", "xstest_unsafe", "xstest_safe"]
    scores = np.array([[0.9, 0.1], [0.1, 0.8], [0.0, 0.9], [0.3, 0.0], [0.2, 0.0]])
    flagged = np.array([1, 0, 1, 0, 0], dtype=bool)
    d = detection(codes, scores, groups, flagged, n_boot=20, seed=0)
    # Neither a negative of S1/S2 nor a hazardous prompt that should rank its category.
    assert d["categories"]["S1"]["vs_other"]["value"] == pytest.approx(1.0)
    assert d["n_hazardous"] == 2 and d["top1"] == 1.0 and set(d["confusion"]) == {"S1", "S2"}
    assert d["flagged_hazardous"] == 0.5
    assert d["flagged_uncategorised"] == {"xstest_unsafe": {"n": 2, "rate": 0.5}}


def test_study_items_are_test_parts_with_a_group_each():
    from plguard_lab.training.corpus import load_corpus

    items = study_items()
    n = Counter(it.fields["group"] for it in items)
    assert n["S1"] == 50 and n["S7"] > 50 and n["X1"] > 0 and n["X2"] > 0
    assert all(n[b] > 100 for b in BENIGN if b != "s14_contrast")
    assert n["S14"] == n["s14_contrast"] == 25  # plguard_s14's test half
    # Harmful prompts of no one category: XSTest's unsafe ones, CoCoNot's dangerous topics.
    assert n["xstest_unsafe"] == 136 and n["coconot_dangerous"] == 41
    dev = {(it.source, it.prompt_id) for it in load_corpus(
        ("ailuminate", "coconot", "coconot_plain", "coconot_hazards", "xstest", "plguard_s14"),
        "dev")}
    assert not dev & {(it.source if it.source != "coconot" else s, it.prompt_id)
                      for it in items for s in ("coconot", "coconot_plain", "coconot_hazards")}
    # CoCoNot's plain requests are benign, except the eval rows the study codes X2: no
    # prompt is both a hazard and benign.
    by_prompt: dict[str, set[str]] = {}
    for it in items:
        if it.source.startswith("coconot"):
            by_prompt.setdefault(it.prompt_id, set()).add(it.fields["group"])
    assert not [p for p, g in by_prompt.items() if len(g) > 1]
    x2 = {it.prompt_id for it in items if it.fields["group"] == "X2"}
    assert x2 and not x2 & {it.prompt_id for it in items if it.fields["group"] == "coconot_plain"}
    small, big = sample(items, 3, 0), sample(items, 6, 0)
    assert {it.uid for it in small} <= {it.uid for it in big}
    assert Counter(it.fields["group"] for it in small) == {g: min(3, k) for g, k in n.items()}


def test_unsafe_inputs_leave_out_what_only_over_refusal_reads():
    from plguard.policy import load_policy
    from plguard_lab.studies.hazards.metrics import unsafe_inputs

    pol = load_policy("hazards")
    got = unsafe_inputs(pol)
    assert {"request_seeks_code_interpreter_abuse", "response_gives_actionable_help"} <= got
    assert not {"request_is_educational_or_protective", "request_is_creative_or_analytical"} & got
    assert got == unsafe_inputs(pol) <= set(pol.predicate_names)
