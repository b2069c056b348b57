"""Platt scaling: the fit and its measures (for :mod:`plguard_lab.studies.quality.fit`).

Fit: Platt scaling ``sigmoid(a * logit(p) + b)`` by Newton's method on the log loss,
with Platt's smoothed targets so tiny or separable splits keep finite parameters.

(The format-1 writer over a guard-labelled folder, ``plguard calibrate --labelled``, was
removed: its files named only the model, so nothing checked their template, policy or
questions. :func:`plguard.calibration.load_calibration` still reads them, with a warning.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plguard_lab.metrics import expected_calibration_error


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return np.log(q) - np.log1p(-q)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # stable for large |z|


def fit_platt(p: Sequence[float] | np.ndarray, y: Sequence[int] | np.ndarray,
              iters: int = 100) -> tuple[float, float]:
    """Platt ``(a, b)`` for raw probabilities ``p`` and 0/1 targets ``y``."""
    x = _logit(np.asarray(p, dtype=float))
    yy = np.asarray(y, dtype=float)
    n_pos, n_neg = yy.sum(), (1 - yy).sum()
    t = np.where(yy > 0.5, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    a, b = 1.0, 0.0
    for _ in range(iters):
        q = _sigmoid(a * x + b)
        g = np.array([((q - t) * x).sum(), (q - t).sum()])
        w = q * (1 - q)
        h = np.array([[(w * x * x).sum(), (w * x).sum()], [(w * x).sum(), w.sum()]])
        h += 1e-9 * np.eye(2)  # a single-valued x makes the Hessian singular
        step = np.linalg.solve(h, g)
        a, b = a - step[0], b - step[1]
        if np.abs(step).max() < 1e-10:
            break
    return float(a), float(b)


def apply_platt(p: Sequence[float] | np.ndarray, a: float, b: float) -> np.ndarray:
    """``sigmoid(a * logit(p) + b)`` elementwise."""
    return _sigmoid(a * _logit(np.asarray(p, dtype=float)) + b)


def ece(p: Sequence[float] | np.ndarray, y: Sequence[int] | np.ndarray, bins: int = 10
        ) -> float:
    """Expected calibration error of ``p`` against 0/1 ``y`` (see metrics)."""
    return expected_calibration_error(y, p, bins)


def brier(p: Sequence[float] | np.ndarray, y: Sequence[int] | np.ndarray) -> float:
    """Mean squared error of ``p`` against 0/1 targets (NaN when empty)."""
    pp, yy = np.asarray(p, dtype=float), np.asarray(y, dtype=float)
    return float(((pp - yy) ** 2).mean()) if pp.size else float("nan")


__all__ = ["apply_platt", "brier", "ece", "fit_platt"]
