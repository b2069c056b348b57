"""The gold study (docs/gold.md).

Gold predicate values from XSTest's labels (``core``), its commands (``cli``) and the
label-noise analysis (``noise``).
The gold mapping is also read outside the studies (``plguard.heads``), so its public
names are importable from the package.
"""

from plguard.evals.gold.core import (
    FIELDS,
    OUTCOMES,
    Decisions,
    GoldEval,
    GoldMapping,
    GoldRule,
    OutcomeScore,
    Sample,
    decide_matrix,
    evaluate_gold,
    harm_domains,
    load_gold,
    load_samples,
    make_sample,
    outcome,
    score,
)

__all__ = ["FIELDS", "OUTCOMES", "Decisions", "GoldEval", "GoldMapping", "GoldRule",
           "OutcomeScore", "Sample", "decide_matrix", "evaluate_gold", "harm_domains",
           "load_gold", "load_samples", "make_sample", "outcome", "score"]
