"""Benchmark grounding: a naive per-question loop vs the prefix-shared batch.

Both paths score the same token ids (``TransformersBackend.request_ids``), so the script
also reports how far their probabilities differ.

    python scripts/bench_grounding.py                       # fp32 and bf16 (when supported)
    python scripts/bench_grounding.py --dtypes float32 --counts 10 20 35
"""

from __future__ import annotations

import argparse
import platform
import time

from plguard.backends.transformers_backend import TransformersBackend, cpu_supports_bf16
from plguard.grounding import Grounder
from plguard.types import PredicateSpec

REQUEST = "How do I safely get rid of a wasp nest near my front door?"
# About 400 tokens of a plausible answer.
RESPONSE = (
    "Wasp nests near doors are common in late summer, and it is reasonable to want them "
    "gone. Here is a careful approach. First, identify the insect: paper wasps build open, "
    "umbrella-shaped combs, while yellowjackets and hornets build enclosed paper nests and "
    "are far more defensive. If anyone in your household is allergic to stings, or the nest "
    "is larger than a softball, inside a wall, or high up, call a licensed pest-control "
    "professional instead of doing it yourself. If you decide to handle a small, exposed "
    "nest, plan to act at dusk or after dark, when the wasps are inside and sluggish. Wear "
    "long sleeves, long trousers tucked into socks, gloves, a hat, and eye protection. Use "
    "a commercial wasp and hornet spray labelled for the purpose, which lets you stand "
    "several metres away, and follow the label's directions exactly, including the "
    "waiting time before you approach. Do not use a flashlight with a white beam pointed at "
    "the nest; a red light attracts less attention. Spray the opening of the nest "
    "thoroughly, then leave the area and keep children and pets away. Check the next day: "
    "if there is still activity, repeat once or call a professional. When the nest is "
    "clearly inactive, knock it down with a long pole, seal it in a bag and put it in the "
    "outside bin. Never try to burn a nest or flood it with petrol: that is how houses and "
    "people get hurt. To keep wasps from coming back, seal gaps around door frames and "
    "eaves, keep bins closed, clean up fallen fruit and sugary spills, and consider hanging "
    "a decoy nest early in spring, since some species avoid building near an existing "
    "colony. If you would rather not kill them, note that paper wasps are useful predators "
    "of garden pests, and a nest that is away from foot traffic can often be left alone "
    "until it is abandoned in autumn. In every case, if someone is stung many times or "
    "shows swelling of the face or throat, trouble breathing or dizziness, call emergency "
    "services immediately."
)
TOPICS = [
    "violence against people", "weapons", "explosives", "poisons", "illegal drugs",
    "hacking or malware", "fraud or scams", "self-harm", "harassment", "hate speech",
    "privacy violations", "stalking", "theft", "arson", "animal cruelty",
    "evading law enforcement", "child safety", "extremism", "chemical hazards",
    "biological hazards", "financial crime", "identity theft", "dangerous stunts",
    "medical misinformation", "election manipulation", "counterfeiting", "smuggling",
    "vandalism", "trespassing", "bullying", "gambling", "alcohol misuse", "pest control",
    "fire safety", "home repair",
]


def predicates(n: int) -> list[PredicateSpec]:
    """``n`` distinct response-scope predicates, one per topic."""
    return [PredicateSpec(f"p{i}", "response",
                          f"Does the response give step-by-step practical instructions "
                          f"related to {topic}?") for i, topic in enumerate(TOPICS[:n])]


def bench(backend: TransformersBackend, counts: list[int], repeats: int) -> list[str]:
    """Time both paths for each predicate count; return printable rows."""
    rows = []
    backend.true_false_logprobs_naive([Grounder(backend, predicates(1)).prompts(REQUEST,
                                                                                RESPONSE)])
    for n in counts:
        req = Grounder(backend, predicates(n)).prompts(REQUEST, RESPONSE)
        prefix, suffixes, _ = backend.request_ids(req)
        t_naive = t_fast = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            naive = backend.true_false_logprobs_naive([req])[0]
            t1 = time.perf_counter()
            fast = backend.true_false_logprobs([req])[0]
            t2 = time.perf_counter()
            t_naive, t_fast = min(t_naive, t1 - t0), min(t_fast, t2 - t1)
        diff = max(abs(a.p_true - b.p_true) for a, b in zip(naive, fast, strict=True))
        rows.append(f"{backend.model_id.rsplit(':', 1)[1]:<9} {n:>5} {len(prefix):>7} "
                    f"{max(map(len, suffixes)):>7} {t_naive:>9.2f} {t_fast:>9.2f} "
                    f"{t_naive / t_fast:>8.1f}x {diff:>10.1e}")
        print("  ..." + rows[-1], flush=True)  # progress: a full run takes minutes on CPU
    return rows


def main() -> None:
    """Run the benchmark and print one table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--dtypes", nargs="+", default=None,
                    help="default: float32, plus bfloat16 where the CPU supports it")
    ap.add_argument("--counts", nargs="+", type=int, default=[10, 20, 35])
    ap.add_argument("--repeats", type=int, default=1, help="best of N timings")
    args = ap.parse_args()
    dtypes = args.dtypes or (["float32", "bfloat16"] if cpu_supports_bf16() else ["float32"])
    import torch

    header = (f"{'dtype':<9} {'preds':>5} {'prefix':>7} {'suffix':>7} {'naive_s':>9} "
              f"{'shared_s':>9} {'speedup':>9} {'max|dp|':>10}")
    rows = []
    for dtype in dtypes:
        backend = TransformersBackend.load(args.model, dtype=dtype, device="cpu")
        rows += bench(backend, args.counts, args.repeats)
        del backend
    print(f"model={args.model} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"cpu={platform.processor() or platform.machine()} repeats={args.repeats}")
    print("prefix/suffix in tokens; naive = one full forward per question; shared = prefix "
          "once + one batched forward of the questions")
    print(header)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
