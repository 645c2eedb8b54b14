"""A fit moved to another device by data-sheet ratios (perfmodel/fit/transfer.py), and
`perfmodel replay --fit <another device>` that uses it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.fit.fitting import OpPredictor, load_latest_fit
from perfmodel.fit.transfer import bound_s, movable, moved_time, transfer_fit
from perfmodel.store import paths
from tests.helpers import THREADS, cpu_spec, planted_spec

seconds = st.floats(1e-7, 1.0)


@given(t=seconds, source=seconds, target=seconds)
def test_a_moved_time_lies_between_keeping_it_and_the_bound_ratio(t, source, target):
    moved = moved_time(t, source, target)
    low, high = sorted((t, t * target / source))
    assert low * (1 - 1e-12) <= moved <= high * (1 + 1e-12)


@given(t=seconds, bound=seconds)
def test_equal_bounds_keep_the_time(t, bound):
    assert moved_time(t, bound, bound) == pytest.approx(t, rel=1e-12)


@given(t=seconds, factor=st.floats(0.1, 10.0))
def test_a_call_at_its_bound_moves_by_the_bound_ratio(t, factor):
    assert moved_time(t, t, t * factor) == pytest.approx(t * factor, rel=1e-9)


def test_a_call_with_no_known_size_keeps_its_time():
    assert moved_time(1e-3, 0.0, 0.0) == 1e-3


def test_the_bound_is_the_slower_of_compute_and_memory():
    spec = cpu_spec(peak_flops={"float32": 1e12, "bfloat16": 2e12}, mem_bandwidth_Bps=1e11)
    assert bound_s(1e9, 1e6, "float32", spec) == pytest.approx(1e-3)   # compute-bound
    assert bound_s(1e6, 1e9, "float32", spec) == pytest.approx(1e-2)   # memory-bound
    assert bound_s(1e9, 0.0, "bfloat16", spec) == pytest.approx(5e-4)  # the dtype's own peak
    assert bound_s(1e9, 0.0, "float16", spec) == pytest.approx(1e-3)   # none: float32's


def test_collectives_and_host_side_predictors_are_not_moved():
    assert movable(OpPredictor("linear", "forward", "roofline", None))
    assert not movable(OpPredictor("all_reduce", "forward", "comm_sigmoid", None))
    assert not movable(OpPredictor("all_reduce", "host_cpu", "comm_sigmoid", None))


def test_a_fit_does_not_move_between_kinds(planted_linear_fit):
    root, key = planted_linear_fit
    fit, spec = _fit_and_spec(root, key)
    gpu = dataclasses.replace(spec, kind="cuda", key="cuda-x-80gb", threads=None)
    with pytest.raises(ValueError, match=f"{key} \\(cpu\\) cannot predict cuda-x-80gb"):
        transfer_fit(fit, spec, gpu)


def _fit_and_spec(root, key):
    from perfmodel.store.results import ResultStore

    fit, _ = load_latest_fit(ResultStore(root, key), threads=THREADS)
    return fit, planted_spec(root, key)


def test_a_faster_device_gets_faster_predictions_and_the_source_fit_is_unchanged(
        planted_linear_fit):
    from perfmodel.ops import get_op

    root, key = planted_linear_fit
    fit, spec = _fit_and_spec(root, key)
    configs = [c.params for c in get_op("linear").cases("quick") if c.direction == "forward"][:20]
    before = list(fit.predictor("linear", "forward").predict("float32", configs))
    same = transfer_fit(fit, spec, spec).predictor("linear", "forward").predict("float32", configs)
    assert list(same) == pytest.approx(before, rel=1e-12)
    fast = dataclasses.replace(spec, key="cpu-fast-2c",
                               peak_flops={k: 2 * v for k, v in spec.peak_flops.items()},
                               mem_bandwidth_Bps=2 * spec.mem_bandwidth_Bps)
    moved = transfer_fit(fit, spec, fast).predictor("linear", "forward").predict("float32", configs)
    assert all(b / 2 * (1 - 1e-9) <= m <= b for m, b in zip(moved, before))
    assert any(m < b for m, b in zip(moved, before))
    assert list(fit.predictor("linear", "forward").predict("float32", configs)) == before


@pytest.fixture
def two_devices(captured_mlp, planted_linear_fit):
    """The planted CPU device with an overhead table and a replay case of a tiny
    mlp_small, and a second CPU device ``cpu-fast-2c`` (twice the peaks and the
    bandwidth) with the same case and no fit nor overhead table of its own."""
    from perfmodel.replay.case import MeasuredTiming, ReplayCase, save_case
    from perfmodel.trace.overheads import samples_from_graph, save_samples

    root, key = planted_linear_fit
    graph = captured_mlp
    spec = planted_spec(root, key)
    fast = dataclasses.replace(spec, key="cpu-fast-2c",
                               peak_flops={k: 2 * v for k, v in spec.peak_flops.items()},
                               mem_bandwidth_Bps=2 * spec.mem_bandwidth_Bps)
    folder, other = paths.device_dir(root, key), paths.device_dir(root, fast.key)
    other.mkdir(parents=True)
    (other / "device.json").write_text(json.dumps(fast.to_dict()))
    save_samples(paths.overhead_file(folder, "mlp_small"),
                 samples_from_graph("mlp_small", graph, 3e10))
    for device, k in ((folder, key), (other, fast.key)):
        save_case(paths.replay_file(device, "mlp_small"),
                  ReplayCase("mlp_small", k, False, 3e10, THREADS, [graph],
                             MeasuredTiming(graph.measured_s, 1e-6, 30, 5, 1000.0),
                             env={"device_key": k, "threads": THREADS, "torch": "x"},
                             config={"size": "tiny"}, recorded={}))
    return root, key, fast


@pytest.fixture(scope="module")
def captured_mlp(tmp_path_factory):
    from perfmodel.e2e.single import capture_graph
    from perfmodel.workloads import build_workload

    step = build_workload("mlp_small", "cpu", size="tiny")
    return capture_graph(step.step, tmp_path_factory.mktemp("traces"), "mlp_small", "cpu")


def test_replay_with_another_devices_fit_moves_it_and_uses_that_devices_overheads(
        two_devices, captured_mlp, capsys):
    from perfmodel.cli.main import main
    from perfmodel.e2e.single import shared_table
    from perfmodel.simulate.predict import predict_graph

    root, key, fast = two_devices
    assert main(["replay", "--results", str(root), "--device", fast.key, "--fit", key,
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["devices"][fast.key]
    row = data["cases"]["mlp_small"]
    assert f"moved from {key} to {fast.key} by data-sheet ratios" in row["fit"]
    fit, spec = _fit_and_spec(root, key)
    table, _ = shared_table(paths.device_dir(root, key), 3e10)
    expected = predict_graph(captured_mlp, transfer_fit(fit, spec, fast), table).total_s
    assert row["predicted_s"] == pytest.approx(expected, rel=1e-12)
    own = predict_graph(captured_mlp, fit, table).total_s
    assert row["predicted_s"] < own
    assert main(["replay", "--results", str(root), "--device", key, "--fit", key]) == 0
    assert "moved from" not in capsys.readouterr().out


def test_replay_names_a_fit_it_cannot_find(two_devices, capsys):
    from perfmodel.cli.main import main

    root, _, fast = two_devices
    assert main(["replay", "--results", str(root), "--device", fast.key,
                 "--fit", "no-such-device"]) == 2
    assert "--fit no-such-device: not a predictors folder" in capsys.readouterr().err
    assert main(["replay", "--results", str(root), "--device", fast.key,
                 "--fit", fast.key]) == 2
    assert f"--fit {fast.key}: no usable fit under" in capsys.readouterr().err
