"""Indexing ops and the elementwise reductions, scan and silu: runners execute on
a CPU, trace nodes map back to the config, and a real captured training step
maps to their forward and backward op tasks."""

import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import cases_for, get_op
from perfmodel.ops import indexing
from perfmodel.trace.parse import TraceNode

INDEXING = ("gather", "scatter_add", "scatter", "index", "index_add", "index_put", "topk",
            "sort", "nonzero", "masked_select")
ELEMENTWISE = ("silu", "amax", "var", "std", "norm", "cumsum")
REDUCTIONS = ("amax", "var", "std", "norm")


def test_the_family_defines_the_requested_ops():
    assert tuple(op.name for op in indexing.OPS) == INDEXING
    assert {get_op(n).family for n in INDEXING} == {"indexing"}
    assert {get_op(n).family for n in ELEMENTWISE} == {"elementwise"}
    assert get_op("nonzero").directions == ("forward",)
    assert all(get_op(n).directions == ("forward", "backward") for n in INDEXING + ELEMENTWISE
               if n != "nonzero")


@pytest.mark.parametrize("name", INDEXING)
def test_smoke_is_four_float32_configs_and_quick_sixteen(name):
    """Four: the fewest that the smoke suite's accuracy items can fit and score."""
    from perfmodel.fit.fitting import MIN_CONFIGS

    op = get_op(name)
    assert len(op.configs("smoke")) == MIN_CONFIGS == 4 and {c.dtype for c in op.cases("smoke")} == {"float32"}
    assert len(op.configs("quick")) == len(op.configs("gpu")) == 16
    assert {c.dtype for c in op.cases("quick")} == set(op.dtypes)
    assert all(op.accepts(c) for p in ("smoke", "quick", "gpu") for c in op.configs(p))


def test_gather_and_scatter_configs_index_the_last_the_first_and_a_middle_dim():
    configs = get_op("gather").configs("quick")
    assert sum(c["INNER"] == 1 for c in configs) >= 8
    assert any(c["OUTER"] == 1 and c["INNER"] > 1 for c in configs)
    assert any(c["OUTER"] > 1 and c["INNER"] > 1 for c in configs)


def test_the_index_range_changes_only_the_backward_work():
    for name, small, big in [
            ("gather", {"OUTER": 2, "SIZE": 10, "INDICES": 3, "INNER": 4}, {"SIZE": 1000}),
            ("index", {"ROWS": 10, "COLS": 8, "INDICES": 4}, {"ROWS": 1000}),
            ("index_put", {"ROWS": 10, "COLS": 8, "INDICES": 4}, {"ROWS": 1000})]:
        op, grown = get_op(name), {**small, **big}
        assert op.bytes_moved(small, "float32", "forward") == \
            op.bytes_moved(grown, "float32", "forward")
        assert op.bytes_moved(small, "float32", "backward") < \
            op.bytes_moved(grown, "float32", "backward")
    # 24 elements gathered: read and written in 4 B, 6 int64 indices (the index is expanded)
    assert get_op("gather").bytes_moved(
        {"OUTER": 2, "SIZE": 10, "INDICES": 3, "INNER": 4}, "float32", "forward") == \
        4 * 2 * 24 + 8 * 6


# -- runners ----------------------------------------------------------------------------------

def _expected_shapes(name, direction, p):
    """Shapes of what a runner returns: the forward's output(s), or autograd's gradients."""
    if name in ELEMENTWISE:
        if direction == "forward" and name in REDUCTIONS:
            return [(p["ROWS"],)]
        return [(p["ROWS"], p["COLS"])]
    if name in ("gather", "scatter_add", "scatter"):
        whole = (p["OUTER"], p["SIZE"], p["INNER"])
        picked = (p["OUTER"], p["INDICES"], p["INNER"])
        return {("gather", "forward"): [picked], ("gather", "backward"): [whole],
                ("scatter_add", "forward"): [whole], ("scatter_add", "backward"): [picked],
                ("scatter", "forward"): [whole], ("scatter", "backward"): [whole, picked],
                }[name, direction]
    if name in ("index", "index_add", "index_put"):
        whole, rows = (p["ROWS"], p["COLS"]), (p["INDICES"], p["COLS"])
        return {("index", "forward"): [rows], ("index", "backward"): [whole],
                ("index_add", "forward"): [whole], ("index_add", "backward"): [rows],
                ("index_put", "forward"): [whole], ("index_put", "backward"): [whole, rows],
                }[name, direction]
    whole, half = (p["ROWS"], p["COLS"]), p["ROWS"] * p["COLS"] // 2
    if direction == "backward":
        return [whole]
    return {"topk": [(p["ROWS"], p.get("K", 0))] * 2, "sort": [whole] * 2,
            "nonzero": [(half, 2)], "masked_select": [(half,)]}[name]


@pytest.mark.parametrize("name", INDEXING + ELEMENTWISE)
def test_runners_execute_on_cpu(name):
    import torch

    op = get_op(name)
    cases = cases_for([name], "smoke")
    assert {c.direction for c in cases} == set(op.directions)
    for case in cases:
        out = op.make_runner(case.params, case.dtype, case.direction, "cpu")()
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        assert [tuple(t.shape) for t in outs] == _expected_shapes(name, case.direction,
                                                                  case.params), case.id
        floats = [t for t in outs if t.is_floating_point()]
        assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in floats)
        if name == "topk" and case.direction == "forward":
            assert outs[1].dtype == torch.int64


def test_runners_run_bfloat16():
    import torch

    for name in ("gather", "index_add", "topk", "masked_select", "cumsum"):
        op = get_op(name)
        params = op.configs("smoke")[0]
        grads = op.make_runner(params, "bfloat16", "backward", "cpu")()
        assert grads[0].dtype == torch.bfloat16 and torch.isfinite(grads[0]).all()


# -- trace nodes ------------------------------------------------------------------------------

_T = [0, 0, 0, 1, 4, "cpu"]  # an ET tensor value; its contents do not matter here


def _node(name, shapes, types, values):
    return TraceNode(1, name, 0, {"shapes": shapes, "types": types, "values": values}, {})


def _trace_node(name, p):
    """A node of ``name`` as a CPU trace records a call of config ``p``."""
    f, i, b, long = "Tensor(float)", "Int", "Bool", "Tensor(long int)"
    if name == "gather":
        x, idx = [p["OUTER"], p["SIZE"], p["INNER"]], [p["OUTER"], p["INDICES"], p["INNER"]]
        return _node("aten::gather", [x, [], idx, []], [f, i, long, b], [_T, 1, _T, False])
    if name in ("scatter_add", "scatter"):
        x, idx = [p["OUTER"], p["SIZE"], p["INNER"]], [p["OUTER"], p["INDICES"], p["INNER"]]
        return _node(f"aten::{name}_", [x, [], idx, idx], [f, i, long, f], [_T, 1, _T, _T])
    x, rows = [p.get("ROWS"), p.get("COLS")], [p.get("INDICES"), p.get("COLS")]
    if name == "index":
        return _node("aten::index", [x, [[p["INDICES"]]]], [f, f"GenericList[{long}]"],
                     [_T, [_T]])
    if name == "index_add":
        return _node("aten::index_add_", [x, [], [p["INDICES"]], rows, []], [f, i, long, f, i],
                     [_T, 0, _T, _T, 1])
    if name == "index_put":
        return _node("aten::index_put_", [x, [[p["INDICES"]]], rows, []],
                     [f, f"GenericList[{long}]", f, b], [_T, [_T], _T, False])
    if name == "topk":
        return _node("aten::topk", [x, [], [], [], []], [f, i, i, b, b],
                     [_T, p["K"], -1, True, True])
    if name == "sort":
        return _node("aten::sort", [x, [], []], [f, i, b], [_T, -1, False])
    if name == "nonzero":
        return _node("aten::nonzero", [x], ["Tensor(bool)"], [_T])
    if name == "masked_select":
        return _node("aten::masked_select", [x, x], [f, "Tensor(bool)"], [_T, _T])
    if name in ("silu",):
        return _node("aten::silu", [x], [f], [_T])
    if name == "amax":
        return _node("aten::amax", [x, [[]], []], [f, "GenericList[Int]", b], [_T, [-1], False])
    if name in ("var", "std"):
        return _node(f"aten::{name}", [x, [[]], [], []], [f, "GenericList[Int]", b, b],
                     [_T, [-1], True, False])
    if name == "norm":
        return _node("aten::linalg_vector_norm", [x, [], [[]], [], []],
                     [f, i, "GenericList[Int]", b, "None"], [_T, 2, [-1], False, "<None>"])
    assert name == "cumsum"
    return _node("aten::cumsum", [x, [], []], [f, i, "None"], [_T, -1, "<None>"])


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(INDEXING + ELEMENTWISE), data=st.data())
def test_trace_nodes_map_back_to_the_config(name, data):
    op = get_op(name)
    params = {p: data.draw(st.integers(1, 64), label=p) for p in op.params}
    if name == "topk":
        params["K"] = data.draw(st.integers(1, params["COLS"]), label="K")
    assert op.params_from_node(_trace_node(name, params)) == params


@pytest.mark.parametrize("name, shapes, types, values, expected", [
    # gather along the last and the first dim of a 2-D tensor
    ("gather", [[6, 9], [], [6, 4], []], ["Tensor(float)", "Int", "Tensor(long int)", "Bool"],
     [_T, -1, _T, False], {"OUTER": 6, "SIZE": 9, "INDICES": 4, "INNER": 1}),
    ("gather", [[6, 9], [], [4, 9], []], ["Tensor(float)", "Int", "Tensor(long int)", "Bool"],
     [_T, 0, _T, False], {"OUTER": 1, "SIZE": 6, "INDICES": 4, "INNER": 9}),
    # an index smaller than the input in another dim, a scalar src, a reduce argument
    ("gather", [[6, 9], [], [5, 4], []], ["Tensor(float)", "Int", "Tensor(long int)", "Bool"],
     [_T, 1, _T, False], None),
    ("scatter", [[6, 9], [], [6, 4], []], ["Tensor(float)", "Int", "Tensor(long int)", "Double"],
     [_T, 1, _T, 0.0], None),
    ("scatter", [[6, 9], [], [6, 4], [6, 4], []],
     ["Tensor(float)", "Int", "Tensor(long int)", "Tensor(float)", "String"],
     [_T, 1, _T, _T, "add"], None),
    # x[mask], x[i, j], x[:, i]
    ("index", [[6, 9], [[6]]], ["Tensor(float)", "GenericList[Tensor(bool)]"], [_T, [_T]], None),
    ("index", [[6, 9], [[4], [4]]], ["Tensor(float)", "GenericList[Tensor(long int),Tensor("
                                     "long int)]"], [_T, [_T, _T]], None),
    ("index", [[6, 9], [[], [4]]], ["Tensor(float)", "GenericList[None,Tensor(long int)]"],
     [_T, ["<None>", _T]], None),
    ("index", [[6, 3, 3], [[4]]], ["Tensor(float)", "GenericList[Tensor(long int)]"],
     [_T, [_T]], {"ROWS": 6, "COLS": 9, "INDICES": 4}),
    # accumulate, index_add along dim 1
    ("index_put", [[6, 9], [[4]], [4, 9], []],
     ["Tensor(float)", "GenericList[Tensor(long int)]", "Tensor(float)", "Bool"],
     [_T, [_T], _T, True], None),
    ("index_add", [[6, 9], [], [4], [6, 4], []],
     ["Tensor(float)", "Int", "Tensor(long int)", "Tensor(float)", "Int"], [_T, 1, _T, _T, 1],
     None),
    # k larger than the dim, topk and sort along dim 0
    ("topk", [[6, 9], [], [], [], []], ["Tensor(float)", "Int", "Int", "Bool", "Bool"],
     [_T, 10, -1, True, True], None),
    ("topk", [[6, 9], [], [], [], []], ["Tensor(float)", "Int", "Int", "Bool", "Bool"],
     [_T, 3, 0, True, True], None),
    ("sort", [[6, 9], [], []], ["Tensor(float)", "Int", "Bool"], [_T, 0, False], None),
    # the stable overload: (self, stable, dim, descending)
    ("sort", [[6, 9], [], [], []], ["Tensor(float)", "Bool", "Int", "Bool"],
     [_T, True, 1, False], {"ROWS": 6, "COLS": 9}),
    ("masked_select", [[6, 9], [9]], ["Tensor(float)", "Tensor(bool)"], [_T, _T], None),
    # reductions over the last two dims, over every dim, over a middle dim
    ("amax", [[2, 3, 4], [[]], []], ["Tensor(float)", "GenericList[Int]", "Bool"],
     [_T, [1, 2], False], {"ROWS": 2, "COLS": 12}),
    ("amax", [[2, 3, 4], [[]], []], ["Tensor(float)", "GenericList[Int]", "Bool"],
     [_T, [], False], {"ROWS": 1, "COLS": 24}),
    ("var", [[6, 9], []], ["Tensor(float)", "Bool"], [_T, True], {"ROWS": 1, "COLS": 54}),
    ("std", [[2, 3, 4], [[]], [], []], ["Tensor(float)", "GenericList[Int]", "Bool", "Bool"],
     [_T, [1], True, False], None),
    ("norm", [[6, 9], [], [[]], [], []], ["Tensor(float)", "Int", "GenericList[Int]", "Bool",
                                          "None"], [_T, 1, [-1], False, "<None>"], None),
    ("cumsum", [[6, 9], [], []], ["Tensor(float)", "Int", "None"], [_T, 0, "<None>"], None),
    ("cumsum", [[6, 9], [], []], ["Tensor(float)", "Int", "None"], [_T, -1, "<None>"],
     {"ROWS": 6, "COLS": 9}),
])
def test_other_forms_of_a_call_map_or_are_left_to_the_generic_model(name, shapes, types, values,
                                                                    expected):
    node = _node(get_op(name).trace_names[0], shapes, types, values)
    assert get_op(name).params_from_node(node) == expected


# -- a real trace -----------------------------------------------------------------------------

_BACKWARD_NODES = ("GatherBackward0", "ScatterAddBackward0", "ScatterBackward0",
                   "IndexBackward0", "IndexAddBackward0", "IndexPutBackward0", "TopkBackward0",
                   "SortBackward0", "MaskedSelectBackward0", "SiluBackward0", "AmaxBackward0",
                   "VarBackward0", "StdBackward0", "LinalgVectorNormBackward0",
                   "CumsumBackward0", "IndexSelectBackward0")


def _training_step():
    """A tiny training step calling every op here once (and ``index_select``)."""
    import torch

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.randn(16, 8))
    v = torch.nn.Parameter(torch.randn(5, 8))
    rows = torch.randint(0, 16, (10,), generator=gen)
    cols = torch.randint(0, 8, (16, 4), generator=gen)
    unique = torch.randperm(16, generator=gen)[:5]
    optimizer = torch.optim.SGD([w, v], lr=0.01)

    def step():
        optimizer.zero_grad()
        # nonzero makes no autograd node: the trace gives it the sequence number
        # of the next op that does, here the unchecked mul
        torch.nonzero(w.detach() > 0)
        x = w * 1.0
        a = torch.gather(x, 1, cols)
        outs = [a,
                torch.zeros(16, 8).scatter_add_(1, cols, a),
                x.scatter(1, cols, a),
                x[rows],
                torch.index_select(x, 0, rows),
                torch.zeros(16, 8).index_add_(0, unique, v)]
        put = x.clone()
        put[unique] = v
        outs += [put, torch.topk(x, 3, dim=-1)[0], torch.sort(x, dim=-1)[0],
                 torch.masked_select(x, x > 0), torch.cumsum(x, dim=-1),
                 torch.nn.functional.silu(x), torch.amax(x, dim=-1), torch.var(x, dim=-1),
                 torch.std(x, dim=-1), torch.linalg.vector_norm(x, dim=-1)]
        loss = sum(o.sum() for o in outs)
        loss.backward()
        optimizer.step()

    return step


def test_a_real_trace_maps_every_op_forward_and_backward(tmp_path):
    from perfmodel.e2e.single import capture_graph

    graph = capture_graph(_training_step(), tmp_path, "indexing", "cpu")
    tasks = {(t.op, t.direction): t.params for t in graph.op_tasks() if t.dtype == "float32"}
    for name in INDEXING + ELEMENTWISE + ("index_select",):
        assert (name, "forward") in tasks, name
        if name != "nonzero":
            assert (name, "backward") in tasks, name
    assert tasks["gather", "forward"] == {"OUTER": 16, "SIZE": 8, "INDICES": 4, "INNER": 1}
    assert tasks["scatter_add", "backward"] == tasks["gather", "forward"]
    assert tasks["index", "backward"] == {"ROWS": 16, "COLS": 8, "INDICES": 10}
    assert tasks["index_add", "forward"] == tasks["index_put", "backward"] == \
        {"ROWS": 16, "COLS": 8, "INDICES": 5}
    assert tasks["topk", "forward"] == {"ROWS": 16, "COLS": 8, "K": 3}
    assert tasks["nonzero", "forward"] == tasks["sort", "backward"] == \
        tasks["cumsum", "backward"] == {"ROWS": 16, "COLS": 8}
    covered = {f"aten::{n}" for n in ("gather", "scatter_add_", "scatter", "index",
                                      "index_add_", "index_put_", "topk", "sort", "nonzero",
                                      "masked_select", "cumsum", "silu", "amax", "var", "std",
                                      "linalg_vector_norm")}
    unmodelled = {name for name, _, _ in graph.unmodelled()}
    assert not unmodelled & covered
    assert not {n for n in unmodelled if n.rpartition(" ")[2] in _BACKWARD_NODES}
