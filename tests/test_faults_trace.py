"""Bad execution traces (beyond tests/test_trace.py): every file of a capture cut,
corrupted, or of another version is rejected with a :class:`TraceError` naming the
file and the node or byte offset; a fuzz of real captures mutated at random."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from perfmodel.trace.graph import build_graph
from perfmodel.trace.parse import TraceError, capture_trace, load_trace
from tests.helpers import mutate, tiny_mlp_step

EXAMPLES = int(os.environ.get("PERFMODEL_FUZZ_EXAMPLES", "200"))


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A real capture of a tiny MLP training step: {"et"|"kineto"|"calibration": bytes}."""
    files = capture_trace(tiny_mlp_step(inputs=8, hidden=16, batch=4),
                          tmp_path_factory.mktemp("capture"), "mlp", iterations=2, warmup=1)
    return Capture(et=files.et.read_bytes(), kineto=files.kineto.read_bytes(),
                   calibration=files.calibration.read_bytes())


class Capture(dict):
    """The three files' bytes; a short repr keeps Hypothesis' failure reports readable."""

    def __repr__(self) -> str:
        return "Capture(" + ", ".join(f"{k}={len(v)} bytes" for k, v in self.items()) + ")"


def write(folder, capture, **replace):
    paths = {}
    for which, content in capture.items():
        paths[which] = folder / f"t.{which}.json"
        paths[which].write_bytes(replace.get(which, content))
    return paths


def load(paths):
    return load_trace(paths["et"], paths["kineto"], paths["calibration"])


def test_the_unmodified_capture_loads(capture, tmp_path):
    trace = load(write(tmp_path, capture))
    assert trace.timed and build_graph(trace).tasks


@pytest.mark.parametrize("which", ["et", "kineto", "calibration"])
@pytest.mark.parametrize("cut", [0.0, 0.3, 0.95])
def test_truncated_file_gives_its_name_and_the_byte_offset(capture, tmp_path, which, cut):
    content = capture[which][: int(len(capture[which]) * cut)]
    paths = write(tmp_path, capture, **{which: content})
    with pytest.raises(TraceError) as info:
        load(paths)
    message = str(info.value)
    assert message.startswith(f"{paths[which]}: invalid JSON at byte offset ")
    offset = int(message.split("byte offset ")[1].split()[0])
    assert offset <= len(content)


@pytest.mark.parametrize("which", ["et", "kineto", "calibration"])
def test_binary_garbage_gives_the_byte_offset(capture, tmp_path, which):
    at = min(100, len(capture[which]) // 2)
    content = capture[which][:at] + b"\xff\xfe" + capture[which][at:]
    paths = write(tmp_path, capture, **{which: content})
    with pytest.raises(TraceError, match=rf"t\.{which}\.json: not UTF-8 text \(byte offset {at}\)"):
        load(paths)


@pytest.mark.parametrize("schema, ok", [("1.0.1", True), ("1.1.1-chakra.0.0.4", True),
                                        ("2.0.0-chakra.1.0.0", False), ("0.9", False),
                                        (None, False), ("", False)])
def test_trace_of_another_version_is_refused(capture, tmp_path, schema, ok):
    doc = json.loads(capture["et"])
    doc["schema"] = schema
    paths = write(tmp_path, capture, et=json.dumps(doc).encode())
    if ok:
        load(paths)
    else:
        with pytest.raises(TraceError, match=r"t\.et\.json: execution-trace schema .* is not "
                                             r"supported \(supported: 1\.0\.x, 1\.1\.x\)"):
            load(paths)


@pytest.mark.parametrize("mutation, message", [
    (lambda d: d["nodes"].__setitem__(3, None), "node #3: expected an object, got NoneType"),
    (lambda d: d["nodes"][3].__setitem__("id", True), "node #3: field 'id' missing or not int"),
    (lambda d: d["nodes"][3].__setitem__("inputs", []), "'inputs' must be an object"),
    (lambda d: d["nodes"][3].__setitem__("attrs", {}), "'attrs' must be a list"),
    (lambda d: d["nodes"][3]["attrs"].append(["rf_id", 1]), "malformed attr ['rf_id', 1]"),
    (lambda d: d.__setitem__("nodes", {}), "not an execution trace (no 'nodes' list)"),
    (lambda d: d.__setitem__("nodes", d["nodes"][: len(d["nodes"]) // 2][::-1][:-2]),
     "which is not in the trace (truncated?)"),
])
def test_malformed_node_is_named(capture, tmp_path, mutation, message):
    doc = json.loads(capture["et"])
    mutation(doc)
    paths = write(tmp_path, capture, et=json.dumps(doc).encode())
    with pytest.raises(TraceError) as info:
        load(paths)
    assert str(info.value).startswith(f"{paths['et']}: ") and message in str(info.value)


@pytest.mark.parametrize("content, message", [
    (b'{"traceEvents": {}}', "not a Chrome/Kineto trace (no 'traceEvents' list)"),
    (b'[]', "not a Chrome/Kineto trace"),
    (b'{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1}]}', "lacks numeric ts/dur"),
])
def test_malformed_kineto_file_is_named(capture, tmp_path, content, message):
    paths = write(tmp_path, capture, kineto=content)
    with pytest.raises(TraceError, match="t.kineto.json") as info:
        load(paths)
    assert message in str(info.value)


@pytest.mark.parametrize("value", ['"0.001"', "-1", "1e9", "NaN", "null", "true"])
def test_bad_calibration_is_named(capture, tmp_path, value):
    paths = write(tmp_path, capture,
                  calibration=f'{{"profiler_overhead_s_per_op": {value}}}'.encode())
    with pytest.raises(TraceError, match=r"t\.calibration\.json: 'profiler_overhead_s_per_op' "
                                         r"must be seconds in \[0, 1\)"):
        load(paths)


@pytest.mark.parametrize("value", ['"1e-6"', "-1", "2", "null", "false"])
def test_bad_launch_calibration_is_named(capture, tmp_path, value):
    """A CUDA calibration's cost per launch is optional, but when given it must be
    seconds in [0, 1)."""
    paths = write(tmp_path, capture, calibration=(
        f'{{"profiler_overhead_s_per_op": 1e-6, "profiler_overhead_s_per_launch": {value}}}'
    ).encode())
    with pytest.raises(TraceError, match=r"t\.calibration\.json: 'profiler_overhead_s_per_launch' "
                                         r"must be seconds in \[0, 1\)"):
        load(paths)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_capture_loads_or_names_the_file(capture, tmp_path_factory, data):
    """A real capture with one file mutated at one JSON path, or cut at any byte:
    it loads (and its graph builds), or TraceError names that file."""
    which = data.draw(st.sampled_from(["et", "et", "kineto", "calibration"]))
    doc = json.loads(capture[which])
    if which == "et":  # mutate inside the nodes most of the time: the deep checks
        node = data.draw(st.integers(0, len(doc["nodes"]) - 1))
        doc["nodes"][node] = mutate(data, doc["nodes"][node])
        content = json.dumps(doc).encode()
    elif which == "kineto" and doc.get("traceEvents") and data.draw(st.booleans()):
        event = data.draw(st.integers(0, len(doc["traceEvents"]) - 1))
        doc["traceEvents"][event] = mutate(data, doc["traceEvents"][event])
        content = json.dumps(doc).encode()
    else:
        content = json.dumps(mutate(data, doc)).encode()
    if data.draw(st.integers(0, 9)) == 0:
        content = content[: data.draw(st.integers(0, len(content)))]
    paths = write(tmp_path_factory.mktemp("fuzz"), capture, **{which: content})
    try:
        trace = load(paths)
    except TraceError as exc:
        assert str(exc).startswith(f"{paths[which]}: "), exc
        return
    build_graph(trace)  # what loads can be turned into a task graph


@given(st.text(alphabet="Tensor(flotaGeicLs)[],", max_size=60))
def test_tensor_types_of_any_type_string_end(typ):
    """An ET type string, well formed or not (an unclosed ``Tensor(``), gives the
    element types of its closed ``Tensor(...)`` groups, in order."""
    from perfmodel.trace.graph import _tensor_types

    found = _tensor_types(typ)
    rebuilt = "".join(f"Tensor({t})" for t in found)
    assert all(")" not in t for t in found)
    assert len(found) <= typ.count("Tensor(") and len(rebuilt) <= len(typ)


def test_tensor_types_of_a_list():
    from perfmodel.trace.graph import _tensor_types

    assert _tensor_types("GenericList[Tensor(float),Tensor(long)]") == ["float", "long"]
    assert _tensor_types("GenericList[Tensor(float),Tensor(lo") == ["float"]


def test_process_group_entries_that_are_not_objects_are_skipped():
    from pathlib import Path

    from perfmodel.trace.parse import PROCESS_GROUP_NODE, Trace, TraceNode

    groups = json.dumps([1, "x", [], {"pg_name": "0", "group_size": 4}])
    node = TraceNode(1, PROCESS_GROUP_NODE, 0, {"values": [groups]}, {})
    trace = Trace(Path("t.et.json"), {1: node}, [node], "1.1.1-chakra.0.0.4", False)
    assert trace.world_size() == 4


def test_a_kernel_with_a_non_integer_stream_names_the_file(tmp_path):
    from perfmodel.trace.parse import TraceNode, _attach_kernels

    node = TraceNode(1, "aten::mm", 0, {}, {})
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 7, "ts": 0, "dur": 10}
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 7, "ts": 2,
              "dur": 1, "args": {"correlation": 5}}
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 4, "dur": 3,
              "args": {"correlation": 5, "stream": "7x"}}
    with pytest.raises(TraceError, match=r"k\.json: kernel 'gemm' has a non-integer stream '7x'"):
        _attach_kernels(tmp_path / "k.json", [op, launch, kernel], [(op, node)], 0)
    kernel["args"]["stream"] = 7
    _attach_kernels(tmp_path / "k.json", [op, launch, kernel], [(op, node)], 0)
    assert [(k.name, k.stream) for k in node.kernels] == [("gemm", 7)]


def test_a_capture_that_dies_leaves_the_earlier_files(tmp_path, capture):
    """The three files move into place together: a step that fails on its
    profiled run leaves the previous capture whole and no scratch folder."""
    for which, content in capture.items():
        (tmp_path / f"mlp.{which}.json").write_bytes(content)
    calls = []

    def step():
        calls.append(1)
        if len(calls) > 2:  # warm-up and the ET pass run, the profiled pass fails
            raise RuntimeError("died")

    with pytest.raises(RuntimeError, match="died"):
        capture_trace(step, tmp_path, "mlp", iterations=1, warmup=1)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        f"mlp.{which}.json": content for which, content in capture.items()}
