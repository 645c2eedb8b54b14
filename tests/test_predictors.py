"""Tests for perfmodel.fit.predictors: estimator contract, fits, properties, persistence."""

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from perfmodel.fit.comm_model import CommRegressor
from perfmodel.fit.metrics import gmae
from perfmodel.fit.predictors import (
    MIN_SECONDS,
    EfficiencyRegressor,
    EmbeddingLookupRegressor,
    PREDICTOR_TYPES,
    RooflineRegressor,
    ShapeRegressor,
    export_tree_ensemble,
    load_predictor,
    predict_tree_ensemble,
    save_predictor,
)

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow],
)

# Device-like peaks: fp32 FLOP/s, bf16 FLOP/s, memory B/s.
PEAKS = np.array([60e12, 400e12, 3e12])
PLANTED_EFFICIENCY = np.array([0.7, 0.55, 0.85])
PLANTED_OVERHEAD_S = 5e-6
GEMM_PEAK_FLOPS = 50e12
GEMM_OVERHEAD_S = 8e-6


def roofline_data(rng, n=300, noise=0.02, zero_column=None):
    """Rows that use fp32 or bf16 compute (or neither) plus memory traffic."""
    fp32 = rng.uniform(0, 1, n) ** 3 * 1e12 * rng.integers(0, 2, n)
    bf16 = rng.uniform(0, 1, n) ** 3 * 4e12 * rng.integers(0, 2, n)
    nbytes = 10 ** rng.uniform(5, 10, n)
    X = np.column_stack([fp32, bf16, nbytes])
    if zero_column is not None:
        X[:, zero_column] = 0.0
    t = np.max(X / (PLANTED_EFFICIENCY * PEAKS), axis=1) + PLANTED_OVERHEAD_S
    return X, t * np.exp(rng.normal(0, noise, n))


def gemm_times(dims):
    """Noise-free GEMM time (s): 2MNK FLOPs at a shape-dependent efficiency + overhead."""
    m, n, k = np.asarray(dims, dtype=np.float64).T
    efficiency = 0.8 * np.prod(np.minimum(1.0, np.asarray(dims) / 512.0) ** 0.3, axis=1)
    return 2 * m * n * k / (GEMM_PEAK_FLOPS * efficiency) + GEMM_OVERHEAD_S


def gemm_dims(rng, n):
    return np.round(2 ** rng.uniform(4, 12, (n, 3)))


@pytest.fixture(scope="module")
def roofline_fitted():
    X, y = roofline_data(np.random.default_rng(0))
    return RooflineRegressor(peaks=PEAKS).fit(X, y)


@pytest.fixture(scope="module")
def shape_fitted():
    rng = np.random.default_rng(1)
    dims = gemm_dims(rng, 1500)
    y = gemm_times(dims) * np.exp(rng.normal(0, 0.01, len(dims)))
    return ShapeRegressor(n_estimators=20).fit(dims, y)


# -- scikit-learn estimator contract ----------------------------------------

@parametrize_with_checks([RooflineRegressor(), ShapeRegressor(n_estimators=5),
                          EfficiencyRegressor(n_estimators=5)])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


def test_predictor_types_registry():
    assert PREDICTOR_TYPES == {"roofline": RooflineRegressor, "shape": ShapeRegressor,
                               "efficiency": EfficiencyRegressor,
                               "embedding_analytic": EmbeddingLookupRegressor,
                               "comm": CommRegressor}
    for name, cls in PREDICTOR_TYPES.items():
        assert cls.type_name == name


# -- RooflineRegressor -------------------------------------------------------

def test_roofline_recovers_planted_efficiencies(roofline_fitted):
    np.testing.assert_allclose(roofline_fitted.efficiency_, PLANTED_EFFICIENCY, rtol=0.03)
    np.testing.assert_allclose(roofline_fitted.rate_, roofline_fitted.efficiency_ * PEAKS)
    assert roofline_fitted.overhead_s_ == pytest.approx(PLANTED_OVERHEAD_S, rel=0.05)


def test_roofline_without_peaks_recovers_rates():
    X, y = roofline_data(np.random.default_rng(2))
    model = RooflineRegressor().fit(X, y)
    assert not hasattr(model, "efficiency_")
    np.testing.assert_allclose(model.rate_, PLANTED_EFFICIENCY * PEAKS, rtol=0.03)


def test_roofline_fit_without_overhead():
    rng = np.random.default_rng(3)
    X = 10 ** rng.uniform(6, 10, (100, 2))
    y = np.max(X / np.array([1e10, 2e11]), axis=1)
    model = RooflineRegressor(fit_overhead=False).fit(X, y)
    assert model.overhead_s_ == 0.0
    np.testing.assert_allclose(model.rate_, [1e10, 2e11], rtol=1e-6)


def test_roofline_all_zero_column_keeps_start_rate():
    rng = np.random.default_rng(4)
    X, y = roofline_data(rng, zero_column=1)
    model = RooflineRegressor(peaks=PEAKS).fit(X, y)
    assert model.efficiency_[1] == 1.0
    assert model.rate_[1] == PEAKS[1]
    np.testing.assert_allclose(model.efficiency_[[0, 2]], PLANTED_EFFICIENCY[[0, 2]], rtol=0.03)


@pytest.mark.parametrize("peaks", [[1.0, 2.0], [1.0, -2.0, 3.0], [1.0, np.nan, 3.0]])
def test_roofline_rejects_bad_peaks(peaks):
    X, y = roofline_data(np.random.default_rng(5), n=20)
    with pytest.raises(ValueError, match="peaks"):
        RooflineRegressor(peaks=peaks).fit(X, y)


work_rows = arrays(
    np.float64,
    st.tuples(st.integers(1, 12), st.integers(1, 3)),
    elements=st.floats(0, 1e15, allow_nan=False, allow_infinity=False),
)


@DETERMINISTIC
@given(
    X=work_rows,
    y_raw=st.lists(st.floats(1e-7, 10.0), min_size=12, max_size=12),
    fit_overhead=st.booleans(),
    data=st.data(),
)
def test_roofline_predictions_positive_and_monotone(X, y_raw, fit_overhead, data):
    y = np.array(y_raw[: X.shape[0]])
    model = RooflineRegressor(fit_overhead=fit_overhead).fit(X, y)
    query = data.draw(
        arrays(
            np.float64,
            (4, X.shape[1]),
            elements=st.floats(0, 1e300, allow_nan=False, allow_infinity=False),
        )
    )
    pred = model.predict(query)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)
    column = data.draw(st.integers(0, X.shape[1] - 1))
    extra = data.draw(st.floats(0, 1e15, allow_nan=False, allow_infinity=False))
    more = query.copy()
    more[:, column] += extra
    assert np.all(model.predict(more) >= pred)


# -- ShapeRegressor ----------------------------------------------------------

def test_shape_regressor_heldout_gmae(shape_fitted):
    dims = gemm_dims(np.random.default_rng(6), 500)
    assert gmae(shape_fitted.predict(dims), gemm_times(dims)) < 0.05


def test_shape_regressor_keeps_only_plain_data(shape_fitted):
    for name, value in vars(shape_fitted).items():
        assert isinstance(value, (int, float, type(None), np.ndarray)), name
        if isinstance(value, np.ndarray):
            assert value.dtype in (np.float64, np.int64), name


def test_exported_trees_match_sklearn_forest():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 4)) * [1.0, 10.0, 1e3, 0.01]
    y = np.sin(X[:, 0]) + X[:, 1] * 0.1 + rng.normal(0, 0.1, 400)
    forest = ExtraTreesRegressor(n_estimators=7, min_samples_leaf=2, random_state=0).fit(X, y)
    exported = export_tree_ensemble(forest)
    assert set(exported) == {
        "node_offsets", "children_left", "children_right", "feature", "threshold", "value",
    }
    # Include the exact thresholds: float32 rounding must match sklearn's.
    query = np.vstack([rng.normal(size=(300, 4)) * [1.0, 10.0, 1e3, 0.01], X])
    np.testing.assert_allclose(
        predict_tree_ensemble(exported, query), forest.predict(query), rtol=1e-12, atol=1e-12
    )


def test_shape_regressor_traversal_matches_its_sklearn_forest(shape_fitted):
    rng = np.random.default_rng(1)
    dims = gemm_dims(rng, 1500)
    y = gemm_times(dims) * np.exp(rng.normal(0, 0.01, len(dims)))
    features = np.log2(1.0 + dims)
    linear = features @ shape_fitted.coef_ + shape_fitted.intercept_
    forest = ExtraTreesRegressor(n_estimators=20, min_samples_leaf=2, random_state=0)
    forest.fit(features, np.log(y) - linear)
    query = gemm_dims(np.random.default_rng(8), 200)
    expected = np.exp(np.log2(1.0 + query) @ shape_fitted.coef_ + shape_fitted.intercept_
                      + forest.predict(np.log2(1.0 + query)))
    np.testing.assert_allclose(shape_fitted.predict(query), expected, rtol=1e-10)


@DETERMINISTIC
@given(
    X=arrays(
        np.float64,
        st.tuples(st.integers(1, 15), st.integers(1, 3)),
        elements=st.floats(0, 1e12, allow_nan=False, allow_infinity=False),
    ),
    data=st.data(),
)
def test_shape_regressor_predictions_finite_and_positive(X, data):
    y = data.draw(arrays(np.float64, X.shape[0], elements=st.floats(1e-7, 10.0)))
    model = ShapeRegressor(n_estimators=3).fit(X, y)
    query = data.draw(
        arrays(
            np.float64,
            (5, X.shape[1]),
            elements=st.floats(0, 1e300, allow_nan=False, allow_infinity=False),
        )
    )
    pred = model.predict(query)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)


gemm_dim = st.integers(16, 4096)


@DETERMINISTIC
@given(m=gemm_dim, n=gemm_dim, k=gemm_dim)
def test_shape_regressor_grows_with_problem_size(shape_fitted, m, n, k):
    # 4x along every dimension is 64x the FLOPs: physics says slower, and the
    # change is large against the trees' piecewise-constant residual error, so
    # no tolerance is needed. (A 2x step can dip by a few % where the fixed
    # overhead dominates and the true time barely moves.)
    small = np.array([[m, n, k]], dtype=np.float64)
    assert shape_fitted.predict(4 * small)[0] >= shape_fitted.predict(small)[0]


# -- persistence -------------------------------------------------------------

def _roundtrip(model, tmp_path, stem="gemm.fp32"):
    json_path, npz_path = save_predictor(model, tmp_path / stem)
    assert json_path == tmp_path / f"{stem}.json" and npz_path == tmp_path / f"{stem}.npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stem}.json", f"{stem}.npz"]
    return load_predictor(tmp_path / stem)


@pytest.mark.parametrize("which", ["roofline_peaks", "roofline", "shape"])
def test_save_load_roundtrip_gives_identical_predictions(which, roofline_fitted, shape_fitted, tmp_path):
    rng = np.random.default_rng(9)
    if which == "roofline_peaks":
        model, query = roofline_fitted, roofline_data(rng, 50)[0]
    elif which == "roofline":
        X, y = roofline_data(rng)
        model, query = RooflineRegressor(fit_overhead=False).fit(X, y), X
    else:
        model, query = shape_fitted, gemm_dims(rng, 50)
    loaded = _roundtrip(model, tmp_path)
    assert type(loaded) is type(model)
    np.testing.assert_array_equal(loaded.predict(query), model.predict(query))
    meta, arrays_ = model.get_state()
    loaded_meta, loaded_arrays = loaded.get_state()
    assert json.loads(json.dumps(meta)) == meta == loaded_meta
    assert arrays_.keys() == loaded_arrays.keys()
    for name, array in arrays_.items():
        assert array.dtype in (np.float64, np.int64)
        np.testing.assert_array_equal(loaded_arrays[name], array)


def test_roundtrip_keeps_feature_names(tmp_path):
    pd = pytest.importorskip("pandas")
    X, y = roofline_data(np.random.default_rng(10), 50)
    frame = pd.DataFrame(X, columns=["flops_fp32", "flops_bf16", "bytes"])
    model = RooflineRegressor().fit(frame, y)
    loaded = _roundtrip(model, tmp_path, stem="named")
    assert list(loaded.feature_names_in_) == ["flops_fp32", "flops_bf16", "bytes"]
    np.testing.assert_array_equal(loaded.predict(frame), model.predict(frame))


def test_get_state_requires_fit():
    with pytest.raises(NotFittedError):
        ShapeRegressor().get_state()


def test_save_rejects_unregistered_objects(tmp_path):
    with pytest.raises(ValueError, match="PREDICTOR_TYPES"):
        save_predictor(ExtraTreesRegressor(), tmp_path / "x")


class _MarkerPayload:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickle_is_refused_and_never_executed(roofline_fitted, tmp_path):
    payload = pickle.dumps(_MarkerPayload(tmp_path / "control"))
    pickle.loads(payload).close()  # control: the payload is live under pickle
    assert (tmp_path / "control").exists()

    marker = tmp_path / "pwned"
    save_predictor(roofline_fitted, tmp_path / "p")
    (tmp_path / "p.npz").write_bytes(pickle.dumps(_MarkerPayload(marker)))
    with pytest.raises(ValueError, match="p\\.npz"):
        load_predictor(tmp_path / "p")
    assert not marker.exists()


def test_object_array_is_refused(roofline_fitted, tmp_path):
    marker = tmp_path / "pwned"
    save_predictor(roofline_fitted, tmp_path / "p")
    np.savez(
        tmp_path / "p.npz",
        rate_=np.array([_MarkerPayload(marker), 1.0, 2.0], dtype=object),
        efficiency_=np.ones(3),
    )
    with pytest.raises(ValueError, match="p\\.npz.*[Oo]bject arrays"):
        load_predictor(tmp_path / "p")
    assert not marker.exists()


def test_unknown_type_name_is_refused(roofline_fitted, tmp_path):
    save_predictor(roofline_fitted, tmp_path / "p")
    document = json.loads((tmp_path / "p.json").read_text())
    document["state"]["type_name"] = "os.system"
    (tmp_path / "p.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="p\\.json.*unknown predictor type 'os.system'"):
        load_predictor(tmp_path / "p")


def test_truncated_json_is_refused(shape_fitted, tmp_path):
    save_predictor(shape_fitted, tmp_path / "p")
    text = (tmp_path / "p.json").read_text()
    (tmp_path / "p.json").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="p\\.json.*not valid JSON"):
        load_predictor(tmp_path / "p")


def test_missing_files_are_reported(roofline_fitted, tmp_path):
    with pytest.raises(ValueError, match="absent\\.json"):
        load_predictor(tmp_path / "absent")
    save_predictor(roofline_fitted, tmp_path / "p")
    (tmp_path / "p.npz").unlink()
    with pytest.raises(ValueError, match="p\\.npz"):
        load_predictor(tmp_path / "p")


def test_arrays_from_another_save_are_refused(tmp_path):
    rng = np.random.default_rng(11)
    X, y = roofline_data(rng)
    save_predictor(RooflineRegressor().fit(X, y), tmp_path / "a")
    save_predictor(RooflineRegressor().fit(X, 2 * y), tmp_path / "b")
    (tmp_path / "b.npz").replace(tmp_path / "a.npz")
    with pytest.raises(ValueError, match="a\\.npz.*sha256"):
        load_predictor(tmp_path / "a")


def _bool_feature_count(meta, arrays_):
    meta["n_features_in_"] = True


def _backward_child(meta, arrays_):
    internal = np.flatnonzero(arrays_["tree_children_left_"] >= 0)
    arrays_["tree_children_left_"][internal[-1]] = 0  # a cycle back to the root


TAMPERINGS = {
    "wrong type_name": lambda m, a: m.update(type_name="roofline"),
    "extra key": lambda m, a: m.update(code="print(1)"),
    "n_estimators as string": lambda m, a: m["params"].update(n_estimators="20"),
    "bool n_features_in_": _bool_feature_count,
    "NaN intercept": lambda m, a: m.update(intercept_=float("nan")),
    "NaN coefficient": lambda m, a: a["coef_"].__setitem__(0, np.nan),
    "float32 coefficients": lambda m, a: a.update(coef_=a["coef_"].astype(np.float32)),
    "2-D coefficients": lambda m, a: a.update(coef_=a["coef_"][None, :]),
    "missing array": lambda m, a: a.pop("tree_value_"),
    "cycle in a tree": _backward_child,
    "feature out of range": lambda m, a: a["tree_feature_"].__setitem__(0, 99),
    "wrong tree count": lambda m, a: m["params"].update(n_estimators=3),
}


@pytest.mark.parametrize("tampering", TAMPERINGS, ids=list(TAMPERINGS))
def test_from_state_rejects_invalid_state(shape_fitted, tampering):
    meta, arrays_ = shape_fitted.get_state()
    ShapeRegressor.from_state(meta, arrays_)  # untouched state is fine
    TAMPERINGS[tampering](meta, arrays_)
    with pytest.raises(ValueError):
        ShapeRegressor.from_state(meta, arrays_)


@pytest.mark.parametrize(
    "tampering",
    [
        lambda m, a: a["efficiency_"].__setitem__(0, 2.0),
        lambda m, a: a["rate_"].__setitem__(0, -1.0),
        lambda m, a: m.update(overhead_s_=-1e-6),
        lambda m, a: m["params"].update(peaks=[1.0, 2.0, 3.0]),
        lambda m, a: m["params"].update(fit_overhead="yes"),
    ],
)
def test_roofline_from_state_rejects_invalid_state(roofline_fitted, tampering):
    meta, arrays_ = roofline_fitted.get_state()
    RooflineRegressor.from_state(meta, arrays_)
    tampering(meta, arrays_)
    with pytest.raises(ValueError):
        RooflineRegressor.from_state(meta, arrays_)


def test_min_seconds_floor_applies_to_nonpositive_targets():
    X = np.array([[1.0], [2.0], [3.0], [4.0]])
    model = RooflineRegressor().fit(X, np.array([-1.0, 0.0, -2.0, 0.0]))
    assert np.all(model.predict(X) >= MIN_SECONDS)
    assert np.all(np.isfinite(model.predict(X)))


def test_efficiency_regressor_roundtrip_and_bounded_extrapolation(tmp_path):
    rng = np.random.default_rng(3)
    mnk = rng.integers(16, 512, size=(200, 3)).astype(float)
    flops = 2 * mnk.prod(axis=1)
    moved = 4 * (mnk[:, 0] * mnk[:, 2] + mnk[:, 2] * mnk[:, 1] + mnk[:, 0] * mnk[:, 1])
    # efficiency falls for small M: a shape effect the trees must learn
    y = 5e-6 + flops / (1e11 * (mnk[:, 0] / (mnk[:, 0] + 64)))
    X = np.column_stack([flops, moved, mnk])
    model = EfficiencyRegressor(peaks=[2e11, 5e10], n_work=2, n_estimators=20).fit(X[:150], y[:150])
    assert gmae(model.predict(X[150:]), y[150:]) < 0.08
    save_predictor(model, tmp_path / "eff")
    loaded = load_predictor(tmp_path / "eff")
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # Far outside the measured shapes the correction stays bounded: 64x the work
    # predicts between 16x and 256x the time.
    big = X[:5].copy()
    big[:, :2] *= 64
    big[:, 2:] *= 4
    ratio = model.predict(big) / model.predict(X[:5])
    assert np.all((ratio > 16) & (ratio < 256))
