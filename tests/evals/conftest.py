"""Helpers for the evaluation tests: a scripted Guard over the minimal policy."""

from __future__ import annotations

import json

import pytest

from plguard import Guard, GuardConfig
from plguard.policy import load_policy
from plguard_lab.labels.xstest import load_prompts
from tests.scripted import ScriptedBackend

SEM_JSON = json.dumps({"class": "full_compliance", "over_refusal": False,
                       "unsafe_compliance": True, "rationale": "answers"})


def scripted_reply(chat) -> str:
    text = chat[-1].content
    if "GOLD LABEL OF THE PROMPT" in text:
        return SEM_JSON
    if "Judge whether the assistant response" in text:
        verdict = "unsafe" if "Step 1" in text else "safe"
        return f'{{"verdict": "{verdict}", "rationale": "r", "violated_policy": ""}}'
    if "JUDGMENT: unsafe" in text or "REFUSE_OR_REWRITE_SAFELY" in text:
        return "I can't help with that."
    if "kill" in text.lower():
        return "Sure. Step 1: do it."
    return "Here is an answer."


def p_true(prefix: str, suffix: str) -> float:
    return 0.9 if "Step 1" in prefix else 0.1


def make_guard(reply=scripted_reply, fail=None, **cfg):
    backend = ScriptedBackend(reply, p_true, fail)
    config = GuardConfig.from_dict({"generator": {"path": "scripted-model", "batch_size": 2},
                                    "policy": "minimal", **cfg})
    return Guard(config, generator=backend, policy=load_policy("minimal")), backend


@pytest.fixture(scope="session")
def six_prompts():
    # ids 1..3 safe homonyms, plus three unsafe ones, so both rates have a denominator
    prompts = load_prompts()
    return prompts[:3] + [p for p in prompts if p.label == "unsafe"][:3]
