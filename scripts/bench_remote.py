"""The openai backend on `vllm serve` vs in-process vLLM: exactness and grounding speed.

    python -u scripts/bench_remote.py                      # 24 XSTest prompts, policy minimal
    python -u scripts/bench_remote.py --n 48 --policy detailed --concurrency 16

Both sides score the same grounding questions on the embedded model, in one run and one
after the other (never two engines at once): first an in-process vLLM engine
(``backend: vllm``), which is then shut down, then a ``vllm serve`` subprocess with the
same engine settings, reached through the openai backend in exact mode (token-id prompts,
``logprob_token_ids``) and in top-k mode over chat (``/v1/chat/completions``
top_logprobs). The
questions are every predicate of ``--policy`` (with paraphrases) on (XSTest prompt,
canned response) pairs, request and response scope, so no generation is involved.
Reported: questions/s of each path (after a warm-up on other pairs), max |dP(True)| of
exact mode against in-process vLLM per question, and of top-k mode on the questions whose
answers were both in the top-k. On a shared machine the times are noisy (the load
average is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_backends import read_prompts  # noqa: E402

RESPONSES = ("I'm sorry, but I can't help with that request.",
             "Sure. Here is a short, direct answer to your question, step by step.")


def requests_for(backend, policy: str, pairs):
    from plguard.grounding import Grounder
    from plguard.policy import load_policy

    g = Grounder(backend, load_policy(policy).predicates)
    return [g.prompts(r, s) for r, s in pairs] + [g.prompts(r, None) for r, _ in pairs]


LOADS: dict[str, tuple[float, float]] = {}


def timed(backend, reqs, label=None):
    l0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    scores = backend.true_false_logprobs(reqs)
    dt = time.perf_counter() - t0
    if label:
        LOADS[label] = (l0, os.getloadavg()[0])
    return [s for group in scores for s in group], dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="XSTest prompts (pairs)")
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--concurrency", type=int, default=8, help="openai: max_concurrency")
    ap.add_argument("--log", default="/tmp/plguard-bench-vllm-serve.log")
    args = ap.parse_args()

    from plguard.backends.openai_backend import OpenAIBackend
    from plguard.backends.vllm_backend import VLLMBackend, shutdown_engines
    from plguard.config import ModelConfig
    from plguard.models import resolve_model_path
    from plguard.testing import VLLMServer
    from plguard.types import TFRequest

    prompts = read_prompts(args.n + 2)
    pairs = [(p, RESPONSES[i % 2]) for i, p in enumerate(prompts)]
    warm, pairs = pairs[:2], pairs[2:]
    print(f"{len(pairs)} pairs, policy '{args.policy}', dtype {args.dtype}; "
          f"{len(os.sched_getaffinity(0))} CPUs, load average {os.getloadavg()[0]:.1f}")

    t0 = time.perf_counter()
    vl = VLLMBackend.from_config(ModelConfig(
        path="embedded", backend="vllm", dtype=args.dtype, max_context=2048,
        gpu_memory_utilization=0.4, cpu_kvcache_space_gib=2))
    print(f"in-process vLLM engine start {time.perf_counter() - t0:.1f} s ({vl.model_id})")
    vl.true_false_logprobs(requests_for(vl, args.policy, warm))
    reqs = requests_for(vl, args.policy, pairs)
    ref, t_vl = timed(vl, reqs, "in-process vLLM")
    shutdown_engines()

    with VLLMServer(resolve_model_path("embedded"), dtype=args.dtype, log=args.log) as srv:
        print(f"vllm serve start {srv.start_s:.1f} s ({srv.base_url})")
        # A generous timeout: on a shared 2-core machine one request can wait minutes.
        cfg = ModelConfig(backend="openai", base_url=srv.base_url, request_timeout_s=900,
                          max_concurrency=args.concurrency)
        ex = OpenAIBackend.from_config(cfg.model_copy(update={"logprobs_mode": "exact"}))
        ex.true_false_logprobs(requests_for(ex, args.policy, warm))
        got, t_ex = timed(ex, reqs, "openai exact (vllm serve)")  # in-process vLLM's ids
        tk = OpenAIBackend.from_config(cfg.model_copy(update={"logprobs_mode": "topk"}))
        tk.via = "topk"  # the chat shape (llama.cpp, Ollama), not the text one vLLM also has
        tk.true_false_logprobs(requests_for(tk, args.policy, warm))
        top, t_tk = timed(tk, requests_for(tk, args.policy, pairs), "openai top-k (vllm serve)")
        # What a chat server scores: the whole prompt tokenised at once (no prefix split).
        joined, _ = timed(ex, [TFRequest(prefix=r.prefix + q, suffixes=("",))
                               for r in reqs for q in r.suffixes])
        usage = dict(ex.total_usage)
        ex.close()
        tk.close()

    n = len(ref)
    d_ex = [abs(a.p_true - b.p_true) for a, b in zip(got, ref, strict=True)]
    d_tk = [abs(a.p_true - b.p_true) for a, b in zip(top, ref, strict=True) if not a.bound]
    d_tj = [abs(a.p_true - b.p_true) for a, b in zip(top, joined, strict=True) if not a.bound]
    print()
    print(f"{'':34}{'questions':>10}{'s':>9}{'q/s':>8}{'vs in-process':>15}{'load':>12}")
    for label, dt in (("in-process vLLM", t_vl), ("openai exact (vllm serve)", t_ex),
                      ("openai top-k (vllm serve)", t_tk)):
        a, b = LOADS[label]
        print(f"{label:34}{n:>10}{dt:>9.2f}{n / dt:>8.1f}{t_vl / dt:>14.2f}x"
              f"{a:>6.1f}-{b:<5.1f}")
    print(f"\nexact vs in-process: max |dP(True)| {max(d_ex):.2e}, mean "
          f"{sum(d_ex) / n:.2e} over {n} questions")
    print(f"top-k vs in-process: max |dP(True)| {max(d_tk):.4f} over the {len(d_tk)} of {n} "
          f"questions with both answers in the top-{cfg.top_logprobs} "
          f"({n - len(d_tk)} bounded); vs exact mode on the same, jointly tokenised "
          f"prompts: {max(d_tj):.4f}")
    print(f"exact-mode usage (warm-up included): {usage}")


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
