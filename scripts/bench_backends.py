"""Throughput of the transformers and vLLM backends, side by side in one run.

    python scripts/bench_backends.py                 # 32 XSTest prompts, embedded model
    python scripts/bench_backends.py --policy minimal --max-new-tokens 32

Generation: the prompts as chats, greedy, batched (transformers in batches of
``--tf-batch``, vLLM in one call); tokens/s counts the tokens actually generated.
Grounding: every predicate of ``--policy`` on (prompt, transformers draft) pairs through
the Grounder, so both backends score identical prompts; predicates/s counts
pairs x predicates. Each phase runs once after a short warm-up; on a shared machine the
figures are noisy (the load average is printed).
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
XSTEST = [ROOT / "eval/data/xstest/xstest_prompts.csv",
          ROOT.parent / "shared/data/xstest/xstest_prompts.csv"]


def read_prompts(n: int) -> list[str]:
    for path in XSTEST:
        if path.is_file():
            with path.open(newline="") as fh:
                return [row["prompt"] for row in csv.DictReader(fh)][:n]
    raise SystemExit(f"XSTest prompts not found in {[str(p) for p in XSTEST]}")


def bench(backend, prompts, drafts, params, policy, batch) -> tuple[dict[str, float], list[str]]:
    from plguard.grounding import Grounder
    from plguard.policy import load_policy
    from plguard.types import Message

    chats = [(Message("user", p),) for p in prompts]
    backend.generate(chats[:2], params)  # warm-up: first-call allocations, lazy init
    t0 = time.perf_counter()
    gens = []
    for i in range(0, len(chats), batch):
        gens += backend.generate(chats[i:i + batch], params)
    gen_s = time.perf_counter() - t0
    n_tok = sum(g.n_new_tokens for g in gens)

    preds = load_policy(policy).predicates
    pairs = list(zip(prompts, drafts or [g.text for g in gens], strict=True))
    Grounder(backend, preds).ground(pairs[:1])  # warm-up
    grounder = Grounder(backend, preds)  # fresh: no request memo
    t0 = time.perf_counter()
    grounder.ground(pairs)
    ground_s = time.perf_counter() - t0
    n_pred = len(pairs) * len(preds)
    return ({"gen_s": gen_s, "tokens": n_tok, "tok_s": n_tok / gen_s,
             "ground_s": ground_s, "preds": n_pred, "pred_s": n_pred / ground_s},
            [g.text for g in gens])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32, help="XSTest prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--policy", default="detailed", help="policy whose predicates are grounded")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--tf-batch", type=int, default=8, help="transformers generation batch")
    ap.add_argument("--max-context", type=int, default=4096)
    args = ap.parse_args()

    from plguard.backends.transformers_backend import TransformersBackend
    from plguard.backends.vllm_backend import VLLMBackend, shutdown_engines
    from plguard.config import ModelConfig
    from plguard.types import GenerationParams

    prompts = read_prompts(args.n)
    params = GenerationParams(max_new_tokens=args.max_new_tokens)
    print(f"{len(prompts)} XSTest prompts, {args.max_new_tokens} new tokens max, greedy; "
          f"grounding policy '{args.policy}'; dtype {args.dtype}; "
          f"{len(os.sched_getaffinity(0))} CPUs, load average {os.getloadavg()[0]:.1f}")

    t0 = time.perf_counter()
    tf = TransformersBackend.load("embedded", dtype=args.dtype, max_context=args.max_context,
                                  batch_size=args.tf_batch)
    print(f"transformers load {time.perf_counter() - t0:.1f} s ({tf.model_id})")
    r_tf, drafts = bench(tf, prompts, None, params, args.policy, args.tf_batch)

    t0 = time.perf_counter()
    vl = VLLMBackend.from_config(ModelConfig.model_validate({
        "path": "embedded", "backend": "vllm", "dtype": args.dtype,
        "max_context": args.max_context, "gpu_memory_utilization": 0.4,
        "cpu_kvcache_space_gib": 2}))
    print(f"vLLM engine start {time.perf_counter() - t0:.1f} s ({vl.model_id})")
    # vLLM takes the whole list at once: its scheduler does the batching.
    r_vl, vl_drafts = bench(vl, prompts, drafts, params, args.policy, len(prompts))
    shutdown_engines()

    print()
    print(f"{'':28}{'transformers':>14}{'vLLM':>12}{'vLLM / tf':>12}")
    rows = [("generation tokens", "tokens", "{:.0f}"), ("generation s", "gen_s", "{:.2f}"),
            ("generation tokens/s", "tok_s", "{:.1f}"), ("grounding predicates", "preds",
                                                          "{:.0f}"),
            ("grounding s", "ground_s", "{:.2f}"), ("grounding predicates/s", "pred_s",
                                                    "{:.1f}")]
    for label, key, fmt in rows:
        a, b = r_tf[key], r_vl[key]
        ratio = f"{b / a:.2f}x" if key in ("tok_s", "pred_s") else ""
        print(f"{label:28}{fmt.format(a):>14}{fmt.format(b):>12}{ratio:>12}")
    same = sum(a == b for a, b in zip(drafts, vl_drafts, strict=True))
    print(f"\nidentical greedy drafts: {same}/{len(prompts)}")
    target = r_vl["tok_s"] / r_tf["tok_s"]
    print(f"batched generation speed-up {target:.2f}x (target >= 3x): "
          f"{'met' if target >= 3 else 'NOT met'}")


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
