"""What a token-check step costs, and why (issue 54, item 3's cost target), in one run.

1. The token check's cost against one forward over the whole answer (the ratio of
   ``scripts/bench_token_check.py``'s section 3) for several ``stream.token_step`` sizes,
   median over the benign answers of ``tests/data/unseen``.
2. The floor under it: one of the grounder's own linear layers (layer 0's MLP up
   projection) timed per call at several token counts, in the grounder's dtype. A step
   forwards every layer once, so a step of any size costs at least the per-call time of
   each of its matrix products.
3. The same floor for a whole step: one forward as deep as the heads read, behind the
   answer template's cached keys and values (what a step of the alone read runs), at 1,
   32, 48 and the 64 tokens a step forwards, against one forward over a whole answer;
   and the least a token check can cost at each step size if every step were that one
   forward (steps over the answer x a 64-token forward / the whole forward), and if each
   step forwarded only its own new tokens (a read that kept the last window's keys and
   values: not built, it is not the view the heads were fitted on), or only one token (the
   least any step's forward costs).

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
            t_inc, t_one, *_ = cost(guard, e["answer"], step)
            ratios.append(t_inc / t_one)
        print(f"  step {step:>4}: median {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})", flush=True)
    up = b.model.model.layers[0].mlp.up_proj
    dtype = next(up.parameters()).dtype
    print(f"\n2. one linear layer ({up.in_features} -> {up.out_features}, {dtype}) per call")
    for n in (1, 16, 32, 64, 128, 256, 676):
        t = per_call(up, up.in_features, n, dtype)
        print(f"  {n:>4} tokens: {t * 1e3:6.3f} ms per call, {t / n * 1e6:7.2f} us per token")
    section_forward(guard, data["benign"][0]["answer"],
                    [int(x) for x in a.steps.split(",")])


def timed(fn, reps: int = 9, warm: int = 1) -> float:  # type: ignore[no-untyped-def]
    """The median seconds of ``fn()`` over ``reps`` calls, after ``warm`` untimed ones
    (under ``torch.inference_mode``)."""
    import torch

    with torch.inference_mode():
        for _ in range(warm):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def section_forward(guard: Guard, answer: str, steps: list[int]) -> None:
    """Section 3 (module docstring)."""
    import torch
    from transformers import DynamicCache

    from plguard.backends.depth import states_to
    from plguard.grounding.alone import render_alone
    from plguard.grounding.prompt import escape_data

    b = guard.grounder_backend
    meter = guard.token_meter()
    assert meter is not None
    before = render_alone(b).answer[0]
    head = b.encode(before)
    whole = b.encode(before + escape_data(answer))
    cache = DynamicCache()  # the template's keys and values, as a step finds them
    with torch.inference_mode():
        states_to(b.model, meter.layers, input_ids=torch.tensor([head], device=b.device),
                  past_key_values=cache, use_cache=True, logits_to_keep=1)

    def step_forward(n: int) -> None:
        with torch.inference_mode():
            states_to(b.model, meter.layers,
                      input_ids=torch.tensor([whole[-n:]], device=b.device),
                      past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.crop(-n)  # back to the template alone

    def whole_forward() -> None:
        with torch.inference_mode():
            b.model(input_ids=torch.tensor([whole], device=b.device), logits_to_keep=1)

    t_at = {n: timed(lambda n=n: step_forward(n)) for n in (1, 32, 48, 64)}
    t_whole = timed(whole_forward)
    print(f"\n3. one step's forward as deep as the heads read (to layer {max(meter.layers)} "
          f"of {len(b.model.model.layers)}), behind the template's cache, vs one forward "
          f"over a whole answer ({len(whole)} tokens, every layer)")
    print("  " + "; ".join(f"{n} token{'s' * (n > 1)}: {t * 1e3:.1f} ms" for n, t in t_at.items())
          + f"; the whole answer: {t_whole * 1e3:.1f} ms")
    for step in steps:
        n = -(-(len(whole) - len(head)) // step)
        new = t_at.get(step) or timed(lambda step=step: step_forward(step))
        print(f"  step {step:>4}: {n} steps x {t_at[64] * 1e3:.1f} ms = at least "
              f"{n * t_at[64] / t_whole:.2f}x the whole forward; {n * new / t_whole:.2f}x if "
              f"a step forwarded only its new tokens, {n * t_at[1] / t_whole:.2f}x if one token")


if __name__ == "__main__":
    main()
