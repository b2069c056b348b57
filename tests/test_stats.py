"""plguard.stats.auroc: the one AUROC, against scikit-learn's on drawn data with ties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plguard.stats import auroc

sklearn_metrics = pytest.importorskip("sklearn.metrics")


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=2, max_size=60))
def test_auroc_equals_scikit_learn_with_ties(rows):
    """Scores drawn from six values, so ties are common; ties count half in both."""
    y = np.array([r[0] for r in rows])
    s = np.array([r[1] for r in rows], dtype=float) / 5
    if y.all() or not y.any():
        assert math.isnan(auroc(y, s))
    else:
        assert auroc(y, s) == pytest.approx(sklearn_metrics.roc_auc_score(y, s))


def test_the_product_and_the_studies_share_it():
    from plguard_lab.metrics import auroc as studies
    from plguard_lab.studies.quality.report import fast_auroc
    from plguard_lab.training.fit import auroc as heads

    assert studies is auroc and fast_auroc is auroc and heads is auroc
