"""A stream's window checks at the ``window`` bound against the full check, side by side.

A stream judges each window of a draft before its text goes out. Over-refusal is not
decided on a part of a draft (issue 54, item 4), so since 2026-12-07 a window is judged at
the ``window`` bound (plguard.judging): the unsafe and content rules exactly, and the
predicates only over-refusal reads (for minimal's shipped heads the refusal, read from the
pair prompt) not grounded. This runs the same streams both ways in one run: the shipped
``window`` bound, and ``answer`` (every predicate of every window, as before), alternating
which goes first. Embedded model, minimal, shipped heads, no repair; the benign answers of
``tests/data/unseen`` from a fake upstream (4 words a piece, 10 ms apart).

    python scripts/bench_stream_windows.py [--answers 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_token_check import DATA, stream  # noqa: E402

from plguard import Guard, GuardConfig  # noqa: E402
from plguard.streaming import GuardedStream  # noqa: E402


def run(guard: Guard, entry: dict[str, str], bound: str) -> dict[str, Any]:
    """One stream of ``entry`` with its windows judged at ``bound``."""
    real = GuardedStream._assess_all

    def at(self: GuardedStream, answers: Any, b: Any = bound) -> Any:
        return real(self, answers, b)

    GuardedStream._assess_all = at  # type: ignore[method-assign,assignment]
    try:
        chunks, end, _ = stream(guard, entry["request"], entry["answer"])
    finally:
        GuardedStream._assess_all = real  # type: ignore[method-assign]
    t = end.result.timings_s
    return {"total": t["total"], "first": t.get("stream.first_release", float("nan")),
            "windows": sum(v for k, v in t.items() if k.startswith("stream.window_")
                           and k[len("stream.window_"):].isdigit()),
            "pieces": len(chunks) - 1, "action": end.result.decision.action,
            "out": "".join(c.text for c in chunks)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=8)
    a = ap.parse_args()
    benign = yaml.safe_load(DATA.read_text(encoding="utf-8"))["benign"][:a.answers]
    with Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0}})) as guard:
        run(guard, benign[-1], "window")  # warm-up, untimed
        rows = []
        for i, e in enumerate(benign):
            order = ("window", "answer") if i % 2 == 0 else ("answer", "window")
            got = {b: run(guard, e, b) for b in order}
            rows.append((e["id"], got["window"], got["answer"]))
    print(f"embedded model, minimal, shipped heads; {len(rows)} benign answers streamed, "
          "windows at the window bound (shipped) and at the answer bound (before)")
    print(f"{'id':6} {'total s':>15} {'first text s':>15} {'windows s':>15} {'pieces':>9} "
          "same text and action")
    for rid, w, b in rows:
        same = w["out"] == b["out"] and w["action"] == b["action"]
        print(f"{rid:6} {w['total']:6.2f} / {b['total']:6.2f} {w['first']:6.2f} / "
              f"{b['first']:6.2f} {w['windows']:6.2f} / {b['windows']:6.2f} "
              f"{w['pieces']:3d} / {b['pieces']:3d} {'yes' if same else 'NO'}")
    for key, what in (("total", "stream total"), ("first", "first text"),
                      ("windows", "window checks")):
        ratios = [w[key] / b[key] for _, w, b in rows if b[key] > 0]
        print(f"{what:14} window / answer bound: median {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
