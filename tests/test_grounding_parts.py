"""The grounding package's parts: declared backend capabilities, resolution before the
Grounder, and the named records that flow between its stages (no model needed)."""

from __future__ import annotations

import math

import pytest

from plguard.backends.base import Backend, Capabilities, states_backend
from plguard.config import GroundingConfig
from plguard.errors import ConfigError, InputError
from plguard.grounding import Grounder, Resolved, resolve
from plguard.grounding.prompt import plan_questions
from plguard.grounding.sources import Reading, ZeroShotSource
from plguard.grounding.sources.zeroshot import NOT_ASKED, Merged, merge_variants
from plguard.types import PredicateSpec, TFScore
from tests.scripted import ScriptedBackend

PREDICATES = (
    PredicateSpec("request_is_harmful", "request", "Is the request harmful?"),
    PredicateSpec("response_refuses", "response", "Does the response refuse?",
                  paraphrases=("Is the response a refusal?",)),
)


def _backend(p: float = 0.25) -> ScriptedBackend:
    return ScriptedBackend(lambda chat: "", lambda prefix, suffix: p)


def test_backends_declare_hidden_states():
    from plguard.backends.openai_backend import OpenAIBackend
    from plguard.backends.transformers_backend import TransformersBackend
    from plguard.backends.vllm_backend import VLLMBackend
    from plguard.testing import FaultSwitch, ScriptedStreamBackend

    assert TransformersBackend.capabilities == Capabilities(hidden_states=True)
    for cls in (VLLMBackend, OpenAIBackend, ScriptedStreamBackend):
        assert cls.capabilities.hidden_states is False
    assert FaultSwitch(_backend()).capabilities.hidden_states is False
    assert isinstance(_backend(), Backend)


def test_states_backend_follows_the_declaration():
    plain = _backend()
    with pytest.raises(ConfigError, match="cannot return hidden states"):
        states_backend(plain)

    class Stating(ScriptedBackend):
        capabilities = Capabilities(hidden_states=True)

    stating = Stating(lambda chat: "", lambda prefix, suffix: 0.5)
    assert states_backend(stating) is stating


def test_a_backend_that_declares_nothing_offers_no_hidden_states():
    """A backend written before ``capabilities`` (even one with true_false_states) is read
    as offering nothing beyond the protocol: shipped heads stay off, a fit is refused."""
    from plguard.backends.base import capabilities_of
    from plguard.heads.apply import resolve_heads

    class Old:
        model_id = "embedded:smollm2-135m-instruct:bfloat16"  # the shipped heads' model
        max_context = 2048

        def true_false_states(self, requests, layers):
            raise AssertionError("never called")

    assert capabilities_of(Old()) == Capabilities()
    assert resolve_heads("auto", Old(), "minimal") is None
    with pytest.raises(ConfigError, match="cannot return hidden states"):
        states_backend(Old())  # type: ignore[arg-type]


def test_resolved_before_the_grounder_gives_the_same_grounding():
    cfg = GroundingConfig(heads=None)
    resolved = resolve(_backend(), PREDICATES, cfg)
    assert resolved == Resolved() and resolved.platt == {}
    pairs = [("How do I boil an egg?", "Boil it for nine minutes.")]
    built = Grounder(_backend(), PREDICATES, cfg, resolved=resolved).ground(pairs)
    assert built == Grounder(_backend(), PREDICATES, cfg).ground(pairs)
    assert [s.p_true for s in built[0].scores] == pytest.approx([0.25, 0.25])


def test_resolve_refuses_bad_predicates_first():
    with pytest.raises(InputError, match="duplicate predicate names"):
        resolve(_backend(), PREDICATES * 2, GroundingConfig(calibration="missing.json"))


def test_question_plan_and_merged_variants():
    plan = plan_questions(PREDICATES[1:], GroundingConfig(heads=None))
    assert plan.variants == (("Does the response refuse?", "Is the response a refusal?"),)
    assert plan.offsets == (0,) and len(plan.blocks) == 2
    scores = (TFScore(math.log(0.8), math.log(0.2)), TFScore(math.log(0.6), math.log(0.4)))
    m = merge_variants(scores, "mean_prob")
    assert isinstance(m, Merged) and m.p == pytest.approx(0.7)
    assert m.variants == pytest.approx((0.8, 0.6)) and m.spread == pytest.approx(0.2)
    assert merge_variants((), "mean_logit") is NOT_ASKED and math.isnan(NOT_ASKED.p)


def test_view_readings_are_a_record_not_a_list():
    g = Grounder(_backend(), PREDICATES, GroundingConfig(heads=None))
    out = g._read_prompt(g._views("Hi", "Hello"))
    assert [type(x) for x in out] == [Reading]
    assert len(out[0].scores) == 2 and out[0].stated is None
    assert out[0].asked == {"response_refuses": (0, 2)}
    # Without heads, zero-shot is the only source and reads every predicate's prompt view.
    assert g.sources == (g.zero,) and isinstance(g.zero, ZeroShotSource)
    assert g.zero.read(PREDICATES[1], out[0]) == pytest.approx(0.25)
