"""The lexical baseline every head stands beside: TF-IDF n-grams and a logistic regression.

Word 1-2 grams and character 3-5 grams (within word boundaries), sublinear TF, one L2
logistic regression (scikit-learn), fitted on the same rows, item weights and held-out
folds as the head it is compared with (:func:`plguard_lab.training.alone_fit.heldout`).
The vocabulary and IDF are fitted once on every row's text, labels unseen (a transductive
step that only helps the baseline). A head that does not beat it on its worst held-out
source reads no more than the words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

LEXICAL_C = 1.0
MAX_FEATURES = 100_000  # per analyser


def vectorizer() -> Any:
    """Word and character TF-IDF, side by side (unfitted)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_union

    return make_union(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2,
                        max_features=MAX_FEATURES),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=2,
                        max_features=MAX_FEATURES))


def lexical_fitter(rows: Any, C: float = LEXICAL_C
                   ) -> Callable[[frozenset[str]], Callable[[np.ndarray], np.ndarray]]:
    """A fitter over ``rows`` (:class:`~plguard_lab.training.alone_fit.Rows`) for the folds."""
    from sklearn.linear_model import LogisticRegression

    X = vectorizer().fit_transform(rows.texts).tocsr()
    y = rows.row_y
    groups = rows.row_groups
    weight = rows.row_weight

    def fit(excluded: frozenset[str]) -> Callable[[np.ndarray], np.ndarray]:
        m = ~np.isin(groups, list(excluded)) & ~np.isnan(y)
        model = LogisticRegression(C=C, max_iter=2000).fit(X[m], y[m].astype(int),
                                                           sample_weight=weight[m])
        return lambda idx: np.asarray(model.decision_function(X[idx]), dtype=np.float64)

    return fit


__all__ = ["LEXICAL_C", "lexical_fitter", "vectorizer"]
