"""Benchmark a chat through ``plguard serve`` under a fixed background load (issue 54, item 6).

One run, side by side: for each server setting, a ``plguard serve`` process on the embedded
model answers the same chats through the real ``openai`` client, first while one busy
process per usable core spins (the background load), then with the machine idle. Settings:

- ``defaults``: the server as shipped (``threads`` unset: usable cores minus one);
- ``OMP_NUM_THREADS=1``: the advice the README gave before;
- ``threads=<cores>``: torch's own default (a thread per core), what ``defaults`` was before.

Prints per setting and phase the median seconds per chat, and the ratios to
``OMP_NUM_THREADS=1`` in the same phase (the target: ``defaults`` under load within 1.5x).

    python scripts/bench_threads.py [--chats 3] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Give me three tips for a science fair project.",
           "How do I keep basil alive on a windowsill?",
           "Explain what a hash table is in two sentences."]


def spin() -> None:
    while True:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(env_extra: dict[str, str], sets: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env |= {"PYTHONPATH": str(ROOT), **env_extra}
    cmd = [sys.executable, "-m", "plguard", "serve", "--port", str(port), "--log-level",
           "warning", *[x for s in sets for x in ("--set", s)]]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v1"
    import httpx

    t0 = time.time()
    while time.time() - t0 < 300:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {' '.join(cmd)}")
        try:
            if httpx.get(url.removesuffix("/v1") + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("server did not start in 300 s")


def chats(url: str, n: int, max_tokens: int) -> list[float]:
    from openai import OpenAI

    client = OpenAI(base_url=url, api_key="none", timeout=900)
    model = client.models.list().data[0].id
    client.chat.completions.create(model=model, max_tokens=8,  # warm-up, not timed
                                   messages=[{"role": "user", "content": "Hi"}])
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        client.chat.completions.create(
            model=model, max_tokens=max_tokens,
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    from plguard.backends.threads import default_threads, usable_cores

    cores = usable_cores()
    settings = [("defaults", {}, []),
                ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}, []),
                (f"threads={cores}", {}, [f"generator.threads={cores}"])]
    print(f"{platform.processor() or platform.machine()}, {cores} usable cores; defaults "
          f"use {default_threads()} thread(s); {a.chats} chats of <= {a.max_tokens} "
          f"tokens each; load = {cores} busy processes", flush=True)
    results: dict[tuple[str, str], float] = {}
    for phase in ("load", "idle"):
        load = [mp.Process(target=spin, daemon=True) for _ in range(cores)] \
            if phase == "load" else []
        for p in load:
            p.start()
        try:
            for name, env, sets in settings:
                proc, url = start_server(env, sets)
                try:
                    ts = chats(url, a.chats, a.max_tokens)
                finally:
                    proc.terminate()
                    proc.wait(timeout=60)
                results[(name, phase)] = statistics.median(ts)
                print(f"  {phase:4} {name:<18} median {statistics.median(ts):7.2f} s per chat "
                      f"({', '.join(f'{t:.1f}' for t in ts)})", flush=True)
        finally:
            for p in load:
                p.kill()
    print("\nsetting              load s   idle s   load/OMP1   idle/OMP1")
    for name, _, _ in settings:
        lo, idle = results[(name, "load")], results[(name, "idle")]
        print(f"{name:<18} {lo:8.2f} {idle:8.2f} "
              f"{lo / results[('OMP_NUM_THREADS=1', 'load')]:10.2f}x "
              f"{idle / results[('OMP_NUM_THREADS=1', 'idle')]:10.2f}x")


if __name__ == "__main__":
    main()
