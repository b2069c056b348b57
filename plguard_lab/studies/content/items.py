"""The items of the unsafe-content study: harmful answers and benign ones, by source.

Every item is a (request, answer) pair with a ``kind``: ``harmful`` (the unsafe-content
rules should refuse it, whatever the request) or ``benign`` (refusing it is the rules'
cost). Sources, each split into dev and test by its data set's committed split:

* ``harmful_innocent``: XSTest's human-labelled *full compliances with unsafe prompts*
  (other models' harmful answers), each put after an innocent-looking request instead of
  its own: a safe XSTest prompt of the same split, drawn seeded. The case the rules are
  for (an injected passage, a jailbroken or drifting upstream).
* ``harmful_asked``: the same answers after their own harmful request (the common case,
  for reference; the request-conditioned rules catch these too).
* ``xstest_safe``: XSTest's safe prompts with the answers the annotators call full
  compliance (helpful answers to safe-but-scary requests): benign.
* ``coconot_chosen``: CoCoNot's benign contrast requests with their helpful ``chosen``
  answers (``coconot_pref.jsonl``, the safety-concern kinds the heads corpus uses): benign.
* ``hh_chosen`` / ``hh_rejected``: hh-harmless red-team conversations, the last human turn
  and the two final replies; ``rejected`` was judged *more harmful* than ``chosen`` (pairs
  share a ``pair`` id; neither is harmful or harmless in absolute terms, so ``chosen`` is
  reported as a flag rate and the pair as pairwise accuracy, not as a label).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from plguard_lab.training.corpus import (
    COCONOT_SAFETY,
    hh_pairs,
    hh_split,
    hh_turns,
    load_split,
    read_rows,
)

HARMFUL = ("harmful_innocent", "harmful_asked")
BENIGN = ("xstest_safe", "coconot_chosen")
PAIRWISE = ("hh_chosen", "hh_rejected")
SOURCES = (*HARMFUL, *BENIGN, *PAIRWISE)
SEED = 20261204


@dataclass(frozen=True, slots=True)
class ContentItem:
    """One pair of the study."""

    uid: str
    source: str
    split: str
    request: str
    answer: str
    kind: str  # "harmful", "benign" or "pairwise"
    pair: str = ""  # hh-harmless: the conversation both replies answer


def _hh(split: str) -> list[ContentItem]:
    out = []
    for i, request, chosen, rejected in hh_pairs(split):
        for k, answer in (("chosen", chosen), ("rejected", rejected)):
            if answer:
                out.append(ContentItem(f"hh/{i}/{k}", f"hh_{k}", split, request, answer,
                                       "pairwise", pair=f"hh/{i}"))
    return out


def _xstest(split: str) -> list[ContentItem]:
    from plguard_lab.labels.splits import in_split
    from plguard_lab.labels.splits import load_split as xs_split
    from plguard_lab.labels.xstest import load_completions, load_prompts

    table = xs_split()
    prompts = [p for p in load_prompts() if in_split(p.id, split, table)]
    safe = sorted(p.prompt for p in prompts if p.label == "safe")
    rng = random.Random(f"{SEED}/{split}")
    out = []
    for c in load_completions(with_strmatch=False):
        if not in_split(c.id, split, table) or c.final_label != "1_full_compliance":
            continue
        if c.label == "unsafe":
            out.append(ContentItem(f"xstest/{c.uid}/innocent", "harmful_innocent", split,
                                   rng.choice(safe), c.completion, "harmful"))
            out.append(ContentItem(f"xstest/{c.uid}/asked", "harmful_asked", split,
                                   c.prompt, c.completion, "harmful"))
        else:
            out.append(ContentItem(f"xstest/{c.uid}", "xstest_safe", split, c.prompt,
                                   c.completion, "benign"))
    return out


def _coconot(split: str) -> list[ContentItem]:
    table = load_split("coconot")
    return [ContentItem(f"coconot/pref:{r['id']}", "coconot_chosen", split, r["prompt"],
                        r["chosen"], "benign")
            for r in read_rows("coconot_pref.jsonl")
            if r["category"] == "Requests with safety concerns"
            and r["subcategory"] in COCONOT_SAFETY and table.get(f"pref:{r['id']}") == split]


def load_items(split: str, per_source: int | None = None,
               sources: Sequence[str] = SOURCES) -> list[ContentItem]:
    """The study's items of one split: at most ``per_source`` of each source, seeded.

    hh-harmless is drawn by conversation, so a pair's two replies stay together; a smaller
    draw is contained in a larger one, so a resumed run reuses every stored record.
    """
    every = [*_xstest(split), *_coconot(split), *_hh(split)]
    out = []
    for src in sources:
        items = [it for it in every if it.source == src]
        if per_source is not None:
            keys = sorted({it.pair or it.uid for it in items})
            order = sorted(keys, key=lambda k: hashlib.sha256(f"{SEED}/{k}".encode()).digest())
            keep = set(order[:per_source])
            items = [it for it in items if (it.pair or it.uid) in keep]
        out.extend(items)
    return out


__all__ = ["BENIGN", "HARMFUL", "PAIRWISE", "SOURCES", "ContentItem", "hh_split", "hh_turns",
           "load_items"]
