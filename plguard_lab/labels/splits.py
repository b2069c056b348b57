"""The XSTest dev/test split, so nothing is tuned on what it is scored on.

Prompts are split by id, stratified by (type, label), about 30% to dev, with a fixed
seed; the 2,250 labelled completions follow their prompt. The split is committed as a
file (``eval/data/xstest/split.json``, shipped in the wheel with the data) so it can never
drift: :func:`make_split` is only used to write it, and a test checks the file equals it.
Every choice (wording, examples, answer words, calibration, thresholds) is made on
``dev``; headline figures are on ``test``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from plguard.errors import ConfigError
from plguard_lab.labels.xstest import XSTestPrompt, data_dir

Split = Literal["dev", "test", "all"]
SPLITS: tuple[str, ...] = ("dev", "test", "all")
SPLIT_FILE = "split.json"
DEV_FRACTION = 0.3
SEED = 20261130


def make_split(prompts: Sequence[XSTestPrompt], fraction: float = DEV_FRACTION,
               seed: int = SEED) -> dict[str, str]:
    """Prompt id -> 'dev' or 'test': per (type, label) stratum, a seeded share to dev.

    Rounding is carried across strata (largest remainder), so the total is as close to
    ``fraction`` as whole prompts allow.
    """
    strata: dict[tuple[str, str], list[str]] = {}
    for p in prompts:
        strata.setdefault((p.type, p.label), []).append(p.id)
    rng = random.Random(seed)
    want = {k: len(v) * fraction for k, v in strata.items()}
    n_dev = {k: int(w) for k, w in want.items()}
    short = round(sum(want.values())) - sum(n_dev.values())
    for k in sorted(want, key=lambda k: (-(want[k] - n_dev[k]), k))[:short]:
        n_dev[k] += 1
    out: dict[str, str] = {}
    for key in sorted(strata):
        ids = sorted(strata[key], key=lambda s: (len(s), s))
        rng.shuffle(ids)
        for i, pid in enumerate(ids):
            out[pid] = "dev" if i < n_dev[key] else "test"
    return out


def split_path() -> Path:
    """The committed split file beside the XSTest data."""
    return data_dir() / SPLIT_FILE


def load_split(path: Path | None = None) -> dict[str, str]:
    """Prompt id -> 'dev' or 'test' from the committed file."""
    p = path or split_path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        ids = data["ids"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"XSTest split file {p} is missing or unreadable ({exc}); "
                          "regenerate it with scripts/make_split.py") from None
    return {str(k): str(v) for k, v in ids.items()}


def check_split(split: str) -> str:
    """A valid split name, or a clear error."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split '{split}'; use one of {', '.join(SPLITS)}")
    return split


def in_split(prompt_id: str, split: str, table: dict[str, str]) -> bool:
    """Whether a prompt belongs to ``split`` ('all' holds every prompt)."""
    return split == "all" or table.get(prompt_id) == split


__all__ = ["DEV_FRACTION", "SEED", "SPLITS", "Split", "check_split", "in_split", "load_split",
           "make_split", "split_path"]
