"""Execution-trace capture and parsing: real captures, and malformed files rejected."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.trace.parse import ITERATION_MARK, TraceError, capture_trace, load_trace
from tests.helpers import tiny_mlp_step


@pytest.fixture(scope="module")
def mlp_trace(tmp_path_factory):
    """A real capture of two iterations of a tiny MLP training step."""
    return capture_trace(tiny_mlp_step(), tmp_path_factory.mktemp("trace"), "mlp", iterations=2,
                         warmup=1)


def test_capture_aligns_the_et_iteration_with_kineto_timings(mlp_trace):
    trace = load_trace(mlp_trace.et, mlp_trace.kineto, mlp_trace.calibration)
    marks = trace.iterations()
    assert len(marks) == 1 and trace.timed
    assert 0 <= trace.profiler_overhead_s < 1e-3
    last = trace.last_iteration()
    assert last is marks[-1] and last.dur_s > 0
    untimed = [n.name for n in last.walk() if n.dur_s is None]
    assert not untimed
    names = [c.name for c in last.children]
    assert names.count("aten::linear") == 2
    assert any(n.startswith("autograd::engine::evaluate_function: AddmmBackward0") for n in names)
    assert all(c.ts_s >= last.ts_s and c.end_s <= last.end_s + 1e-9 for c in last.children)


def test_untimed_trace_has_no_durations(mlp_trace):
    trace = load_trace(mlp_trace.et)
    assert not trace.timed
    assert all(n.dur_s is None for n in trace.nodes.values())


def _write(tmp_path, obj, name="t.et.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def _node(id, name, parent, **kw):
    return {"id": id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": [], "shapes": [], "types": []},
            "outputs": {"values": [], "shapes": [], "types": []}, "attrs": [], **kw}


def _et(nodes, schema="1.1.1-chakra.0.0.4"):
    return {"schema": schema, "pid": 1, "nodes": nodes}


ROOTS = [_node(1, "[pytorch|profiler|execution_trace|process]", 1),
         _node(2, "[pytorch|profiler|execution_trace|thread]", 1),
         _node(3, ITERATION_MARK, 2)]


@pytest.mark.parametrize("payload, message", [
    (_et(ROOTS, schema="0.9"), "schema '0.9' is not supported"),
    ({"schema": "1.1"}, "no 'nodes' list"),
    (_et([*ROOTS, _node(4, "aten::add", 99)]), "node 4 (aten::add) names parent 99"),
    (_et([*ROOTS, _node(3, "aten::add", 2)]), "repeats id 3"),
    (_et([*ROOTS, {"id": 5, "name": "x"}]), "node #3: field 'ctrl_deps'"),
    (_et([*ROOTS, _node(6, "aten::mul", 7), _node(7, "aten::mul", 6)]), "parent cycle"),
    (_et([*ROOTS, {**_node(8, "aten::relu", 3), "inputs": {"types": ["Int"], "shapes": []}}]),
     "node 8 (aten::relu): inputs types, shapes and values differ"),
    (_et([*ROOTS, {**_node(9, "aten::relu", 3),
                   "attrs": [{"name": "seq_id", "value": "x"}]}]), "attr 'seq_id'"),
])
def test_malformed_trace_names_the_node(tmp_path, payload, message):
    path = _write(tmp_path, payload)
    with pytest.raises(TraceError, match="t.et.json") as info:
        load_trace(path)
    assert message in str(info.value)


def test_a_worker_scope_naming_an_absent_parent_hangs_under_the_node_before_it(tmp_path):
    # the observer nests main-thread ops started during a gloo scope under it; the
    # scope's own parent (whatever was open on the main thread) may never be written
    path = _write(tmp_path, _et([*ROOTS, _node(4, "aten::mul", 3),
                                 _node(6, "gloo:all_to_all", 5), _node(7, "aten::add", 6)]))
    trace = load_trace(path)
    assert [w.name for w in trace.worker_nodes] == ["gloo:all_to_all"]
    assert [c.name for c in trace.nodes[4].children] == ["aten::add"]
    # so may any node's, once worker scopes ran (seen on a 2-rank ddp_mlp trace)
    path = _write(tmp_path, _et([*ROOTS, _node(4, "gloo:all_reduce", 3),
                                 _node(5, "aten::mul", 3), _node(8, "aten::as_strided", 7)]),
                  "ddp.et.json")
    assert [c.name for c in load_trace(path).nodes[5].children] == ["aten::as_strided"]
    with pytest.raises(TraceError, match="node 7 \\(aten::add\\) names parent 5"):
        load_trace(_write(tmp_path, _et([*ROOTS, _node(7, "aten::add", 5)]), "op.et.json"))


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "absent.json")


def test_bad_kineto_file_is_named(tmp_path):
    et = _write(tmp_path, _et(ROOTS))
    kineto = _write(tmp_path, {"traceEvents": [{"ph": "X", "name": "a", "ts": "x"}]}, "k.json")
    with pytest.raises(TraceError, match="k.json.*lacks numeric ts/dur"):
        load_trace(et, kineto)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(min_value=0.0, max_value=0.999))
def test_truncated_trace_gives_the_offset(mlp_trace, tmp_path, cut):
    text = mlp_trace.et.read_text()
    path = _write(tmp_path, text[: int(len(text) * cut)], "cut.et.json")
    with pytest.raises(TraceError, match=r"cut\.et\.json: invalid JSON at byte offset \d+"):
        load_trace(path)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from(["id", "name", "ctrl_deps", "nodes",
                                                       "schema", "inputs", "attrs"]), inner,
                                      max_size=5), max_leaves=20))
def test_arbitrary_json_is_rejected_cleanly_or_parsed(tmp_path_factory, payload):
    path = tmp_path_factory.mktemp("fuzz") / "f.et.json"
    path.write_text(json.dumps(payload))
    try:
        load_trace(path)
    except TraceError as exc:
        assert str(path) in str(exc)


@pytest.mark.parametrize("schema, view", [
    ("aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride) -> Tensor(a)", True),
    ("aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]", True),
    ("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", False),
    ("aten::mm(Tensor self, Tensor mat2) -> Tensor", False),
    ("aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
     False),
    (None, False),
])
def test_views_are_told_by_their_schema_and_move_no_bytes(tmp_path, schema, view):
    """DDP's bucket views (``as_strided`` of a 5 MB bucket) were priced as 5 MB
    copies when unmodelled; a view's schema returns only unwritten aliases."""
    from perfmodel.trace.graph import tensor_bytes

    tensor = {"types": ["Tensor(float)"], "shapes": [[1000]],
              "values": [[10, 1, 0, 1000, 4, "cpu"]]}
    attrs = [{"name": "op_schema", "type": "string", "value": schema}] if schema else []
    node = {**_node(4, "aten::op", 3), "inputs": tensor, "outputs": tensor, "attrs": attrs}
    trace = load_trace(_write(tmp_path, _et([*ROOTS, node])))
    parsed = trace.nodes[4]
    assert parsed.op_schema == (schema or "") and parsed.is_view is view
    assert tensor_bytes(parsed) == (0.0 if view else 4000.0)
