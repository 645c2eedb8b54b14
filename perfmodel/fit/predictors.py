"""Per-op performance predictors and their plain-data persistence.

Every predictor here follows scikit-learn's estimator contract: ``__init__`` only
stores parameters, ``fit(X, y)`` returns ``self``, learned attributes end in
``_`` and ``predict(X)`` returns times in seconds (always finite and > 0).
``y`` is a measured time in seconds; values <= 0 (which only arise from bad
data) are clipped to ``MIN_SECONDS`` so that logs stay finite. Feature values
are amounts of work or shape parameters and are clipped at 0.

A fitted predictor is persisted as plain data: ``<stem>.json`` (metadata) and
``<stem>.npz`` (float64/int64 arrays). Loading never unpickles anything.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import least_squares
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from perfmodel.plaindata import write_bytes_atomic
from perfmodel.store.paths import predictor_files

__all__ = [
    "MIN_SECONDS",
    "PREDICTOR_TYPES",
    "EfficiencyRegressor",
    "EmbeddingLookupRegressor",
    "RooflineRegressor",
    "ShapeRegressor",
    "export_tree_ensemble",
    "load_predictor",
    "predict_tree_ensemble",
    "save_predictor",
]

#: Smallest time (seconds) a predictor predicts, and the floor applied to
#: training targets y <= 0 before taking logs.
MIN_SECONDS = 1e-12

#: Largest natural log of a prediction; exp(690) ~ 1e299 s stays finite.
_MAX_LOG_SECONDS = 690.0

#: Plain-data file format tag and version written into every ``<stem>.json``.
_FILE_FORMAT = "perfmodel.predictor"
_FILE_VERSION = 1


def _as_float(value: Any, what: str) -> float:
    """Return ``value`` as a finite float; ValueError for bools, strings, NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{what} must be a number, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{what} must be finite, got {result!r}")
    return result


def _as_int(value: Any, what: str) -> int:
    """Return ``value`` as an int; ValueError for bools, floats and strings."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {type(value).__name__}")
    return int(value)


class _PlainDataRegressor(RegressorMixin, BaseEstimator):
    """Shared tags and get_state/from_state plumbing for the predictors.

    Subclasses set ``type_name`` and ``_scalar_attrs`` (float learned
    attributes kept in the JSON) and implement ``_array_specs`` (learned array
    attributes and their dtype), ``_params_to_json``, ``_check_params`` and
    ``_check_learned_state``.
    """

    type_name: ClassVar[str] = ""
    _scalar_attrs: ClassVar[tuple[str, ...]] = ()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The estimator checks score us on standardised targets, half of them
        # negative; times cannot be negative, so the R^2 there means nothing.
        tags.regressor_tags.poor_score = True
        return tags

    # -- hooks -------------------------------------------------------------
    def _array_specs(self) -> dict[str, type]:
        raise NotImplementedError

    def _params_to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _check_learned_state(self) -> None:
        raise NotImplementedError

    # -- persistence -------------------------------------------------------
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Return (JSON-safe metadata, float64/int64 arrays) of a fitted predictor."""
        check_is_fitted(self)
        meta: dict[str, Any] = {
            "type_name": self.type_name,
            "params": self._params_to_json(),
            "n_features_in_": int(self.n_features_in_),
        }
        for name in self._scalar_attrs:
            meta[name] = _as_float(getattr(self, name), name)
        if hasattr(self, "feature_names_in_"):
            meta["feature_names_in_"] = [str(n) for n in self.feature_names_in_]
        arrays = {
            name: np.array(getattr(self, name), dtype=dtype, copy=True)
            for name, dtype in self._array_specs().items()
        }
        return meta, arrays

    @classmethod
    def from_state(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]):
        """Rebuild a fitted predictor from ``get_state`` output; ValueError if invalid."""
        if not isinstance(meta, Mapping):
            raise ValueError(f"metadata must be a mapping, got {type(meta).__name__}")
        if meta.get("type_name") != cls.type_name:
            raise ValueError(
                f"type_name {meta.get('type_name')!r} does not match {cls.type_name!r}"
            )
        required = {"type_name", "params", "n_features_in_", *cls._scalar_attrs}
        allowed = required | {"feature_names_in_"}
        missing = sorted(required - set(meta))
        unknown = sorted(set(meta) - allowed)
        if missing or unknown:
            raise ValueError(f"metadata keys: missing {missing}, unknown {unknown}")

        params = meta["params"]
        if not isinstance(params, Mapping):
            raise ValueError("params must be a mapping")
        expected_params = set(cls._get_param_names())
        if set(params) != expected_params:
            raise ValueError(
                f"params must have exactly the keys {sorted(expected_params)}, "
                f"got {sorted(params)}"
            )
        estimator = cls(**cls._check_params(dict(params)))

        n_features = _as_int(meta["n_features_in_"], "n_features_in_")
        if n_features < 1:
            raise ValueError(f"n_features_in_ must be >= 1, got {n_features}")
        estimator.n_features_in_ = n_features
        if "feature_names_in_" in meta:
            names = meta["feature_names_in_"]
            if (
                not isinstance(names, list)
                or len(names) != n_features
                or not all(isinstance(n, str) for n in names)
                or len(set(names)) != len(names)
            ):
                raise ValueError(
                    f"feature_names_in_ must be {n_features} distinct strings"
                )
            estimator.feature_names_in_ = np.asarray(names, dtype=object)
        for name in cls._scalar_attrs:
            setattr(estimator, name, _as_float(meta[name], name))

        if not isinstance(arrays, Mapping):
            raise ValueError(f"arrays must be a mapping, got {type(arrays).__name__}")
        specs = estimator._array_specs()
        if set(arrays) != set(specs):
            raise ValueError(
                f"arrays must be exactly {sorted(specs)}, got {sorted(arrays)}"
            )
        for name, dtype in specs.items():
            array = arrays[name]
            if not isinstance(array, np.ndarray):
                raise ValueError(f"array {name!r} is not a numpy array")
            want = np.dtype(dtype)
            if array.dtype.kind != want.kind or array.dtype.itemsize != want.itemsize:
                raise ValueError(f"array {name!r} must be {want}, got {array.dtype}")
            if array.ndim != 1:
                raise ValueError(f"array {name!r} must be 1-D, got shape {array.shape}")
            if want.kind == "f" and not np.all(np.isfinite(array)):
                raise ValueError(f"array {name!r} contains NaN or infinite values")
            setattr(estimator, name, np.array(array, dtype=want, copy=True))
        estimator._check_learned_state()
        return estimator


# ---------------------------------------------------------------------------
# Roofline
# ---------------------------------------------------------------------------

#: Sharpness schedule of the smooth max used while fitting the roofline; the
#: last stage (inf) is the exact max that ``predict`` uses.
_ROOFLINE_SHARPNESS = (8.0, 32.0, 128.0, math.inf)
#: Residual evaluations allowed per sharpness stage (bounds time on bad data).
_ROOFLINE_MAX_NFEV = 50
#: Bounds of a learned efficiency (fraction of the given peak).
_MIN_EFFICIENCY = 1e-9
_MAX_EFFICIENCY = 1.5


def _busy_time(z: np.ndarray, log_rate: np.ndarray, sharpness: float):
    """Return (busy seconds, d busy / d log_rate) for work ``z`` at rates exp(log_rate).

    Busy time is the p-norm of the per-resource times w_j = z_j / rate_j with
    p = ``sharpness``: a smooth upper bound of max_j w_j (p = inf gives the
    exact max and a one-hot derivative).
    """
    with np.errstate(over="ignore"):
        w = z * np.exp(-log_rate)
    w = np.minimum(w, np.finfo(np.float64).max / 4)
    w_max = w.max(axis=1)
    if math.isinf(sharpness):
        busy = w_max
        onehot = np.zeros_like(w)
        onehot[np.arange(w.shape[0]), np.argmax(w, axis=1)] = 1.0
        grad = np.where(w_max[:, None] > 0, onehot, 0.0)
    else:
        safe_max = np.where(w_max > 0, w_max, 1.0)
        ratio = w / safe_max[:, None]
        with np.errstate(under="ignore"):
            powered = ratio**sharpness
        busy = w_max * np.sum(powered, axis=1) ** (1.0 / sharpness)
        safe_busy = np.where(busy > 0, busy, 1.0)
        with np.errstate(under="ignore"):
            grad = (w / safe_busy[:, None]) ** (sharpness - 1.0)
        grad = np.where(w_max[:, None] > 0, grad, 0.0)
    return busy, -grad * w


class RooflineRegressor(_PlainDataRegressor):
    """Generalised roofline: t = max_j(X_j / rate_j) + overhead_s (seconds).

    Each column of X is an amount of work for one resource (FLOPs at a dtype,
    bytes moved, ...). With ``peaks`` (one peak rate per column, e.g. FLOP/s
    and B/s of the device) the fit learns ``efficiency_`` in (0, 1.5] and
    ``rate_ = efficiency_ * peaks``; with ``peaks=None`` it learns ``rate_``
    (work units per second) directly. ``overhead_s_`` is the fixed cost
    (seconds), learned when ``fit_overhead`` else 0. Predictions are monotone
    non-decreasing in every column by construction.

    Fitting minimises the squared error of log(t_pred) - log(t_meas) with
    ``scipy.optimize.least_squares`` over log-rates (and the overhead). It
    starts from rates estimated on the rows each resource dominates, then
    anneals a smooth max (p-norm, p = 8, 32, 128) to the exact max used by
    ``predict``, so the optimiser sees smooth residuals first and the final
    answer has no smoothing bias. A column that is zero in every training row
    is not identifiable and keeps its start rate (efficiency 1, i.e. the peak;
    or 1.0 when ``peaks`` is None).
    """

    type_name: ClassVar[str] = "roofline"
    _scalar_attrs: ClassVar[tuple[str, ...]] = ("overhead_s_",)

    def __init__(self, peaks=None, fit_overhead=True):
        self.peaks = peaks
        self.fit_overhead = fit_overhead

    # -- fitting -----------------------------------------------------------
    def _peaks_array(self, n_features: int) -> np.ndarray | None:
        """Validated peaks as float64 array of length n_features, or None."""
        if self.peaks is None:
            return None
        try:
            peaks = np.asarray(self.peaks, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"peaks must be a sequence of numbers: {exc}") from exc
        if peaks.ndim != 1 or peaks.shape[0] != n_features:
            raise ValueError(
                f"peaks must have one entry per feature ({n_features}), "
                f"got shape {peaks.shape}"
            )
        if not np.all(np.isfinite(peaks)) or not np.all(peaks > 0):
            raise ValueError("peaks must be finite and > 0")
        return peaks

    @staticmethod
    def _initial_rates(z: np.ndarray, t: np.ndarray, overhead0: float) -> np.ndarray:
        """Start rates: median z_j / busy time over the rows column j dominates."""
        rates = np.ones(z.shape[1])
        active = z.max(axis=0) > 0
        for j in np.flatnonzero(active):
            used = z[:, j] > 0
            # Every row gives a lower bound z_j / t on rate_j; a high quantile
            # approximates the rows where column j is the bottleneck.
            rates[j] = np.quantile(z[used, j] / t[used], 0.9)
        busy = np.maximum(t - overhead0, 0.5 * t)
        for _ in range(2):
            share = z / rates
            dominant = np.argmax(share, axis=1)
            for j in np.flatnonzero(active):
                rows = (dominant == j) & (z[:, j] > 0)
                if np.any(rows):
                    rates[j] = np.median(z[rows, j] / busy[rows])
        return rates

    def fit(self, X, y):
        """Fit rates (and overhead) to work X (n_samples, n_resources) and times y (s)."""
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        n_features = X.shape[1]
        peaks = self._peaks_array(n_features)
        fit_overhead = bool(self.fit_overhead)
        scale = peaks if peaks is not None else np.ones(n_features)
        z = np.maximum(X, 0.0) / scale
        t = np.maximum(y, MIN_SECONDS)
        log_t = np.log(t)
        t_ref = float(np.median(t))

        overhead0 = 0.5 * float(np.min(t)) if fit_overhead else 0.0
        rates0 = self._initial_rates(z, t, overhead0)
        active = np.flatnonzero(z.max(axis=0) > 0)
        if peaks is not None:
            rates0 = np.clip(rates0, _MIN_EFFICIENCY * 1.01, _MAX_EFFICIENCY / 1.01)
            rates0[z.max(axis=0) <= 0] = 1.0
            lower = np.full(active.size, math.log(_MIN_EFFICIENCY))
            upper = np.full(active.size, math.log(_MAX_EFFICIENCY))
        log_rate = np.log(rates0)
        if peaks is None:
            lower = log_rate[active] - 50.0
            upper = log_rate[active] + 50.0

        n_rate = active.size
        x0 = log_rate[active]
        if fit_overhead:
            x0 = np.append(x0, overhead0 / t_ref)
            lower = np.append(lower, 0.0)
            upper = np.append(upper, np.inf)

        def unpack(params):
            full = log_rate.copy()
            full[active] = params[:n_rate]
            overhead = params[n_rate] * t_ref if fit_overhead else 0.0
            return full, overhead

        def model(params, sharpness):
            full, overhead = unpack(params)
            busy, dbusy = _busy_time(z, full, sharpness)
            raw = busy + overhead
            pred = np.maximum(raw, MIN_SECONDS)
            return pred, dbusy, raw > MIN_SECONDS

        for sharpness in _ROOFLINE_SHARPNESS:
            if x0.size == 0:
                break

            def residuals(params, sharpness=sharpness):
                pred, _, _ = model(params, sharpness)
                return np.log(pred) - log_t

            def jacobian(params, sharpness=sharpness):
                pred, dbusy, live = model(params, sharpness)
                factor = np.where(live, 1.0 / pred, 0.0)[:, None]
                jac = dbusy[:, active] * factor
                if fit_overhead:
                    jac = np.hstack([jac, factor * t_ref])
                return jac

            x0 = np.clip(x0, lower, upper)
            result = least_squares(
                residuals,
                x0,
                jac=jacobian,
                bounds=(lower, upper),
                method="trf",
                x_scale="jac",
                ftol=1e-10,
                xtol=1e-10,
                gtol=1e-10,
                max_nfev=_ROOFLINE_MAX_NFEV,
            )
            x0 = result.x

        log_rate, overhead = unpack(x0)
        if peaks is not None:
            self.efficiency_ = np.exp(log_rate)
            self.rate_ = self.efficiency_ * peaks
        else:
            self.rate_ = np.exp(log_rate)
        self.overhead_s_ = float(overhead)
        return self

    def predict(self, X):
        """Predicted time (seconds, finite, > 0) for work X (n_samples, n_resources)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        work = np.maximum(X, 0.0)
        with np.errstate(over="ignore"):
            busy = np.max(work / self.rate_, axis=1)
            pred = busy + self.overhead_s_
        return np.clip(pred, MIN_SECONDS, np.finfo(np.float64).max)

    # -- persistence hooks -------------------------------------------------
    def _array_specs(self) -> dict[str, type]:
        specs: dict[str, type] = {"rate_": np.float64}
        if self.peaks is not None:
            specs["efficiency_"] = np.float64
        return specs

    def _params_to_json(self) -> dict[str, Any]:
        peaks = None
        if self.peaks is not None:
            peaks = [_as_float(p, "peaks entry") for p in np.asarray(self.peaks).ravel()]
        return {"peaks": peaks, "fit_overhead": bool(self.fit_overhead)}

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        peaks = params["peaks"]
        if peaks is not None:
            if not isinstance(peaks, list) or not peaks:
                raise ValueError("params.peaks must be null or a non-empty list")
            peaks = [_as_float(p, "params.peaks entry") for p in peaks]
            if min(peaks) <= 0:
                raise ValueError("params.peaks entries must be > 0")
        if not isinstance(params["fit_overhead"], bool):
            raise ValueError("params.fit_overhead must be a boolean")
        return {"peaks": peaks, "fit_overhead": params["fit_overhead"]}

    def _check_learned_state(self) -> None:
        n = self.n_features_in_
        if self.rate_.shape != (n,) or not np.all(self.rate_ > 0):
            raise ValueError(f"rate_ must hold {n} values > 0")
        if self.overhead_s_ < 0 or (not self.fit_overhead and self.overhead_s_ != 0):
            raise ValueError("overhead_s_ must be >= 0 (and 0 when fit_overhead is false)")
        if self.peaks is not None:
            peaks = np.asarray(self.peaks, dtype=np.float64)
            eff = self.efficiency_
            if peaks.shape != (n,) or eff.shape != (n,):
                raise ValueError(f"peaks and efficiency_ must hold {n} values")
            if not np.all((eff > 0) & (eff <= _MAX_EFFICIENCY)):
                raise ValueError(f"efficiency_ must lie in (0, {_MAX_EFFICIENCY}]")
            if not np.allclose(self.rate_, eff * peaks, rtol=1e-9, atol=0):
                raise ValueError("rate_ must equal efficiency_ * peaks")


# ---------------------------------------------------------------------------
# Shape regressor and its plain-data tree ensemble
# ---------------------------------------------------------------------------

#: Ridge penalty of the linear part (log2-feature units); small, it only keeps
#: the solve well conditioned when features are constant or collinear.
_RIDGE_ALPHA = 1e-3

_TREE_ARRAYS = (
    "tree_node_offsets_",
    "tree_children_left_",
    "tree_children_right_",
    "tree_feature_",
    "tree_threshold_",
    "tree_value_",
)


def _log_features(X: np.ndarray) -> np.ndarray:
    """Shape features log2(1 + max(x, 0)) (dimensionless)."""
    return np.log2(1.0 + np.maximum(X, 0.0))


def export_tree_ensemble(forest) -> dict[str, np.ndarray]:
    """Flatten a fitted single-output sklearn tree ensemble into plain arrays.

    Returns int64 ``node_offsets`` (n_trees + 1; tree k owns nodes
    offsets[k]:offsets[k+1]), int64 ``children_left``/``children_right``
    (global node indices, -1 at leaves), int64 ``feature`` (-1 at leaves),
    float64 ``threshold`` (go left when x <= threshold; 0 at leaves) and
    float64 ``value`` (leaf prediction). The ensemble predicts the mean over
    trees, as sklearn's forests do without bootstrap weighting.
    """
    offsets = [0]
    parts: dict[str, list[np.ndarray]] = {
        "children_left": [], "children_right": [], "feature": [],
        "threshold": [], "value": [],
    }
    for estimator in forest.estimators_:
        tree = estimator.tree_
        base = offsets[-1]
        left = np.asarray(tree.children_left, dtype=np.int64)
        right = np.asarray(tree.children_right, dtype=np.int64)
        internal = left >= 0
        node_ids = np.arange(left.size)
        if np.any(internal & ((left <= node_ids) | (right <= node_ids))):
            raise RuntimeError("tree children must come after their parent node")
        parts["children_left"].append(np.where(internal, left + base, -1))
        parts["children_right"].append(np.where(internal, right + base, -1))
        parts["feature"].append(np.where(internal, tree.feature, -1).astype(np.int64))
        parts["threshold"].append(np.where(internal, tree.threshold, 0.0))
        parts["value"].append(np.asarray(tree.value[:, 0, 0], dtype=np.float64))
        offsets.append(base + left.size)
    exported = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    exported["node_offsets"] = np.asarray(offsets, dtype=np.int64)
    return exported


def predict_tree_ensemble(ensemble: Mapping[str, np.ndarray], features) -> np.ndarray:
    """Mean prediction over the exported trees for features (n_samples, n_features).

    All trees are walked at once, one level per step. Features are rounded to
    float32 before comparing, exactly as sklearn's trees do, so results match
    the original forest.
    """
    x = np.asarray(features, dtype=np.float64).astype(np.float32).astype(np.float64)
    offsets = ensemble["node_offsets"]
    left = ensemble["children_left"]
    right = ensemble["children_right"]
    feature = ensemble["feature"]
    threshold = ensemble["threshold"]
    node = np.broadcast_to(offsets[:-1], (x.shape[0], offsets.size - 1)).copy()
    rows = np.arange(x.shape[0])[:, None]
    # Children always have larger indices than their parent, so each tree is
    # finished after at most (its node count) steps.
    for _ in range(int(np.max(np.diff(offsets)))):
        internal = left[node] >= 0
        if not np.any(internal):
            break
        column = np.where(internal, feature[node], 0)
        go_left = x[rows, column] <= threshold[node]
        node = np.where(internal, np.where(go_left, left[node], right[node]), node)
    return ensemble["value"][node].mean(axis=1)


def _check_tree_state(est, n: int) -> None:
    """Validate the exported ``tree_*_`` arrays of ``est`` against ``n`` features."""
    offsets = est.tree_node_offsets_
    if offsets.size != est.n_estimators + 1 or offsets[0] != 0:
        raise ValueError(
            f"tree_node_offsets_ must start at 0 and hold n_estimators + 1 "
            f"= {est.n_estimators + 1} entries"
        )
    sizes = np.diff(offsets)
    if np.any(sizes < 1):
        raise ValueError("tree_node_offsets_ must be strictly increasing")
    n_nodes = int(offsets[-1])
    for name in _TREE_ARRAYS[1:]:
        if getattr(est, name).shape != (n_nodes,):
            raise ValueError(f"{name} must hold {n_nodes} entries, one per node")
    left, right = est.tree_children_left_, est.tree_children_right_
    leaf = left == -1
    if np.any(leaf != (right == -1)):
        raise ValueError("a node must have both children or none (-1)")
    node_ids = np.arange(n_nodes)
    tree_end = np.repeat(offsets[1:], sizes)
    internal = ~leaf
    for name, child in (("tree_children_left_", left), ("tree_children_right_", right)):
        bad = internal & ((child <= node_ids) | (child >= tree_end))
        if np.any(bad):
            raise ValueError(f"{name} must point forward to a node of the same tree")
    feature = est.tree_feature_
    if np.any(internal & ((feature < 0) | (feature >= n))):
        raise ValueError(f"tree_feature_ must lie in [0, {n}) at split nodes")


class ShapeRegressor(_PlainDataRegressor):
    """Log-space linear model plus extra-trees residuals; predicts seconds.

    Features are transformed to log2(1 + max(x, 0)); the target is log(y).
    A ridge fit of log y on those features extrapolates power laws; an
    ``ExtraTreesRegressor`` fitted on its residuals captures shape-specific
    efficiency. The trees are exported to plain arrays (``tree_*_`` learned
    attributes, see ``export_tree_ensemble``) and the forest object is
    dropped, so a fitted and a reloaded predictor run the same numpy code.
    Prediction is exp(linear + trees), clipped to [MIN_SECONDS, ~1e299] s.
    """

    type_name: ClassVar[str] = "shape"
    _scalar_attrs: ClassVar[tuple[str, ...]] = ("intercept_",)

    def __init__(self, n_estimators=50, min_samples_leaf=2, random_state=0):
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def fit(self, X, y):
        """Fit to shape features X (n_samples, n_features) and times y (seconds)."""
        from sklearn.ensemble import ExtraTreesRegressor

        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        features = _log_features(X)
        log_t = np.log(np.maximum(y, MIN_SECONDS))

        mean_f = features.mean(axis=0)
        centred = features - mean_f
        gram = centred.T @ centred + _RIDGE_ALPHA * np.eye(features.shape[1])
        coef = np.linalg.solve(gram, centred.T @ (log_t - log_t.mean()))
        intercept = float(log_t.mean() - mean_f @ coef)
        residual = log_t - (features @ coef + intercept)

        forest = ExtraTreesRegressor(
            n_estimators=self.n_estimators,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        ).fit(features, residual)
        exported = export_tree_ensemble(forest)

        self.coef_ = coef
        self.intercept_ = intercept
        for name in _TREE_ARRAYS:
            setattr(self, name, exported[name[len("tree_"):-1]])
        return self

    def _tree_ensemble(self) -> dict[str, np.ndarray]:
        return {name[len("tree_"):-1]: getattr(self, name) for name in _TREE_ARRAYS}

    def predict(self, X):
        """Predicted time (seconds, finite, > 0) for shape features X."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        features = _log_features(X)
        log_t = features @ self.coef_ + self.intercept_
        log_t = log_t + predict_tree_ensemble(self._tree_ensemble(), features)
        return np.exp(np.clip(log_t, math.log(MIN_SECONDS), _MAX_LOG_SECONDS))

    # -- persistence hooks -------------------------------------------------
    def _array_specs(self) -> dict[str, type]:
        specs: dict[str, type] = {"coef_": np.float64}
        for name in _TREE_ARRAYS:
            kind = np.float64 if name in ("tree_threshold_", "tree_value_") else np.int64
            specs[name] = kind
        return specs

    def _params_to_json(self) -> dict[str, Any]:
        if self.random_state is not None and not isinstance(self.random_state, (int, np.integer)):
            raise ValueError("only an int or None random_state can be persisted")
        return {
            "n_estimators": int(self.n_estimators),
            "min_samples_leaf": int(self.min_samples_leaf),
            "random_state": None if self.random_state is None else int(self.random_state),
        }

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        checked = {}
        for name in ("n_estimators", "min_samples_leaf"):
            checked[name] = _as_int(params[name], f"params.{name}")
            if checked[name] < 1:
                raise ValueError(f"params.{name} must be >= 1")
        seed = params["random_state"]
        checked["random_state"] = None if seed is None else _as_int(seed, "params.random_state")
        return checked

    def _check_learned_state(self) -> None:
        n = self.n_features_in_
        if self.coef_.shape != (n,):
            raise ValueError(f"coef_ must hold {n} values")
        _check_tree_state(self, n)


class EfficiencyRegressor(_PlainDataRegressor):
    """Roofline bound times a learned efficiency correction; predicts seconds.

    The first ``n_work`` columns of X are work amounts (as for
    :class:`RooflineRegressor`, with ``peaks`` for them); the remaining columns
    are shape features. A roofline is fitted on the work columns, then an
    extra-trees model on log2(1 + x) of every column learns the residual
    log(t / roofline). Trees cannot extrapolate, so far outside the measured
    shapes the correction stays bounded and the roofline's physics carries the
    scaling. Learned: ``rate_``, ``overhead_s_`` and the ``tree_*_`` arrays.
    """

    type_name: ClassVar[str] = "efficiency"
    _scalar_attrs: ClassVar[tuple[str, ...]] = ("overhead_s_",)

    def __init__(self, peaks=None, n_work=1, n_estimators=50, min_samples_leaf=2, random_state=0):
        self.peaks = peaks
        self.n_work = n_work
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def _roofline(self, X: np.ndarray) -> np.ndarray:
        work = np.maximum(X[:, : self.n_work], 0.0)
        with np.errstate(over="ignore"):
            pred = np.max(work / self.rate_, axis=1) + self.overhead_s_
        return np.clip(pred, MIN_SECONDS, np.finfo(np.float64).max)

    def fit(self, X, y):
        """Fit to X = [work columns, shape columns] and times y (seconds)."""
        from sklearn.ensemble import ExtraTreesRegressor

        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        n_work = _as_int(self.n_work, "n_work")
        if not 1 <= n_work <= X.shape[1]:
            raise ValueError(f"n_work must lie in [1, {X.shape[1]}], got {n_work}")
        roof = RooflineRegressor(peaks=self.peaks).fit(X[:, :n_work], y)
        self.rate_, self.overhead_s_ = roof.rate_, roof.overhead_s_
        t = np.maximum(y, MIN_SECONDS)
        residual = np.log(t) - np.log(self._roofline(X))
        forest = ExtraTreesRegressor(
            n_estimators=self.n_estimators,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        ).fit(_log_features(X), residual)
        for name, array in export_tree_ensemble(forest).items():
            setattr(self, f"tree_{name}_", array)
        return self

    def predict(self, X):
        """Predicted time (seconds, finite, > 0)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        ensemble = {name[len("tree_"):-1]: getattr(self, name) for name in _TREE_ARRAYS}
        log_t = np.log(self._roofline(X)) + predict_tree_ensemble(ensemble, _log_features(X))
        return np.exp(np.clip(log_t, math.log(MIN_SECONDS), _MAX_LOG_SECONDS))

    # -- persistence hooks -------------------------------------------------
    def _array_specs(self) -> dict[str, type]:
        specs: dict[str, type] = {"rate_": np.float64}
        for name in _TREE_ARRAYS:
            specs[name] = np.float64 if name in ("tree_threshold_", "tree_value_") else np.int64
        return specs

    def _params_to_json(self) -> dict[str, Any]:
        roof = RooflineRegressor(peaks=self.peaks)._params_to_json()
        tree = ShapeRegressor(self.n_estimators, self.min_samples_leaf,
                              self.random_state)._params_to_json()
        return {"peaks": roof["peaks"], "n_work": int(self.n_work), **tree}

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        roof = RooflineRegressor._check_params({"peaks": params["peaks"], "fit_overhead": True})
        tree = ShapeRegressor._check_params(
            {k: params[k] for k in ("n_estimators", "min_samples_leaf", "random_state")})
        n_work = _as_int(params["n_work"], "params.n_work")
        if n_work < 1 or (roof["peaks"] is not None and len(roof["peaks"]) != n_work):
            raise ValueError("params.n_work must be >= 1 and match the number of peaks")
        return {"peaks": roof["peaks"], "n_work": n_work, **tree}

    def _check_learned_state(self) -> None:
        n = self.n_features_in_
        if self.n_work > n:
            raise ValueError(f"n_work must be <= n_features_in_ = {n}")
        if self.rate_.shape != (self.n_work,) or not np.all(self.rate_ > 0):
            raise ValueError(f"rate_ must hold {self.n_work} values > 0")
        if self.overhead_s_ < 0:
            raise ValueError("overhead_s_ must be >= 0")
        _check_tree_state(self, n)


class EmbeddingLookupRegressor(_PlainDataRegressor):
    """The analytical embedding-lookup model (:mod:`perfmodel.fit.embedding_model`) times
    one fitted scale factor; predicts seconds.

    X columns are B, E, T, L, D. ``kind`` picks the model ("forward",
    "backward_sgd", "backward_rowwise_adagrad"); ``spec`` is the device's
    :class:`~perfmodel.device.spec.DeviceSpec`, whose constants the model reads. The
    scale (learned ``scale_``) is the geometric mean of measured / modelled time,
    so the model can be calibrated to a device it was not written for.
    """

    type_name: ClassVar[str] = "embedding_analytic"
    _scalar_attrs: ClassVar[tuple[str, ...]] = ("scale_",)

    def __init__(self, kind="forward", spec=None):
        self.kind = kind
        self.spec = spec

    def _model(self, X: np.ndarray) -> np.ndarray:
        from perfmodel.fit.embedding_model import MODELS, notebook_v100_spec

        if self.kind not in MODELS:
            raise ValueError(f"unknown kind {self.kind!r}: expected one of {sorted(MODELS)}")
        if X.shape[1] != 5:
            raise ValueError(f"X must have 5 columns (B, E, T, L, D), got shape {X.shape}")
        spec = self.spec if self.spec is not None else notebook_v100_spec()
        rows = np.maximum(np.rint(X), 1).astype(np.int64)
        return np.array([MODELS[self.kind](*map(int, row), spec) for row in rows])

    def fit(self, X, y):
        """Fit the scale factor to measured seconds ``y``; returns self."""
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        modelled = np.maximum(self._model(X), MIN_SECONDS)
        self.scale_ = float(np.exp(np.mean(np.log(np.maximum(y, MIN_SECONDS) / modelled))))
        return self

    def predict(self, X):
        """Predicted seconds (finite, > 0) per row of X."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return np.clip(self._model(X) * self.scale_, MIN_SECONDS, np.finfo(np.float64).max)

    # -- persistence hooks -------------------------------------------------
    def _array_specs(self) -> dict[str, type]:
        return {}

    def _params_to_json(self) -> dict[str, Any]:
        return {"kind": str(self.kind),
                "spec": None if self.spec is None else self.spec.to_dict()}

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from perfmodel.device.spec import DeviceSpec
        from perfmodel.fit.embedding_model import MODELS

        if params["kind"] not in MODELS:
            raise ValueError(f"params.kind must be one of {sorted(MODELS)}")
        spec = params["spec"]
        return {"kind": params["kind"],
                "spec": None if spec is None else DeviceSpec.from_dict(spec)}

    def _check_learned_state(self) -> None:
        if self.n_features_in_ != 5 or not self.scale_ > 0:
            raise ValueError("n_features_in_ must be 5 and scale_ > 0")


#: Predictor classes by their persisted ``type_name``; the only classes
#: ``load_predictor`` will construct.
PREDICTOR_TYPES: dict[str, type] = {
    RooflineRegressor.type_name: RooflineRegressor,
    ShapeRegressor.type_name: ShapeRegressor,
    EfficiencyRegressor.type_name: EfficiencyRegressor,
    EmbeddingLookupRegressor.type_name: EmbeddingLookupRegressor,
}


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def _predictor_paths(path_stem: Path | str) -> tuple[Path, Path]:
    """``<stem>.json`` and ``<stem>.npz`` (the stem may itself contain dots)."""
    return predictor_files(Path(path_stem))


def save_predictor(pred, path_stem: Path | str) -> tuple[Path, Path]:
    """Write a fitted predictor to ``<stem>.json`` and ``<stem>.npz`` (a compressed
    archive; :func:`load_predictor` reads compressed and uncompressed ones); return
    both paths."""
    if type(pred) not in PREDICTOR_TYPES.values():
        raise ValueError(f"cannot save {type(pred).__name__}: not in PREDICTOR_TYPES")
    meta, arrays = pred.get_state()
    json_path, npz_path = _predictor_paths(path_stem)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    npz_bytes = buffer.getvalue()
    document = {
        "format": _FILE_FORMAT,
        "version": _FILE_VERSION,
        "npz_sha256": hashlib.sha256(npz_bytes).hexdigest(),
        "state": meta,
    }
    text = json.dumps(document, allow_nan=False, indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(npz_path, npz_bytes)
    write_bytes_atomic(json_path, text.encode("utf-8"))
    return json_path, npz_path


def compress_predictor_files(path_stem: Path | str) -> tuple[int, int]:
    """Rewrite a predictor saved uncompressed (before compressed saves) with its
    arrays compressed, bit for bit the same, and the new checksum in its metadata;
    (bytes of ``<stem>.npz`` before, after). A compressed one is left as it is.
    ValueError naming the file when the pair does not load."""
    json_path, npz_path = _predictor_paths(path_stem)
    try:
        data = npz_path.read_bytes()
        document = json.loads(json_path.read_text(encoding="utf-8"),
                              parse_constant=_reject_json_constant)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            stored = [i for i in archive.infolist() if i.compress_type == zipfile.ZIP_STORED]
    except (OSError, ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{npz_path}: cannot read predictor files: {exc}") from exc
    if not stored:
        return len(data), len(data)
    if not isinstance(document, dict) or document.get("npz_sha256") != \
            hashlib.sha256(data).hexdigest():
        raise ValueError(f"{npz_path}: sha256 does not match {json_path}; left as it is")
    arrays = _read_npz_arrays(npz_path, data)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    packed = buffer.getvalue()
    document["npz_sha256"] = hashlib.sha256(packed).hexdigest()
    text = json.dumps(document, allow_nan=False, indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(npz_path, packed)
    write_bytes_atomic(json_path, text.encode("utf-8"))
    return len(data), len(packed)


def _reject_json_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _read_npz_arrays(npz_path: Path, data: bytes) -> dict[str, np.ndarray]:
    """Parse .npz bytes without pickle; ValueError naming ``npz_path`` otherwise."""
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with loaded:
            return {key: loaded[key] for key in loaded.files}
    except (ValueError, OSError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{npz_path}: cannot load predictor arrays: {exc}") from exc


def load_predictor(path_stem: Path | str):
    """Load a predictor written by ``save_predictor``; never executes file content.

    Raises ValueError naming the offending file on unreadable or malformed
    JSON, an unknown type_name, a non-npz or pickled/object array file, a
    .json/.npz pair from different saves, or an invalid state.
    """
    json_path, npz_path = _predictor_paths(path_stem)
    try:
        with open(json_path, encoding="utf-8") as handle:
            document = json.load(handle, parse_constant=_reject_json_constant)
    except OSError as exc:
        raise ValueError(f"{json_path}: cannot read predictor metadata: {exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{json_path}: not valid JSON: {exc}") from exc
    if (
        not isinstance(document, dict)
        or document.get("format") != _FILE_FORMAT
        or document.get("version") != _FILE_VERSION
        or not isinstance(document.get("npz_sha256"), str)
        or not isinstance(document.get("state"), dict)
    ):
        raise ValueError(
            f"{json_path}: not a {_FILE_FORMAT} version {_FILE_VERSION} file"
        )
    state = document["state"]
    type_name = state.get("type_name")
    if not isinstance(type_name, str) or type_name not in PREDICTOR_TYPES:
        raise ValueError(
            f"{json_path}: unknown predictor type {type_name!r}; "
            f"known types: {sorted(PREDICTOR_TYPES)}"
        )
    try:
        npz_bytes = npz_path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{npz_path}: cannot read predictor arrays: {exc}") from exc
    arrays = _read_npz_arrays(npz_path, npz_bytes)
    if hashlib.sha256(npz_bytes).hexdigest() != document["npz_sha256"]:
        raise ValueError(
            f"{npz_path}: sha256 does not match {json_path}; the files come from "
            "different saves"
        )
    try:
        return PREDICTOR_TYPES[type_name].from_state(state, arrays)
    except ValueError as exc:
        raise ValueError(f"{json_path}: invalid {type_name} predictor state: {exc}") from exc
