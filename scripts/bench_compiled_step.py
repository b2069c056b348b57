"""Would a compiled forward bring the token check under 1.3x? (issue 54, item 3), one run.

On a CPU with AMX a step of the token check costs mostly a fixed part per forward (the
weights re-laid for every matrix product, and ~100 small operations a layer:
docs/benchmarks.md, *On a CPU with AMX*). ``torch.compile`` (inductor, with the weights
frozen and packed once) takes much of that away. This times, side by side, the grounder's
own modules (its embedding, rotary embedding and decoder layers from transformers; no
hand-written model code), eager and compiled:

1. one step's forward: the newest 64 tokens of an answer through the decoder layers the
   content heads read (the alone read forwards these 64 behind the answer template's
   cached keys and values: a few more keys to attend to);
2. one forward over the whole answer through every decoder layer;
3. the token check's floor at each step size: the steps over that answer x (1) / (2),
   eager against eager, compiled against compiled, and compiled steps against the eager
   whole forward (the yardstick as the product runs it).

Not in the product: each new shape compiles for 15-25 s on 2 cores.

    python scripts/bench_compiled_step.py [--steps 32,48,64]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_token_check import DATA  # noqa: E402
from bench_token_step import timed  # noqa: E402

from plguard import Guard, GuardConfig  # noqa: E402


def layers_to(model: Any, depth: int) -> Any:
    """The first ``depth`` decoder layers of ``model`` as one module: token ids -> states."""
    import torch

    inner = model.model

    class Truncated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.rotary = inner.embed_tokens, inner.rotary_emb
            self.layers = inner.layers[:depth]

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.embed(ids)
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            pe = self.rotary(h, pos)
            for layer in self.layers:  # causal: sdpa with no mask (transformers' layers)
                out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
                h = out[0] if isinstance(out, tuple) else out
            return h

    return Truncated().eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="32,48,64")
    a = ap.parse_args()
    import torch
    import torch._inductor.config as inductor

    from plguard.backends.depth import states_to
    from plguard.grounding.prompt import escape_data
    from plguard.grounding.resolve import backend_identity

    guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0},
                                         "stream": {"token_check": True}}))
    b = guard.grounder_backend
    meter = guard.token_meter()
    assert meter is not None
    depth, total = max(meter.layers), len(b.model.model.layers)
    answer = yaml.safe_load(DATA.read_text(encoding="utf-8"))["benign"][0]["answer"]
    ids = b.encode(escape_data(answer))
    step_ids = torch.tensor([ids[-64:]], device=b.device)
    whole_ids = torch.tensor([ids], device=b.device)
    print(f"{backend_identity(b)['model_id']}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; an answer of {len(ids)} tokens")

    part, every = layers_to(b.model, depth), layers_to(b.model, total)
    with torch.inference_mode():  # the same states as the product's stopped forward
        want = states_to(b.model, [depth], input_ids=step_ids)[depth]
        assert torch.equal(part(step_ids), want), "the truncated forward is not the model's"
    eager = {"step": timed(lambda: part(step_ids), 20, warm=2),
             "whole": timed(lambda: every(whole_ids), 7, warm=2)}
    inductor.freezing = True  # weights are constants: packed once for the CPU's kernels
    t0 = time.perf_counter()
    part_c = torch.compile(part, dynamic=False)
    every_c = torch.compile(every, dynamic=False)
    with torch.inference_mode():
        got = part_c(step_ids).float()
        every_c(whole_ids)
    print(f"compiling both shapes took {time.perf_counter() - t0:.0f} s; compiled step "
          f"states differ from eager by at most {(got - want.float()).abs().max().item():.3g} "
          f"(largest state {want.float().abs().max().item():.3g}, bf16)")
    compiled = {"step": timed(lambda: part_c(step_ids), 20, warm=2),
                "whole": timed(lambda: every_c(whole_ids), 7, warm=2)}
    print(f"\n1. one step: 64 tokens through layers 1-{depth} of {total}: eager "
          f"{eager['step'] * 1e3:.1f} ms, compiled {compiled['step'] * 1e3:.1f} ms")
    print(f"2. the whole answer through every layer: eager {eager['whole'] * 1e3:.1f} ms, "
          f"compiled {compiled['whole'] * 1e3:.1f} ms")
    print("3. the token check's floor, steps x one step / the whole forward")
    for step in (int(x) for x in a.steps.split(",")):
        n = -(-len(ids) // step)
        print(f"  step {step:>3} ({n} steps): eager {n * eager['step'] / eager['whole']:.2f}x, "
              f"compiled {n * compiled['step'] / compiled['whole']:.2f}x, compiled steps "
              f"against the eager whole {n * compiled['step'] / eager['whole']:.2f}x")


if __name__ == "__main__":
    main()
