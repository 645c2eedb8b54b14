"""Gate logic: baseline entries and files, verdicts under a noise-aware policy, warnings."""

import json
import math
import statistics

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.gate.baseline import (BASELINE_SCHEMA, Baseline, BaselineEntry, GatePolicy, check_errors,
                            error_fails, held_out_runs, load_baseline, overhead_check,
                            save_baseline, spread_bound)

DETERMINISTIC = settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
ENV = {"torch": "2.13.0+cpu", "fbgemm": "1.8.0", "python": "3.11.9", "commit": "abc",
       "threads": 2}


def entry(*errors):
    return BaselineEntry.from_errors(errors)


def baseline(**entries):
    return Baseline("cpu-x", dict(entries), dict(ENV))


def by_name(report):
    return {v.workload: v for v in report.verdicts}


# -- BaselineEntry -----------------------------------------------------------------------
def test_entry_from_errors_is_mean_and_sample_sd():
    e = entry(0.02, 0.04, 0.06)
    assert e.n == 3 and e.errors == (0.02, 0.04, 0.06)
    assert e.mean == pytest.approx(0.04)
    assert e.spread == pytest.approx(0.02)  # sample sd (n - 1), not population sd 0.0163


def test_entry_of_one_run_has_zero_spread():
    assert entry(0.05) == BaselineEntry(0.05, 0.0, 1, (0.05,))


def test_noise_floor_is_the_mean_deviation_of_measured_times_from_their_median():
    # measured = predicted / (1 + error): 100, 80 and 125 ms around a median of 100 ms
    e = BaselineEntry.from_errors([0.0, 0.25, -0.2], predicted_s=[0.1, 0.1, 0.1])
    assert e.measured_s == pytest.approx((0.1, 0.08, 0.125))
    assert e.noise_floor == pytest.approx((0 + 0.02 / 0.08 + 0.025 / 0.125) / 3)  # 15%


def test_noise_floor_needs_two_runs_with_predictions():
    assert entry(0.01, 0.02).noise_floor is None  # no predicted times recorded
    assert BaselineEntry.from_errors([0.1], predicted_s=[0.2]).noise_floor is None


@given(st.lists(st.floats(0.001, 10), min_size=2, max_size=12),
       st.lists(st.floats(-0.9, 3), min_size=12, max_size=12), st.floats(0.01, 100))
@DETERMINISTIC
def test_noise_floor_is_scale_free_and_zero_only_for_equal_measurements(predicted, errors,
                                                                        scale):
    errors = errors[:len(predicted)]
    e = BaselineEntry.from_errors(errors, predicted_s=predicted)
    scaled = BaselineEntry.from_errors(errors, predicted_s=[p * scale for p in predicted])
    assert e.noise_floor >= 0
    assert scaled.noise_floor == pytest.approx(e.noise_floor, rel=1e-9, abs=1e-12)
    constant = BaselineEntry.from_errors(errors, predicted_s=[1 + err for err in errors])
    assert constant.noise_floor == pytest.approx(0, abs=1e-12)  # every run measured 1 s


@pytest.mark.parametrize("errors", [(), (0.1, float("nan")), (float("inf"),), ("0.1",),
                                    (True,)])
def test_entry_rejects_empty_and_bad_errors(errors):
    with pytest.raises(ValueError):
        BaselineEntry.from_errors(errors)


# -- verdicts ----------------------------------------------------------------------------
def test_k_times_spread_sets_the_allowed_error():
    base = baseline(a=BaselineEntry(0.032, 0.004, 5, (0.032,) * 5))  # spread planted
    # allowed = 3.20% + 3 x 0.40% = 4.40% (the spread as measured)
    policy = GatePolicy(k=3.0, min_margin=0.01, spread_confidence=0)
    ok = by_name(check_errors({"a": 0.0439}, base, policy))["a"]
    bad = by_name(check_errors({"a": 0.091}, base, policy))["a"]
    assert ok.status == "ok" and not ok.failed and ok.allowed == pytest.approx(0.044)
    assert bad.status == "regressed" and bad.failed
    assert bad.line() == ("FAIL a: E2E error +9.10% outside baseline +3.20% ± 3.0×spread 0.40% "
                          "(allowed |error| ≤ 4.40%)")
    assert ok.line().startswith("ok   a: E2E error +4.39% within baseline +3.20%")


def test_the_spread_of_few_runs_is_taken_at_its_upper_bound():
    """Five runs' sample spread is often far below the true one: at 95% one-sided
    confidence the true one is up to 2.37 times it, and the gate allows k times that."""
    base = baseline(a=BaselineEntry(0.032, 0.004, 5, (0.032,) * 5))
    policy = GatePolicy(k=3.0, min_margin=0.01)  # spread_confidence 0.95 by default
    assert policy.bound(5) == pytest.approx(2.3724, abs=1e-4)
    allowed = 0.032 + 3 * 0.004 * policy.bound(5)
    ok = by_name(check_errors({"a": allowed * 0.999}, base, policy))["a"]
    bad = by_name(check_errors({"a": allowed * 1.001}, base, policy))["a"]
    assert not ok.failed and ok.allowed == pytest.approx(allowed) and bad.failed
    assert "± 3.0×spread 0.40%×2.37 (5 runs) (allowed |error| ≤ 6.05%)" in bad.line()
    many = baseline(a=BaselineEntry(0.032, 0.004, 40, (0.032,) * 40))
    assert by_name(check_errors({"a": 0.05}, many, policy))["a"].failed  # 40 runs: x1.23


def test_spread_bound_falls_to_one_with_the_number_of_runs():
    values = [spread_bound(n) for n in range(2, 200)]
    assert values == sorted(values, reverse=True) and values[-1] > 1
    assert spread_bound(5) == pytest.approx(2.3724, abs=1e-4)
    assert spread_bound(20) == pytest.approx(1.3704, abs=1e-4)
    assert spread_bound(5, 0.5) == pytest.approx(1.0916, abs=1e-4)
    assert spread_bound(1) == spread_bound(5, 0.0) == 1.0
    with pytest.raises(ValueError, match="spread_confidence"):
        GatePolicy(spread_confidence=1.0)


def test_errors_are_signed_and_judged_by_magnitude():
    """A workload predicted close to its time has errors of both signs: their spread,
    not the spread of their magnitudes, is its noise."""
    e = entry(-0.05, 0.03, -0.02, 0.04)
    assert e.mean == pytest.approx(0.0) and e.spread == pytest.approx(0.0424, rel=1e-2)
    policy = GatePolicy(k=3.0, spread_confidence=0)
    assert not check_errors({"a": -0.12}, baseline(a=e), policy).failed
    assert check_errors({"a": -0.13}, baseline(a=e), policy).failed
    under = baseline(a=entry(-0.20, -0.22, -0.18))  # mean -20%, spread 2%
    assert not check_errors({"a": -0.25}, under, policy).failed
    assert check_errors({"a": +0.27}, under, policy).failed  # magnitude over 26%


def test_min_margin_floors_a_quiet_baseline():
    base = baseline(a=entry(0.05, 0.05, 0.05))  # spread 0: k x spread would allow nothing
    policy = GatePolicy(k=3.0, min_margin=0.01)
    assert by_name(check_errors({"a": 0.0599}, base, policy))["a"].status == "ok"
    bad = by_name(check_errors({"a": 0.061}, base, policy))["a"]
    assert bad.status == "regressed"
    assert bad.line() == ("FAIL a: E2E error +6.10% outside baseline +5.00% ± minimum margin "
                          "1.00% (allowed |error| ≤ 6.00%)")


def test_larger_k_allows_more():
    base = baseline(a=BaselineEntry(0.05, 0.01, 5, (0.05,) * 5))
    error = {"a": 0.075}
    assert check_errors(error, base, GatePolicy(k=2.0, spread_confidence=0)).failed
    assert not check_errors(error, base, GatePolicy(k=3.0, spread_confidence=0)).failed
    assert "2.5×spread 1.00%" in check_errors(error, base, GatePolicy(
        k=2.5, spread_confidence=0)).verdicts[0].line()


def test_ceiling_fails_even_within_the_baseline_and_without_one():
    base = baseline(a=BaselineEntry(0.30, 0.05, 5, (0.30,) * 5))
    policy = GatePolicy(ceilings={"a": 0.25, "b": 0.10})
    report = check_errors({"a": 0.31, "b": 0.12, "c": 0.5}, base, policy)
    v = by_name(report)
    assert v["a"].status == "over_ceiling"  # within mean + 3 x spread, but over the cap
    assert v["b"].status == "over_ceiling"  # no baseline entry at all
    assert v["c"].status == "new" and not v["c"].failed
    assert report.failed
    assert v["b"].line() == ("FAIL b: E2E error +12.00% exceeds the ceiling 10.00% set in "
                             "pyproject.toml")
    assert check_errors({"b": -0.12}, base, policy).failed  # the magnitude counts


def test_error_at_the_ceiling_passes():
    report = check_errors({"b": 0.10}, baseline(), GatePolicy(ceilings={"b": 0.10}))
    assert report.verdicts[0].status == "new" and not report.failed


def test_new_workload_does_not_fail():
    report = check_errors({"z": 0.2}, baseline(a=entry(0.01)), GatePolicy())
    assert [v.status for v in report.verdicts] == ["new"] and not report.failed
    assert report.verdicts[0].line().startswith("NEW  z: E2E error +20.00%")


def test_missing_fails_only_when_expected():
    base = baseline(a=entry(0.01), b=entry(0.02), c=entry(0.03))
    report = check_errors({"a": 0.01}, base, GatePolicy(), expected=["a", "b", "x"])
    v = by_name(report)
    assert set(v) == {"a", "b"}  # c was not expected (deselected); x has no baseline entry
    assert v["b"].status == "missing" and report.failed
    assert v["b"].line() == "FAIL b: in the baseline but produced no E2E result"
    assert not check_errors({"a": 0.01}, base, GatePolicy(), expected=["a"]).failed


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.1"])
def test_invalid_error_fails_rather_than_passing(bad):
    report = check_errors({"a": bad}, baseline(a=entry(0.05)), GatePolicy())
    assert report.verdicts[0].status == "invalid" and report.failed
    assert report.verdicts[0].line().startswith("FAIL a:")


def test_verdicts_sorted_and_lines_put_warnings_first():
    base = baseline(b=entry(0.01), a=entry(0.01))
    report = check_errors({"b": 0.01}, base, GatePolicy(), expected=["a", "b"],
                          device_key="cpu-y")
    assert [v.workload for v in report.verdicts] == ["a", "b"]
    lines = report.lines()
    assert lines[0].startswith("WARN") and lines[1].startswith("FAIL a:")


def test_warnings_name_device_and_changed_versions():
    env = {**ENV, "torch": "2.14.0", "python": None, "commit": "def", "threads": 8}
    report = check_errors({}, baseline(), GatePolicy(), device_key="cuda-h200", env=env)
    assert len(report.warnings) == 3 and all(w.startswith("WARN ") for w in report.warnings)
    device, torch, python = report.warnings
    assert "'cpu-x'" in device and "'cuda-h200'" in device
    assert "torch" in torch and "2.13.0+cpu" in torch and "2.14.0" in torch
    assert "python" in python and "3.11.9" in python and "not recorded" in python
    assert not report.failed  # warnings never fail the gate


def test_no_warnings_when_same_or_not_given():
    assert check_errors({}, baseline(), GatePolicy()).warnings == []
    same = {**ENV, "commit": "other", "threads": 1}  # commit and threads do not warn
    assert check_errors({}, baseline(), GatePolicy(), device_key="cpu-x", env=same).warnings == []


@pytest.mark.parametrize("kwargs", [{"k": 0}, {"k": -1.0}, {"k": float("nan")},
                                    {"min_margin": -0.01}, {"ceilings": {"a": 0}},
                                    {"ceilings": {"a": "0.1"}}])
def test_bad_policy_is_rejected(kwargs):
    with pytest.raises(ValueError):
        GatePolicy(**kwargs)


# -- the property ------------------------------------------------------------------------
errors_lists = st.lists(st.floats(min_value=-1, max_value=5, allow_nan=False), min_size=1,
                        max_size=10)
policies = st.builds(GatePolicy, k=st.floats(min_value=0.1, max_value=10),
                     min_margin=st.floats(min_value=0, max_value=0.2),
                     spread_confidence=st.sampled_from([0.0, 0.5, 0.95]))


@DETERMINISTIC
@given(errors=errors_lists, policy=policies, excess=st.floats(min_value=0, max_value=1))
def test_mean_never_fails_and_above_allowed_always_fails(errors, policy, excess):
    e = BaselineEntry.from_errors(errors)
    base = baseline(w=e)
    assert not check_errors({"w": e.mean}, base, policy).failed
    allowed = abs(e.mean) + max(policy.k * e.spread * spread_bound(e.n, policy.spread_confidence),
                                policy.min_margin)
    above = max(math.nextafter(allowed, math.inf), allowed + excess)
    for error in (above, -above):
        report = check_errors({"w": error}, base, policy)
        assert report.failed and report.verdicts[0].status == "regressed"


# -- leave one run out --------------------------------------------------------------------
def test_held_out_runs_judge_each_run_by_the_band_of_the_others():
    policy = GatePolicy(k=4.0, min_margin=0.01, spread_confidence=0)
    e = entry(-0.10, -0.12, -0.11, -0.09, -0.40)
    check = held_out_runs("w", e, policy, ["a", "b", "c", "d", "e"])
    assert check.outside == (4,) and check.tightest == 4 and check.run_ids[4] == "e"
    rest = entry(-0.10, -0.12, -0.11, -0.09)
    assert check.allowed[4] == pytest.approx(policy.allowed(rest))
    assert check.margins[4] == pytest.approx(policy.allowed(rest) - 0.40)
    # with the outlier among the others, every other run's band is wide
    assert all(m > 0 for m in check.margins[:4])
    assert held_out_runs("w", e, policy).run_ids == ("run 1", "run 2", "run 3", "run 4", "run 5")
    assert held_out_runs("w", entry(0.1, 0.2), policy) is None  # two runs: no spread without one
    assert check.statuses == ("ok",) * 4 + ("regressed",)


def test_held_out_runs_check_drift_only_on_one_fit():
    """A run whose prediction moved away from the others' fails the drift check
    against them, where all the runs predicted with one fit (as the gate runs it)."""
    policy = GatePolicy(k=4.0, min_margin=0.01, spread_confidence=0)
    errors = (0.01, -0.01, 0.0, 0.005, 0.0)
    predicted = (1.0, 1.001, 0.999, 1.0, 1.2)
    one_fit = BaselineEntry.from_errors(errors, predicted, fit_data="f" * 16)
    check = held_out_runs("w", one_fit, policy)
    assert check.outside == (4,) and check.statuses[4] == "drifted"
    assert check.margins[4] > 0  # its error alone is well inside
    assert held_out_runs("w", BaselineEntry.from_errors(errors, predicted), policy).outside == ()


@DETERMINISTIC
@given(errors=st.lists(st.floats(min_value=-1, max_value=5, allow_nan=False), min_size=3,
                       max_size=12), policy=policies)
def test_held_out_runs_are_the_error_check_without_each_run(errors, policy):
    e = BaselineEntry.from_errors(errors)
    check = held_out_runs("w", e, policy)
    for i, error in enumerate(e.errors):
        others = baseline(w=BaselineEntry.from_errors(e.errors[:i] + e.errors[i + 1:]))
        failed = check_errors({"w": error}, others, policy).failed
        assert (i in check.outside) == failed
        assert check.margins[i] == pytest.approx(check.allowed[i] - abs(error))
    assert check.margins[check.tightest] == min(check.margins)
    if len(set(e.errors)) == 1:  # identical runs never leave their band
        assert check.outside == ()


# -- the baseline file -------------------------------------------------------------------
def test_baseline_roundtrip(tmp_path):
    path = tmp_path / "cpu-x" / "baseline.json"
    saved = save_baseline(path, "cpu-x", {"mlp": [0.03, 0.05, 0.04], "one": [0.2]}, ENV,
                          created_unix_s=1.5e9)
    loaded = load_baseline(path)
    assert loaded == saved
    assert loaded.device_key == "cpu-x" and loaded.env == ENV and loaded.created_unix_s == 1.5e9
    assert loaded.entries["mlp"] == BaselineEntry(0.04, statistics.stdev([0.03, 0.05, 0.04]),
                                                  3, (0.03, 0.05, 0.04))
    assert loaded.entries["one"].spread == 0.0
    data = json.loads(path.read_text())
    assert data["schema"] == BASELINE_SCHEMA == 2
    assert data["workloads"]["mlp"]["errors"] == [0.03, 0.05, 0.04]
    assert list(tmp_path.joinpath("cpu-x").iterdir()) == [path]  # no temp file left behind


def test_save_rejects_a_workload_without_errors(tmp_path):
    path = tmp_path / "baseline.json"
    with pytest.raises(ValueError, match="'mlp'"):
        save_baseline(path, "cpu-x", {"mlp": []}, ENV)
    assert not path.exists()


def test_missing_baseline_is_none(tmp_path):
    assert load_baseline(tmp_path / "baseline.json") is None


def good_file():
    errors = [0.03, 0.05]
    return {"schema": 2, "device_key": "cpu-x", "created_unix_s": 1.5e9, "env": dict(ENV),
            "workloads": {"mlp": {"mean": statistics.mean(errors),
                                  "spread": statistics.stdev(errors), "n": 2,
                                  "errors": errors}}}


def test_the_good_file_loads(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(good_file()))
    assert load_baseline(path).entries["mlp"].n == 2


def edit(change):
    data = good_file()
    change(data)
    return json.dumps(data)


def mlp(key, value):
    return lambda d: d["workloads"]["mlp"].__setitem__(key, value)


def top(key, value):
    return lambda d: d.__setitem__(key, value)


BAD_FILES = {
    "not json": ("{", "not readable JSON"),
    "NaN constant": (edit(mlp("mean", 0.0)).replace('"mean": 0.0', '"mean": NaN'), "NaN"),
    "duplicate key": ('{"schema": 2, "schema": 2}', "'schema' appears twice"),
    "list on top": ("[]", "list"),
    "schema 1": (json.dumps({"schema": 1, "errors": {"a": 0.1}}),
                 "old baseline.*--perfmodel-save-baseline"),
    "schema 7": (edit(top("schema", 7)), "'schema' = 7"),
    "no workloads": (edit(lambda d: d.pop("workloads")), "'workloads'"),
    "unknown top key": (edit(top("errors", {})), "'errors'"),
    "bad device key": (edit(top("device_key", "")), "'device_key' = ''"),
    "bad created": (edit(top("created_unix_s", "today")), "'created_unix_s' = 'today'"),
    "env not object": (edit(top("env", [])), "'env' = \\[\\]"),
    "workloads list": (edit(top("workloads", [])), "'workloads' = \\[\\]"),
    "entry not object": (edit(lambda d: d["workloads"].__setitem__("mlp", 0.1)),
                         "'workloads.mlp' = 0.1"),
    "entry lacks key": (edit(lambda d: d["workloads"]["mlp"].pop("spread")), "'spread'"),
    "entry unknown key": (edit(mlp("median", 0.1)), "'median'"),
    "empty errors": (edit(mlp("errors", [])), "'workloads.mlp.errors' = \\[\\]"),
    "text error": (edit(mlp("errors", [0.03, "x"])), "'workloads.mlp.errors\\[1\\]' = 'x'"),
    "infinite error": (edit(mlp("errors", [0.03, 1e999])).replace("Infinity", "1e999"),
                       "'workloads.mlp.errors\\[1\\]' = inf"),
    "n mismatch": (edit(mlp("n", 3)), "'workloads.mlp.n' = 3"),
    "n is text": (edit(mlp("n", "2")), "'workloads.mlp.n' = '2'"),
    "negative mean off its errors": (edit(mlp("mean", -0.04)),
                                     "'workloads.mlp.mean' = -0.04 does not match"),
    "mean is bool": (edit(mlp("mean", True)), "'workloads.mlp.mean' = True"),
    "negative spread": (edit(mlp("spread", -1)), "'workloads.mlp.spread' = -1"),
    "mean off its errors": (edit(mlp("mean", 0.5)), "'workloads.mlp.mean' = 0.5 does not match"),
    "spread off": (edit(mlp("spread", 0.0)), "'workloads.mlp.spread' = 0.0 does not match"),
}


@pytest.mark.parametrize("text, expected", list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_bad_baseline_names_the_file_and_the_value(tmp_path, text, expected):
    path = tmp_path / "baseline.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_baseline(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert info.match(expected)


def test_baseline_errors_take_the_newest_runs_of_a_profile_without_bias():
    from perfmodel.gate.baseline import baseline_errors

    def rec(run, workload, predicted, profile="quick", bias=None):
        return {"kind": "e2e", "run_id": run, "profile": profile, "workload": workload,
                "measured_s": 0.1, "predicted_s": predicted, "bias": bias or {},
                "env": {"run": run}}

    records = [rec("20260101T000000Z-a", "w", 0.2), rec("20260102T000000Z-b", "w", 0.11),
               rec("20260103T000000Z-c", "w", 0.09), rec("20260104T000000Z-d", "w", 0.5,
                                                           bias={"linear": 1.1}),
               rec("20260105T000000Z-e", "w", 0.5, profile="smoke")]
    chosen = baseline_errors(records, "quick", last_runs=2)
    assert chosen.errors == {"w": [pytest.approx(0.1), pytest.approx(-0.1)]}
    assert chosen.predicted_s == {"w": [0.11, 0.09]} and chosen.fits == {"w": {None}}
    assert chosen.overhead_s == {}  # these records carry no traced overheads
    with pytest.raises(ValueError, match="need 4 run.*the most any workload has is 3"):
        baseline_errors(records, "quick", last_runs=4)
    # a workload with fewer runs than asked for is left out, not given a zero spread
    chosen = baseline_errors(records + [rec("20260106T000000Z-f", "once", 0.1)], "quick", 2)
    assert set(chosen.errors) == {"w"}
    assert chosen.left_out == ["once"]
    assert chosen.env == {"run": "20260103T000000Z-c"}  # the newest chosen run's, not "once"'s


def test_a_multi_rank_baseline_keeps_the_predictions_at_the_fits_host_speed():
    """The drift check compares a run's prediction at the fit's host speed
    (``model_predicted_s``), so the baseline built from stored runs keeps those;
    the errors stay those of the predictions moved by the host's drift."""
    from perfmodel.gate.baseline import baseline_errors

    def rec(run, at_fit_speed):
        return {"kind": "e2e", "run_id": run, "profile": "quick", "workload": "w@2",
                "measured_s": 0.1, "predicted_s": 0.095, "bias": {},
                "predicted_fit_speed_s": at_fit_speed}

    records = [rec("20260101T000000Z-a", 0.1), rec("20260102T000000Z-b", 0.102),
               {**rec("20260103T000000Z-c", None), "workload": "w"}]
    chosen = baseline_errors(records, "quick", last_runs=2)
    assert chosen.predicted_s == {"w@2": [0.1, 0.102]}
    assert chosen.errors == {"w@2": [pytest.approx(-0.05), pytest.approx(-0.05)]}
    assert baseline_errors(records, "quick", last_runs=1).predicted_s["w"] == [0.095]


def test_baseline_errors_keep_overhead_pairs_only_when_every_run_has_them():
    from perfmodel.gate.baseline import baseline_errors

    def rec(run, workload, traced):
        return {"kind": "e2e", "run_id": run, "profile": "quick", "workload": workload,
                "measured_s": 0.1, "predicted_s": 0.1, "bias": {},
                "breakdown_s": {"host overhead": 0.002, "gemm": 0.098}, "traced_gaps_s": traced}

    records = [rec("20260101T000000Z-a", "w", 0.0021), rec("20260102T000000Z-b", "w", 0.0019),
               rec("20260101T000000Z-a", "old", None), rec("20260102T000000Z-b", "old", 0.002)]
    chosen = baseline_errors(records, "quick", last_runs=2)
    assert chosen.overhead_s == {"w": [(0.002, 0.0021), (0.002, 0.0019)]}


# -- prediction drift -------------------------------------------------------------------
FIT = "0123456789abcdef"  # the training-data id of the fit the baseline predicted with


def drift_baseline(mean_error=-0.01, predicted=(0.100, 0.101, 0.099, 0.100)):
    errors = [mean_error - 0.05, mean_error + 0.05, mean_error - 0.02, mean_error + 0.02]
    return Baseline("cpu-x", {"w": BaselineEntry.from_errors(errors, predicted)}, ENV, 0.0,
                    fit_data=FIT)


def test_a_prediction_that_moved_and_worsens_the_expected_error_fails():
    base, policy = drift_baseline(), GatePolicy(k=4.0, min_margin=0.01, spread_confidence=0)
    e = base.entries["w"]
    assert policy.allowed_drift(e) == pytest.approx(4 * e.predicted_spread)
    # the measured error is well inside its wide band; the prediction moved +9%
    verdict = by_name(check_errors({"w": 0.02}, base, policy, predicted_s={"w": 0.109}, fit_data=FIT))["w"]
    assert verdict.status == "drifted" and verdict.failed
    assert verdict.shift == pytest.approx(0.09)
    assert verdict.expected_error == pytest.approx(0.99 * 1.09 - 1)
    assert verdict.line().startswith("FAIL w: prediction moved +9.00% from the baseline's")


def test_a_small_or_improving_prediction_move_passes():
    policy = GatePolicy(k=4.0, min_margin=0.01, spread_confidence=0)
    base = drift_baseline()
    assert not check_errors({"w": 0.0}, base, policy, predicted_s={"w": 0.1005}, fit_data=FIT).failed
    under = drift_baseline(mean_error=-0.10)  # under-predicted: a +8% move improves it
    assert not check_errors({"w": -0.05}, under, policy, predicted_s={"w": 0.108}, fit_data=FIT).failed
    assert check_errors({"w": -0.05}, under, policy, predicted_s={"w": 0.092}, fit_data=FIT).failed


def test_without_predictions_only_the_error_is_checked():
    base = baseline(w=BaselineEntry.from_errors([0.0, 0.02]))
    assert GatePolicy().allowed_drift(base.entries["w"]) is None
    assert not check_errors({"w": 0.01}, base, GatePolicy(), predicted_s={"w": 9.9}).failed
    assert not check_errors({"w": 0.01}, drift_baseline(), GatePolicy()).failed  # no predicted_s


def test_drift_is_checked_only_on_the_baselines_training_data():
    base = drift_baseline()
    for other in (None, "fedcba9876543210"):  # a refit on new measurements moves predictions
        report = check_errors({"w": 0.02}, base, GatePolicy(), predicted_s={"w": 0.2},
                              fit_data=other)
        assert not report.failed
        assert any(line.startswith("note: prediction drift not checked") for line in report.lines())


@given(st.floats(-0.3, 0.3), st.floats(-0.5, 0.5))
@settings(max_examples=200)
def test_drift_fails_exactly_when_beyond_the_band_and_worse(mean, shift):
    base = drift_baseline(mean_error=mean)
    e, policy = base.entries["w"], GatePolicy(k=4.0, min_margin=0.01, spread_confidence=0)
    predicted = e.predicted_mean_s * (1 + shift)
    verdict = by_name(check_errors({"w": mean}, base, policy, predicted_s={"w": predicted},
                                    fit_data=FIT))["w"]
    expected = (1 + mean) * (1 + shift) - 1
    beyond = abs(shift) > policy.allowed_drift(e) * (1 + 1e-9)
    worse = abs(expected) > abs(mean) + 0.01 + 1e-9
    inside = abs(shift) < policy.allowed_drift(e) * (1 - 1e-9)
    better = abs(expected) < abs(mean) + 0.01 - 1e-9
    if beyond and worse:
        assert verdict.status == "drifted"
    if inside or better:
        assert verdict.status == "ok"


def test_predictions_round_trip_through_the_file_and_are_validated(tmp_path):
    path = tmp_path / "baseline-quick.json"
    saved = save_baseline(path, "cpu-x", {"w": [0.01, 0.03]}, ENV,
                          predicted_by_workload={"w": [0.1, 0.102]}, fit_data=FIT)
    assert load_baseline(path) == saved and saved.fit_data_for("w") == FIT
    assert saved.entries["w"].predicted_s == (0.1, 0.102)
    data = json.loads(path.read_text())
    data["workloads"]["w"]["predicted_s"] = [0.1]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"predicted_s.*not a list of 2"):
        load_baseline(path)
    data["workloads"]["w"]["predicted_s"] = [0.1, -1.0]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"predicted_s\[1\]"):
        load_baseline(path)


def test_each_workload_is_drift_checked_against_the_fit_its_own_baseline_runs_used(tmp_path):
    """A multi-rank workload is predicted with its ranks' 1-thread fit and a
    single-rank one with the session's: the baseline keeps one fit id per workload,
    and a run checks the drift of the workloads whose fit it still has."""
    ranks = "fedcba9876543210"
    path = tmp_path / "baseline-quick.json"
    runs = {"w": [-0.06, 0.04, -0.03, 0.01], "w@2": [-0.06, 0.04, -0.03, 0.01]}
    predicted = {"w": [0.100, 0.101, 0.099, 0.100], "w@2": [0.100, 0.101, 0.099, 0.100]}
    saved = save_baseline(path, "cpu-x", runs, ENV, predicted_by_workload=predicted,
                          fit_data={"w": FIT, "w@2": ranks})
    assert load_baseline(path) == saved
    assert (saved.fit_data_for("w"), saved.fit_data_for("w@2")) == (FIT, ranks)
    moved = {"w": 0.109, "w@2": 0.109}  # both predictions moved +9%
    both = by_name(check_errors({"w": 0.02, "w@2": 0.02}, saved, GatePolicy(),
                                predicted_s=moved, fit_data={"w": FIT, "w@2": ranks}))
    assert both["w"].status == both["w@2"].status == "drifted"
    refit = check_errors({"w": 0.02, "w@2": 0.02}, saved, GatePolicy(), predicted_s=moved,
                         fit_data={"w": FIT, "w@2": "0000000000000000"})  # the ranks refitted
    assert (by_name(refit)["w"].status, by_name(refit)["w@2"].status) == ("drifted", "ok")
    assert any(line.startswith("note: prediction drift not checked for w@2:")
               for line in refit.lines())
    data = json.loads(path.read_text())
    data["workloads"]["w"]["fit_data"] = 7
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"workloads\.w\.fit_data"):
        load_baseline(path)


def test_a_baseline_with_one_top_level_fit_id_still_checks_every_workload():
    base = Baseline("cpu-x", {"w": BaselineEntry.from_errors([0.0, 0.02], [0.1, 0.1])}, ENV, 0.0,
                    fit_data=FIT)  # saved before entries named their fit
    assert base.fit_data_for("w") == FIT and base.fit_data_for("other") == FIT
    assert check_errors({"w": 0.01}, base, GatePolicy(), predicted_s={"w": 0.2},
                        fit_data=FIT).failed


# -- the host-overhead model ----------------------------------------------------------------
def overhead_baseline(ratios_w=(1.0, 1.02, 0.98, 1.0), ratios_v=(2.0, 2.0, 2.0, 2.0)):
    """Two workloads whose per-run (predicted, traced) pairs have the given ratios:
    w traced 1 ms, v traced 3 ms."""
    errors = [0.0, 0.01, -0.01, 0.0]
    return Baseline("cpu-x", {
        "w": BaselineEntry.from_errors(errors, overhead_s=[(r * 1e-3, 1e-3) for r in ratios_w]),
        "v": BaselineEntry.from_errors(errors, overhead_s=[(r * 3e-3, 3e-3) for r in ratios_v]),
    }, ENV, 0.0)


def test_the_overhead_check_pools_workloads_per_run():
    base, policy = overhead_baseline(), GatePolicy(k=4.0, min_margin=0.01)
    # baseline run i: (w_i * 1 + 2 * 3) / 4 ms
    expected = [(r + 6.0) / 4.0 for r in (1.0, 1.02, 0.98, 1.0)]
    quiet = {"w": (1.0e-3, 1e-3), "v": (6e-3, 3e-3)}
    report = check_errors({"w": 0.0, "v": 0.0}, base, policy, overhead_s=quiet)
    assert report.overhead.baseline_ratios == pytest.approx(expected)
    assert report.overhead.workloads == ("v", "w")
    assert not report.failed and report.lines()[-1].startswith("ok   host-overhead model")
    # the model prices every gap 10% higher: both workloads' predictions move
    biased = {w: (p * 1.1, t) for w, (p, t) in quiet.items()}
    report = check_errors({"w": 0.0, "v": 0.0}, base, policy, overhead_s=biased)
    assert report.failed and report.overhead.shift == pytest.approx(0.1, rel=1e-3)
    line = report.lines()[-1]
    assert line.startswith("FAIL host-overhead model: predicts 1.925x the traced host "
                           "overheads of 2 workload(s), baseline 1.750x: +10.00%"), line
    assert all(v.status == "ok" for v in report.verdicts)  # the errors themselves passed


def test_the_overhead_check_needs_two_baseline_runs_of_the_same_workloads():
    base, policy = overhead_baseline(), GatePolicy()
    report = check_errors({"x": 0.0}, base, policy, overhead_s={"x": (1e-3, 1e-3)})
    assert report.overhead is None
    assert any(line.startswith("note: host-overhead model not checked") for line in report.lines())
    one_run = Baseline("cpu-x", {"w": BaselineEntry.from_errors([0.0], overhead_s=[(1, 1)])},
                       ENV, 0.0)
    assert check_errors({"w": 0.0}, one_run, policy, overhead_s={"w": (5, 1)}).overhead is None
    assert check_errors({"w": 0.0}, base, policy, overhead_s={"w": (1e-3, 0.0)}).overhead is None
    with pytest.raises(ValueError, match=r"overhead_s\['w'\] = \(-1, 1\)"):
        check_errors({"w": 0.0}, base, policy, overhead_s={"w": (-1, 1)})


@given(st.lists(st.floats(0.5, 2.0), min_size=2, max_size=8), st.floats(0.2, 5.0),
       st.floats(1e-6, 1.0))
@DETERMINISTIC
def test_the_overhead_check_fails_exactly_beyond_its_band(ratios, factor, traced):
    base = Baseline("cpu-x", {"w": BaselineEntry.from_errors(
        [0.0] * len(ratios), overhead_s=[(r * traced, traced) for r in ratios])}, ENV, 0.0)
    policy = GatePolicy(k=3.0, min_margin=0.01)
    mean = sum(ratios) / len(ratios)
    verdict = overhead_check({"w": (mean * factor * traced, traced)}, base, policy)
    allowed = max(3.0 * statistics.stdev(ratios) / mean * spread_bound(len(ratios)), 0.01)
    assert verdict.shift == pytest.approx(factor - 1, rel=1e-6, abs=1e-9)
    if abs(factor - 1) > allowed * (1 + 1e-6):
        assert verdict.failed
    elif abs(factor - 1) < allowed * (1 - 1e-6):
        assert not verdict.failed


def test_overhead_pairs_round_trip_through_the_file_and_are_validated(tmp_path):
    path = tmp_path / "baseline-quick.json"
    saved = save_baseline(path, "cpu-x", {"w": [0.01, 0.03]}, ENV,
                          overhead_by_workload={"w": [(0.001, 0.0011), (0.0012, 0.0011)]})
    assert load_baseline(path) == saved
    assert saved.entries["w"].overhead_s == ((0.001, 0.0011), (0.0012, 0.0011))
    data = json.loads(path.read_text())
    for bad, match in (([[0.001, 0.001]], r"overhead_s.*not a list of 2"),
                       ([[0.001, 0.001], [0.001]], r"overhead_s\[1\]"),
                       ([[0.001, 0.001], [0.001, float("nan")]], r"not plain JSON"),
                       ([[0.001, 0.001], "x"], r"overhead_s\[1\]")):
        data["workloads"]["w"]["overhead_s"] = bad
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=match):
            load_baseline(path)


def test_error_fails_is_the_error_check_alone():
    base = drift_baseline()  # mean -1%, spread about 4.3%
    policy = GatePolicy(k=3.0, min_margin=0.01)
    allowed = policy.allowed(base.entries["w"])
    assert not error_fails("w", allowed * 0.99, base, policy)
    assert error_fails("w", -allowed * 1.01, base, policy)
    assert not error_fails("new", 5.0, base, policy)  # no baseline entry: never a failure
    ceiling = GatePolicy(k=3.0, min_margin=0.01, ceilings={"w": 0.02})
    assert error_fails("w", 0.03, base, ceiling)


def test_workload_runs_group_a_sessions_results_in_run_order():
    from types import SimpleNamespace

    from perfmodel.gate.baseline import WorkloadRuns

    def result(workload, error, predicted, gaps=None):
        return SimpleNamespace(workload=workload, signed_error=error, model_predicted_s=predicted,
                               traced_gaps_s=None if gaps is None else gaps[1],
                               predicted_gaps_s=None if gaps is None else gaps[0])

    runs = WorkloadRuns.of([result("a", 0.01, 1.0, (0.1, 0.2)), result("b", -0.02, 2.0),
                            result("a", 0.03, 1.5)])
    assert runs.errors == {"a": [0.01, 0.03], "b": [-0.02]}
    assert runs.predicted_s == {"a": [1.0, 1.5], "b": [2.0]}
    assert runs.overhead_s == {"a": [(0.1, 0.2)]}


# -- how a baseline was built ------------------------------------------------------------

from perfmodel.gate.baseline import FLOOR_SPAN_S, built_from_repeats, built_from_sessions  # noqa: E402


def test_a_baseline_records_how_it_was_built_and_says_when_it_cannot_set_the_floor(tmp_path):
    path = tmp_path / "baseline.json"
    errors = {"mlp": [0.03, 0.05]}
    repeats = save_baseline(path, "cpu-x", errors, ENV, built=built_from_repeats(5, "r1"))
    assert load_baseline(path) == repeats and repeats.built["from"] == "repeats"
    assert "5 repeats in one session" in repeats.floor_note()

    ids = ["20261128T000000Z-1-aaaa", "20261128T013000Z-2-bbbb"]
    short = save_baseline(path, "cpu-x", errors, ENV, built=built_from_sessions(ids))
    assert short.built == {"from": "sessions", "runs": ids, "span_s": 5400.0}
    assert "2 sessions span 1.5 h (< 4 h)" in short.floor_note()

    ids.append("20261128T053000Z-3-cccc")
    wide = save_baseline(path, "cpu-x", errors, ENV, built=built_from_sessions(ids))
    assert wide.built["span_s"] == 5.5 * 3600 >= FLOOR_SPAN_S and wide.floor_note() is None
    assert load_baseline(path) == wide

    old = save_baseline(path, "cpu-x", errors, ENV)  # before it was recorded
    assert "does not record how it was built" in old.floor_note()
    assert all(len(b.floor_note()) < 100 for b in (repeats, short, old))


@pytest.mark.parametrize("built", [[], {"from": "guess"}, {"from": "sessions", "runs": []},
                                   {"from": "sessions", "runs": [], "span_s": -1}])
def test_a_bad_built_record_is_named(tmp_path, built):
    path = tmp_path / "baseline.json"
    save_baseline(path, "cpu-x", {"mlp": [0.03]}, ENV)
    data = json.loads(path.read_text())
    data["built"] = built
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="'built'"):
        load_baseline(path)
