"""Load and fault test of ``plguard serve`` on the embedded model, loopback only.

Starts its own server (uvicorn in a thread of this process, on a free 127.0.0.1 port) and
runs three bounded phases of CLIENTS concurrent clients, one request each:

1. batching on  (server.max_batch_size = --max-batch-size)
2. batching off (server.max_batch_size = 1: one guard.batch call per request)
3. fault: batching on, and the model backend is switched to raising as soon as the first
   batch reaches the Guard, then switched back once a 503 has gone out; the server must
   answer 503 for the failed batch, 200 for the rest and a probe afterwards, and never
   anything else.

Half of the requests stream (SSE), so time to first byte can be set against total
latency: the guard decides on the whole draft before the first byte, so TTFB ~ total.
Prints a markdown table; exits non-zero if phases 1-2 saw any error or phase 3 saw
anything but 200/503 or the server stopped answering.

    python scripts/load_server.py                    # 64 clients, 16 new tokens
    python scripts/load_server.py --clients 8 --time-limit 120   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from plguard import Guard, GuardConfig
from plguard.backends import load_backend
from plguard.config import ModelConfig, ServerConfig
from plguard.server import build_app
from plguard.testing import FaultSwitch, LiveServer

PROMPTS = [
    "How do I boil an egg?",
    "What is the capital of Australia?",
    "How do I kill a python process on Linux?",
    "Give me one tip for learning to juggle.",
    "How do I make a pipe bomb at home?",
    "Write a haiku about autumn rain.",
    "What is photosynthesis, in one sentence?",
    "How can I shoot a good photo at night?",
]


@dataclass
class Sample:
    status: int
    total_s: float
    ttfb_s: float | None
    stream: bool
    action: str | None = None


@dataclass
class Phase:
    name: str
    wall_s: float
    samples: list[Sample]
    batches: int
    batch_sizes: list[int] = field(default_factory=list)
    probe_after: int | None = None

    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 200]


async def _one(client: httpx.AsyncClient, i: int, stream: bool) -> Sample:
    body = {"model": "plguard", "stream": stream,
            "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}
    t0 = time.perf_counter()
    ttfb = None
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            chunks = []
            async for chunk in r.aiter_bytes():
                if ttfb is None:
                    ttfb = time.perf_counter() - t0
                chunks.append(chunk)
        total = time.perf_counter() - t0
        data = b"".join(chunks).decode()
        action = None
        if r.status_code == 200:
            last = (json.loads(data) if not stream else
                    json.loads([e for e in data.split("\n\n") if e][-2].removeprefix("data: ")))
            action = last["plguard"]["action"]
        return Sample(r.status_code, total, ttfb if stream else None, stream, action)
    except httpx.HTTPError:
        return Sample(-1, time.perf_counter() - t0, None, stream)


async def _phase(name: str, url: str, app: Any, clients: int,
                 fault: FaultSwitch | None = None) -> Phase:
    batcher = app.state.batcher
    b0, s0 = batcher.stats.batches, len(batcher.stats.sizes)
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(900), limits=limits) as c:
        tasks = [asyncio.create_task(_one(c, i, stream=i % 2 == 1)) for i in range(clients)]
        t0 = time.perf_counter()
        if fault is not None:
            # Break the backend as soon as the first batch is handed to the Guard, while
            # the other clients are still queued, and mend it when the first 503 is out.
            while batcher.stats.batches == b0:
                await asyncio.sleep(0.005)
            fault.broken = True
            while not any(t.done() and t.result().status == 503 for t in tasks):
                if all(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.01)
            fault.broken = False
        samples = list(await asyncio.gather(*tasks))
        wall = time.perf_counter() - t0
        probe = None
        if fault is not None:
            probe = (await _one(c, 0, stream=False)).status
    return Phase(name, wall, samples, batcher.stats.batches - b0, list(batcher.stats.sizes)[s0:],
                 probe)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _row(p: Phase) -> str:
    ok = p.ok()
    lat = [s.total_s for s in ok]
    ttfb = [s.ttfb_s for s in ok if s.stream and s.ttfb_s is not None]
    stream_total = [s.total_s for s in ok if s.stream]
    codes: dict[int, int] = {}
    for s in p.samples:
        codes[s.status] = codes.get(s.status, 0) + 1
    mean_batch = statistics.mean(p.batch_sizes) if p.batch_sizes else 0.0
    status = ", ".join(f"{k}: {v}" for k, v in sorted(codes.items()))
    return (f"| {p.name} | {len(p.samples)} | {status} "
            f"| {_pct(lat, .5):.2f} | {_pct(lat, .95):.2f} | {len(ok) / p.wall_s:.2f} "
            f"| {_pct(ttfb, .5):.2f} / {_pct(stream_total, .5):.2f} "
            f"| {p.batches} ({mean_batch:.1f}) | {p.wall_s:.1f} |")


async def _main(args: argparse.Namespace) -> int:
    t_load = time.perf_counter()
    backend = load_backend(ModelConfig(path="embedded", dtype=args.dtype, device="cpu"))
    switch = FaultSwitch(backend, "injected fault: backend switched off by the load script")
    cfg = GuardConfig.from_dict({"generation": {"max_new_tokens": args.max_new_tokens}})
    guard = Guard(cfg, generator=switch)
    guard.batch(PROMPTS[:2])  # warm-up: first-call costs are not load
    print(f"model {backend.model_id} loaded and warmed in {time.perf_counter() - t_load:.1f}s",
          file=sys.stderr)
    phases: list[Phase] = []
    plan = [("batching on", args.max_batch_size, None),
            ("batching off", 1, None),
            ("fault mid-load (batching on)", args.max_batch_size, switch)]
    for name, batch_size, fault in plan:
        settings = ServerConfig(max_batch_size=batch_size, max_wait_ms=args.max_wait_ms,
                                api_key_env="PLGUARD_LOAD_TEST_NO_KEY")
        app = build_app(guard, settings)
        with LiveServer(app, stop_timeout_s=60) as server:
            url = server.url
            print(f"phase: {name} ...", file=sys.stderr)
            phases.append(await _phase(name, url, app, args.clients, fault))
    on, off, fault_phase = phases
    print(f"\nplguard serve load test: {args.clients} concurrent clients x 1 request per phase, "
          f"embedded model ({backend.model_id}), max_new_tokens={args.max_new_tokens}, "
          f"max_batch_size={args.max_batch_size}, max_wait_ms={args.max_wait_ms}, "
          f"{os.cpu_count()} CPU cores, Python {platform.python_version()}\n")
    print("| phase | requests | status codes | p50 latency (s) | p95 latency (s) | throughput "
          "(req/s) | stream TTFB / total, p50 (s) | guard.batch calls (mean size) | wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in phases:
        print(_row(p))
    thr_on = len(on.ok()) / on.wall_s
    thr_off = len(off.ok()) / off.wall_s
    p50_on = _pct([s.total_s for s in on.ok()], .5)
    p50_off = _pct([s.total_s for s in off.ok()], .5)
    print(f"\nbatching on / off: throughput x{thr_on / thr_off:.2f}, "
          f"p50 latency x{p50_on / p50_off:.2f} (same run, same process, same model)")
    actions: dict[str, int] = {}
    for s in on.ok() + off.ok():
        actions[str(s.action)] = actions.get(str(s.action), 0) + 1
    print(f"guard actions over phases 1-2: {actions}")
    n503 = sum(s.status == 503 for s in fault_phase.samples)
    print(f"fault phase: {n503} answered 503 while the backend was broken, "
          f"{len(fault_phase.ok())} answered 200, probe after the fault: "
          f"{fault_phase.probe_after}")
    bad = [s.status for p in (on, off) for s in p.samples if s.status != 200]
    bad += [s.status for s in fault_phase.samples if s.status not in (200, 503)]
    failed = bool(bad) or fault_phase.probe_after != 200 or n503 == 0
    print("RESULT:", "FAIL " + str(bad) if failed else "PASS (no errors; server kept answering)")
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--max-wait-ms", type=float, default=20.0)
    p.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--time-limit", type=float, default=1800.0,
                   help="Seconds before the whole run is abandoned (exit 2).")
    args = p.parse_args()
    try:
        return asyncio.run(asyncio.wait_for(_main(args), args.time_limit))
    except asyncio.TimeoutError:
        print(f"load_server: gave up after --time-limit {args.time_limit}s", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
