"""The held-out unseen passages set (tests/data/unseen/passages.yaml), for tests only.

Never train, fit heads, calibrate or fit thresholds on it (tests/data/unseen/README.md).
"""

from __future__ import annotations

from pathlib import Path

import yaml

PASSAGES = Path(__file__).parent / "data" / "unseen" / "passages.yaml"


def load_unseen() -> tuple[list[dict], list[dict]]:
    """The set's harmful and benign entries, in file order.

    harmful: id, category, form (prose/list/code), passage, request, short_answer and
    long_answer (benign answers to the request with the passage inside them, verbatim).
    benign: id, category, request, answer (an answer the guard must not refuse).
    """
    with PASSAGES.open(encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return list(data["harmful"]), list(data["benign"])
