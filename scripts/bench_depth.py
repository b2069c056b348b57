"""Forwards that stop after the deepest layer read (plguard/backends/depth.py), side by side.

``Guard.check`` on long answers (the benign and the long harmful answers of
``tests/data/unseen``) with the forwards stopping after the deepest layer the heads read,
and with every forward run whole (``depth.can_stop`` patched to say no), in one process,
alternating per answer so the machine's load falls on both alike. The scores must be the
same to the last bit (the same operations run up to the deepest layer read).

    python scripts/bench_depth.py [--policies minimal,detailed] [--n 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from unittest import mock

import yaml

from plguard import Guard, GuardConfig
from plguard.backends import depth

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "unseen" / "passages.yaml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="minimal,detailed")
    ap.add_argument("--n", type=int, default=8, help="answers of each kind")
    a = ap.parse_args()
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    items = ([(e["request"], e["answer"]) for e in data["benign"][:a.n]]
             + [(e["request"], e["long_answer"]) for e in data["harmful"][:a.n]])
    print(f"Guard.check on {len(items)} long answers (tests/data/unseen), repair off; "
          "seconds per check, stopped at the deepest layer read vs every forward whole")
    for policy in a.policies.split(","):
        guard = Guard(GuardConfig.from_dict({"policy": policy, "repair": {"max_rounds": 0}}))
        guard.check("Hello", "Hi! How can I help?")  # load and warm up
        stop, whole, same = [], [], True
        for q, ans in items:
            t0 = time.perf_counter()
            r_stop = guard.check(q, ans)
            stop.append(time.perf_counter() - t0)
            with mock.patch.object(depth, "can_stop", lambda model, layers: False):
                t0 = time.perf_counter()
                r_whole = guard.check(q, ans)
                whole.append(time.perf_counter() - t0)
            same &= ([(s.name, s.p_true) for s in r_stop.grounding.scores]
                     == [(s.name, s.p_true) for s in r_whole.grounding.scores])
        print(f"  {policy:<14} stopped {statistics.median(stop):5.2f} s, whole "
              f"{statistics.median(whole):5.2f} s (medians): "
              f"{sum(stop) / sum(whole):.2f}x the time in all; scores identical: {same}",
              flush=True)
        guard.close()


if __name__ == "__main__":
    main()
