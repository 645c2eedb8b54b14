"""Trace-to-graph mapping, the overhead table, and the simulator."""

import math

import numpy as np
import pytest

from perfmodel.fit.generic import generic_model
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.trace.graph import Graph, Task, build_graph, match_node
from perfmodel.trace.overheads import (OverheadSamples, load_samples, samples_from_graph,
                                 save_samples, table_from_samples, traced_gaps_s,
                                 with_earlier_leaves)
from perfmodel.simulate.predict import predict_graph
from perfmodel.simulate.walk import SimTask, critical_path, simulate
from perfmodel.trace.parse import TraceNode, capture_trace, load_trace
from tests.helpers import ConstantFit, tiny_mlp, tiny_mlp_step

BANDWIDTH = 10e9


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    step = tiny_mlp_step(momentum=0.9)
    files = capture_trace(step, tmp_path_factory.mktemp("g"), "mlp", iterations=2, warmup=2)
    return build_graph(load_trace(files.et, files.kineto, files.calibration))


def _ops(graph):
    return [(t.op, t.direction) for t in graph.tasks if t.kind == "op"]


def test_forward_and_backward_ops_are_mapped(graph):
    ops = _ops(graph)
    assert ops.count(("linear", "forward")) == 2 and ops.count(("linear", "backward")) == 2
    assert ("relu", "forward") in ops and ("relu", "backward") in ops
    assert ("mse_loss", "forward") in ops and ("mse_loss", "backward") in ops
    assert ("sgd_foreach", "forward") in ops
    first = next(t for t in graph.tasks if t.op == "linear")
    assert first.params == {"B": 8, "IN": 16, "OUT": 32, "GRAD_INPUT": 1}
    assert first.dtype == "float32"
    # the first layer's input needs no gradient: its backward runs one GEMM
    backward = {t.params["IN"]: t.params["GRAD_INPUT"] for t in graph.tasks
                if t.kind == "op" and t.op == "linear" and t.direction == "backward"}
    assert backward == {16: 0, 32: 1}
    step = next(t for t in graph.tasks if t.op == "sgd_foreach")
    assert step.params == {"NTENSORS": 4, "NUMEL": round((16 * 32 + 32 + 32 + 1) / 4)}


def test_a_conv_backward_without_input_gradient_is_its_own_config(tmp_path):
    """The stem conv's input needs no gradient: its backward is GRAD_INPUT 0, read
    from convolution_backward's output_mask; the next conv's is 1."""
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 1))
    x = torch.randn(2, 3, 8, 8)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    files = capture_trace(step, tmp_path, "conv", iterations=1, warmup=1)
    g = build_graph(load_trace(files.et, files.kineto, files.calibration))
    backward = {t.params["C"]: t.params["GRAD_INPUT"] for t in g.tasks
                if t.kind == "op" and t.op == "conv2d" and t.direction == "backward"}
    assert backward == {3: 0, 8: 1}


def test_an_adam_step_is_read_from_its_parameters_not_its_step_counters(tmp_path):
    """AdamW's first foreach op adds 1 to the one-element step counters; the config
    is that of the parameters (4 tensors, 16·32 + 32 + 32 + 1 elements)."""
    import torch

    model, opt, x, _ = tiny_mlp(
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3, foreach=True))

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    files = capture_trace(step, tmp_path, "adamw", iterations=1, warmup=1)
    g = build_graph(load_trace(files.et, files.kineto, files.calibration))
    (task,) = [t for t in g.tasks if t.kind == "op" and t.op == "adamw_foreach"]
    assert task.params == {"NTENSORS": 4, "NUMEL": round((16 * 32 + 32 + 32 + 1) / 4)}


def test_nothing_is_dropped(graph):
    """Every top-level node of the iteration is a task (op, covered or unmodelled)."""
    kinds = {t.kind for t in graph.tasks}
    assert kinds <= {"op", "covered", "unmodelled", "overhead"}
    assert any(t.kind == "covered" and "TBackward0" in t.name for t in graph.tasks)
    names = {name for name, _, _ in graph.unmodelled()}
    assert any("AccumulateGrad" in n for n in names)
    shares = [share for _, _, share in graph.unmodelled()]
    assert all(0 <= s <= 1 for s in shares) and sum(shares) < 1


def test_overhead_table_roundtrip_and_fallbacks(graph, tmp_path):
    samples = samples_from_graph("mlp", graph, BANDWIDTH)
    assert samples.gaps["T1.iteration.autograd"] and samples.leaf
    save_samples(tmp_path / "mlp.json", samples)
    again = load_samples(tmp_path / "mlp.json")
    assert again.gaps == samples.gaps and again.leaf == samples.leaf
    table = table_from_samples([again], BANDWIDTH)
    assert table.gap("T1.iteration.autograd") == pytest.approx(
        float(np.median(samples.gaps["T1.iteration.autograd"])))
    assert table.gap("T1.iteration.never_seen") == table.gaps["T1.iteration"]
    assert table.gap("T9") == 0.0
    assert table.leaf_cost("no such op", 1e9) == pytest.approx(table.leaf_default_s + 0.1)


def test_traced_gaps_count_each_key_at_its_median():
    gap = lambda key, s: Task("overhead", key, "host overhead", measured_s=s)  # noqa: E731
    tasks = [gap("T1.op.op", 3e-6), gap("T1.op.op", 5e-6), gap("T1.op.op", 400e-6),  # a hiccup
             gap("T2.op", 2e-6), gap("T2.op", None),  # untimed: not counted
             Task("unmodelled", "aten::view", "unmodelled", measured_s=1.0)]
    # profiler cost 1 us per gap taken out: T1 median 4 us x 3, T2 1 us x 1
    assert traced_gaps_s(Graph(tasks, 1.0, 1e-6)) == pytest.approx(13e-6)
    assert traced_gaps_s(Graph([], None)) == 0.0


@given(st.lists(st.tuples(st.sampled_from(["T1.op.op", "T2.op", "T3.op"]),
                          st.floats(0, 1e-3)), max_size=60), st.floats(0, 1e-5))
def test_table_from_one_trace_prices_its_own_gaps_exactly(gaps, delta):
    """A table built from one graph alone predicts its traced gaps (robust count)."""
    tasks = [Task("overhead", key, "host overhead", measured_s=s) for key, s in gaps]
    g = Graph(tasks, 1.0, delta)
    table = table_from_samples([samples_from_graph("g", g, BANDWIDTH)], BANDWIDTH)
    predicted = predict_graph(g, None, table).breakdown_s.get("host overhead", 0.0)
    assert predicted == pytest.approx(traced_gaps_s(g), rel=1e-9, abs=1e-15)


@given(st.integers(1, 4).flatmap(lambda n: st.lists(
    st.lists(st.floats(0, 1e-3), min_size=n, max_size=n), min_size=1, max_size=8)),
    st.integers(1, 6))
def test_leaf_samples_keep_the_newest_traces(per_trace, traces):
    """Each trace's samples of one node name (as many per trace, as a node runs the same
    number of times per iteration), saved in turn: the file keeps the newest ``traces``
    traces' worth, and the gaps of the newest only."""
    kept = None
    for i, seconds in enumerate(per_trace):
        new = OverheadSamples("w", {"T1": [float(i)]}, {"aten::pow": [(s, 8.0) for s in seconds],
                                                        f"only_in_{i}": [(1.0, 1.0)]})
        kept = with_earlier_leaves(new, kept, traces)
        history = [(s, 8.0) for earlier in per_trace[:i + 1] for s in earlier]
        assert kept.leaf["aten::pow"] == history[-traces * len(seconds):]
        assert set(kept.leaf) == {"aten::pow", f"only_in_{i}"}  # names no longer seen go
        assert kept.gaps == {"T1": [float(i)]}
    other = OverheadSamples("other", {}, {"aten::pow": [(9.0, 9.0)]})
    assert with_earlier_leaves(new, other) is new  # another workload's file is not merged


def test_leaf_line_fits_size_dependence_and_falls_back():
    from perfmodel.trace.overheads import fit_leaf_line

    pairs = [(1e-6 + 2e-10 * b, b) for b in (1e3, 1e4, 1e5, 1e6)]
    a, b = fit_leaf_line(pairs, BANDWIDTH)
    assert a == pytest.approx(1e-6, rel=1e-6) and b == pytest.approx(2e-10)
    a, b = fit_leaf_line([(5e-6, 100.0), (7e-6, 120.0)], BANDWIDTH)  # too narrow: median
    assert b == 1 / BANDWIDTH and a == pytest.approx(6e-6, rel=1e-2)
    a, b = fit_leaf_line([(1e-6, 0.0)] * 3, BANDWIDTH)
    assert (a, b) == (pytest.approx(1e-6), 1 / BANDWIDTH)


@pytest.mark.parametrize("text, message", [
    ("{", "not readable JSON"), ('{"schema": 1}', "not perfmodel overhead samples"),
    ('{"schema": 1, "workload": "w", "gaps": {"T1": [-1]}, "leaf": {}}', "non-negative"),
    ('{"schema": 1, "workload": "w", "gaps": {}, "leaf": {"x": [[1e-6]]}}', "[seconds, bytes]"),
])
def test_bad_overhead_samples_name_the_file(tmp_path, text, message):
    path = tmp_path / "w.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_samples(path)
    assert str(path) in str(info.value)


def test_prediction_sums_ops_overheads_and_unmodelled(graph):
    table = table_from_samples([samples_from_graph("mlp", graph, BANDWIDTH)], BANDWIDTH)
    fit = ConstantFit(1e-3)
    generic_model(fit)  # the generic model's own predictor calls, made once per fit
    fit.calls = 0
    pred = predict_graph(graph, fit, table)
    n_ops = len(_ops(graph))
    assert pred.breakdown_s["gemm"] == pytest.approx(4e-3)
    assert sum(pred.breakdown_s.values()) == pytest.approx(pred.total_s)
    assert pred.total_s > n_ops * 1e-3
    assert fit.calls == len(set(_ops(graph)))  # one batched call per (op, direction, dtype)
    missing = predict_graph(graph, ConstantFit(1e-3, missing={"relu"}), table)
    assert missing.no_predictor == {"relu.forward": 1, "relu.backward": 1}


def test_match_reads_conv_scalars_and_sdpa_causality():
    conv = TraceNode(1, "aten::conv2d", 0, {
        "types": ["Tensor(float)", "Tensor(float)", "Tensor(float)", "GenericList[Int,Int]",
                  "GenericList[Int,Int]", "GenericList[Int,Int]", "Int"],
        "shapes": [[2, 8, 16, 16], [4, 8, 3, 3], [4], [[], []], [[], []], [[], []], []],
        "values": [[], [], [], [2, 2], [1, 1], [1, 1], 1]}, {})
    op, params, dtype = match_node(conv)
    assert op.name == "conv2d" and dtype == "float32"
    assert params == {"N": 2, "C": 8, "H": 16, "W": 16, "K": 4, "R": 3, "STRIDE": 2, "PAD": 1,
                      "DIL": 1, "GROUPS": 1, "GRAD_INPUT": 1, "BIAS": 1}
    conv.inputs["shapes"][2] = []  # bias=False: an empty third input
    assert match_node(conv)[1]["BIAS"] == 0
    sdpa = TraceNode(2, "aten::scaled_dot_product_attention", 0, {
        "types": ["Tensor(c10::BFloat16)"] * 3 + ["None", "Double", "Bool", "None", "Bool"],
        "shapes": [[2, 4, 16, 8]] * 3 + [[], [], [], [], []],
        "values": [[], [], [], None, 0.0, True, None, False]}, {})
    op, params, dtype = match_node(sdpa)
    assert op.name == "sdpa" and dtype == "bfloat16" and params["CAUSAL"] == 1
    assert params["DROPOUT"] == 0
    sdpa.inputs["values"][4] = 0.1  # dropout_p of a model in training
    assert match_node(sdpa)[1] == {"B": 2, "H": 4, "S": 16, "DH": 8, "CAUSAL": 1, "DROPOUT": 1}


_task = st.builds(
    SimTask, name=st.just("t"), category=st.sampled_from(["a", "b"]),
    host_s=st.floats(0, 1e-3),
    kernels=st.lists(st.tuples(st.integers(0, 2), st.floats(0, 1e-3)), max_size=3),
    inputs=st.lists(st.integers(0, 6), max_size=3).map(tuple),
    outputs=st.lists(st.integers(0, 6), max_size=2).map(tuple), sync=st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(_task, max_size=40))
def test_simulation_is_never_below_the_critical_path(tasks):
    result = simulate(tasks)
    assert result.total_s >= critical_path(tasks) - 1e-12
    assert result.total_s >= sum(t.host_s for t in tasks) - 1e-12
    assert result.device_active_s <= result.total_s + 1e-12


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1e-2), max_size=50))
def test_host_only_simulation_is_the_sum(durations):
    tasks = [SimTask("t", "x", d) for d in durations]
    assert math.isclose(simulate(tasks).total_s, sum(durations), abs_tol=1e-12)


def test_kernels_wait_for_their_inputs_on_other_streams():
    tasks = [SimTask("produce", "x", 1e-6, kernels=[(0, 5e-3)], outputs=(1,)),
             SimTask("consume", "x", 1e-6, kernels=[(1, 1e-3)], inputs=(1,)),
             SimTask("independent", "x", 1e-6, kernels=[(2, 1e-3)])]
    result = simulate(tasks)
    ends = {name: end for lane, name, _, end in result.timeline if lane != "cpu"}
    assert ends["consume"] == pytest.approx(6e-3 + 1e-6 / 2, rel=1e-3)
    assert ends["independent"] < 2e-3
    assert result.device_active_s == pytest.approx(6e-3, rel=1e-3)


def test_calls_beyond_the_fitted_configs_are_reported(graph):
    """An op whose call needs more than 4x the FLOPs (or bytes) of the largest
    config its predictor was fitted on is listed with its count and ratio."""
    from perfmodel.fit.fitting import OpAccuracy
    from perfmodel.simulate.predict import beyond_fit

    def accuracy(op, direction, flops, moved):
        return OpAccuracy(op, direction, 8, 16, "shape", "", 0.1, 0.1, 0.2, None, None, 0,
                          largest_flops=flops, largest_bytes=moved)

    fit = ConstantFit(1e-5)
    # the MLP's linears: 8x16x32 and 8x32x1 (8,448 and 528 FLOPs forward, biases included)
    fit.accuracy = {("linear", "forward"): accuracy("linear", "forward", 1024.0, 1e9),
                    ("relu", "forward"): accuracy("relu", "forward", 1e9, 1e9),
                    ("linear", "backward"): accuracy("linear", "backward", None, None)}
    assert beyond_fit(graph.tasks, fit) == {"linear.forward": (1, pytest.approx(8.25))}
    assert beyond_fit(graph.tasks, fit, factor=8.5) == {}
    pred = predict_graph(graph, fit, table_from_samples([], BANDWIDTH))
    assert pred.beyond_fit == {"linear.forward": (1, pytest.approx(8.25))}
    # a fit that never recorded its range cannot say
    plain = predict_graph(graph, ConstantFit(1e-5), table_from_samples([], BANDWIDTH))
    assert plain.beyond_fit is None
    fit.accuracy = {("linear", "backward"): accuracy("linear", "backward", None, None)}
    assert beyond_fit(graph.tasks, fit) is None


def _cuda_trace(tmp_path, extra_events=(), launch_overhead_s=None,
                launch=("cuda_runtime", "cudaLaunchKernel")):
    """A synthetic CUDA trace: a linear whose GEMM kernel runs 400 us on stream 7
    (launched in 5 us), then an ``aten::item`` that waits for it; the iteration
    lasts 1 ms. ``launch_overhead_s``: the calibration's profiler cost per launch."""
    import json

    def node(id, name, parent, shapes=(), types=()):
        return {"id": id, "name": name, "ctrl_deps": parent,
                "inputs": {"values": [[]] * len(shapes), "shapes": list(shapes),
                           "types": list(types)},
                "outputs": {"values": [], "shapes": [], "types": []}, "attrs": []}

    et = {"schema": "1.1.1-chakra.0.0.4", "nodes": [
        node(1, "[pytorch|profiler|execution_trace|process]", 1),
        node(2, "[pytorch|profiler|execution_trace|thread]", 1),
        node(3, "perfmodel::iteration", 2),
        node(4, "aten::linear", 3, ([64, 32], [16, 32], [16]), ["Tensor(float)"] * 3),
        node(5, "aten::item", 3)]}
    ev = [{"ph": "X", "cat": "user_annotation", "name": "perfmodel::iteration", "tid": 1,
           "ts": 0.0, "dur": 1000.0},
          {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "tid": 1, "ts": 10.0, "dur": 30.0},
          {"ph": "X", "cat": launch[0], "name": launch[1], "tid": 1, "ts": 20.0,
           "dur": 5.0, "args": {"correlation": 7}},
          {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "tid": 7, "ts": 30.0,
           "dur": 400.0, "args": {"correlation": 7, "stream": 7}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::item", "tid": 1, "ts": 50.0, "dur": 390.0},
          *extra_events]
    (tmp_path / "t.et.json").write_text(json.dumps(et))
    (tmp_path / "t.kineto.json").write_text(json.dumps({"traceEvents": ev}))
    calibration = None
    if launch_overhead_s is not None:
        calibration = tmp_path / "t.calibration.json"
        calibration.write_text(json.dumps({"profiler_overhead_s_per_op": 0.0,
                                           "profiler_overhead_s_per_launch": launch_overhead_s}))
    return load_trace(tmp_path / "t.et.json", tmp_path / "t.kineto.json", calibration)


def test_cuda_kernels_are_tied_to_their_ops_and_simulated_on_streams(tmp_path):
    """The CUDA path on a synthetic trace: Kineto kernels reach their CPU op
    through the launch's correlation id, and run on their stream in the simulation."""
    trace = _cuda_trace(tmp_path)
    (kernel,) = trace.nodes[4].kernels
    assert kernel.stream == 7 and kernel.dur_s == pytest.approx(400e-6)
    assert kernel.launch_ts_s == pytest.approx(20e-6)
    graph = build_graph(trace)
    linear = next(t for t in graph.tasks if t.op == "linear")
    assert linear.kernels == [kernel] and linear.params == {"B": 64, "IN": 32, "OUT": 16, "GRAD_INPUT": 1}
    assert any(t.sync for t in graph.tasks if t.name == "aten::item")
    table = table_from_samples([samples_from_graph("t", graph, BANDWIDTH)], BANDWIDTH)
    pred = predict_graph(graph, ConstantFit(1e-3), table, on_device=True)
    assert pred.sim.device_active_s == pytest.approx(1e-3)
    assert pred.predicted_s >= 1e-3  # the host waits for the kernel at aten::item
    assert any(lane == "stream 7" for lane, *_ in pred.timeline)
    assert pred.timeline is pred.sim.timeline


def test_kernels_launched_through_the_driver_api_reach_their_op(tmp_path):
    """cuBLAS launches its GEMMs with the driver's ``cuLaunchKernel`` (Kineto
    category ``cuda_driver``): those kernels are tied to their op too."""
    trace = _cuda_trace(tmp_path, launch=("cuda_driver", "cuLaunchKernel"))
    (kernel,) = trace.nodes[4].kernels
    assert kernel.stream == 7 and kernel.dur_s == pytest.approx(400e-6)
    linear = next(t for t in build_graph(trace).tasks if t.op == "linear")
    assert linear.kernels == [kernel]


def _two_node_backward_trace(tmp_path):
    """A linear on a 3-d input, as nn.Linear runs it: forward ``aten::linear``
    (over a view), and a backward of two autograd nodes of its sequence number:
    ``ViewBackward0`` (no kernel) first, then ``AddmmBackward0`` whose two GEMM
    kernels (300 and 200 us) run on stream 7."""
    import json

    def node(id, name, parent, shapes=(), types=(), seq=-1):
        return {"id": id, "name": name, "ctrl_deps": parent,
                "inputs": {"values": [[]] * len(shapes), "shapes": list(shapes),
                           "types": list(types)},
                "outputs": {"values": [], "shapes": [], "types": []},
                "attrs": [{"name": "seq_id", "value": seq}]}

    prefix = "autograd::engine::evaluate_function: "
    et = {"schema": "1.1.1-chakra.0.0.4", "nodes": [
        node(1, "[pytorch|profiler|execution_trace|process]", 1),
        node(2, "[pytorch|profiler|execution_trace|thread]", 1),
        node(3, "perfmodel::iteration", 2),
        node(4, "aten::linear", 3, ([64, 32], [16, 32], [16]), ["Tensor(float)"] * 3),
        node(5, "aten::view", 4, seq=11),
        node(6, "aten::addmm", 4, seq=12),
        node(7, prefix + "ViewBackward0", 3),
        node(8, "ViewBackward0", 7, seq=11),
        node(9, prefix + "AddmmBackward0", 3),
        node(10, "AddmmBackward0", 9, seq=12),
        node(11, "aten::mm", 10)]}

    def op(name, ts, dur, tid=1):
        return {"ph": "X", "cat": "cpu_op", "name": name, "tid": tid, "ts": ts, "dur": dur}

    ev = [{"ph": "X", "cat": "user_annotation", "name": "perfmodel::iteration", "tid": 1,
           "ts": 0.0, "dur": 1000.0},
          op("aten::linear", 10.0, 30.0), op("aten::view", 12.0, 2.0),
          op("aten::addmm", 16.0, 20.0),
          op(prefix + "ViewBackward0", 50.0, 10.0), op("ViewBackward0", 51.0, 8.0),
          op(prefix + "AddmmBackward0", 70.0, 40.0), op("AddmmBackward0", 71.0, 38.0),
          op("aten::mm", 72.0, 30.0)]
    for corr, (ts, dur) in enumerate(((75.0, 300.0), (90.0, 200.0)), start=20):
        ev += [{"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "tid": 1,
                "ts": ts, "dur": 3.0, "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": f"gemm{corr}", "tid": 7, "ts": ts + 20,
                "dur": dur, "args": {"correlation": corr, "stream": 7}}]
    (tmp_path / "b.et.json").write_text(json.dumps(et))
    (tmp_path / "b.kineto.json").write_text(json.dumps({"traceEvents": ev}))
    return load_trace(tmp_path / "b.et.json", tmp_path / "b.kineto.json")


def test_a_backward_over_several_autograd_nodes_owns_all_their_kernels(tmp_path):
    """The op's backward task (its first autograd node) carries the kernels of
    the nodes it covers, so on a device its predicted time runs on their
    stream, in line with the rest, and not beside them on the host."""
    graph = build_graph(_two_node_backward_trace(tmp_path))
    (backward,) = [t for t in graph.tasks if t.kind == "op" and t.direction == "backward"]
    (covered,) = [t for t in graph.tasks if t.kind == "covered"]
    assert "ViewBackward0" in backward.name and "AddmmBackward0" in covered.name
    assert [k.name for k in backward.kernels] == ["gemm20", "gemm21"]
    assert covered.kernels == []
    pred = predict_graph(graph, ConstantFit(1e-3), table_from_samples([], BANDWIDTH),
                         on_device=True)
    # the forward's and the backward's 1 ms each, one after the other on stream 7
    assert pred.sim.device_active_s == pytest.approx(2e-3)
    assert pred.predicted_s >= 2e-3


def test_an_op_without_traced_kernels_runs_on_the_main_stream_on_a_device():
    """On a device, a priced op whose kernels the trace did not tie to it runs
    on the stream that carried most traced kernel time, not on the host, where
    it would overlap the device's work."""
    from perfmodel.trace.parse import Kernel

    k = Kernel("gemm", 7, 0.0, 4e-4, 0.0, 5e-6)
    tasks = [Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                  dtype="float32", params={"B": 64, "IN": 32, "OUT": 16, "GRAD_INPUT": 1},
                  kernels=[k]),
             Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                  dtype="float32", params={"B": 64, "IN": 32, "OUT": 16, "GRAD_INPUT": 1})]
    pred = predict_graph(Graph(tasks, None), ConstantFit(1e-3), table_from_samples([], BANDWIDTH),
                         on_device=True)
    assert pred.sim.device_active_s == pytest.approx(2e-3)
    assert pred.predicted_s >= 2e-3
    host = predict_graph(Graph(tasks, None), ConstantFit(1e-3), table_from_samples([], BANDWIDTH))
    assert host.sim.device_active_s == 0


def test_host_waits_for_the_device_are_not_host_overhead(tmp_path):
    """Time the host spends in CUDA synchronize calls (``aten::item`` waiting
    for the GEMM; the step's closing ``torch.cuda.synchronize``) is the
    device's: the gap and leaf samples leave it out, and the simulator puts the
    waits back where the kernels make them."""
    waits = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "tid": 1,
              "ts": 60.0, "dur": 370.0},
             {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "tid": 1,
              "ts": 450.0, "dur": 500.0}]
    plain = build_graph(_cuda_trace(tmp_path))
    graph = build_graph(_cuda_trace(tmp_path, waits))
    item = next(t for t in graph.tasks if t.name == "aten::item")
    end = next(t for t in graph.tasks if t.name == "T3.iteration")
    assert item.waited_s == pytest.approx(370e-6) and end.waited_s == pytest.approx(500e-6)
    assert all(t.waited_s == 0 for t in plain.tasks)
    samples = samples_from_graph("t", graph, BANDWIDTH)
    assert samples.gaps["T3.iteration"] == [pytest.approx(60e-6)]  # 440 -> 1000 us, less 500
    assert samples.leaf["aten::item"][0][0] == pytest.approx(20e-6)  # 390 us, less 370
    assert samples_from_graph("t", plain, BANDWIDTH).gaps["T3.iteration"] == [pytest.approx(560e-6)]
    table = table_from_samples([samples], BANDWIDTH)
    pred = predict_graph(graph, ConstantFit(400e-6), table, on_device=True)
    # the GEMM's 400 us on the device sets the iteration; counted as host
    # overhead too, the waits made it 1.5 ms
    assert 400e-6 <= pred.total_s < 600e-6
    assert pred.breakdown_s["host overhead"] < 100e-6


@pytest.mark.parametrize("launch_overhead_s, t4_s", [(None, 5e-6), (2e-6, 3e-6), (8e-6, 0.0)])
def test_the_profilers_cost_per_launch_is_taken_out_of_launch_samples(tmp_path,
                                                                      launch_overhead_s, t4_s):
    """A CUDA calibration's cost per kernel launch (CUPTI's, beyond the cost per
    op) comes off every launch sample (T4), floored at 0; older calibrations
    without it leave the samples as traced."""
    trace = _cuda_trace(tmp_path, launch_overhead_s=launch_overhead_s)
    assert trace.profiler_launch_overhead_s == (launch_overhead_s or 0.0)
    samples = samples_from_graph("t", build_graph(trace), BANDWIDTH)
    assert samples.gaps["T4"] == [pytest.approx(t4_s)]


def test_retrace_rebuilds_a_case_and_its_overheads_from_its_raw_traces(tmp_path):
    """``perfmodel replay --retrace``: a case whose stored graph predates a parser
    fix is rebuilt from the raw traces kept beside it; its measurement stays."""
    import shutil

    from perfmodel.replay.case import ReplayCase, load_case, measured_timing, save_case
    from perfmodel.replay.retrace import retrace_device
    from perfmodel.store import paths

    trace = _cuda_trace(tmp_path, launch=("cuda_driver", "cuLaunchKernel"))
    assert trace.nodes[4].kernels
    device = tmp_path / "results" / "cuda-test"
    et, kineto, _ = paths.trace_files(paths.traces_dir(device), "w")
    et.parent.mkdir(parents=True)
    shutil.copy(tmp_path / "t.et.json", et)
    shutil.copy(tmp_path / "t.kineto.json", kineto)
    case = ReplayCase("w", "cuda-test", True, BANDWIDTH, None, [Graph([], 1e-3)],
                      measured_timing(1e-3, 1e-5, 3, 2))
    save_case(paths.replay_file(device, "w"), case)
    paths.replay_file(device, "lone").write_bytes(paths.replay_file(device, "w").read_bytes())
    done = dict(retrace_device(device))
    assert done["w"].startswith("rebuilt: 0 -> ") and "no raw trace" in done["lone"]
    again = load_case(paths.replay_file(device, "w"))
    linear = next(t for t in again.graphs[0].tasks if t.op == "linear")
    assert [k.stream for k in linear.kernels] == [7]
    assert again.measured == case.measured
    assert load_samples(paths.overhead_file(device, "w")).workload == "w"


def test_back_to_back_iterations_overlap_the_hosts_lead_with_the_devices_tail():
    """A host-led iteration (1 ms on the host, then a 1 ms kernel): from idle
    streams it takes 2 ms; four back to back take 5 ms, 1.25 ms each, as a
    measured block of four does. Host-only work does not change."""
    from perfmodel.simulate.predict import back_to_back_s

    tasks = [SimTask("host", "a", 1e-3), SimTask("op", "b", 0.0, kernels=[(0, 1e-3)])]
    assert simulate(tasks).total_s == pytest.approx(2e-3)
    assert back_to_back_s(tasks, 1) == pytest.approx(2e-3)
    assert back_to_back_s(tasks, 4) == pytest.approx(1.25e-3)
    host_only = [SimTask("host", "a", 1e-3), SimTask("host", "c", 2e-3)]
    assert back_to_back_s(host_only, 5) == pytest.approx(3e-3)


@settings(max_examples=200, deadline=None)
@given(st.lists(_task, min_size=1, max_size=30), st.integers(1, 6))
def test_back_to_back_is_between_a_kth_and_all_of_one_iteration(tasks, k):
    from perfmodel.simulate.predict import back_to_back_s

    one = simulate(tasks, keep_timeline=False).total_s
    per = back_to_back_s(tasks, k)
    assert one / k - 1e-12 <= per <= one + 1e-12
    assert per >= sum(t.host_s for t in tasks) - 1e-12  # the host never overlaps itself
