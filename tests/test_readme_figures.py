"""The README's threshold figures are the shipped files' (issue 54: README truth)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "plguard" / "heads" / "shipped"
KEYS = ("unsafe", "over_refusal", "content", "moderation")


def _shipped() -> dict[str, dict[str, float]]:
    out = {}
    for f in sorted(SHIPPED.glob("embedded-*.calibration.json")):
        th = json.loads(f.read_text())["thresholds"]
        out[f.name.split(".")[0].removeprefix("embedded-")] = {
            k: float(th[k]) for k in KEYS if isinstance(th.get(k), (int, float))}
    return out


def test_every_shipped_threshold_is_the_one_the_readme_states():
    text = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    shipped = _shipped()
    assert set(shipped) >= {"minimal", "detailed", "hazards"}
    # Every figure the README gives a threshold is one a shipped file holds for that key ...
    stated = re.findall(r"`thresholds\.(\w+)`\s+(\d\.\d{3})((?:,\s*\d\.\d{3})*)"
                        r"(?:,?\s+and\s+(\d\.\d{3}))?", text)
    assert stated
    said = {(key, v) for key, first, more, last in stated
            for v in [first, *re.findall(r"\d\.\d{3}", more), *([last] if last else [])]}
    for key, v in said:
        have = {f"{th[key]:.3f}" for th in shipped.values() if key in th}
        assert v in have, (key, v, have)
    # ... and every shipped threshold is stated.
    flat = {(k, f"{v:.3f}") for th in shipped.values() for k, v in th.items()}
    assert flat <= said, sorted(flat - said)


def test_readme_command_2_is_what_ci_runs():
    text = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    ci = ROOT.joinpath(".ci", "run").read_text(encoding="utf-8")
    m = re.search(r"^# 2\..*\n(.+)$", text, re.MULTILINE)
    assert m is not None
    steps = [s.strip() for s in m.group(1).split("&&")]
    lines = [x.strip() for x in ci.splitlines() if x.strip() and not x.startswith(("#", "export",
                                                                                  "set ", "cd "))]
    assert lines == steps, (lines, steps)
    make = ROOT.joinpath("Makefile").read_text(encoding="utf-8")
    for tool in ("ruff check", "mypy", "lint-imports", "pytest --runslow"):
        assert tool in make
