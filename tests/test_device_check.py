"""The GPU timing script runs end to end on CPU with its --tiny config."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_device_check_tiny_runs_on_cpu():
    proc = subprocess.run(["bash", str(ROOT / "scripts/device_check.sh"), "--tiny"],
                          capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Phi3 tiny shape" in out
    assert "predicates" in out and "16 new tokens per example" in out
    for phase in ("generate", "ground", "reason", "total", "paper"):
        assert phase in out
    assert "30.43" in out
    assert "(16 tokens," in out  # min_new_tokens holds generation to the fixed length
