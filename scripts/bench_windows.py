"""Benchmark windowed grounding: cost per 1k response tokens as answers grow.

Grounds the minimal policy's response-scope questions on answers of increasing length with
the embedded model (transformers), windows on, and reports windows, tokens processed
(prompt tokens of every window and question) and seconds, each per 1k response tokens, so
the linear growth shows side by side in one run. A fixed-length answer within the budget
is the baseline row.

    python scripts/bench_windows.py                     # 0.25k .. 8k tokens, budget 512
    python scripts/bench_windows.py --lengths 1000 4000 --budget 1024 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from plguard.backends.transformers_backend import TransformersBackend
from plguard.config import GroundingConfig
from plguard.grounding import Grounder
from plguard.policy import load_policy

PARAGRAPH = ("Composting turns kitchen scraps into soil. Mix green material such as "
             "vegetable peelings with brown material such as dry leaves, keep the heap damp "
             "like a wrung-out sponge, and turn it every week or two so air reaches the "
             "middle. ")
REQUEST = "How do I start a compost heap?"


def answer_of(backend: TransformersBackend, n_tokens: int) -> str:
    reps = max(1, n_tokens // max(1, backend.count_tokens(PARAGRAPH)))
    return PARAGRAPH * reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[250, 1000, 2000, 4000, 8000])
    ap.add_argument("--budget", type=int, default=512, help="grounding.max_data_tokens")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()
    backend = TransformersBackend.load("embedded", dtype=args.dtype, device="cpu")
    preds = [p for p in load_policy("minimal").predicates if p.scope == "response"]
    g = Grounder(backend, preds, GroundingConfig(max_data_tokens=args.budget,
                                                 paraphrases=False))
    g.ground([(REQUEST, "warm-up")])
    print(f"embedded model ({backend.model_id}), budget {args.budget} tokens, "
          f"{len(preds)} response questions, median of {args.repeats}")
    print(f"{'response tokens':>15} {'windows':>8} {'tokens processed':>17} "
          f"{'seconds':>8} {'tokens/1k resp':>15} {'s/1k resp':>10}")
    for n in args.lengths:
        answer = answer_of(backend, n)
        n_resp = backend.count_tokens(answer)
        reqs = g.windows(REQUEST, answer)
        processed = sum(len(backend.encode(r.prefix)) + sum(len(backend.encode(s))
                                                            for s in r.suffixes)
                        for r in reqs)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            g.ground([(REQUEST, answer)])
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        print(f"{n_resp:>15} {len(reqs):>8} {processed:>17} {t:>8.2f} "
              f"{processed / n_resp * 1000:>15.0f} {t / n_resp * 1000:>10.2f}")


if __name__ == "__main__":
    main()
