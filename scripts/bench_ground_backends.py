"""Grounding throughput on this CPU: transformers vs vLLM, vLLM with and without all cores.

The same grounding job (labelled XSTest pairs of the test split, the detailed policy's 16
questions, paraphrases off) runs three ways, each in its own process (vLLM reads its
CPU-binding variables at engine start):

* ``transformers``: prefix-shared scoring (the prefix forwarded once per pair);
* ``vllm-reserved``: vLLM's own CPU binding (one core kept for its scheduler);
* ``vllm-all-cores``: every core bound to the model (plguard's default on CPUs with at
  most 4 cores, see plguard/backends/vllm_backend.py).

It prints tokens processed per second (prompt tokens of every question, each prefix
counted once) and each variant's ratio to transformers, side by side in one run.

    python scripts/bench_ground_backends.py                           # the embedded model
    python scripts/bench_ground_backends.py --model /models/qwen-1.5b.gguf --pairs 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

VARIANTS = ("transformers", "vllm-reserved", "vllm-all-cores")


def run_one(variant: str, model: str, pairs: int) -> dict[str, float]:
    """Load the backend, ground ``pairs`` pairs once to warm up, then time them."""
    from plguard.backends import load_backend
    from plguard.config import GroundingConfig, ModelConfig
    from plguard.grounding import Grounder
    from plguard.policy import load_policy
    from plguard_lab.studies.quality.ground import labelled_items

    if variant == "transformers":
        cfg = ModelConfig(path=model, backend="transformers", dtype="bfloat16", device="cpu")
    else:
        cfg = ModelConfig(path=model, backend="vllm", dtype="bfloat16", max_context=4096,
                          cpu_kvcache_space_gib=2)
    t0 = time.perf_counter()
    backend = load_backend(cfg)
    load_s = time.perf_counter() - t0
    g = Grounder(backend, load_policy("detailed").predicates,
                 GroundingConfig(paraphrases=False))
    items = labelled_items("test", 600, 0)[-pairs:]
    todo = [(c.prompt, c.completion) for c in items]
    tokens = 0
    for req, resp in todo:
        for r in (g.prompts(req, None), g.prompts(req, resp)):
            tokens += len(backend.encode(r.prefix)) + sum(len(backend.encode(s))
                                                          for s in r.suffixes)
    g.ground(todo[:1])
    g.clear_cache()
    t0 = time.perf_counter()
    g.ground(todo)
    dt = time.perf_counter() - t0
    return {"load_s": load_s, "tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(args.one, args.model, args.pairs)), flush=True)
        return
    results: dict[str, dict[str, float]] = {}
    for v in args.variants:
        env = dict(os.environ)
        for k in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):
            env.pop(k, None)
        if v == "vllm-reserved":
            env["VLLM_CPU_OMP_THREADS_BIND"] = "auto"  # vLLM's own binding, not plguard's
        out = subprocess.run([sys.executable, __file__, "--one", v, "--model", args.model,
                              "--pairs", str(args.pairs)], env=env, capture_output=True,
                             text=True)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{v}: failed\n{out.stderr[-2000:]}")
            continue
        results[v] = json.loads(line[7:])
        r = results[v]
        print(f"{v:<16} load {r['load_s']:6.1f} s   {r['tokens']:>6.0f} tokens in "
              f"{r['seconds']:6.1f} s = {r['tokens_per_s']:6.1f} tokens/s", flush=True)
    base = results.get("transformers", {}).get("tokens_per_s")
    if base:
        print("ratio to transformers: " + ", ".join(
            f"{v} {r['tokens_per_s'] / base:.2f}x" for v, r in results.items()))


if __name__ == "__main__":
    main()
