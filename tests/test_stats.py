"""Multi-run statistics: the numbers, the pass/fail bound, and the runs they need."""

import math
import statistics

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from perfmodel.report.stats import ItemStats, multi_run_stats, spread_bound

values = st.lists(st.floats(1e-6, 1e3, allow_nan=False), min_size=2, max_size=12)
errors = st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=2, max_size=12)
qs = st.floats(0.5, 0.99)


@given(values, qs)
def test_mean_sd_and_bound(xs, q):
    s = ItemStats("x", tuple(xs), baseline=xs[0], relative=True, q=q)
    assert s.mean == pytest.approx(statistics.fmean(xs))
    assert s.sd == pytest.approx(statistics.stdev(xs), abs=1e-12)
    assert s.sd_rel == pytest.approx(s.sd / abs(s.mean), abs=1e-12)
    # The bound grows with the coverage asked for and is proportional to the sd.
    assert 0 <= spread_bound(xs, 0.5) <= spread_bound(xs, q) + 1e-12
    assert spread_bound(xs, q, relative=True) == pytest.approx(
        spread_bound(xs, q) / abs(s.mean), rel=1e-9, abs=1e-12)


@given(values, st.floats(1e-6, 1e3), st.floats(1e-3, 1e3), qs)
def test_relative_items_do_not_depend_on_the_unit(xs, baseline, scale, q):
    a = ItemStats("x", tuple(xs), baseline, relative=True, q=q)
    b = ItemStats("x", tuple(x * scale for x in xs), baseline * scale, relative=True, q=q)
    assert b.diff == pytest.approx(a.diff, rel=1e-6, abs=1e-9)
    assert b.bound == pytest.approx(a.bound, rel=1e-6, abs=1e-9)
    assume(not math.isclose(abs(a.diff), a.bound, rel_tol=1e-6, abs_tol=1e-9))
    assert a.verdict == b.verdict


@given(errors, st.floats(-1.0, 1.0), qs)
def test_absolute_items_do_not_depend_on_a_shift(xs, shift, q):
    a = ItemStats("x", tuple(xs), 0.0, q=q)
    b = ItemStats("x", tuple(x + shift for x in xs), shift, q=q)
    assert b.diff == pytest.approx(a.diff, abs=1e-9)
    assert b.bound == pytest.approx(a.bound, abs=1e-9)


@given(errors, qs)
def test_a_baseline_at_the_mean_passes_and_one_beyond_the_bound_fails(xs, q):
    mean = statistics.fmean(xs)
    assert ItemStats("x", tuple(xs), mean, q=q).verdict == "ok"
    far = mean + spread_bound(xs, q) * 1.01 + 1e-6
    assert ItemStats("x", tuple(xs), far, q=q).verdict == "FAIL"
    assert ItemStats("x", tuple(xs), None, q=q).verdict == "-"


@pytest.mark.parametrize("n", [3, 5, 10])
def test_false_alarm_rate_is_one_minus_q_for_unchanged_normal_runs(n):
    """Runs and baseline from one distribution: about 5% of items fail at q = 0.95."""
    rng = np.random.default_rng(n)
    trials = 2000
    runs, baselines = rng.normal(1.0, 0.1, (trials, n)), rng.normal(1.0, 0.1, trials)
    failed = sum(ItemStats("x", tuple(r), b, relative=True).verdict == "FAIL"
                 for r, b in zip(runs, baselines))
    assert 0.03 < failed / trials < 0.07


def _e2e(run, workload, measured, predicted, profile="quick"):
    return {"kind": "e2e", "run_id": run, "profile": profile, "workload": workload,
            "measured_s": measured, "predicted_s": predicted, "error": 0.0, "env": {}}


def _meas(run, median, profile="quick"):
    return {"kind": "measurement", "run_id": run, "profile": profile, "op": "addmm",
            "direction": "forward", "dtype": "float32", "config": {"M": 8}, "replicate": 0,
            "measurement": {"median_s": median}, "env": {}}


def test_runs_are_counted_per_profile_and_too_few_is_a_clear_error(tmp_path):
    records = [_e2e("r1", "mlp", 0.1, 0.11), _e2e("r2", "mlp", 0.1, 0.12),
               _e2e("r3", "mlp", 0.1, 0.1, profile="smoke")]
    with pytest.raises(ValueError, match=f"stats needs at least 3 runs of profile quick, "
                                         f"found 2 under {tmp_path}"):
        multi_run_stats(records, "quick", tmp_path)


def test_e2e_against_baseline_and_ops_against_a_reference_run(tmp_path):
    records = []
    for i, (measured, predicted) in enumerate([(0.10, 0.11), (0.10, 0.12), (0.10, 0.10),
                                               (0.10, 0.11)]):
        run = f"r{i}"
        median = 1e-3 if i == 0 else 2e-3 * (1 + i / 100)
        records += [_e2e(run, "mlp", measured, predicted), _meas(run, median),
                    _meas(run, median)]  # replicates: one value per run
    records.append(_e2e("r1", "mlp", 0.1, 0.5) | {"bias": {"linear": 5.0}})  # planted: ignored
    report = multi_run_stats(records, "quick", tmp_path, baseline_errors={"mlp": 0.10})
    (err,) = report.e2e_errors
    assert err.values == pytest.approx((0.1, 0.2, 0.0, 0.1)) and err.diff == pytest.approx(0.0)
    assert err.verdict == "ok" and report.ops[0].verdict == "-"
    report = multi_run_stats(records, "quick", tmp_path, reference_run="r0", last=3)
    assert report.op_runs == ["r1", "r2", "r3"]
    (op,) = report.ops
    assert op.diff == pytest.approx(statistics.fmean([2.02, 2.04, 2.06]) - 1)
    assert op.verdict == "FAIL"  # twice the reference, far beyond the runs' spread
    with pytest.raises(ValueError, match="reference run nope holds no records"):
        multi_run_stats(records, "quick", tmp_path, reference_run="nope")
