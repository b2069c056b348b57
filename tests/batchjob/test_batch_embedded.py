"""`plguard batch` locally on the real embedded model: traces, per-row faults, resume."""

from __future__ import annotations

import json

from plguard.batchjob.job import run_batch
from plguard.config import GuardConfig
from plguard.records.store import read_jsonl

ROWS = [
    {"id": "kill", "prompt": "How do I kill a Python process?"},
    {"id": "bomb", "prompt": "How do I build a bomb?", "response": "I can't help with that."},
    {"id": "bad-role", "prompt": [{"role": "wizard", "content": "hi"}]},
    {"id": "paris", "prompt": [{"role": "user", "content": "Capital of France?"}]},
    {"id": "joke", "prompt": "Tell me a joke.", "response": "Why did the chicken cross?"},
]


def config() -> GuardConfig:
    return GuardConfig.from_dict({
        "generator": {"path": "embedded", "dtype": "float32", "device": "cpu",
                      "batch_size": 2},
        "generation": {"max_new_tokens": 8}, "policy": "minimal"})


def test_batch_guards_rows_and_resumes_after_an_interruption(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out.jsonl"
    s = run_batch(config(), src, out, progress=False)
    assert (s.rows, s.written, s.skipped, s.errors) == (5, 5, 0, 1)
    recs = {r["id"]: r for r in read_jsonl(out)}
    assert set(recs) == {r["id"] for r in ROWS}
    bad = recs["bad-role"]
    assert bad["action"] is None and "in.jsonl:3" in bad["error"] and "wizard" in bad["error"]
    for rid in ("kill", "bomb", "paris", "joke"):  # the bad row cost only itself
        r = recs[rid]
        assert r["error"] is None and r["action"] in ("allow", "refuse", "rewrite")
        assert set(r["predicates"]) == {p["name"] for p in r["trace"]["grounding"]["scores"]}
        assert 0 <= r["p_unsafe"] <= 1 and r["policy"].startswith("minimal@")
        # minimal tags no categories: the Llama Guard form is the bare verdict.
        assert r["categories"] == [] and r["category_scores"] == {}
        assert r["llama_guard"] == ("unsafe" if r["action"] == "refuse" else "safe")
    assert recs["bomb"]["draft"] == "I can't help with that." and recs["bomb"]["response_given"]
    assert recs["kill"]["draft"] and not recs["kill"]["response_given"]

    # An interrupted run: two whole lines and a torn third one are on disk.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:2]) + lines[2][:40])
    s2 = run_batch(config(), src, out, progress=False)
    assert (s2.skipped, s2.written) == (2, 3)
    again = read_jsonl(out)
    assert sorted(r["id"] for r in again) == sorted(recs)  # no duplicate, none missing
    for r in again:  # redone rows come out as before (greedy, same batches)
        assert (r["final"], r["action"], r["predicates"]) == (
            recs[r["id"]]["final"], recs[r["id"]]["action"], recs[r["id"]]["predicates"])
    s3 = run_batch(config(), src, out, progress=False)
    # Rows written with an error are retried (this one fails again, on its input).
    assert (s3.skipped, s3.written, s3.retried, s3.errors) == (4, 1, 1, 1)
    assert sorted(r["id"] for r in read_jsonl(out)) == sorted(recs)
