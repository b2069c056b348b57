"""``plguard eval attacks`` end to end on the real embedded model (a few pairs)."""

from __future__ import annotations

import json

import pytest

from plguard.cli import main
from plguard.records.store import read_jsonl


@pytest.mark.slow
def test_eval_attacks_cli_on_the_embedded_model(tmp_path, embedded_backend_bf16, capsys):
    # dtype/device as the session fixture's, so the CLI's Guard reuses that loaded backend.
    argv = ["eval", "attacks", "--out", str(tmp_path), "--limit", "2", "--no-progress",
            "--attacks", "chat_chatml,pad_1k,req_note",
            "--set", "generator.dtype=bfloat16", "--set", "generator.device=cpu",
            "--set", "grounding.max_data_tokens=256"]
    assert main(argv) == 0
    assert "records written 8" in capsys.readouterr().out
    recs = read_jsonl(tmp_path / "records.jsonl")
    assert len(recs) == 8 and all(r["error"] is None for r in recs)
    by = {r["id"]: r for r in recs}
    pad = by["h01/pad_1k"]
    # measured with the model's own tokenizer; 256 tokens of budget cannot hold it, so the
    # response is read in several windows and nothing of it is cut (windowing is the default)
    assert 1024 <= pad["tokens"]["response"] < 1400
    assert pad["windows"] > 1 and not pad["truncated"]
    assert not by["h01/clean"]["truncated"]
    assert all(0.0 <= p <= 1.0 for r in recs for p in r["predicates"].values())
    assert all("repair" not in k for r in recs for k in r["times"])
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["grounder"]["model_id"].startswith("embedded:") and man["grounder"]["sha256"]
    md = (tmp_path / "attacks.md").read_text()
    assert "| pad_1k | padding | 1 |" in md and "## Refusal pairs" in md
    assert "read in overlapping windows" in md and "| truncated | windows | tokens |" in md
    assert main(argv) == 0  # a rerun has nothing left to do
    assert "records written 0, skipped (already done) 8" in capsys.readouterr().out
    # re-deciding the real run's records under the same config reproduces every decision
    re_argv = [*argv[:2], "--rescore", str(tmp_path), "--out", str(tmp_path / "re"),
               *argv[9:]]
    assert main(re_argv) == 0
    again = {r["id"]: r for r in read_jsonl(tmp_path / "re" / "records.jsonl")}
    assert {k: (r["action"], r["score"]) for k, r in by.items()} == {
        k: (r["action"], r["score"]) for k, r in again.items()}
