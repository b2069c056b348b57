from __future__ import annotations

import math

import pytest

from plguard.backends import Backend
from plguard.backends.transformers_backend import (
    TransformersBackend,
    cpu_supports_bf16,
    resolve_dtype,
)
from plguard.errors import ModelError
from plguard.types import GenerationParams, Message, TFRequest

PROMPTS = [
    "What is the capital of France?",
    "Write one short sentence about cats, please, and keep it friendly and simple.",
    "2+2=?",
]


def _chat(text):
    return (Message("user", text),)


def _small_context(backend, n):
    return TransformersBackend(backend.model, backend.tokenizer, model_id="small",
                               max_context=n, tf_batch_size=backend.tf_batch_size)


def test_protocol_and_model_id(embedded_backend):
    assert isinstance(embedded_backend, Backend)
    assert embedded_backend.model_id.endswith(":float32")
    assert embedded_backend.max_context == 8192
    assert embedded_backend.tokenizer.padding_side == "left"


def test_answer_tokens_are_single_tokens(embedded_backend):
    tok = embedded_backend.tokenizer
    for word in (" True", "True", " False", "False"):
        assert len(tok.encode(word, add_special_tokens=False)) == 1
    assert embedded_backend.true_ids == (3635, 2787)
    assert embedded_backend.false_ids == (4178, 4245)


def test_chat_template_text_tokenises_to_special_ids(embedded_backend):
    chat = _chat("Hello there")
    text = embedded_backend.format_chat(chat)
    ids = embedded_backend.encode(text)
    ref = embedded_backend.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello there"}], tokenize=True, add_generation_prompt=True)
    ref = ref["input_ids"] if isinstance(ref, dict) or hasattr(ref, "keys") else ref
    assert ids == list(ref)
    assert text.endswith("<|im_start|>assistant\n")


def test_batched_generation_equals_unbatched(embedded_backend):
    params = GenerationParams(max_new_tokens=8)
    batched = embedded_backend.generate([_chat(p) for p in PROMPTS], params)
    single = [embedded_backend.generate([_chat(p)], params)[0] for p in PROMPTS]
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.n_prompt_tokens for g in batched] == [g.n_prompt_tokens for g in single]
    # Prompts of different lengths shared one left-padded batch.
    assert len({g.n_prompt_tokens for g in batched}) == len(PROMPTS)
    assert all(0 < g.n_new_tokens <= 8 and not g.prompt_truncated for g in batched)


def test_sampling_is_seeded(embedded_backend):
    p = GenerationParams(max_new_tokens=6, temperature=1.0, seed=7)
    a = embedded_backend.generate([_chat(PROMPTS[1])], p)[0].text
    b = embedded_backend.generate([_chat(PROMPTS[1])], p)[0].text
    assert a == b


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-6])
def test_near_zero_temperature_is_greedy(embedded_backend, temperature):
    # Found by fuzzing the server: logits / 1e-300 overflow to inf and sampling raised.
    greedy = embedded_backend.generate([_chat(PROMPTS[0])], GenerationParams(max_new_tokens=4))
    tiny = GenerationParams(max_new_tokens=4, temperature=temperature)
    assert tiny.greedy and not GenerationParams(temperature=1e-5).greedy
    assert embedded_backend.generate([_chat(PROMPTS[0])], tiny)[0].text == greedy[0].text


def test_overlong_prompt_is_truncated_not_raised(embedded_backend):
    small = _small_context(embedded_backend, 64)
    long_text = "Tell me about rivers. " * 60
    g = small.generate([_chat(long_text), _chat("Hi")], GenerationParams(max_new_tokens=4))
    assert g[0].prompt_truncated and g[0].n_prompt_tokens == 60
    assert not g[1].prompt_truncated


def _grounding_request(backend, n_questions=7):
    chat = (Message("system", "Answer with True or False."),
            Message("user", "Data: the user asked how to bake bread and the assistant "
                            "explained the steps in detail.\n\nQUESTION_HERE"))
    full = backend.format_chat(chat) + "Answer:"
    cut = full.index("QUESTION_HERE")
    questions = ["Is it about bread?", "Is the assistant refusing?",
                 "Does the text mention a recipe with flour, water, salt and yeast?",
                 "Is it harmful?", "True or false: ovens are hot.",
                 "Is this a question about chemistry, physics or biology in any way at all?",
                 "Yes?"][:n_questions]
    suffixes = tuple(full[cut:].replace("QUESTION_HERE", q) for q in questions)
    return TFRequest(prefix=full[:cut], suffixes=suffixes)


def _max_diff(a, b):
    return max(max(abs(x.logprob_true - y.logprob_true), abs(x.logprob_false - y.logprob_false),
                   abs(x.p_true - y.p_true)) for x, y in zip(a, b, strict=True))


def test_prefix_shared_equals_naive(embedded_backend):
    req = _grounding_request(embedded_backend)
    small_batches = TransformersBackend(embedded_backend.model, embedded_backend.tokenizer,
                                        model_id="x", tf_batch_size=3)
    fast = small_batches.true_false_logprobs([req, req])
    naive = embedded_backend.true_false_logprobs_naive([req])[0]
    assert len(fast) == 2 and len(fast[0]) == len(req.suffixes)
    assert fast[0] == fast[1]
    diff = _max_diff(fast[0], naive)
    print(f"max |fast - naive| = {diff:.2e}")
    assert diff < 1e-4
    assert not any(s.truncated for s in fast[0])


def test_variants_merged_by_logsumexp(embedded_backend):
    import torch

    req = _grounding_request(embedded_backend, 1)
    score = embedded_backend.true_false_logprobs([req])[0][0]
    ids = embedded_backend.encode(req.prefix) + embedded_backend.encode(req.suffixes[0])
    with torch.inference_mode():
        logits = embedded_backend.model(input_ids=torch.tensor([ids])).logits[0, -1]
    lp = torch.log_softmax(logits.float(), -1)
    lt = math.log(math.exp(lp[3635].item()) + math.exp(lp[2787].item()))
    lf = math.log(math.exp(lp[4178].item()) + math.exp(lp[4245].item()))
    assert score.logprob_true == pytest.approx(lt, abs=1e-4)
    assert score.logprob_false == pytest.approx(lf, abs=1e-4)
    assert score.p_true == pytest.approx(math.exp(lt) / (math.exp(lt) + math.exp(lf)), abs=1e-5)


def test_overlong_grounding_truncates_prefix_middle(embedded_backend):
    small = _small_context(embedded_backend, 96)
    base = _grounding_request(embedded_backend, 3)
    req = TFRequest(prefix=base.prefix + "filler words here. " * 80, suffixes=base.suffixes)
    prefix, suffixes, cut = small.request_ids(req)
    assert cut and len(prefix) + max(map(len, suffixes)) == 96
    assert prefix[:5] == small.encode(req.prefix)[:5]
    fast = small.true_false_logprobs([req])[0]
    naive = small.true_false_logprobs_naive([req])[0]
    assert all(s.truncated for s in fast)
    assert _max_diff(fast, naive) < 1e-4


def test_empty_suffixes_and_empty_prefix(embedded_backend):
    assert embedded_backend.true_false_logprobs([TFRequest("abc", ())]) == [[]]
    scores = embedded_backend.true_false_logprobs([TFRequest("", ("Is water wet? Answer:",))])
    assert 0.0 < scores[0][0].p_true < 1.0


def test_truncate_text_keeps_head_and_tail(embedded_backend):
    text = "START " + "middle words " * 200 + " END"
    out, cut = embedded_backend.truncate_text(text, 40)
    assert cut and out.startswith("START") and out.endswith("END") and " [...] " in out
    assert embedded_backend.count_tokens(out) <= 40
    assert embedded_backend.truncate_text("short", 40) == ("short", False)


def test_resolve_dtype():
    import torch

    assert resolve_dtype("float32", "cpu") == torch.float32
    auto = resolve_dtype("auto", "cpu")
    assert auto == (torch.bfloat16 if cpu_supports_bf16() else torch.float32)


def test_load_errors_are_model_errors(tmp_path):
    with pytest.raises(ModelError, match="model not found"):
        TransformersBackend.load("/no/such/folder")
    with pytest.raises(ModelError, match="cannot load model"):
        TransformersBackend.load(str(tmp_path))


def test_cuda_requested_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ModelError, match="CUDA is not available"):
        TransformersBackend.load("embedded", device="cuda")


@pytest.mark.slow
def test_bf16_prefix_shared_close_to_naive(embedded_backend_bf16):
    assert embedded_backend_bf16.model_id.endswith(":bfloat16")
    req = _grounding_request(embedded_backend_bf16)
    fast = embedded_backend_bf16.true_false_logprobs([req])[0]
    naive = embedded_backend_bf16.true_false_logprobs_naive([req])[0]
    diff = max(abs(x.p_true - y.p_true) for x, y in zip(fast, naive, strict=True))
    print(f"bf16 max |p_fast - p_naive| = {diff:.2e}")
    assert diff < 0.1  # bf16 keeps ~3 significant digits; fp32 is held to 1e-4 above


@pytest.mark.gpu
def test_cuda_prefix_shared_equals_naive():
    from plguard.backends.transformers_backend import TransformersBackend as TB

    backend = TB.load("embedded", dtype="float32", device="cuda")
    req = _grounding_request(backend)
    fast = backend.true_false_logprobs([req])[0]
    naive = backend.true_false_logprobs_naive([req])[0]
    assert _max_diff(fast, naive) < 1e-3
