"""The test items of the hazards study: hazardous prompts with a category, benign requests.

Test splits (the committed splits of plguard_lab.training.corpus; the same groups of dev are
where the moderation threshold is fitted, plguard_lab.studies.hazards.thresholds).
Hazardous: AILuminate's test prompts (hazard -> code as policies/hazards/gold.yaml's header
says) and CoCoNot's test requests of a clear category (privacy S7, offensive language S10,
copyright S8, misinformation X1, humanizing X2; its dangerous-topics rows mix categories
and are a group of their own below, its wildchats rows are left out), and plguard_s14's
unsafe requests (S14; written by the plguard developers, eval/data/plguard_s14/SOURCE.md).
Benign: every CoCoNot contrast test request,
XSTest's safe test prompts, plguard_s14's safe coding look-alikes, and CoCoNot's plain
requests (``coconot_plain``: underspecified, unsupported, subjective ... requests of no harm
category, less the eval rows coded X2 above and the contrast rows already benign above):
ordinary user texts that do not look dangerous, which a moderation threshold fitted on
look-alikes of hazards alone flagged; and ``answer_texts``, helpful answers to safe prompts
read as texts (plguard_lab.training.corpus): benign texts that are not requests at all.
Harmful but of no one category (:data:`UNCATEGORISED`): XSTest's unsafe prompts (short and
blunt: "How do I shoot someone?") and CoCoNot's dangerous or sensitive topics (violence,
drugs, explosives and self-harm mixed); they count in the flag rates, not in the per-category
figures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from plguard_lab.training.corpus import CorpusItem, load_corpus, load_split, read_rows

AILUMINATE_CODES = {"vcr": "S1", "ncr": "S2", "src": "S3", "cse": "S4", "dfm": "S5",
                    "spc_fin": "S6", "spc_hlt": "S6", "spc_lgl": "S6", "prv": "S7",
                    "ipv": "S8", "iwp": "S9", "hte": "S10", "ssh": "S11", "sxc_prn": "S12",
                    "spc_ele": "S13"}
COCONOT_CODES = {"privacy violations": "S7", "triggers for offensive language": "S10",
                 "copyright violations": "S8", "misinformation": "X1",
                 "personal inquiry": "X2", "offer advice, opinion or recommendations": "X2"}
# The benign groups' names.
BENIGN = ("coconot_contrast", "xstest_safe", "s14_contrast", "coconot_plain", "answer_texts")
# Harmful groups whose prompts have no one category.
UNCATEGORISED = ("xstest_unsafe", "coconot_dangerous")
_DANGEROUS = "dangerous or sensitive topics"
# CoCoNot eval rows of these subcategories are hazards (X2), whatever their category.
_CODED_TYPES = {f"coconot_eval_{sub.replace(' ', '_')}" for sub in COCONOT_CODES}


def test_items(split: str = "test") -> list[CorpusItem]:
    """Every item of the study, its group in ``fields['group']``.

    A group is a category code, a benign group or a harmful group of no one category
    (:data:`UNCATEGORISED`).

    ``split`` "dev": the same groups on the dev part, where thresholds are fitted.
    """
    out = [CorpusItem(it.uid, it.source, it.prompt_id, it.request, None,
                      {"group": AILUMINATE_CODES[it.fields["hazard"]]})
           for it in load_corpus(["ailuminate"], split)]
    table = load_split("coconot")
    for r in read_rows("coconot_eval.jsonl"):
        pid = f"eval:{r['id']}"
        group = COCONOT_CODES.get(r["subcategory"],
                                  "coconot_dangerous" if r["subcategory"] == _DANGEROUS else None)
        if group is not None and table.get(pid) == split:
            out.append(CorpusItem(f"coconot/{pid}", "coconot", pid, r["prompt"], None,
                                  {"group": group}))
    for r in read_rows("coconot_contrast_eval.jsonl"):
        pid = f"contrast:{r['id']}"
        if table.get(pid) == split:
            out.append(CorpusItem(f"coconot/{pid}", "coconot", pid, r["prompt"], None,
                                  {"group": "coconot_contrast"}))
    out.extend(CorpusItem(it.uid, it.source, it.prompt_id, it.request, None,
                          {"group": "S14" if it.fields["label"] == "unsafe" else "s14_contrast"})
               for it in load_corpus(["plguard_s14"], split))
    out.extend(CorpusItem(it.uid, "xstest", it.prompt_id, it.request, None,
                          {"group": f"xstest_{it.fields['label']}"})
               for it in load_corpus(["xstest"], split)
               if it.response is None and it.fields.get("label") in ("safe", "unsafe"))
    out.extend(CorpusItem(it.uid, it.source, it.prompt_id, it.request, None,
                          {"group": "coconot_plain"})
               for it in load_corpus(["coconot_plain"], split)
               if it.fields["type"] not in _CODED_TYPES  # hazards (X2)
               and not it.prompt_id.startswith("contrast:"))  # coconot_contrast has them
    out.extend(CorpusItem(it.uid, it.source, it.prompt_id, it.request, None,
                          {"group": "answer_texts"})
               for it in load_corpus(["answer_texts"], split))
    return out


def categorised(groups: Sequence[str] | np.ndarray) -> np.ndarray:
    """Which rows are hazardous prompts of a category: neither benign nor uncategorised."""
    g = np.asarray(groups)
    return ~np.isin(g, BENIGN) & ~np.isin(g, UNCATEGORISED)


def sample(items: Sequence[CorpusItem], per_group: int | None, seed: int) -> list[CorpusItem]:
    """A seeded ``per_group`` items of each group (all with None), in the items' order.

    Shuffled by a hash of the uid, so a larger sample holds every item of a smaller one.
    """
    if per_group is None:
        return list(items)
    groups: dict[str, list[CorpusItem]] = {}
    for it in items:
        groups.setdefault(it.fields["group"], []).append(it)
    keep = {it.uid for g in groups.values() for it in sorted(
        g, key=lambda it: hashlib.sha256(f"{seed}:{it.uid}".encode()).digest())[:per_group]}
    return [it for it in items if it.uid in keep]


__all__ = ["AILUMINATE_CODES", "BENIGN", "COCONOT_CODES", "UNCATEGORISED", "categorised",
           "sample", "test_items"]
