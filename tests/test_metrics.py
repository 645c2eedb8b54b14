"""Tests for perfmodel.fit.metrics: definitions, known values, input validation."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.fit.metrics import GMAE_EPSILON, gmae, mape, max_abs_rel_error, noise_floor

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)

times_s = st.floats(min_value=1e-9, max_value=1e3, allow_nan=False, allow_infinity=False)


def test_epsilon_is_the_seed_constant():
    assert GMAE_EPSILON == 4e-4


def test_gmae_of_identical_arrays_is_epsilon():
    meas = np.array([1e-6, 3e-3, 2.5, 70.0])
    assert gmae(meas, meas) == pytest.approx(GMAE_EPSILON, rel=1e-12)
    assert noise_floor(meas, meas) == pytest.approx(GMAE_EPSILON, rel=1e-12)
    assert mape(meas, meas) == 0.0
    assert max_abs_rel_error(meas, meas) == 0.0


def test_known_values():
    # Relative errors 0.1 and 0.1.
    assert gmae([1.1, 0.9], [1.0, 1.0]) == pytest.approx(0.1 + GMAE_EPSILON, rel=1e-12)
    # Relative errors 1.0 and 0.0: geometric mean of 1.0004 and 4e-4.
    expected = math.sqrt((1.0 + GMAE_EPSILON) * GMAE_EPSILON)
    assert gmae([2.0, 1.0], [1.0, 1.0]) == pytest.approx(expected, rel=1e-12)
    assert mape([2.0, 1.0], [1.0, 1.0]) == pytest.approx(0.5)
    assert max_abs_rel_error([2.0, 1.0, 0.25], [1.0, 1.0, 1.0]) == pytest.approx(1.0)
    # The reference is meas, not pred: 0.5 vs 1.0 is a 50 % error, 1.0 vs 0.5 is 100 %.
    assert mape([0.5], [1.0]) == pytest.approx(0.5)
    assert mape([1.0], [0.5]) == pytest.approx(1.0)


def test_noise_floor_averages_both_references():
    a = np.array([1.0, 2.0, 4.0])
    b = np.array([1.1, 1.8, 4.0])
    expected = 0.5 * (gmae(a, b) + gmae(b, a))
    assert noise_floor(a, b) == pytest.approx(expected, rel=1e-12)
    assert noise_floor(b, a) == pytest.approx(noise_floor(a, b), rel=1e-12)
    assert gmae(a, b) != pytest.approx(gmae(b, a), rel=1e-6)


@pytest.mark.parametrize("metric", [gmae, mape, max_abs_rel_error, noise_floor])
@pytest.mark.parametrize(
    ("pred", "meas", "message"),
    [
        ([1.0, 2.0], [1.0], "same shape"),
        ([], [], "empty"),
        ([1.0], [0.0], "positive"),
        ([1.0], [-1.0], "positive"),
        ([np.nan], [1.0], "NaN"),
        ([1.0], [np.inf], "NaN or infinite"),
        (["fast"], [1.0], "numeric"),
    ],
)
def test_bad_input_raises_value_error(metric, pred, meas, message):
    with pytest.raises(ValueError, match=message):
        metric(pred, meas)


def test_noise_floor_requires_both_runs_positive():
    with pytest.raises(ValueError, match="positive"):
        noise_floor([0.0, 1.0], [1.0, 1.0])


@DETERMINISTIC
@given(
    st.lists(st.tuples(times_s, times_s), min_size=1, max_size=30),
    st.randoms(use_true_random=False),
)
def test_gmae_bounds_and_permutation_invariance(pairs, rnd):
    pred = np.array([p for p, _ in pairs])
    meas = np.array([m for _, m in pairs])
    value = gmae(pred, meas)
    assert value >= GMAE_EPSILON * (1 - 1e-12)
    # Geometric mean <= arithmetic mean <= max.
    assert value <= (mape(pred, meas) + GMAE_EPSILON) * (1 + 1e-9)
    assert mape(pred, meas) <= max_abs_rel_error(pred, meas) * (1 + 1e-12)
    order = list(range(len(pairs)))
    rnd.shuffle(order)
    assert gmae(pred[order], meas[order]) == pytest.approx(value, rel=1e-12)
    assert noise_floor(pred, meas) == pytest.approx(noise_floor(meas, pred), rel=1e-12)
