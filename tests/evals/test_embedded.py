"""Evaluation commands end to end on the real embedded model (small limits).

The embedded SmolLM2-135M rarely writes valid JSON, so these tests also exercise the
paths where judge and evaluator outputs are unparseable: they must be counted, never
dropped or fatal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plguard import GuardConfig
from plguard.records.store import read_jsonl
from plguard_lab.studies.xstest.labelled import guard_labelled
from plguard_lab.studies.xstest.validate import validate_scorers

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("base", "policy_prompting", "llm_judge", "plguard")
SMALL = {"policy": "minimal",
         "generator": {"path": "embedded", "dtype": "float32", "device": "cpu",
                       "batch_size": 2},
         "generation": {"max_new_tokens": 8},
         "grounding": {"max_data_tokens": 128},
         "eval": {"judge_max_new_tokens": 12, "evaluator_max_new_tokens": 12,
                  "evaluator_batch_size": 4, "bootstrap": 50}}


@pytest.mark.slow
def test_validate_scorers_small(tmp_path, embedded_backend):
    cfg = GuardConfig.from_dict(SMALL)
    path = validate_scorers(cfg, tmp_path, limit=30, semantic_limit=4, progress=False,
                            evaluator=embedded_backend)
    md = path.read_text()
    assert "xstest_authors_strmatch (reference)" in md and "| regex_extended |" in md
    res = json.loads((tmp_path / "validate-scorers.json").read_text())
    assert res["all"]["n"] == 30 and res["semantic_subset"]["n"] == 4
    sem = read_jsonl(tmp_path / "semantic.jsonl")
    assert len(sem) == 4  # every verdict kept, parsed or not
    unparsed = sum(not r["parsed"] for r in sem)
    assert res["semantic_subset"]["semantic_unparsed"] == unparsed
    assert all(r["attempts"] == 2 for r in sem if not r["parsed"])
    # a rerun reuses the stored verdicts
    validate_scorers(cfg, tmp_path, limit=30, semantic_limit=4, progress=False,
                     evaluator=embedded_backend)
    assert len(read_jsonl(tmp_path / "semantic.jsonl")) == 4


@pytest.mark.slow
def test_guard_labelled_small(tmp_path, embedded_backend):
    cfg = GuardConfig.from_dict(SMALL)
    path = guard_labelled(cfg, tmp_path, limit=4, progress=False, generator=embedded_backend)
    md = path.read_text()
    assert "guard: strongest unsafe rule" in md and "judge: verdict unsafe" in md
    res = json.loads((tmp_path / "guard-labelled.json").read_text())
    assert res["meta"]["n"] == 4 and res["meta"]["errors"] == {"guard": 0, "judge": 0}
    recs = read_jsonl(tmp_path / "guard.jsonl")
    assert len(recs) == 4
    assert all(0.0 <= r["strongest_unsafe"][1] <= 1.0 for r in recs)
    assert all("repair" not in r["times"] for r in recs)  # classification only


def _cmd(out: Path, limit: int) -> list[str]:
    return [sys.executable, "-m", "plguard.cli", "eval", "xstest", "--limit", str(limit),
            "--out", str(out), "--policy", "minimal", "--scorers", "regex",
            "--no-progress", "--no-report",
            "--set", "generator.batch_size=2", "--set", "generator.dtype=float32",
            "--set", "generation.max_new_tokens=8", "--set", "eval.judge_max_new_tokens=8",
            "--set", "grounding.max_data_tokens=128"]


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_has_no_duplicate_or_missing_record(tmp_path):
    out, limit = tmp_path / "run", 4
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen(_cmd(out, limit), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    try:
        # kill once the first batch's drafts exist, while its other methods are running
        while time.monotonic() < deadline and proc.poll() is None:
            if len(read_jsonl(out / "base.jsonl")) >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = {m: len(read_jsonl(out / f"{m}.jsonl")) for m in METHODS}
    assert 0 < sum(before.values()) < limit * len(METHODS)
    done = subprocess.run(_cmd(out, limit), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    want = [str(i) for i in range(1, limit + 1)]
    for m in METHODS:
        raw = (out / f"{m}.jsonl").read_text().splitlines()
        ids = [json.loads(line)["id"] for line in raw]  # every line parses: none torn
        assert sorted(ids, key=int) == want, m  # no duplicate, none missing
        assert all(json.loads(line)["error"] is None for line in raw)
    man = json.loads((out / "manifest.json").read_text())
    assert len(man["sessions"]) == 2 and man["sessions"][-1]["ended"]
    assert "skipped (already done)" in done.stdout


@pytest.mark.slow
def test_ctrl_c_on_a_vllm_run_stops_it_without_failing_the_rest(tmp_path):
    """Ctrl-C reaches the whole process group, vLLM's engine process included.

    The engine dies first; the run must then stop with a clear message, not record
    every remaining prompt as failed (a rerun would skip those as done).
    """
    pytest.importorskip("vllm")
    out = tmp_path / "run"
    limit = 48
    cmd = [sys.executable, "-m", "plguard.cli", "eval", "xstest", "--limit", str(limit),
           "--out", str(out), "--policy", "minimal", "--methods", "base", "--scorers",
           "regex", "--no-progress", "--no-report", "--backend", "vllm",
           "--set", "generator.batch_size=4", "--set", "generation.max_new_tokens=8"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if len(read_jsonl(out / "base.jsonl")) >= 4:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        # vLLM's engine shuts its workers down in its own time: once, with the full suite
        # running on 2 cores, it took over 120 s (2026-12-07); alone it takes seconds.
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    recs = read_jsonl(out / "base.jsonl")
    assert proc.returncode != 0 and 0 < len(recs) < limit
    assert all(r["error"] is None for r in recs), [r["error"] for r in recs][:3]
    # vLLM's engine and worker processes log their own tracebacks on the way down;
    # plguard's process ends with one clear line and no traceback through plguard code.
    lines = err.decode(errors="replace").splitlines()
    assert not any('File "' in ln and "/plguard/" in ln for ln in lines), err[-3000:]
    ours = [ln for ln in lines if ln.startswith("plguard: ")]
    assert ours and ("has stopped" in ours[-1] or "interrupted" in ours[-1]), ours
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    recs = read_jsonl(out / "base.jsonl")
    assert sorted(int(r["id"]) for r in recs) == list(range(1, limit + 1))
    assert all(r["error"] is None for r in recs)
