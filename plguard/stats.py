"""Rank statistics the product and the laboratory share (numpy only: no extra needed).

One AUROC for everything that reports one: the model check's separations, the heads fit's
choices, the evaluation reports. It equals scikit-learn's ``roc_auc_score`` (ties count
half) and is NaN, not an error, when a class is missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def auroc(y: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray) -> float:
    """Area under the ROC curve by the rank-sum statistic, ties counted half.

    NaN when only one class is present: the area is undefined then.
    """
    yy = np.asarray(y, dtype=bool)
    n_pos, n_neg = int(yy.sum()), int((~yy).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inv, counts = np.unique(np.asarray(score, dtype=float), return_inverse=True,
                               return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inv]  # average 1-based rank of each tie run
    return float((ranks[yy].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


__all__ = ["auroc"]
