"""`plguard batch` on the shared loop, over a scripted backend: failures, retries, redone shards."""

from __future__ import annotations

import json

import pytest

import plguard.guard as guard_mod
from plguard.batchjob import job
from plguard.batchjob.job import run_batch
from plguard.config import GuardConfig
from plguard.records.store import read_jsonl
from tests.scripted import ScriptedBackend

ROWS = [{"id": "a", "prompt": "Capital of France?"}, {"id": "b", "prompt": "How to bake bread?"},
        {"id": "c", "prompt": "Name a prime.", "response": "7"},
        {"id": "d", "prompt": "A colour?", "response": "Blue."}]


@pytest.fixture
def scripted(monkeypatch):
    """Every Guard the batch worker builds runs on one scripted backend, down for "bread"."""
    state = {"down": True}

    def p_true(prefix, suffix):
        if "bread" in prefix and state["down"]:
            raise RuntimeError("grounder down")
        return 0.2

    backend = ScriptedBackend(lambda c: "Fine.", p_true)

    class ScriptedGuard(guard_mod.Guard):
        def __init__(self, config):
            super().__init__(config, generator=backend)

    monkeypatch.setattr(guard_mod, "Guard", ScriptedGuard)
    return state


def _cfg():
    return GuardConfig.from_dict({"generator": {"path": "/nonexistent/scripted",
                                                "batch_size": 2},
                                  "policy": "minimal", "grounding": {"cache": None}})


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_failed_row_costs_only_itself_and_is_retried_on_resume(tmp_path, scripted, suffix):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / f"out{suffix}"
    s = run_batch(_cfg(), src, out, progress=False)
    assert (s.written, s.errors, s.skipped, s.retried) == (4, 1, 0, 0)
    assert sum(s.actions.values()) == 3
    recs = _read(out)
    assert "grounder down" in recs["b"]["error"] and recs["b"]["action"] is None
    assert all(recs[i]["error"] is None and recs[i]["action"] for i in "acd")
    scripted["down"] = False
    s = run_batch(_cfg(), src, out, progress=False)
    assert (s.written, s.errors, s.skipped, s.retried) == (1, 0, 3, 1)
    recs = _read(out)
    assert len(recs) == 4 and recs["b"]["error"] is None and recs["b"]["action"]


def test_a_redone_shard_adds_nothing_twice(tmp_path, scripted, monkeypatch):
    real = job.run_shards_local

    def twice(factory, config, shards):  # every shard comes back twice, as after a Ray retry
        for records in real(factory, config, shards):
            yield records
            yield [dict(r) for r in records]

    monkeypatch.setattr(job, "run_shards_local", twice)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out.jsonl"
    s = run_batch(_cfg(), src, out, progress=False)
    assert (s.written, s.errors, sum(s.actions.values())) == (4, 1, 3)
    assert len(out.read_text().splitlines()) == 4  # the failed row too is written once


def _read(path):
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return {r["id"]: r for r in pq.read_table(path).to_pylist()}
    return {r["id"]: r for r in read_jsonl(path)}
