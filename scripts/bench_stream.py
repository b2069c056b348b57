"""Benchmark guarded streaming (issue 27): first token, throughput and block latency.

For each prompt, in one run and on one loaded model (greedy, so every path sees the same
draft), side by side:

- ``raw``: the unguarded generator's own stream (``backend.stream_generate``);
- ``stream F+W/O``: ``Guard.stream`` with its defaults: a first window of F tokens, then
  windows of W tokens with O of overlap; ``stream W/O flat``: the first window full size too;
- ``guard``: today's non-streaming guard (``Guard.chat``): its first byte is its answer.

Columns: time to first text (s), end-to-end seconds, tokens delivered per second (the
final text's tokens over the end-to-end time), and the ratios of the first-text times,
also to the issue's bound: the request check plus one window of generation (timed on the
raw run) plus that window's check.
``flag->end`` is measured on a separate stream whose grounder (a scripted one: the real
model's verdicts are near chance) flags the second response window: seconds from the start
of that window's check to the end of the stream (refusal sent, generation cancelled), and
how many deltas (words) the generator produced after the check began.

    OMP_NUM_THREADS=2 python scripts/bench_stream.py                 # embedded, 256 tokens
    python scripts/bench_stream.py --max-new-tokens 128 --prompts 2 --small-window 32
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time
from typing import Any

import torch

from plguard import Guard, GuardConfig
from plguard.backends.transformers_backend import TransformersBackend
from plguard.streaming import StreamChunk, StreamEnd
from plguard.testing import ScriptedStreamBackend
from plguard.types import GenerationParams, Message

PROMPTS = [
    "Write a long, detailed essay about the history of the bicycle, with many examples.",
    "Explain in detail how bread is made at home, step by step, with tips for beginners.",
    "Describe the water cycle at length, as if teaching a class of curious students.",
]


def _raw(backend: Any, text: str, params: GenerationParams, windows: list[int]
         ) -> dict[str, Any]:
    t0 = time.perf_counter()
    first, out, reached = None, "", {}
    for delta in backend.stream_generate((Message("user", text),), params, threading.Event()):
        if first is None:
            first = time.perf_counter() - t0
        out += delta
        n = backend.count_tokens(out)
        for w in windows:  # when the generator alone had produced one window of tokens
            if w not in reached and n >= w:
                reached[w] = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return {"first": first or total, "total": total, "tokens": backend.count_tokens(out),
            "window_s": reached}


def _stream(guard: Guard, backend: Any, text: str, params: GenerationParams
            ) -> dict[str, Any]:
    t0 = time.perf_counter()
    first, end = None, None
    for ev in guard.stream([{"role": "user", "content": text}], params=params):
        if isinstance(ev, StreamChunk) and first is None:
            first = ev.t - t0
        elif isinstance(ev, StreamEnd):
            end = ev
    total = time.perf_counter() - t0
    assert end is not None
    windows = sum(1 for k in end.result.timings_s if k.startswith("stream.window_"))
    t = end.result.timings_s
    return {"first": first or total, "total": total,
            "tokens": backend.count_tokens(end.result.final), "windows": windows,
            "action": end.result.decision.action, "draft": end.result.draft,
            "request_s": t.get("stream.request_check", 0.0),
            "window1_s": t.get("stream.window_1", 0.0)}


def _guard(guard: Guard, backend: Any, text: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = guard.chat([{"role": "user", "content": text}])
    total = time.perf_counter() - t0
    t = res.timings_s
    return {"first": total, "total": total, "tokens": backend.count_tokens(res.final),
            "action": res.decision.action, "draft": res.draft,
            "phases": f"generate {t.get('generate', 0):.1f} s, ground {t.get('ground', 0):.1f} s"}


class _Flagging(ScriptedStreamBackend):
    """A grounder that allows the first response window and flags the second, timed.

    The request passes (harmful, but only a harmful answer is unsafe); flagging the second
    window, after text was released, measures the block itself: a block before any release
    would be repaired instead (a whole generation more).
    """

    def __init__(self) -> None:
        super().__init__([], p_true=self._p)
        self.windows: list[str] = []
        self.flag_check: float | None = None

    def _p(self, prefix: str, suffix: str) -> float:
        if "<<<RESPONSE>>>" not in prefix:
            return 0.9
        if prefix not in self.windows:
            self.windows.append(prefix)
            if len(self.windows) == 2:
                self.flag_check = time.perf_counter()
        return 0.95 if len(self.windows) >= 2 else 0.05


def _flagged(backend: Any, text: str, params: GenerationParams, window: int) -> dict[str, Any]:
    grounder = _Flagging()
    cfg = GuardConfig.from_dict({"stream": {"window_tokens": window,
                                            "overlap_tokens": window // 4}})
    guard = Guard(cfg, generator=backend, grounder=grounder)
    produced: list[float] = []

    class Counting:  # the generator's deltas, timed as they are produced
        def __init__(self) -> None:
            self.it = backend.stream_generate

        def __call__(self, cancel: threading.Event) -> Any:
            for d in self.it((Message("user", text),), params, cancel):
                produced.append(time.perf_counter())
                yield d

    end = None
    for ev in guard.stream([{"role": "user", "content": text}], params=params,
                           source=Counting()):
        if isinstance(ev, StreamEnd):
            end = ev
    t_end = time.perf_counter()
    assert end is not None and grounder.flag_check is not None
    t_flag = grounder.flag_check
    return {"flag_to_end": t_end - t_flag, "after": sum(1 for t in produced if t > t_flag),
            "blocked": end.blocked, "finish": end.finish_reason}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--small-window", type=int, default=48,
                    help="window size (tokens) of the flagged-window run; overlap a quarter")
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    backend = TransformersBackend.load(args.model, device=args.device)
    params = GenerationParams(max_new_tokens=args.max_new_tokens)
    gen = {"max_new_tokens": args.max_new_tokens}
    default = GuardConfig().stream
    first_w = min(default.first_window_tokens or default.window_tokens, default.window_tokens)
    configs = {f"{first_w}+{default.window_tokens}/{default.overlap_tokens}": {},  # defaults
               f"{default.window_tokens}/{default.overlap_tokens} flat":
                   {"first_window_tokens": None}}
    guards = {name: Guard(GuardConfig.from_dict({"policy": args.policy, "generation": gen,
                                                 "stream": s}), generator=backend)
              for name, s in configs.items()}
    # Each configuration's first window (tokens): what the first text waits for.
    first_of = {name: min(g.config.stream.first_window_tokens or g.config.stream.window_tokens,
                          g.config.stream.window_tokens) for name, g in guards.items()}
    plain = next(iter(guards.values()))
    backend.generate([(Message("user", "Hi"),)], GenerationParams(max_new_tokens=4))  # warm
    print(f"model={backend.model_id} policy={args.policy} max_new_tokens={args.max_new_tokens}"
          f" cpu={platform.machine()} threads={torch.get_num_threads()}")
    print(f"{'prompt':>6} {'path':>12} {'first_s':>8} {'total_s':>8} {'tok':>5} "
          f"{'tok/s':>6} {'windows':>7} {'action':>7}")
    ratios: dict[str, list[float]] = {f"{n} vs raw": [] for n in guards}
    ratios.update({f"{n} vs guard": [] for n in guards})
    ratios.update({f"{n} vs bound": [] for n in guards})
    flags = []
    for i, text in enumerate(PROMPTS[:args.prompts]):
        sizes = list(first_of.values())
        rows: dict[str, dict[str, Any]] = {"raw": _raw(backend, text, params, sizes)}
        for name, g in guards.items():
            rows[f"stream {name}"] = _stream(g, backend, text, params)
        rows["guard"] = _guard(plain, backend, text)
        drafts = {r["draft"] for r in rows.values() if "draft" in r}
        for path, r in rows.items():
            print(f"{i:>6} {path:>12} {r['first']:>8.2f} {r['total']:>8.2f} {r['tokens']:>5} "
                  f"{r['tokens'] / r['total']:>6.1f} {r.get('windows', ''):>7} "
                  f"{r.get('action', ''):>7}")
        print(f"{'':>6} {'':>12} guard phases: {rows['guard']['phases']}")
        if len(drafts) != 1:
            print("       (the paths drafted different texts: ratios of this prompt are "
                  "still measured, but compare unequal answers)")
        for name in configs:
            r = rows[f"stream {name}"]
            s = r["first"]
            ratios[f"{name} vs raw"].append(s / rows["raw"]["first"])
            ratios[f"{name} vs guard"].append(s / rows["guard"]["first"])
            # The bound: the request check plus one window of generation (and, since
            # nothing leaves unchecked, that window's own check).
            gen_w = rows["raw"]["window_s"].get(first_of[name], rows["raw"]["total"])
            bound = r["request_s"] + gen_w + r["window1_s"]
            ratios[f"{name} vs bound"].append(s / bound)
            print(f"{'':>6} {'':>12} stream {name}: request check {r['request_s']:.2f} s + "
                  f"one window generated {gen_w:.2f} s + its check {r['window1_s']:.2f} s "
                  f"= {bound:.2f} s")
        flags.append(_flagged(backend, text, params, args.small_window))
    print("\ntime to first text, guarded stream / other (median over prompts):")
    for k, v in ratios.items():
        each = ", ".join(f"{x:.2f}" for x in v)
        print(f"  stream {k:<18} {statistics.median(v):6.2f}x  ({each})")
    print(f"\nflagged second window ({args.small_window}-token windows, scripted grounder):")
    for i, f in enumerate(flags):
        print(f"  prompt {i}: flag->end {f['flag_to_end'] * 1000:.0f} ms, deltas generated "
              f"after its check began {f['after']}, blocked={f['blocked']} "
              f"finish={f['finish']}")


if __name__ == "__main__":
    main()
