"""Manual check: the openai backend in top-k mode against llama.cpp's server.

    # once (about 30 min on 2 shared cores: llama.cpp builds from source)
    python3 -m venv --system-site-packages /tmp/llcpp && \\
        /tmp/llcpp/bin/pip install 'llama-cpp-python[server]==0.3.36'
    python -u scripts/check_llamacpp.py --server-python /tmp/llcpp/bin/python

Starts ``python -m llama_cpp.server`` (llama-cpp-python's OpenAI-compatible server) on
the embedded model's GGUF file (SmolLM2-135M-Instruct, Q4_1), grounds every predicate of
``--policy`` on (XSTest prompt, canned response) pairs through the openai backend in top-k
mode, and compares P(True) with the transformers backend (float32, the de-quantised
weights) scoring the same chat, tokenised whole. Not in CI: the build alone takes longer
than CI's budget for it. The difference mixes llama.cpp's Q4_1 kernels with any
difference in how its server renders the chat.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_backends import read_prompts  # noqa: E402
from bench_remote import RESPONSES, requests_for  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", default=sys.executable,
                    help="a Python with llama-cpp-python[server] installed")
    ap.add_argument("--n", type=int, default=12, help="XSTest prompts (pairs)")
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--log", default="/tmp/plguard-llamacpp-server.log")
    args = ap.parse_args()

    from plguard.backends.openai_backend import OpenAIBackend
    from plguard.backends.transformers_backend import TransformersBackend
    from plguard.config import ModelConfig
    from plguard.models import embedded_gguf_path
    from plguard.testing import free_port
    from plguard.types import TFRequest

    port = free_port()
    cmd = [args.server_python, "-m", "llama_cpp.server", "--model", str(embedded_gguf_path()),
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
           "--model_alias", "smollm2-gguf"]
    t0 = time.monotonic()
    with open(args.log, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > 300:
                    raise SystemExit(f"llama.cpp server did not start; see {args.log}") from None
                time.sleep(1)
        print(f"llama.cpp server (llama-cpp-python) start {time.monotonic() - t0:.1f} s")
        b = OpenAIBackend.from_config(ModelConfig(
            backend="openai", base_url=f"http://127.0.0.1:{port}/v1", logprobs_mode="auto",
            max_concurrency=1))
        ident = b.remote_identity()
        print(f"probed mode: {b.mode} via {b.via} (tokenizer check: {ident['tokenizer_check']}; "
              f"context {b.max_context})")
        pairs = [(p, RESPONSES[i % 2]) for i, p in enumerate(read_prompts(args.n))]
        t0 = time.monotonic()
        got = [s for g in b.true_false_logprobs(requests_for(b, args.policy, pairs)) for s in g]
        dt = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    tf = TransformersBackend.load("embedded", dtype="float32", device="cpu")
    reqs = requests_for(tf, args.policy, pairs)
    ref = [s for g in tf.true_false_logprobs(reqs) for s in g]
    joined = [g[0] for g in tf.true_false_logprobs_naive(  # the naive path takes a whole prompt
        [TFRequest(prefix=r.prefix + q, suffixes=("",)) for r in reqs for q in r.suffixes])]
    both = [(a, j, r) for a, j, r in zip(got, joined, ref, strict=True) if not a.bound]
    d_j = [abs(a.p_true - j.p_true) for a, j, _ in both]
    d_r = [abs(a.p_true - r.p_true) for a, _, r in both]
    print(f"{len(got)} questions in {dt:.1f} s ({len(got) / dt:.1f} q/s); "
          f"{len(got) - len(both)} bounded (an answer outside the top-{b.top_logprobs})")
    if both:
        print(f"top-k on llama.cpp vs transformers float32, same chat tokenised whole: "
              f"max |dP(True)| {max(d_j):.4f}, mean {sum(d_j) / len(d_j):.4f}")
        print(f"  vs the canonical prefix/question split (exact mode's tokens): "
              f"max {max(d_r):.4f}, mean {sum(d_r) / len(d_r):.4f}")


if __name__ == "__main__":
    main()
