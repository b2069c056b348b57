"""The shipped hazards heads on the test split's texts, on the real embedded model (issue 40).

Moderation reads user texts, not only requests: the helpful answers to safe prompts, read
as texts (corpus source ``answer_texts``), must mostly pass, while AILuminate's hazard
prompts must still be flagged. The heads shipped before answer_texts was a training
source flagged 55% of these texts at their threshold; the embedded model alone reads the
categories near chance, so these are the heads' figures, not the model's.
"""

from __future__ import annotations

import random

import pytest

N = 60  # texts per group: a share's standard error about 0.06 (60, not 100: CI time)
# The goal for benign texts (<= 10% flagged); hazard prompts: 40% of 787 measured
# (eval/results/hazards-embedded/report.md), so 0.25 is over two standard errors below.
FP_MAX, TP_MIN = 0.10, 0.25


def _texts(source: str) -> list[str]:
    from plguard_lab.training.corpus import load_corpus

    texts = [it.request for it in load_corpus((source,), "test") if it.response is None]
    return random.Random(0).sample(texts, N)


@pytest.mark.slow
def test_shipped_hazards_pass_benign_texts_and_flag_hazard_prompts():
    from plguard.guard import Guard
    from plguard.heads.artefact import shipped_calibration

    guard = Guard.from_config(policy="hazards", **{"grounding.cache": None})
    assert shipped_calibration("hazards") is not None and guard.thresholds.moderation
    benign = guard.moderate(_texts("answer_texts"))
    hazardous = guard.moderate(_texts("ailuminate"))
    fp = sum(m.flagged for m in benign) / N
    tp = sum(m.flagged for m in hazardous) / N
    assert fp <= FP_MAX and tp >= TP_MIN, (fp, tp)
