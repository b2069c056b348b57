"""Reasoning benchmark: re-parse+compile per example vs compiled once vs vectorised.

Usage: python scripts/bench_reasoning.py [--examples N] [--batch B]

For the minimal bundle and a synthetic 35-predicate policy (20 unsafe subrules, an
aggregate, 10 over-refusal rules using negation), prints ms per example for
  compile/example : ProbLog parse + ground + SDD compile + evaluate, for every example
  problog         : compiled once, ProbLog's evaluate(weights=...) (Policy.evaluate_problog)
  compiled once   : Policy.evaluate, the cached circuit flattened into numpy, one example
  vectorised      : Policy.evaluate_matrix over a batch (numpy over the circuit's nodes)
and the speed-ups over compile/example.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from plguard.policy import Policy, load_policy


def synthetic_bundle(folder: Path) -> Path:
    """35 predicates (20 harm categories, 10 benign contexts, 5 response); 31 queries."""
    harms = [f"request_harm_{i:02d}" for i in range(20)]
    resp = ["response_steps", "response_details", "response_evasion", "response_refuses",
            "response_redirect"]
    benign = [f"request_benign_{i}" for i in range(10)]
    preds = [(n, "request") for n in harms + benign] + [(n, "response") for n in resp]
    assert len(preds) == 35
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.md").write_text("# synthetic 35-predicate policy\n")
    (folder / "predicates.yaml").write_text(yaml.safe_dump([
        {"name": n, "scope": s, "question": f"Is {n} true?", "description": f"{n} holds"}
        for n, s in preds]))
    lines = ["harmful_request :- " + " ; ".join(harms) + ".",
             "declines :- response_refuses ; response_redirect."]
    unsafe = []
    for i, h in enumerate(harms):
        r = resp[i % 3]
        lines.append(f"unsafe_compliance_{i:02d} :- {h}, {r}.")
        unsafe.append(f"unsafe_compliance_{i:02d}")
    lines.append("unsafe_compliance :- " + " ; ".join(unsafe) + ".")
    over = []
    for i, b in enumerate(benign):
        lines.append(f"over_refusal_{i} :- {b}, \\+ harmful_request, declines.")
        over.append(f"over_refusal_{i}")
    queries = unsafe + ["unsafe_compliance"] + over
    assert len(queries) == 31
    lines += [f"query({q})." for q in queries]
    (folder / "policy.pl").write_text("\n".join(lines) + "\n")
    return folder


def per_example_compile(policy: Policy, rows: list[dict[str, float]]) -> float:
    from problog import get_evaluatable
    from problog.program import PrologString

    start = time.perf_counter()
    for row in rows:
        facts = "".join(f"{float(row[p]):.17f}::{p}.\n" for p in policy.predicate_names)
        src = policy.user_program + "\n" + facts
        get_evaluatable("sdd").create_from(PrologString(src)).evaluate()
    return (time.perf_counter() - start) / len(rows)


def compiled_once(policy: Policy, rows: list[dict[str, float]], problog: bool) -> float:
    policy.compiled  # noqa: B018 - exclude the one-off compile from the per-example time
    evaluate = policy.evaluate_problog if problog else policy.evaluate
    start = time.perf_counter()
    for row in rows:
        evaluate(row)
    return (time.perf_counter() - start) / len(rows)


def vectorised(policy: Policy, matrix: np.ndarray, repeats: int) -> float:
    names = list(policy.predicate_names)
    policy.evaluate_matrix(matrix[:2], names)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        policy.evaluate_matrix(matrix, names)
        times.append((time.perf_counter() - start) / len(matrix))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=50, help="examples for the slow paths")
    ap.add_argument("--batch", type=int, default=1000, help="rows per vectorised batch")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("minimal", load_policy("minimal")),
                 ("synthetic-35", load_policy(synthetic_bundle(Path(tmp) / "synthetic_35")))]
        print(f"python {platform.python_version()}, {platform.machine()}; "
              f"{args.examples} examples (slow paths), batch {args.batch} (vectorised)")
        header = (f"{'policy':<14}{'preds':>6}{'queries':>8}{'compile ms':>11}"
                  f"{'compile/ex ms':>14}{'problog ms':>11}{'once ms':>9}{'vector ms':>10}"
                  f"{'problog x':>10}{'once x':>8}{'vector x':>10}")
        print(header)
        print("-" * len(header))
        for label, policy in cases:
            names = list(policy.predicate_names)
            matrix = rng.uniform(size=(args.batch, len(names)))
            rows = [dict(zip(names, r, strict=True)) for r in matrix[: args.examples]]
            start = time.perf_counter()
            policy.compiled  # noqa: B018
            compile_ms = (time.perf_counter() - start) * 1e3
            slow = per_example_compile(policy, rows)
            once_pl = compiled_once(policy, rows, problog=True)
            once = compiled_once(policy, rows, problog=False)
            vec = vectorised(policy, matrix, repeats=5)
            check = policy.evaluate_matrix(matrix[:20], names)
            worst = max(abs(check[q][i] - policy.evaluate_problog(rows[i]).probs[q])
                        for i in range(min(20, len(rows))) for q in policy.queries)
            assert worst <= 1e-9, worst
            print(f"{label:<14}{len(names):>6}{len(policy.queries):>8}{compile_ms:>11.1f}"
                  f"{slow * 1e3:>14.3f}{once_pl * 1e3:>11.3f}{once * 1e3:>9.3f}"
                  f"{vec * 1e3:>10.4f}{slow / once_pl:>9.0f}x{slow / once:>7.0f}x"
                  f"{slow / vec:>9.0f}x")
        print("compile/ex: ProbLog parse+ground+compile+evaluate per example; problog: "
              "compiled once, ProbLog's evaluate(weights=...);\nonce: compiled once, "
              "Policy.evaluate (circuit, one example); vector: Policy.evaluate_matrix per row "
              "in a batch;\nx: speed-up over compile/ex. Circuit results agree with ProbLog "
              "within 1e-9 (checked above).")


if __name__ == "__main__":
    main()
