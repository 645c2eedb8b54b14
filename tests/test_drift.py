"""The host drift probe: sampling, summary and its command (no wall-clock asserts)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.measure.drift import (DriftSample, HostDrift, HostSpeed, OpDrift,
                                     measure_host_speed, op_drift_factors, probe, summarise)
from perfmodel.ops import get_op


class FakeClock:
    """A clock that moves 1 ms per reading, and a sleep that moves it too."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1e-3
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_probe_samples_every_runner_until_the_time_is_up():
    clock, calls = FakeClock(), []
    runners = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    seen = []
    samples = probe(1.0, interval_s=0.2, calls=3, runners=runners, clock=clock,
                    sleep=clock.sleep, progress=seen.append)
    assert len(samples) >= 2 and seen == samples
    assert all(set(s.seconds) == {"a", "b"} for s in samples)
    assert calls.count("a") == 1 + 3 * len(samples)  # one warm-up call, then 3 per sample
    assert samples[-2].t_s < 1.0 <= samples[-1].t_s + 0.2 + 1e-9


def test_summary_of_a_planted_series():
    samples = [DriftSample(float(i), {"op": s}) for i, s in enumerate((1.0, 2.0, 1.0, 1.0))]
    (row,) = summarise(samples)
    assert (row.n, row.min_s, row.median_s, row.max_s, row.ratio) == (4, 1.0, 1.0, 2.0, 2.0)
    assert row.gmae == pytest.approx((4e-4 ** 3 * (1 + 4e-4)) ** 0.25)
    with pytest.raises(ValueError, match="no drift samples"):
        summarise([])


def test_bad_probe_arguments_are_named():
    with pytest.raises(ValueError, match="seconds > 0"):
        probe(0, runners={})


def test_drift_command_prints_and_stores_the_probe(planted_results, capsys):
    from perfmodel.cli.main import main

    results, key = planted_results
    args = ["drift", "--seconds", "0.05", "--interval", "0", "--calls", "1",
            "--device", "cpu", "--results", str(results), "--threads", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "addmm" in out and "copy " in out and "max/min" in out
    (path,) = (results / key / "drift").glob("*.json")
    record = json.loads(path.read_text())
    assert record["kind"] == "drift" and record["device_key"] == key
    assert len(record["samples"]) >= 2 and {r["op"] for r in record["summary"]} == {"addmm", "copy"}


# -- the host's speed beside a fit --------------------------------------------------

SGD = {"NTENSORS": 14, "NUMEL": 370172}
LINEAR = {"B": 256, "IN": 100, "OUT": 256, "GRAD_INPUT": 1}


def _speed(addmm, copy):
    return HostSpeed({"addmm": addmm, "copy": copy})


def test_a_host_speed_sample_is_the_median_round_after_a_warm_up():
    """The clock moves 1 ms per reading, and 5 ms more in two of the three calls
    of ``copy``'s first round: that round's median moves, not the sample."""
    clock, calls = FakeClock(), []

    def copy():
        calls.append(1)
        if len(calls) in (2, 3):  # round 1's first two calls (after the warm-up)
            clock.sleep(5e-3)

    speed = measure_host_speed({"addmm": lambda: None, "copy": copy}, calls=3, rounds=3,
                               clock=clock)
    assert len(calls) == 1 + 3 * 3  # one warm-up call, then 3 rounds of 3 timed
    assert speed.seconds == {"addmm": pytest.approx(1e-3), "copy": pytest.approx(1e-3)}


def test_the_median_of_host_speeds_is_per_reference_op():
    median = HostSpeed.median_of([_speed(1.0, 9.0), _speed(3.0, 1.0), _speed(2.0, 2.0)])
    assert median == _speed(2.0, 2.0)
    assert HostSpeed.median_of([]) is None


@pytest.mark.parametrize("bad", [None, [], {"addmm": 1.0}, {"addmm": 1.0, "copy": 0.0},
                                 {"addmm": 1.0, "copy": True}, {"addmm": "1", "copy": 1.0},
                                 {"addmm": 1.0, "copy": float("inf")},
                                 {"addmm": 1.0, "copy": 1.0, "x": 1.0},
                                 {"addmm": 1.0, "add": 1.0, "copy": 1.0}])
def test_a_bad_host_speed_is_refused_naming_where_it_came_from(bad):
    with pytest.raises(ValueError, match="here.json: host_speed must map"):
        HostSpeed.from_dict(bad, "here.json")
    assert HostSpeed.from_dict({"addmm": 2, "copy": 1e-3}, "x") == _speed(2.0, 1e-3)


def test_a_speed_timed_with_the_old_reference_ops_loads_but_moves_no_prediction():
    """Records and fits stored before the ``copy`` reference keep the 4M-element
    ``add``: they load, a fit's median prefers current samples, and a drift
    between the two sets is None (no drift applied) rather than a ratio of
    different ops."""
    legacy = HostSpeed.from_dict({"addmm": 2e-3, "add": 1.8e-3}, "old run")
    assert not legacy.comparable and _speed(2e-3, 7e-3).comparable
    assert HostDrift.between(_speed(2e-3, 7e-3), legacy, 2e10) is None
    assert HostDrift.between(legacy, legacy, 2e10) is None
    assert HostSpeed.median_of([legacy, _speed(1.0, 2.0), legacy]) == _speed(1.0, 2.0)
    assert HostSpeed.median_of([legacy, legacy]) == legacy


@given(st.floats(0.25, 4.0), st.floats(0.25, 4.0), st.floats(1e-7, 10.0),
       st.sampled_from([("sgd_foreach", SGD, "forward"), ("linear", LINEAR, "backward")]))
def test_drift_moves_an_op_between_its_compute_and_memory_factors(compute, memory, t, case):
    op, params, direction = case
    now = HostDrift(compute, memory, 2e10).seconds(op, params, "float32", direction, t)
    lo, hi = sorted((compute, memory))
    assert lo * t * (1 - 1e-12) <= now <= hi * t * (1 + 1e-12)
    assert HostDrift(1.0, 1.0, 2e10).seconds(op, params, "float32", direction, t) == \
        pytest.approx(t)


def test_a_stream_follows_the_memory_drift_and_a_gemm_the_compute_drift():
    drift = HostDrift.between(_speed(3e-3, 1.5e-3), _speed(2e-3, 1e-3), 2e10)
    assert (drift.compute, drift.memory) == (pytest.approx(1.5), pytest.approx(1.5))
    drift = HostDrift.between(_speed(2e-3, 1.2e-3), _speed(2e-3, 1e-3), 2e10)
    sgd_fit = get_op("sgd_foreach").bytes_moved(SGD, "float32", "forward") / 2e10
    assert drift.seconds("sgd_foreach", SGD, "float32", "forward", sgd_fit) == \
        pytest.approx(1.2 * sgd_fit)
    assert 1.0 <= drift.seconds("linear", LINEAR, "float32", "backward", 1.0) < 1.0 + 1e-3
    with pytest.raises(ValueError, match="bad host drift figures"):
        HostDrift(0.0, 1.0, 2e10)


# -- each op's own drift ---------------------------------------------------------------


def _measured(op, direction, config, seconds, cache="hot", dtype="float32"):
    return {"kind": "measurement", "op": op, "direction": direction, "dtype": dtype,
            "config": config, "measurement": {"median_s": seconds, "cache": cache}}


@given(st.floats(0.1, 10.0), st.lists(st.floats(1e-6, 1.0), min_size=3, max_size=12))
def test_an_op_slowed_by_a_factor_everywhere_drifts_by_that_factor(factor, seconds):
    then = [_measured("linear", "forward", {"B": i}, s) for i, s in enumerate(seconds)]
    now = [_measured("linear", "forward", {"B": i}, s * factor) for i, s in enumerate(seconds)]
    assert op_drift_factors(now, then) == {"linear.forward": pytest.approx(factor)}


def test_op_drift_is_the_median_over_the_configs_both_sweeps_timed():
    then = [_measured("relu", "forward", {"N": n}, 1.0) for n in range(5)]
    then += [_measured("relu", "forward", {"N": 0}, 3.0),  # a replicate: the median is 2
             _measured("relu", "forward", {"N": 9}, 1.0),  # not timed now
             _measured("relu", "forward", {"N": 1}, 1.0, cache="cold"),  # another cache state
             _measured("add", "forward", {"N": 1}, 1.0)]  # too few shared configs
    now = [_measured("relu", "forward", {"N": n}, f) for n, f in
           zip(range(5), (2.0, 1.5, 3.0, 1.2, 9.0))]
    now += [_measured("relu", "forward", {"N": 1}, 50.0, cache="cold"),
            _measured("add", "forward", {"N": 1}, 2.0)]
    # per config now/then: 1.0, 1.5, 3.0, 1.2, 9.0 (and the cold 50) -> median 2.25
    assert op_drift_factors(now, then) == {"relu.forward": pytest.approx(2.25)}
    assert op_drift_factors(now, then, min_shared=1)["add.forward"] == pytest.approx(2.0)
    assert op_drift_factors([], then) == {}


def test_op_drift_prices_an_op_with_its_own_factor_else_the_host_drift():
    host = HostDrift(2.0, 2.0, 2e10)
    drift = OpDrift({"linear.backward": 1.5}, host)
    assert drift.seconds("linear", LINEAR, "float32", "backward", 1.0) == pytest.approx(1.5)
    assert drift.seconds("linear", LINEAR, "float32", "forward", 1.0) == pytest.approx(2.0)
    assert OpDrift({"linear.backward": 1.5}).seconds("sgd_foreach", SGD, "float32", "forward",
                                                     3.0) == 3.0
    assert drift.to_dict() == {"factors": {"linear.backward": 1.5}, "fallback": host.to_dict()}
    with pytest.raises(ValueError, match="must be > 0"):
        OpDrift({"linear.forward": 0.0})


# -- the host's speed around E2E measurements ---------------------------------------------

@given(addmm=st.floats(1e-4, 1e-1), copy=st.floats(1e-4, 1e-1),
       scale=st.lists(st.floats(0.5, 2.0), min_size=1, max_size=7))
def test_the_e2e_speed_ratio_is_the_median_sample_over_the_fits(addmm, copy, scale):
    from statistics import median

    from perfmodel.measure.drift import e2e_speed_ratio

    fit = HostSpeed({"addmm": addmm, "copy": copy})
    seen = [HostSpeed({"addmm": addmm * f, "copy": copy * f}) for f in scale]
    ratio = e2e_speed_ratio(seen, fit)
    assert ratio["addmm"] == pytest.approx(median(scale), rel=1e-9)
    assert ratio["copy"] == pytest.approx(median(scale), rel=1e-9)


def test_the_session_notes_a_host_that_moved_around_the_e2e_measurements():
    from types import SimpleNamespace

    from perfmodel.session import Session

    fit = SimpleNamespace(host_speed=HostSpeed({"addmm": 0.004, "copy": 0.010}))
    fast = {"addmm": 0.003, "copy": 0.010}
    same = {"addmm": 0.0041, "copy": 0.0099}

    def note(*seen):
        results = [SimpleNamespace(host_speed_seen=s) for s in seen]
        return Session.host_speed_note(SimpleNamespace(_fit=fit, e2e=results))

    moved = note({"before": fast, "after": fast}, None)
    assert moved is not None and "addmm x0.75, copy x1.00" in moved
    assert note({"before": same, "after": same}) is None
    assert note(None) is None
    assert Session.host_speed_note(SimpleNamespace(_fit=None, e2e=[])) is None
