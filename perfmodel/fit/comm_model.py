"""Latency/bandwidth predictor of collectives, per world size; predicts seconds.

:class:`CommRegressor` reads X = [world_size, algo bytes, bus bytes] (the
features :func:`comm_features` builds from a collective's
:class:`~perfmodel.ops.collective.Collective` definition) and fits one curve of
time against message size per world size, in log space:

- ``curve="sigmoid"`` (the seed work's shape): t = alpha + S / bw(S) with an
  effective bandwidth bw(S) = B / (1 + exp(-(ln S - mu) / w)), a sigmoid in
  log-size: constant latency below the knee, then saturation bandwidth B.
  Four parameters per world size, fitted by least squares on log t.
- ``curve="hockney"``: the classic latency-bandwidth line t = alpha + S / B,
  two parameters per world size, fitted like the sigmoid (robust least squares
  on log t). With ranks time-sharing cores, small messages scatter by tens of
  percent around a flat latency, and the sigmoid's extra two parameters follow
  that scatter, where the line does not.
- ``curve="cache"``: the line with a second, slower bandwidth beyond a
  capacity K: t = alpha + S / B + max(0, S - K) / B_far. Gloo copies and
  reduces buffers in memory; once a collective's buffers outgrow the caches
  every further byte moves at DRAM speed, and the time grows faster than the
  bytes. K starts at the midpoint between measured sizes (at least two sizes above
  it) with the lowest robust cost, then is fitted with alpha, B and B_far by
  the robust least squares between the sizes on either side. Without a knee in
  the data B_far grows until its term vanishes (the line). Four parameters per
  world size.
- ``curve="interp"``: the measured curve itself, made non-decreasing (isotonic
  in log-log) and interpolated linearly in log-log; below the smallest size it
  stays at its latency, above the largest it grows at the bandwidth of the last
  two sizes.

Fitting scores every curve on held-out configs and keeps the best. A world size
that was not measured is predicted from the nearest measured one at the same
*bus* bytes (bus bandwidth is what stays constant across world sizes). How the
curves scored on measured sweeps: docs/journal/2026-11-25-collectives.md.

Importing this module registers ``CommRegressor`` with
:data:`perfmodel.fit.predictors.PREDICTOR_TYPES` (``perfmodel.fit.fitting`` imports it),
so it persists as plain JSON + npz like the other predictors.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import least_squares
from sklearn.utils.validation import check_is_fitted, validate_data

from perfmodel.fit.predictors import MIN_SECONDS, PREDICTOR_TYPES, _PlainDataRegressor

CURVES = ("sigmoid", "hockney", "cache", "interp")
#: Bounds of the sigmoid's width w (in ln-bytes): narrower is a step, wider a
#: slope that never saturates within the measured sizes.
_WIDTH_BOUNDS = (0.2, 8.0)
#: Residual evaluations allowed per sigmoid fit (bounds the time on few points).
_MAX_NFEV = 60


def comm_features(op, params) -> list[float]:
    """Feature row of a collective config: world size, algo bytes (B), bus bytes (B)."""
    return [float(params["world_size"]), op.algo_bytes(params), op.bus_bytes(params)]


def predict_collective(report, op: str, world_size: int, nbytes: int,
                       dtype: str = "float32") -> float:
    """Predicted seconds of collective ``op`` with ``nbytes`` per rank on
    ``world_size`` ranks, from a fitted :class:`~perfmodel.fit.fitting.FitReport`."""
    return float(report.predictor(op, "forward").predict(
        dtype, [{"world_size": world_size, "bytes": nbytes}])[0])


def _sigmoid_log_t(p: np.ndarray, log_s: np.ndarray) -> np.ndarray:
    """ln t of the sigmoid curve; p = (ln alpha, ln B, mu, ln w)."""
    log_alpha, log_bw, mu, log_w = p
    # ln(S / bw(S)) = ln S - ln B + ln(1 + exp(-(ln S - mu) / w))
    transfer = log_s - log_bw + np.logaddexp(0.0, -(log_s - mu) / np.exp(log_w))
    return np.logaddexp(log_alpha, transfer)


def _sigmoid_jacobian(p: np.ndarray, log_s: np.ndarray) -> np.ndarray:
    """d ln t / d p of :func:`_sigmoid_log_t`, one row per size."""
    log_alpha, log_bw, mu, log_w = p
    z = -(log_s - mu) / np.exp(log_w)
    transfer = log_s - log_bw + np.logaddexp(0.0, z)
    share = 1.0 / (1.0 + np.exp(np.clip(transfer - log_alpha, -700, 700)))  # of alpha
    q = 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))  # d softplus(z) / dz
    rest = 1.0 - share
    return np.column_stack([share, -rest, rest * q / np.exp(log_w), -rest * q * z])


def _hockney_log_t(p: np.ndarray, log_s: np.ndarray) -> np.ndarray:
    """ln t of the line t = alpha + S / B; p = (ln alpha, ln B)."""
    return np.logaddexp(p[0], log_s - p[1])


def _hockney_jacobian(p: np.ndarray, log_s: np.ndarray) -> np.ndarray:
    """d ln t / d p of :func:`_hockney_log_t`, one row per size."""
    share = 1.0 / (1.0 + np.exp(np.clip(log_s - p[1] - p[0], -700, 700)))  # of alpha
    return np.column_stack([share, share - 1.0])


def _log_excess(log_s: np.ndarray, log_knee: float) -> np.ndarray:
    """ln max(S - K, tiny) for sizes S = exp(``log_s``) and K = exp(``log_knee``)."""
    return np.log(np.maximum(-np.expm1(log_knee - log_s), 1e-300)) + log_s


def _cache_log_t(p: np.ndarray, log_s: np.ndarray, log_knee: float) -> np.ndarray:
    """ln t of t = alpha + S / B + max(0, S - K) / B_far; p = (ln alpha, ln B,
    ln B_far), K = exp(``log_knee``) bytes."""
    far = _log_excess(log_s, log_knee)
    terms = np.stack([np.full_like(log_s, p[0]), log_s - p[1],
                      np.where(log_s > log_knee, far - p[2], -np.inf)])
    return np.logaddexp.reduce(terms, axis=0)


def _cache_jacobian(p: np.ndarray, log_s: np.ndarray, log_knee: float) -> np.ndarray:
    """d ln t / d p of :func:`_cache_log_t`: each term's share of t (signed)."""
    log_t = _cache_log_t(p, log_s, log_knee)
    far = _log_excess(log_s, log_knee)
    far_share = np.where(log_s > log_knee, np.exp(np.minimum(far - p[2] - log_t, 0.0)), 0.0)
    return np.column_stack([np.exp(p[0] - log_t), -np.exp(log_s - p[1] - log_t), -far_share])


def _cache_jacobian_with_knee(q: np.ndarray, log_s: np.ndarray) -> np.ndarray:
    """d ln t / d q of :func:`_cache_log_t` for q = (ln alpha, ln B, ln B_far, ln K)."""
    log_t = _cache_log_t(q[:3], log_s, q[3])
    d_knee = np.where(log_s > q[3], -np.exp(q[3] - q[2] - log_t), 0.0)
    return np.column_stack([_cache_jacobian(q[:3], log_s, q[3]), d_knee])


def _robust_log_fit(log_t_of, jacobian, log_s: np.ndarray, log_t: np.ndarray, x0: np.ndarray,
                    bounds) -> list[float]:
    """Parameters of curve ``log_t_of(p, log_s)`` fitted to ``log_t`` by least
    squares with a soft-L1 loss (residuals beyond 0.1 in ln t, about 10%,
    weigh less), from ``x0`` within ``bounds``."""
    return [float(v) for v in _robust_least_squares(log_t_of, jacobian, log_s, log_t, x0,
                                                    bounds).x]


def _robust_least_squares(log_t_of, jacobian, log_s, log_t, x0, bounds):
    """scipy's result of :func:`_robust_log_fit` (``.x``, and ``.cost``, the robust cost)."""
    return least_squares(lambda p: log_t_of(p, log_s) - log_t, x0,
                         jac=lambda p: jacobian(p, log_s), bounds=bounds, loss="soft_l1",
                         f_scale=0.1, x_scale="jac", max_nfev=_MAX_NFEV)


class CommRegressor(_PlainDataRegressor):
    """Collective time per world size: ``curve`` is one of :data:`CURVES` (see
    the module docstring). X columns: world size, algo bytes, bus bytes.
    Learned: ``world_`` and ``bus_factor_`` per world size, then the curve's
    arrays (``log_alpha_``, ``log_bw_``, and for the sigmoid ``mu_``,
    ``log_width_``; for the cache curve ``log_knee_``, ``log_bw_far_``; or
    ``knot_offsets_``, ``knot_log_bytes_``, ``knot_log_s_``, ``tail_log_bw_``)."""

    type_name: ClassVar[str] = "comm"

    def __init__(self, curve="sigmoid"):
        self.curve = curve

    # -- fitting -------------------------------------------------------------------
    def fit(self, X, y):
        """Fit one curve per world size to X (n, 3) and times y (s); returns self."""
        if self.curve not in CURVES:
            raise ValueError(f"curve must be one of {CURVES}, got {self.curve!r}")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        if X.shape[1] != 3:
            raise ValueError(f"X must have 3 columns (world size, algo bytes, bus bytes), "
                             f"got {X.shape[1]}")
        world = np.rint(X[:, 0]).astype(np.int64)
        log_s = np.log(np.maximum(X[:, 1], 1.0))
        log_t = np.log(np.maximum(y, MIN_SECONDS))
        self.world_ = np.unique(world)
        self.bus_factor_ = np.array([float(np.median(X[world == w, 2] / np.maximum(
            X[world == w, 1], 1.0))) for w in self.world_])
        groups = [(log_s[world == w], log_t[world == w]) for w in self.world_]
        if self.curve == "sigmoid":
            params = np.array([self._fit_sigmoid(*g) for g in groups])
            self.log_alpha_, self.log_bw_, self.mu_, self.log_width_ = (params[:, i].copy()
                                                                        for i in range(4))
        elif self.curve == "hockney":
            params = np.array([self._fit_hockney(*g) for g in groups])
            self.log_alpha_, self.log_bw_ = params[:, 0].copy(), params[:, 1].copy()
        elif self.curve == "cache":
            params = np.array([self._fit_cache(*g) for g in groups])
            self.log_alpha_, self.log_bw_, self.log_bw_far_, self.log_knee_ = (
                params[:, i].copy() for i in range(4))
        else:
            knots = [self._fit_knots(*g) for g in groups]
            self.knot_offsets_ = np.cumsum([0] + [len(k[0]) for k in knots]).astype(np.int64)
            self.knot_log_bytes_ = np.concatenate([k[0] for k in knots])
            self.knot_log_s_ = np.concatenate([k[1] for k in knots])
            self.tail_log_bw_ = np.array([k[2] for k in knots])
        return self

    @staticmethod
    def _fit_sigmoid(log_s: np.ndarray, log_t: np.ndarray) -> list[float]:
        log_alpha0 = float(np.min(log_t))
        log_bw0 = float(np.max(log_s - log_t))
        x0 = np.array([log_alpha0, log_bw0, log_alpha0 + log_bw0, 0.0])
        lower = [log_alpha0 - 10, log_bw0 - 10, float(log_s.min()) - 10, math.log(_WIDTH_BOUNDS[0])]
        upper = [float(np.max(log_t)) + 1, log_bw0 + 10, float(log_s.max()) + 10,
                 math.log(_WIDTH_BOUNDS[1])]
        return _robust_log_fit(_sigmoid_log_t, _sigmoid_jacobian, log_s, log_t,
                               np.clip(x0, lower, upper), (lower, upper))

    @staticmethod
    def _fit_hockney(log_s: np.ndarray, log_t: np.ndarray) -> list[float]:
        x0 = np.array([float(np.min(log_t)), float(np.max(log_s - log_t))])
        return _robust_log_fit(_hockney_log_t, _hockney_jacobian, log_s, log_t, x0,
                               (x0 - 10, x0 + 10))

    @staticmethod
    def _fit_cache(log_s: np.ndarray, log_t: np.ndarray) -> list[float]:
        """(ln alpha, ln B, ln B_far, ln K). The knee K starts at the midpoint
        between measured sizes (leaving two or more sizes above it) with the
        lowest robust cost, then moves with the other three parameters between
        the sizes on either side of that midpoint."""
        line = CommRegressor._fit_hockney(log_s, log_t)
        x0 = np.array([line[0], line[1], line[1]])
        bounds = (x0 - 10, x0 + 10)
        sizes = np.unique(log_s)
        starts = range(1, sizes.size - 1) if sizes.size > 2 else range(sizes.size - 1, sizes.size)
        best = None
        for i in starts:
            log_knee = float(sizes[i - 1] + sizes[i]) / 2 if sizes.size > 2 else float(sizes[-1])
            fit = _robust_least_squares(
                lambda p, s, k=log_knee: _cache_log_t(p, s, k),
                lambda p, s, k=log_knee: _cache_jacobian(p, s, k), log_s, log_t, x0, bounds)
            if best is None or fit.cost < best[0]:
                best = (fit.cost, fit.x, log_knee, i)
        _, p, log_knee, i = best
        lo, hi = float(sizes[max(i - 1, 0)]), float(sizes[min(i, sizes.size - 1)])
        if hi <= lo:
            return [*map(float, p), log_knee]
        refined = _robust_least_squares(
            lambda q, s: _cache_log_t(q[:3], s, q[3]), _cache_jacobian_with_knee, log_s, log_t,
            np.append(p, log_knee), (np.append(bounds[0], lo), np.append(bounds[1], hi)))
        return [float(v) for v in refined.x]

    @staticmethod
    def _fit_knots(log_s: np.ndarray, log_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        from sklearn.isotonic import IsotonicRegression

        sizes = np.unique(log_s)
        mean_t = np.array([log_t[log_s == s].mean() for s in sizes])
        knots_t = IsotonicRegression(increasing=True).fit_transform(sizes, mean_t)
        if sizes.size > 1:
            gain = math.exp(knots_t[-1]) - math.exp(knots_t[-2])
            span = math.exp(sizes[-1]) - math.exp(sizes[-2])
            tail = math.log(span / gain) if gain > 0 else float(sizes[-1] - knots_t[-1])
        else:
            tail = float(sizes[-1] - knots_t[-1])  # bytes / time of the one size
        return sizes, knots_t, tail

    # -- predicting ----------------------------------------------------------------
    def predict(self, X):
        """Predicted seconds (finite, > 0) per row of X = [world size, algo bytes, bus bytes]."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        world = np.rint(X[:, 0])
        out = np.empty(X.shape[0])
        nearest = np.argmin(np.abs(np.log(np.maximum(world[:, None], 1.0))
                                   - np.log(self.world_[None, :].astype(float))), axis=1)
        for g in np.unique(nearest):
            rows = nearest == g
            size = np.maximum(X[rows, 1], 1.0)
            other = world[rows] != self.world_[g]
            if self.bus_factor_[g] > 0:  # an unmeasured world size: same bus bytes
                size = np.where(other & (X[rows, 2] > 0), X[rows, 2] / self.bus_factor_[g], size)
            out[rows] = self._log_t(g, np.log(np.maximum(size, 1.0)))
        return np.exp(np.clip(out, math.log(MIN_SECONDS), 690.0))

    def _log_t(self, g: int, log_s: np.ndarray) -> np.ndarray:
        if self.curve == "sigmoid":
            p = (self.log_alpha_[g], self.log_bw_[g], self.mu_[g], self.log_width_[g])
            return _sigmoid_log_t(np.array(p), log_s)
        if self.curve == "hockney":
            return _hockney_log_t(np.array((self.log_alpha_[g], self.log_bw_[g])), log_s)
        if self.curve == "cache":
            p = np.array((self.log_alpha_[g], self.log_bw_[g], self.log_bw_far_[g]))
            return _cache_log_t(p, log_s, float(self.log_knee_[g]))
        lo, hi = self.knot_offsets_[g], self.knot_offsets_[g + 1]
        sizes, times = self.knot_log_bytes_[lo:hi], self.knot_log_s_[lo:hi]
        inside = np.interp(log_s, sizes, times)
        beyond = np.exp(times[-1]) + (np.exp(log_s) - np.exp(sizes[-1])) / math.exp(
            self.tail_log_bw_[g])
        return np.where(log_s > sizes[-1], np.log(np.maximum(beyond, MIN_SECONDS)), inside)

    # -- persistence hooks ---------------------------------------------------------
    def _array_specs(self) -> dict[str, type]:
        curve = {"sigmoid": ("log_alpha_", "log_bw_", "mu_", "log_width_"),
                 "hockney": ("log_alpha_", "log_bw_"),
                 "cache": ("log_alpha_", "log_bw_", "log_bw_far_", "log_knee_"),
                 "interp": ("knot_log_bytes_", "knot_log_s_", "tail_log_bw_")}[self.curve]
        specs: dict[str, type] = {"world_": np.int64, "bus_factor_": np.float64}
        specs.update({name: np.float64 for name in curve})
        if self.curve == "interp":
            specs["knot_offsets_"] = np.int64
        return specs

    def _params_to_json(self) -> dict[str, Any]:
        return {"curve": str(self.curve)}

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        if params["curve"] not in CURVES:
            raise ValueError(f"params.curve must be one of {CURVES}, got {params['curve']!r}")
        return {"curve": params["curve"]}

    def _check_learned_state(self) -> None:
        groups = self.world_.size
        if self.n_features_in_ != 3 or groups < 1 or np.any(self.world_ < 1):
            raise ValueError("n_features_in_ must be 3 and world_ hold world sizes >= 1")
        per_group = [n for n in self._array_specs() if n not in ("knot_offsets_", "knot_log_bytes_",
                                                                 "knot_log_s_")]
        if any(getattr(self, n).shape != (groups,) for n in per_group):
            raise ValueError(f"per-world arrays must hold {groups} values")
        if self.curve == "interp":
            offsets = self.knot_offsets_
            knots = self.knot_log_bytes_.size
            if offsets.shape != (groups + 1,) or offsets[0] != 0 or np.any(np.diff(offsets) < 1) \
                    or offsets[-1] != knots or self.knot_log_s_.size != knots:
                raise ValueError("knot_offsets_ must index the knots, one or more per world size")


PREDICTOR_TYPES[CommRegressor.type_name] = CommRegressor
__all__ = ["CURVES", "CommRegressor", "comm_features", "predict_collective"]
