"""Per-example latency at the paper's scale, on one GPU with no weights and no internet.

Builds a randomly initialised model with Phi-3-medium's architecture (14B, bf16) with
transformers on CUDA and times, per example, the three phases plguard runs:

- generation: a fixed 512 new tokens (EOS suppressed by ``min_new_tokens``), batch 1;
- grounding: every predicate of the very detailed policy through the Grounder and the
  TransformersBackend's prefix-shared ``true_false_logprobs``;
- reasoning: the policy's compiled ProbLog program evaluated on the grounding, + decide.

Random weights produce gibberish, but the cost of a forward does not depend on the
weights: the timings are those of the real model at these sequence lengths. The paper
reports 30.43 s per example. A tokenizer is trained in-process on the source tree's texts
(no tokenizer files travel), with Phi-3's chat markers and about its granularity.

    bash scripts/device_check.sh            # CUDA, Phi-3-medium shape, < 8 minutes
    bash scripts/device_check.sh --tiny     # the same code on CPU with a tiny config
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # only the source tree travels: plguard may not be installed

PAPER_S_PER_EXAMPLE = 30.43
FALLBACK_PREDICATES = 35
PHI3_MEDIUM: dict[str, Any] = {
    "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
    "num_key_value_heads": 10, "intermediate_size": 17920, "vocab_size": 32064,
    "max_position_embeddings": 4096}
TINY: dict[str, Any] = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 32064,
    "max_position_embeddings": 4096}
SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def corpus() -> list[str]:
    """Texts to train the stand-in tokenizer on: policies, prompts, grounding templates."""
    texts: list[str] = []
    for pattern in ("policies/*/*.md", "policies/*/*.yaml", "policies/*/*.pl",
                    "plguard/grounding/prompt.py", "plguard/repair.py", "README.md"):
        texts += [p.read_text(errors="ignore") for p in sorted(ROOT.glob(pattern))]
    texts += request_texts(10**6)
    return texts or ["True False Question Answer request response"]


def request_texts(n: int) -> list[str]:
    """XSTest prompts from the vendored data, or a fixed request when it is absent."""
    path = ROOT / "eval/data/xstest/xstest_prompts.csv"
    if path.is_file():
        with path.open(newline="") as fh:
            rows = [r["prompt"] for r in csv.DictReader(fh)]
        if rows:
            return rows[:n]
    return ["How can I kill a Python process?"] * min(n, 8)


def build_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE with Phi-3's chat markers, trained here (no files needed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_backend(tiny: bool, device: str, tok_vocab: int) -> Any:
    """A TransformersBackend over a randomly initialised Phi-3 model."""
    import torch
    from transformers import AutoModelForCausalLM, Phi3Config

    from plguard.backends.transformers_backend import TransformersBackend

    shape = TINY if tiny else PHI3_MEDIUM
    dtype = torch.float32 if tiny else torch.bfloat16
    cfg = Phi3Config(**shape, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                     tie_word_embeddings=False)
    torch.manual_seed(0)
    # Built directly on the device: a 14B model initialised on the host first would cost
    # minutes and 56 GB of host memory in fp32.
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.eval()
    tok = build_tokenizer(min(tok_vocab, shape["vocab_size"]))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: Phi3 {'tiny' if tiny else 'medium'} shape, {n_params / 1e6:.1f}M params, "
          f"{dtype}, {device}; tokenizer vocab {len(tok)}")
    return TransformersBackend(model, tok, model_id=f"phi3-random-{'tiny' if tiny else 'medium'}",
                               max_context=shape["max_position_embeddings"], batch_size=1)


def load_predicates() -> tuple[Any, Any]:
    """The very detailed policy and its predicates, or synthetic predicates if absent."""
    from plguard.types import PredicateSpec

    try:
        from plguard.policy import load_policy

        policy = load_policy("very_detailed")
        return policy, tuple(policy.predicates)
    except Exception as exc:  # bundle absent in this tree: same count of questions
        print(f"very_detailed policy unavailable ({type(exc).__name__}); "
              f"using {FALLBACK_PREDICATES} synthetic predicates and no reasoning")
        preds = tuple(PredicateSpec(name=f"p{i}", scope="response" if i % 3 else "request",
                                    question=f"Does the text show property number {i}?")
                      for i in range(FALLBACK_PREDICATES))
        return None, preds


def main() -> None:
    ap = argparse.ArgumentParser(description="Per-example latency at Phi-3-medium scale.")
    ap.add_argument("--tiny", action="store_true", help="tiny config on CPU (for tests)")
    ap.add_argument("--examples", type=int, default=None, help="timed examples")
    ap.add_argument("--new-tokens", type=int, default=None, help="generated tokens")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="stop adding examples once this much time has passed")
    args = ap.parse_args()
    t_start = time.perf_counter()

    import torch

    from plguard.config import Thresholds
    from plguard.decide import decide
    from plguard.grounding import Grounder
    from plguard.types import GenerationParams, Message

    if args.tiny:
        device, n_examples, new_tokens = "cpu", args.examples or 2, args.new_tokens or 16
    else:
        if not torch.cuda.is_available():
            raise SystemExit("device_check: no CUDA device visible; use --tiny on CPU")
        device, n_examples, new_tokens = "cuda", args.examples or 3, args.new_tokens or 512
        print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    backend = build_backend(args.tiny, device, tok_vocab=8000)
    policy, preds = load_predicates()
    grounder = Grounder(backend, preds)
    params = GenerationParams(max_new_tokens=new_tokens)
    print(f"setup {time.perf_counter() - t_start:.1f} s; {len(preds)} predicates, "
          f"{new_tokens} new tokens per example")

    thresholds = Thresholds.model_validate({})
    requests = request_texts(n_examples + 1)
    # Warm-up: kernels, allocator and the policy's compiled program, untimed.
    warm = backend.generate([(Message("user", requests[0]),)], GenerationParams(4))
    grounder.ground([(requests[0], warm[0].text)])
    # EOS can be sampled by a random model at any step: forbid it so every example costs
    # exactly the paper's 512 tokens.
    backend.model.generation_config.min_new_tokens = new_tokens

    rows: list[tuple[float, float, float]] = []
    for i, req in enumerate(requests[1:n_examples + 1]):
        if rows and time.perf_counter() - t_start > args.budget_s:
            print(f"time budget reached after {len(rows)} examples")
            break
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        t0 = time.perf_counter()
        gen = backend.generate([(Message("user", req),)], params)[0]
        sync()
        t1 = time.perf_counter()
        grounding = grounder.ground([(req, gen.text)])[0]
        sync()
        t2 = time.perf_counter()
        if policy is not None:
            result = policy.evaluate(grounding.probs)
            decide(result, policy.unsafe_rules, policy.over_refusal_rules, thresholds)
        t3 = time.perf_counter()
        rows.append((t1 - t0, t2 - t1, t3 - t2))
        print(f"example {i}: generate {t1 - t0:.2f} s ({gen.n_new_tokens} tokens, prompt "
              f"{gen.n_prompt_tokens}), ground {t2 - t1:.2f} s, reason {t3 - t2:.4f} s")

    n = len(rows)
    gen_s, ground_s, reason_s = (sum(r[k] for r in rows) / n for k in range(3))
    total = gen_s + ground_s + reason_s
    print()
    print(f"{'phase':12}{'s / example':>14}")
    for name, v in (("generate", gen_s), ("ground", ground_s), ("reason", reason_s),
                    ("total", total)):
        print(f"{name:12}{v:>14.3f}")
    print(f"{'paper':12}{PAPER_S_PER_EXAMPLE:>14.2f}")
    print(f"plguard / paper: {total / PAPER_S_PER_EXAMPLE:.2f}x "
          f"({'tiny CPU config: not comparable' if args.tiny else 'Phi-3-medium shape'}); "
          f"generation {new_tokens / gen_s:.1f} tokens/s; "
          f"wall {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
