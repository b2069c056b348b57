"""The hazards study's arithmetic: worst-answer category scores and detection metrics.

Category score: each category's unsafe rule at its worst answer (the response predicates
set to every true/false assignment, the highest probability kept), which is what
``/v1/moderations`` reports as ``category_scores``; flagged: the strongest unsafe rule at
or above the unsafe threshold, as moderation flags a request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from plguard.policy.bounds import bounds
from plguard_lab.studies.hazards.items import BENIGN, UNCATEGORISED, categorised


def unsafe_inputs(policy: Any) -> set[str]:
    """The predicates some unsafe rule depends on (its compiled circuit's support).

    The others (over-refusal's request predicates) cannot change a worst-answer score, so
    a study need not read them: their columns may hold anything.
    """
    return set().union(*(policy.compiled.support(q) for q in policy.unsafe_rules))


def worst_case_matrix(policy: Any, request_probs: np.ndarray, names: Sequence[str]
                      ) -> dict[str, np.ndarray]:
    """Each unsafe rule's worst-answer probability per row of ``request_probs``.

    ``request_probs``: ``[n, len(names)]``, the request-scope predicates ``names``. The
    batched form of :func:`plguard.moderation.worst_case` (both are
    :func:`plguard.policy.bounds`' highest value).
    """
    return bounds(policy, request_probs, names, list(policy.unsafe_rules)).high


def category_matrix(policy: Any, rules: Mapping[str, np.ndarray]
                    ) -> tuple[list[str], np.ndarray]:
    """(codes, ``[n, n_codes]``): each code's highest rule, as category_scores takes it."""
    from plguard.categories import policy_codes

    codes = list(policy_codes(policy.categories))
    n = len(next(iter(rules.values())))
    out = np.zeros((n, len(codes)))
    for rule, cs in policy.categories.items():
        if rule not in rules:  # a content rule: a request alone has no answer to read
            continue
        for c in cs:
            j = codes.index(c)
            out[:, j] = np.maximum(out[:, j], rules[rule])
    return codes, out


def detection(codes: Sequence[str], scores: np.ndarray, groups: Sequence[str],
              flagged: np.ndarray, n_boot: int, seed: int) -> dict[str, Any]:
    """Per category AUROC (vs benign, vs other categories), top-1, confusion, flag rates.

    ``groups``: each row's category code, benign group (:data:`BENIGN`) or harmful group of
    no one category (:data:`UNCATEGORISED`: flag rates only, so the per-category figures,
    top-1 and ``flagged_hazardous`` stay those of the categorised prompts). A category with
    no prompt of its own gets no AUROC row; ranking ties break toward the taxonomy order.
    """
    from plguard_lab.studies.quality.report import score_detector

    g = np.array(groups)
    benign = np.isin(g, BENIGN)
    hazardous = categorised(g)
    per: dict[str, Any] = {}
    present = [c for c in codes if (g == c).any()]
    for c in present:
        j = codes.index(c)
        own = g == c
        row: dict[str, Any] = {"n": int(own.sum())}
        for name, neg in (("vs_benign", benign), ("vs_other", hazardous & ~own)):
            sel = own | neg
            d = score_detector(c, name, own[sel], scores[sel, j], None, n_boot, seed)
            row[name] = {"value": d.auroc.value, "lo": d.auroc.lo, "hi": d.auroc.hi}
        per[c] = row
    top = np.array(codes)[np.argmax(scores, axis=1)] if len(codes) else np.array([])
    haz_rows = np.flatnonzero(hazardous)
    confusion: dict[str, dict[str, int]] = {c: {} for c in present}
    for i in haz_rows:
        confusion[g[i]][str(top[i])] = confusion[g[i]].get(str(top[i]), 0) + 1
    right = [top[i] == g[i] for i in haz_rows]
    # Among the categories some test prompt has: a category no set labels (S14) cannot be
    # right, and a zero-shot reading of it may outrank every head's calibrated P.
    cols = [codes.index(c) for c in present]
    top_p = np.array(present)[np.argmax(scores[:, cols], axis=1)] if cols else np.array([])
    right_p = [top_p[i] == g[i] for i in haz_rows]
    return {"categories": per, "top1": float(np.mean(right)) if right else math.nan,
            "top1_present": float(np.mean(right_p)) if right_p else math.nan,
            "n_hazardous": len(haz_rows), "confusion": confusion,
            "flagged": {b: {"n": int((g == b).sum()),
                            "rate": float(flagged[g == b].mean()) if (g == b).any()
                            else math.nan} for b in BENIGN},
            "flagged_hazardous": float(flagged[hazardous].mean()) if len(haz_rows)
            else math.nan,
            "flagged_uncategorised": {u: {"n": int((g == u).sum()),
                                          "rate": float(flagged[g == u].mean())}
                                      for u in UNCATEGORISED if (g == u).any()}}


__all__ = ["category_matrix", "detection", "unsafe_inputs", "worst_case_matrix"]
