"""What a token-check step costs, and why (issue 54, item 3's cost target), in one run.

1. The token check's cost against one forward over the whole answer (the ratio of
   ``scripts/bench_token_check.py``'s section 3) for several ``stream.token_step`` sizes,
   median over the benign answers of ``tests/data/unseen``.
2. The floor under it: one of the grounder's own linear layers (layer 0's MLP up
   projection) timed per call at several token counts, in the grounder's dtype. A step
   forwards every layer once, so a step of any size costs at least the per-call time of
   each of its matrix products.

    python scripts/bench_token_step.py [--steps 16,32,64,128] [--answers 12]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_token_check import DATA, cost  # noqa: E402

from plguard import Guard, GuardConfig  # noqa: E402


def per_call(layer, width: int, tokens: int, dtype) -> float:  # type: ignore[no-untyped-def]
    """Seconds per call of ``layer`` on ``tokens`` rows (best of several timed loops)."""
    import torch

    x = torch.randn(1, tokens, width).to(dtype)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(3):
            layer(x)
        for _ in range(5):
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < 0.2:
                layer(x)
                n += 1
            best = min(best, (time.perf_counter() - t0) / n)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="16,32,64,128")
    ap.add_argument("--answers", type=int, default=12)
    a = ap.parse_args()
    import torch

    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0},
                                         "stream": {"token_check": True}}))
    b = guard.grounder_backend
    from plguard.grounding.resolve import backend_identity

    print(f"{backend_identity(b)['model_id']}; "
          f"torch threads {torch.get_num_threads()}; {a.answers} benign answers")
    print("\n1. token check vs one forward over the whole answer, by stream.token_step")
    for step in (int(x) for x in a.steps.split(",")):
        ratios = []
        for e in data["benign"][:a.answers]:
            t_inc, t_one, _, _ = cost(guard, e["answer"], step)
            ratios.append(t_inc / t_one)
        print(f"  step {step:>4}: median {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})", flush=True)
    up = b.model.model.layers[0].mlp.up_proj
    dtype = next(up.parameters()).dtype
    print(f"\n2. one linear layer ({up.in_features} -> {up.out_features}, {dtype}) per call")
    for n in (1, 16, 32, 64, 128, 256, 676):
        t = per_call(up, up.in_features, n, dtype)
        print(f"  {n:>4} tokens: {t * 1e3:6.3f} ms per call, {t / n * 1e6:7.2f} us per token")


if __name__ == "__main__":
    main()
