"""The gold study (docs/gold.md).

Gold decisions scored against XSTest's outcome labels (``core``), its commands (``cli``)
and the label-noise analysis (``noise``). The gold mapping itself (samples, gold.yaml) is
read outside the studies too (``plguard_lab.training``), so it lives in
:mod:`plguard_lab.labels.gold`.
"""

from plguard_lab.studies.gold.core import (
    Decisions,
    GoldEval,
    OutcomeScore,
    decide_matrix,
    evaluate_gold,
    score,
)

__all__ = ["Decisions", "GoldEval", "OutcomeScore", "decide_matrix", "evaluate_gold", "score"]
