"""Prediction-error metrics for per-op and end-to-end time predictions.

All metrics take predicted and measured times in the same unit (normally
seconds) and return a dimensionless fraction (0.05 means 5 %), never percent.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "GMAE_EPSILON",
    "gmae",
    "mape",
    "max_abs_rel_error",
    "noise_floor",
]

#: Added to every relative error before the log in :func:`gmae`, so that an
#: exact prediction contributes log(4e-4) instead of -inf. This is the seed
#: work's definition; a perfect predictor therefore scores GMAE = 4e-4.
GMAE_EPSILON = 4e-4


def _relative_errors(pred: ArrayLike, meas: ArrayLike) -> np.ndarray:
    """Return |pred - meas| / meas (fraction) after validating both inputs.

    Raises ValueError unless both are numeric, non-empty, of the same shape and
    finite, and every measured value is > 0.
    """
    try:
        p = np.asarray(pred, dtype=np.float64)
        m = np.asarray(meas, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"pred and meas must be numeric arrays: {exc}") from exc
    if p.shape != m.shape:
        raise ValueError(
            f"pred and meas must have the same shape, got {p.shape} and {m.shape}"
        )
    if p.size == 0:
        raise ValueError("pred and meas must not be empty")
    p = p.ravel()
    m = m.ravel()
    if not np.all(np.isfinite(p)):
        raise ValueError("pred contains NaN or infinite values")
    if not np.all(np.isfinite(m)):
        raise ValueError("meas contains NaN or infinite values")
    if not np.all(m > 0):
        raise ValueError("meas must be strictly positive (times in seconds)")
    return np.abs(p - m) / m


def gmae(pred: ArrayLike, meas: ArrayLike) -> float:
    """Geometric mean absolute relative error (fraction).

    GMAE = exp(mean(log(|pred - meas| / meas + GMAE_EPSILON))). Its minimum,
    reached by a perfect prediction, is GMAE_EPSILON = 4e-4.
    """
    rel = _relative_errors(pred, meas)
    return float(np.exp(np.mean(np.log(rel + GMAE_EPSILON))))


def mape(pred: ArrayLike, meas: ArrayLike) -> float:
    """Mean absolute relative error, mean(|pred - meas| / meas), as a fraction."""
    return float(np.mean(_relative_errors(pred, meas)))


def max_abs_rel_error(pred: ArrayLike, meas: ArrayLike) -> float:
    """Largest absolute relative error, max(|pred - meas| / meas), as a fraction."""
    return float(np.max(_relative_errors(pred, meas)))


def noise_floor(a: ArrayLike, b: ArrayLike) -> float:
    """GMAE between two independent measurements of the same configs (fraction).

    Neither run is the truth, so each takes a turn as the reference and the two
    GMAEs are averaged: (gmae(a, b) + gmae(b, a)) / 2. This is symmetric in a
    and b, and, for small differences, equal to using (a + b) / 2 as the
    reference to first order. It is the best GMAE any predictor can expect on
    these configs. Both a and b must be > 0 (seconds).
    """
    return 0.5 * (gmae(a, b) + gmae(b, a))
