"""The generic model: node categories, lines learned from a fit, pricing and coverage."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.fit.generic import SOURCES, GenericModel, Line, fit_line, generic_from_fit
from perfmodel.ops import OPS
from perfmodel.trace.categories import CATEGORIES, COMPUTE_BOUND, NAMED, host_only, leaf_category
from tests.helpers import ConstantFit


def _t(numel, elem=4):
    return [1, 1, 0, numel, elem, "cpu"]


@pytest.mark.parametrize("name, inputs, outputs, expected", [
    ("aten::pow", [_t(100)], [_t(100)], "pointwise"),
    ("aten::where", [_t(100, 1), _t(100), _t(100)], [_t(100)], "pointwise"),
    ("aten::amax", [_t(100)], [_t(10)], "reduction"),
    ("aten::some_new_reduction", [_t(1000)], [_t(1)], "reduction"),
    ("aten::some_new_lookup", [_t(1000), _t(50, 8)], [_t(200)], "gather_scatter"),
    ("aten::some_new_pointwise", [_t(1000), _t(1000)], [_t(1000)], "pointwise"),
    ("aten::index", [_t(1000)], [_t(1000)], "gather_scatter"),
    ("aten::cat", [_t(10), _t(10)], [_t(20)], "layout"),
    ("aten::mm", [_t(100), _t(100)], [_t(100)], None),
    ("aten::empty", [], [_t(100)], None),
    ("aten::zero_", [], [], None),
    ("Optimizer.step#Adam.step", [_t(10)], [_t(10)], None),
])
def test_leaf_categories(name, inputs, outputs, expected):
    assert leaf_category(name, False, inputs, outputs) == expected


def test_a_view_has_no_category_and_named_ops_are_known():
    assert leaf_category("aten::pow", True, [_t(10)], [_t(10)]) is None
    assert set(NAMED.values()) == set(CATEGORIES)
    assert not COMPUTE_BOUND & set(NAMED)


def test_every_source_is_a_known_category():
    assert set(SOURCES) == set(CATEGORIES)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e2, 1e9), st.floats(1e-7, 1e-1)), min_size=2, max_size=30))
def test_fit_line_is_non_negative_and_finite(points):
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    a, b = fit_line(x, y)
    assert a >= 0 and b >= 0 and math.isfinite(a) and math.isfinite(b)
    assert a > 0 or b > 0


def test_fit_line_recovers_an_exact_line():
    x = np.array([1e3, 1e5, 1e7, 1e8])
    a, b = fit_line(x, 2e-6 + x / 50e9)
    assert a == pytest.approx(2e-6, rel=1e-6) and b == pytest.approx(1 / 50e9, rel=1e-6)


_LINES = st.builds(lambda a, bw: Line(a, 1 / bw, ("x.forward",), 2, 0.1),
                   st.floats(1e-8, 1e-4), st.floats(1e8, 1e13))


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({c: _LINES for c in CATEGORIES}),
       st.dictionaries(st.sampled_from(CATEGORIES),
                       st.tuples(st.integers(1, 1000), st.floats(0, 1e10)), min_size=1),
       st.floats(1, 1e9))
def test_generic_prices_are_finite_positive_and_monotone_in_bytes(lines, parts, extra):
    model = GenericModel(lines)
    parts = {c: [n, b] for c, (n, b) in parts.items()}
    price = model.seconds(parts)
    assert math.isfinite(price) and price > 0
    cat = next(iter(parts))
    more = {**parts, cat: [parts[cat][0], parts[cat][1] + extra]}
    assert model.seconds(more) > price
    assert model.seconds({**parts, cat: [parts[cat][0] + 1, parts[cat][1]]}) > price


def test_a_fit_teaches_one_line_per_category():
    model = generic_from_fit(ConstantFit(1e-5))
    assert set(model.lines) == set(CATEGORIES)
    # a constant predictor is a per-call cost with nothing per byte
    assert model.lines["pointwise"].a_s == pytest.approx(1e-5)
    assert model.lines["pointwise"].b_s_per_B == pytest.approx(0.0, abs=1e-18)
    assert all(line.points >= 2 for line in model.lines.values())
    assert len(model.describe()) == len(CATEGORIES)


def test_a_category_without_sources_borrows_pointwise():
    pointwise_only = {op for op, _ in SOURCES["pointwise"]}
    missing = [name for name in OPS if name not in pointwise_only]
    model = generic_from_fit(ConstantFit(2e-5, missing=missing))
    assert model.borrowed == tuple(c for c in CATEGORIES if c != "pointwise")
    assert model.lines["layout"] is model.lines["pointwise"]
    assert generic_from_fit(ConstantFit(2e-5, missing=list(OPS))) is None
    assert generic_from_fit(None) is None


def _pow_step():
    """A training step whose loss goes through ``torch.pow`` and ``torch.where``,
    which no op definition knows."""
    import torch

    torch.manual_seed(0)
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(64, 64)
    opt = torch.optim.SGD([w], lr=0.01, foreach=True)

    def step():
        opt.zero_grad(set_to_none=True)
        y = torch.where(x > 0, torch.pow(w, 3), w)
        loss = y.sum()
        loss.backward()
        opt.step()
        return loss
    return step


def test_unknown_nodes_are_priced_by_the_generic_model(tmp_path):
    from perfmodel.simulate.predict import predict_graph, sim_tasks
    from perfmodel.trace.graph import build_graph
    from perfmodel.trace.overheads import samples_from_graph, table_from_samples
    from perfmodel.trace.parse import capture_trace, load_trace

    files = capture_trace(_pow_step(), tmp_path, "pow", iterations=2, warmup=1)
    graph = build_graph(load_trace(files.et, files.kineto, files.calibration))
    pow_tasks = [t for t in graph.tasks if t.name == "aten::pow"]
    assert pow_tasks and pow_tasks[0].parts["pointwise"][0] >= 1
    assert pow_tasks[0].parts["pointwise"][1] >= 2 * 64 * 64 * 4
    table = table_from_samples([samples_from_graph("pow", graph, 1e10)], 1e10)
    fit = ConstantFit(1e-3)
    tasks, _ = sim_tasks(graph, fit, table, False)
    priced = [t for t in tasks if t.category == "generic"]
    assert any(t.name == "aten::pow" for t in priced)
    assert all(t.host_s >= 1e-3 for t in priced)  # at least one leaf at the constant's cost
    plain, _ = sim_tasks(graph, fit, table, False, generic=False)
    assert not any(t.category == "generic" for t in plain)
    cover = predict_graph(graph, fit, table).coverage
    assert cover.by_generic > 0
    assert cover.by_host > 0  # zero_grad, AccumulateGrad and the views
    assert cover.by_op + cover.by_generic + cover.by_overheads + cover.by_host + \
        cover.unmodelled == pytest.approx(1.0)
    assert "host-only nodes" in cover.line()


_EVAL = "autograd::engine::evaluate_function: "


@pytest.mark.parametrize("name, expected", [
    ("aten::view", True), ("aten::unbind", True), ("aten::empty_like", True), ("aten::to", True),
    ("Optimizer.zero_grad#AdamW.zero_grad", True),
    (_EVAL + "torch::autograd::AccumulateGrad", True), (_EVAL + "ViewBackward0", True),
    (_EVAL + "AddBackward0", True), (_EVAL + "CatBackward0", True),
    (_EVAL + "UnsafeViewBackward0", True), (_EVAL + "SqueezeBackward1", True),
    (_EVAL + "MmBackward0", False), (_EVAL + "MkldnnRnnLayerBackward0", False),
    (_EVAL + "ConvolutionBackward0", False), (_EVAL + "MyFusedThingBackward0", False),
    ("aten::mm", False), ("aten::lstm", False), ("aten::my_custom_op", False),
    ("## forward ##", False),
])
def test_host_only_nodes_are_views_allocations_and_autograd_bookkeeping(name, expected):
    assert host_only(name) is expected


def test_coverage_counts_host_only_nodes_apart_from_the_unmodelled():
    from perfmodel.simulate.predict import coverage
    from perfmodel.trace.graph import Task

    tasks = [Task("unmodelled", _EVAL + "torch::autograd::AccumulateGrad", "unmodelled", measured_s=1.0),
             Task("unmodelled", _EVAL + "MmBackward0", "unmodelled", measured_s=2.0),
             Task("unmodelled", "aten::view", "unmodelled", measured_s=3.0),
             Task("unmodelled", "aten::pow", "unmodelled", measured_s=4.0,
                  parts={"pointwise": [1, 64.0]}),
             Task("overhead", "T1", "overhead", measured_s=5.0)]
    cover = coverage(tasks, {}, generic=True)
    assert (cover.by_host, cover.unmodelled, cover.by_generic, cover.by_overheads) == \
        pytest.approx((4 / 15, 2 / 15, 4 / 15, 5 / 15))


def test_replay_cases_keep_parts_and_old_cases_still_load(tmp_path):
    from perfmodel.replay.case import ReplayError, case_from_plain, case_to_plain
    from perfmodel.trace.graph import Graph, Task

    task = Task("unmodelled", "aten::pow", "unmodelled", bytes=32.0, measured_s=1e-5,
                parts={"pointwise": [1, 32.0]}, launch_gaps=(2e-6, 1e-6))
    data = _minimal_case(Graph([task], 1e-5))
    plain = case_to_plain(case_from_plain(data))
    assert plain["graphs"][0]["tasks"][0][-2:] == [{"pointwise": [1, 32.0]}, [2e-6, 1e-6]]
    old = _minimal_case(Graph([task], 1e-5))
    old["schema"] = 1
    old["graphs"][0]["task_fields"] = old["graphs"][0]["task_fields"][:-2]
    old["graphs"][0]["tasks"] = [row[:-2] for row in old["graphs"][0]["tasks"]]
    assert case_from_plain(old).graphs[0].tasks[0].parts == {}
    bad = _minimal_case(Graph([task], 1e-5))
    bad["graphs"][0]["tasks"][0][-2] = {"matmul": [1, 2.0]}
    with pytest.raises(ReplayError, match="unknown category 'matmul'"):
        case_from_plain(bad, "x.json.gz")


def _minimal_case(graph):
    from perfmodel.replay.case import MeasuredTiming, ReplayCase, case_to_plain

    return case_to_plain(ReplayCase("w", "cpu-x", False, 1e10, 1, [graph],
                                    MeasuredTiming(1e-5, 1e-7, 5, 1), {}, {}, None, {}))


def test_launch_gaps_teach_the_table_its_launch_overheads():
    from perfmodel.trace.graph import Graph, Task
    from perfmodel.trace.overheads import samples_from_graph, table_from_samples

    tasks = [Task("op", "aten::addmm", "gemm", op="addmm", direction="forward",
                  measured_s=5e-5, launch_gaps=(t2, 3e-6)) for t2 in (1e-5, 2e-5, 3e-5)]
    graph = Graph(tasks, 2e-4, profiler_overhead_s=1e-6)
    samples = samples_from_graph("w", graph, 1e12)
    assert samples.gaps["T2.launch"] == pytest.approx([9e-6, 19e-6, 29e-6])
    table = table_from_samples([samples], 1e12)
    assert table.gap("T2.launch") == pytest.approx(19e-6)
    assert table.gap("T3.launch") == pytest.approx(2e-6)


def test_contributors_rank_the_categories_by_their_share_of_the_error():
    from perfmodel.e2e.result import IterationTiming, MeasuredIteration
    from perfmodel.simulate.result import IterationPrediction

    prediction = IterationPrediction(0.012, {"gemm": 0.008, "generic": 0.001,
                                             "host overhead": 0.003})
    result = MeasuredIteration("m", IterationTiming(0.010, 1e-4, 10, 1, 100.0), prediction,
                               traced_breakdown_s={"gemm": 0.006, "generic": 0.0015,
                                                   "host overhead": 0.0025})
    rows = result.contributors()
    assert [r[0] for r in rows] == ["gemm", "generic", "host overhead"] or \
        [r[0] for r in rows] == ["gemm", "host overhead", "generic"]
    assert rows[0] == pytest.approx(("gemm", 0.008, 0.006, 0.2))
    assert sum(r[3] for r in rows) == pytest.approx((0.012 - 0.010) / 0.010)


def test_sizes_below_the_measured_ones_are_raised_to_them():
    from perfmodel.ops import get_op

    op = get_op("sum")
    floors = {k: min(c[k] for p in ("smoke", "quick", "gpu") for c in op.configs(p, workloads=False))
              for k in op.params}
    assert op.raised_to_measured({"ROWS": 6656, "COLS": 1}) == \
        {"ROWS": max(6656, floors["ROWS"]), "COLS": floors["COLS"]}
    inside = {"ROWS": max(64, floors["ROWS"]), "COLS": max(64, floors["COLS"])}
    assert op.raised_to_measured(inside) == inside
    linear = get_op("linear")  # a flag (GRAD_INPUT) is not a size: 0 stays 0
    raised = linear.raised_to_measured({"B": 1, "IN": 1, "OUT": 1, "GRAD_INPUT": 0})
    assert raised["GRAD_INPUT"] == 0 and all(raised[k] >= 1 for k in ("B", "IN", "OUT"))
