"""Rows per second of ``plguard batch``: local vs Ray with one and two workers, in one run.

    python -u scripts/bench_ray.py                    # 48 labelled XSTest pairs, minimal
    python -u scripts/bench_ray.py --rows 96 --policy detailed

Each variant is the real command in its own process (``plguard batch IN OUT`` and
``... --ray --workers K`` on a fresh local Ray instance), checking the same seeded
(prompt, completion) pairs from XSTest's labelled completions: grounding and reasoning,
no drafting. Two figures per variant:

* end to end: rows / wall time of the command, model loads and Ray start included;
* steady: rows after the first written batch / time from that batch to the last row
  (the output file is polled), which leaves the start-up out.

On a machine with N cores, Ray with K workers gives each actor one core and one torch
thread; local runs torch on all cores. The load average is printed: on a shared
machine the figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_input(path: Path, n: int, seed: int) -> None:
    from plguard_lab.labels.xstest import load_completions, seeded_subset

    items = seeded_subset(load_completions(), n, seed)
    with path.open("w", encoding="utf-8") as fh:
        for c in items:
            fh.write(json.dumps({"id": c.uid, "prompt": c.prompt,
                                 "response": c.completion}) + "\n")


def run(cmd: list[str], out: Path, n: int, env: dict[str, str]) -> dict[str, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first: tuple[float, int] | None = None
    last = t0
    seen = 0
    while True:
        done = proc.poll() is not None
        rows = sum(1 for _ in out.open()) if out.exists() else 0
        now = time.perf_counter()
        if rows > seen:
            seen, last = rows, now
            if first is None:
                first = (now, rows)
        if done:
            break
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0 or seen != n:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}, {seen}/{n} rows):\n"
                         f"{stderr[-3000:]}")
    wall = time.perf_counter() - t0
    steady = ((seen - first[1]) / (last - first[0])
              if first is not None and seen > first[1] and last > first[0] else float("nan"))
    return {"wall_s": wall, "rows_per_s": n / wall, "steady_rows_per_s": steady,
            "first_row_s": (first[0] - t0) if first else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jsonl"
        write_input(src, args.rows, args.seed)
        base = [sys.executable, "-m", "plguard.cli", "batch", str(src)]
        opts = ["--policy", args.policy, "--set", f"generator.batch_size={args.batch_size}",
                "--set", "generator.dtype=float32", "--no-progress"]
        variants = {"local": [], "ray-1": ["--ray", "--workers", "1"],
                    "ray-2": ["--ray", "--workers", "2"]}
        results = {}
        for name, extra in variants.items():
            out = Path(tmp) / f"{name}.jsonl"
            load = os.getloadavg()[0]
            results[name] = run(base + [str(out)] + opts + extra, out, args.rows, env)
            results[name]["load_before"] = load
            r = results[name]
            print(f"{name:<6} end-to-end {r['rows_per_s']:.2f} rows/s (wall {r['wall_s']:.1f} s,"
                  f" first row at {r['first_row_s']:.1f} s), steady "
                  f"{r['steady_rows_per_s']:.2f} rows/s, load {load:.2f}", flush=True)
    loc = results["local"]
    print(f"\n{args.rows} rows, policy {args.policy}, batch {args.batch_size}, "
          f"{os.cpu_count()} cores")
    for name in ("ray-1", "ray-2"):
        r = results[name]
        print(f"{name} / local: end-to-end {r['rows_per_s'] / loc['rows_per_s']:.2f}x, "
              f"steady {r['steady_rows_per_s'] / loc['steady_rows_per_s']:.2f}x")
    r1, r2 = results["ray-1"], results["ray-2"]
    print(f"ray-2 / ray-1: end-to-end {r2['rows_per_s'] / r1['rows_per_s']:.2f}x, "
          f"steady {r2['steady_rows_per_s'] / r1['steady_rows_per_s']:.2f}x")


if __name__ == "__main__":
    main()
