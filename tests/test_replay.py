"""Replay cases (perfmodel/replay/case.py) and `perfmodel replay` (perfmodel/replay/rerun.py):
a saved case predicts exactly as the captured graph did, a bad file is one ReplayError
naming it, and the command's output is deterministic and adds up."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.replay.case import (
    SCHEMA,
    MeasuredTiming,
    ReplayCase,
    ReplayError,
    case_bytes,
    case_from_plain,
    case_to_plain,
    load_case,
    save_case,
)
from perfmodel.store import paths
from perfmodel.trace.graph import Graph, Task
from perfmodel.trace.parse import Kernel
from tests.helpers import THREADS, forbid_cuda

TINY_WORKLOADS = ("mlp_small", "transformer_encoder")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Task graphs of real captures of tiny workloads on the CPU, by name."""
    from perfmodel.e2e.single import capture_graph
    from perfmodel.workloads import build_workload

    out = {}
    for name in TINY_WORKLOADS:
        step = build_workload(name, "cpu", size="tiny")
        out[name] = capture_graph(step.step, tmp_path_factory.mktemp("traces"), name, "cpu")
    return out


def _case(graph: Graph, workload: str = "mlp_small", key: str = "cpu-x-2c",
          on_device: bool = False, threads: int | None = THREADS,
          measured_s: float = 0.01) -> ReplayCase:
    return ReplayCase(workload, key, on_device, 3e10, threads, [graph],
                      MeasuredTiming(measured_s, measured_s / 50, 30, 5, 1000.0),
                      env={"device_key": key, "threads": threads, "torch": "x"},
                      config={"size": "tiny", "batch": 8}, recorded={"predicted_s": 0.009})


def _table(graph: Graph):
    from perfmodel.trace.overheads import samples_from_graph, table_from_samples

    return table_from_samples([samples_from_graph("w", graph, 3e10)], 3e10)


# -- the round trip ------------------------------------------------------------------------

@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_a_saved_case_predicts_bit_identically(captured, planted_linear_fit, tmp_path, name):
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.simulate.predict import predict_graph
    from perfmodel.store.results import ResultStore

    root, key = planted_linear_fit
    fit, _ = load_latest_fit(ResultStore(root, key))
    graph = captured[name]
    path = save_case(tmp_path / "case.json.gz", _case(graph, name))
    back = load_case(path)
    assert back.graphs == [graph]
    assert back.measured == MeasuredTiming(0.01, 0.0002, 30, 5, 1000.0)
    table = _table(graph)
    before, after = (predict_graph(g, fit, table) for g in (graph, back.graphs[0]))
    assert any(t.kind == "op" and t.op == "linear" for t in graph.tasks)  # the fit prices some
    assert after.total_s == before.total_s  # exactly, not approximately
    assert after.breakdown_s == before.breakdown_s
    assert after.sim.timeline == before.sim.timeline
    assert case_bytes(back) == case_bytes(_case(graph, name))  # deterministic bytes


def test_a_cpu_case_stays_small(captured, tmp_path):
    for workload, graph in captured.items():
        size = save_case(tmp_path / f"{workload}.json.gz", _case(graph, workload)).stat().st_size
        assert size < 1_000_000, (workload, size)


_names = st.text("abcdefgh:._ ", min_size=1, max_size=12)
_maybe_s = st.none() | st.floats(0, 10, allow_nan=False)
_kernels = st.lists(st.builds(Kernel, _names, st.integers(-1, 20), st.floats(0, 1), st.floats(0, 1),
                              st.floats(0, 1), st.floats(0, 1e-3)), max_size=3)
_tasks = st.builds(
    Task, st.sampled_from(["op", "covered", "overhead", "unmodelled", "collective"]), _names,
    _names, op=st.none() | _names, direction=st.none() | st.sampled_from(["forward", "backward"]),
    dtype=st.none() | st.sampled_from(["float32", "bfloat16"]),
    params=st.none() | st.dictionaries(st.text("mnkb", min_size=1, max_size=3),
                                       st.integers(0, 2**40), max_size=4),
    bytes=st.floats(0, 1e12), measured_s=_maybe_s, waited_s=st.floats(0, 1),
    region=st.none() | _names, inputs=st.lists(st.integers(0, 2**62), max_size=4).map(tuple),
    outputs=st.lists(st.integers(0, 2**62), max_size=4).map(tuple), kernels=_kernels,
    sync=st.booleans(), n_nodes=st.integers(1, 1000))
_graphs = st.builds(Graph, st.lists(_tasks, max_size=12), _maybe_s, st.floats(0, 1e-3),
                    st.floats(0, 1e-3))


@settings(max_examples=60)
@given(graphs=st.lists(_graphs, min_size=1, max_size=3), threads=st.none() | st.integers(1, 64),
       on_device=st.booleans())
def test_random_graphs_round_trip_exactly(graphs, threads, on_device):
    case = ReplayCase("w@2", "cuda-x" if on_device else "cpu-x", on_device, 3e10, threads, graphs,
                      MeasuredTiming(None, None, 0, 0), ranks={"cores": 2, "contention": None})
    data = json.loads(gzip.decompress(case_bytes(case)))
    back = case_from_plain(data)
    assert back == case
    assert case_to_plain(back) == data


# -- malformed files -------------------------------------------------------------------------

def _plain_case() -> dict:
    task = Task("op", "aten::linear", "gemm", op="linear", direction="forward", dtype="float32",
                params={"m": 8, "n": 4, "k": 2}, measured_s=1e-5,
                kernels=[Kernel("gemm", 7, 0.0, 1e-5, 0.0, 1e-6)])
    return case_to_plain(_case(Graph([task], 2e-5)))


def _write(path, data) -> None:
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


def _with(data: dict, dotted: str, value) -> dict:
    """``data`` with the item at ``dotted`` (keys and list indices) set, or deleted
    for the value ``...``."""
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize("change, what", [
    (lambda d: _with(d, "schema", SCHEMA + 1), "schema version"),
    (lambda d: _with(d, "format", "something else"), "not a replay case"),
    (lambda d: _with(d, "workload", ...), "workload: missing"),
    (lambda d: _with(d, "measured.median_s", ...), "measured.median_s: missing"),
    (lambda d: _with(d, "graphs.0.tasks.0.6.m", "8"), "params.m: expected an integer"),
    (lambda d: _with(d, "graphs.0.tasks.0.13.0.1", 1.5), "kernels[0].stream: expected an integer"),
    (lambda d: _with(d, "graphs.0.tasks.0.7", None), "bytes: expected a finite number"),
    (lambda d: _with(d, "graphs.0.tasks.0", ["op"]), "1 columns"),
    (lambda d: _with(d, "graphs.0.task_fields", ["kind"]), "task_fields"),
    (lambda d: _with(d, "on_device", "yes"), "on_device: expected true or false"),
    (lambda d: _with(d, "graphs", []), "no task graph"),
    (lambda d: [d], "the case: expected an object"),
])
def test_a_malformed_case_is_one_error_naming_the_file(tmp_path, change, what):
    path = tmp_path / "bad.json.gz"
    _write(path, change(_plain_case()))
    with pytest.raises(ReplayError, match=re.escape(what)) as info:
        load_case(path)
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize("content, what", [
    (lambda good: good[: len(good) // 2], "not a complete gzip file"),
    (lambda good: b"{\"format\": 1}", "not a complete gzip file"),
    (lambda good: gzip.compress(b"{\"format\": "), "not JSON"),
    (lambda good: gzip.compress(b"\xff\xfe binary"), "not JSON"),
    (lambda good: gzip.compress(b"{\"schema\": NaN}"), "not JSON"),
    (lambda good: b"", "not JSON"),
])
def test_a_truncated_or_foreign_file_is_one_error_naming_the_file(tmp_path, content, what):
    good = gzip.compress(json.dumps(_plain_case()).encode())
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content(good))
    with pytest.raises(ReplayError) as info:
        load_case(path)
    assert str(info.value).startswith(str(path))
    assert what in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_missing_case_is_a_replay_error(tmp_path):
    with pytest.raises(ReplayError, match="no such replay case"):
        load_case(tmp_path / "none.json.gz")


# -- perfmodel replay ----------------------------------------------------------------------------

@pytest.fixture
def corpus(captured, planted_linear_fit):
    """A results root with the planted 1-thread linear fit, an overhead table and two
    CPU replay cases; and a CUDA device with a case whose op runs as two kernels.
    Returns (root, cpu key)."""
    from perfmodel.e2e.single import overheads_dir
    from perfmodel.trace.overheads import samples_from_graph, save_samples

    root, key = planted_linear_fit
    folder = paths.device_dir(root, key)
    for workload, graph in captured.items():
        save_samples(paths.overhead_file(folder, workload),
                     samples_from_graph(workload, graph, 3e10))
        save_case(paths.replay_file(folder, workload),
                  _case(graph, workload, key, measured_s=1.1 * graph.measured_s))
    assert overheads_dir(folder).is_dir()
    cuda = paths.device_dir(root, "cuda-planted-80gb")
    fit = paths.fit_dirs(folder)[-1]
    target = paths.fit_dir(cuda, fit.name)
    target.mkdir(parents=True)
    for member in fit.iterdir():
        (target / member.name).write_bytes(member.read_bytes())
    linear = Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                  dtype="float32", params=next(dict(t.params) for t in captured["mlp_small"].op_tasks()
                                               if t.op == "linear"),
                  measured_s=2e-5, kernels=[Kernel("a", 7, 0.0, 3e-5, 0.0, 1e-6),
                                            Kernel("b", 7, 3e-5, 1e-5, 1e-6, 1e-6)])
    gap = Task("overhead", "T1.op.op", "host overhead", measured_s=5e-6)
    save_case(paths.replay_file(cuda, "gpu_model"),
              _case(Graph([gap, linear, gap], 6e-5), "gpu_model", "cuda-planted-80gb",
                    on_device=True, threads=None, measured_s=7e-5))
    return root, key


def _run(capsys, *args) -> str:
    from perfmodel.cli.main import main

    assert main(["replay", *args]) == 0
    return capsys.readouterr().out


def test_replay_prints_every_case_and_is_deterministic(corpus, capsys):
    root, key = corpus
    first = _run(capsys, "--results", str(root), "--device", key)
    assert _run(capsys, "--results", str(root), "--device", key) == first
    for workload in TINY_WORKLOADS:
        assert workload in first
    assert "geomean |error| (GMAE)" in first and "predictors/planted" in first
    everything = _run(capsys, "--results", str(root))
    assert "cuda-planted-80gb" in everything and key in everything
    assert _run(capsys, "--results", str(root)) == everything


def test_replay_json_parses_and_matches_the_prediction(corpus, captured, capsys):
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.simulate.predict import predict_graph
    from perfmodel.store.results import ResultStore

    root, key = corpus
    data = json.loads(_run(capsys, "--results", str(root), "--device", key, "--json"))
    row = data["devices"][key]["cases"]["mlp_small"]
    store = ResultStore(root, key)
    fit, _ = load_latest_fit(store, threads=THREADS)
    table, _ = shared_table(store.dir, 3e10)
    assert row["predicted_s"] == predict_graph(captured["mlp_small"], fit, table).total_s
    assert row["error"] == pytest.approx(row["predicted_s"] / row["measured_s"] - 1)
    assert row["fit"] == "predictors/planted"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_attribution_adds_up(corpus, capsys, device):
    root, key = corpus
    key = key if device == "cpu" else "cuda-planted-80gb"
    data = json.loads(_run(capsys, "--results", str(root), "--device", key, "--json",
                           "--attribute"))
    for row in data["devices"][key]["cases"].values():
        att = row["attribution"]
        measured = row["measured_s"]
        families = att["families"]
        total = sum(f["contribution"] for f in families)
        assert total == pytest.approx(att["tasks_delta_s"] / measured, rel=1e-9, abs=1e-12)
        assert sum(f["predicted_s"] - f["traced_s"] for f in families) == pytest.approx(
            att["tasks_delta_s"], rel=1e-9, abs=1e-15)
        assert (att["tasks_delta_s"] + att["untimed_delta_s"] + att["trace_delta_s"]
                + att["schedule_delta_s"]) / measured == pytest.approx(row["error"], rel=1e-9,
                                                                       abs=1e-12)
        contributions = [abs(f["contribution"]) for f in families]
        assert contributions == sorted(contributions, reverse=True)
        assert 0 < len(att["ops"]) <= 10
    if device == "cuda":  # traced time is the kernels' device time: 40 us, predicted by the fit
        (gemm,) = [f for f in families if f["name"] == "gemm"]
        assert gemm["traced_s"] == pytest.approx(4e-5)
        host = att["host"]  # and the host's side beside it, adding up the same way
        assert host["predicted_s"] == pytest.approx(sum(f["predicted_s"]
                                                        for f in host["families"]))
        assert host["traced_s"] == pytest.approx(sum(f["traced_s"] for f in host["families"]))
        assert sum(f["contribution"] for f in host["families"]) == pytest.approx(
            (host["predicted_s"] - host["traced_s"]) / measured)
        assert {f["name"] for f in host["families"]} >= {"gemm"}
    else:
        assert "host" not in att  # a CPU's families are host time already
    text = _run(capsys, "--results", str(root), "--device", key, "--attribute")
    assert "per family" in text and "worst" in text
    assert ("host side: predicted" in text) == (device == "cuda")
    assert _run(capsys, "--results", str(root), "--device", key, "--attribute") == text


def test_replay_needs_no_cuda(corpus, capsys, monkeypatch):
    forbid_cuda(monkeypatch, "replay")
    root, _ = corpus
    assert "gpu_model" in _run(capsys, "--results", str(root), "--device", "cuda-planted-80gb")


def test_replay_names_what_it_cannot_find(corpus, capsys, tmp_path):
    from perfmodel.cli.main import main

    root, key = corpus
    assert main(["replay", "--results", str(root), "--device", key, "--workload", "nope"]) == 2
    assert "no replay case for nope" in capsys.readouterr().err
    assert main(["replay", "--results", str(tmp_path / "empty")]) == 2
    assert "no replay cases under" in capsys.readouterr().err
    bad = paths.replay_file(paths.device_dir(root, key), "broken")
    bad.write_bytes(b"not gzip")
    out = _run(capsys, "--results", str(root), "--device", key)
    assert f"skipped: {bad}: not a complete gzip file" in out
    fit = paths.fit_dirs(paths.device_dir(root, key))[-1]
    only = _run(capsys, "--results", str(root), "--device", key, "--fit", str(fit),
                "--workload", "mlp_small")
    assert "mlp_small" in only and "transformer_encoder" not in only


def test_a_multirank_case_replays_its_ranks_together(corpus, captured, capsys):
    """Two ranks with no collective on a host with a core each predict as one rank does."""
    root, key = corpus
    graph = captured["mlp_small"]
    case = _case(graph, "mlp_small@2", key, measured_s=graph.measured_s)
    case.graphs = [graph, graph]
    case.ranks = {"threads_per_rank": THREADS, "cores": 2, "contention": None,
                  "host_speed": None}
    save_case(paths.replay_file(paths.device_dir(root, key), "mlp_small@2"), case)
    data = json.loads(_run(capsys, "--results", str(root), "--device", key, "--json",
                           "--attribute", "--workload", "mlp_small", "mlp_small@2"))
    cases = data["devices"][key]["cases"]
    assert cases["mlp_small@2"]["problem"] is None
    assert cases["mlp_small@2"]["predicted_s"] == pytest.approx(cases["mlp_small"]["predicted_s"],
                                                                rel=1e-12)
    att = cases["mlp_small@2"]["attribution"]
    assert sum(f["contribution"] for f in att["families"]) == pytest.approx(
        att["tasks_delta_s"] / cases["mlp_small@2"]["measured_s"], rel=1e-9)


def test_the_e2e_path_saves_what_it_predicted(captured, planted_linear_fit, tmp_path):
    """save_replay keeps the graph, the unmeasured time as null, and the prediction made."""
    from perfmodel.e2e.single import predict_and_measure, save_replay
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.store.results import ResultStore

    root, key = planted_linear_fit
    fit, _ = load_latest_fit(ResultStore(root, key))
    graph = captured["mlp_small"]
    result = predict_and_measure("mlp_small", lambda: None, 8, graph, fit, _table(graph), "cpu",
                                 3e10, measure=False)
    path = save_replay(tmp_path / "r" / "mlp_small.json.gz", result, key, "cpu", 3e10, THREADS,
                       {"threads": THREADS}, {"size": "tiny"})
    case = load_case(path)
    assert case.graphs == [graph] and not case.on_device
    assert case.measured == MeasuredTiming(None, None, 0, 0, None)
    assert case.recorded["predicted_s"] == result.predicted_s
    assert case.config == {"size": "tiny"} and case.threads == THREADS


def test_a_multirank_case_replays_with_the_op_drift_it_recorded(corpus, captured, capsys):
    """Each op's own drift, saved with the ranks, moves those ops' prices again
    on replay; a malformed one is a problem naming the case."""
    root, key = corpus
    graph = captured["mlp_small"]
    folder = paths.device_dir(root, key)
    predicted = {}
    for name, op_drift in (("plain@2", None), ("drifted@2", {"linear.forward": 3.0,
                                                            "linear.backward": 3.0}),
                           ("broken@2", {"linear.forward": -1})):
        case = _case(graph, name, key, measured_s=graph.measured_s)
        case.graphs = [graph, graph]
        case.ranks = {"threads_per_rank": THREADS, "cores": 2, "contention": None,
                      "host_speed": None, "op_drift": op_drift}
        save_case(paths.replay_file(folder, name), case)
    data = json.loads(_run(capsys, "--results", str(root), "--device", key, "--json",
                           "--workload", "plain@2", "drifted@2", "broken@2"))
    cases = data["devices"][key]["cases"]
    predicted = {name: cases[name]["predicted_s"] for name in ("plain@2", "drifted@2")}
    assert predicted["drifted@2"] > predicted["plain@2"]
    assert "op drift factors must be > 0" in cases["broken@2"]["problem"]


def test_the_host_side_takes_the_profilers_cost_out_per_node_and_per_launch():
    """A device case's host time per task: its duration less the host's waits,
    one profiler cost per recorded node (one per gap) and one launch cost per
    kernel; floored at 0."""
    from perfmodel.replay.rerun import _traced_host_s

    graph = Graph([], 1e-3, profiler_overhead_s=2e-6, profiler_launch_overhead_s=1e-6)
    kernels = [Kernel("k", 0, 1e-5, 0.0, 1e-6, 0.0), Kernel("k", 0, 1e-5, 0.0, 1e-6, 0.0)]
    op = Task("op", "aten::linear", "gemm", op="linear", direction="forward",
              measured_s=50e-6, waited_s=5e-6, n_nodes=3, kernels=kernels)
    gap = Task("overhead", "T1.op.op", "host overhead", measured_s=10e-6, n_nodes=7)
    assert _traced_host_s(op, graph) == pytest.approx(50e-6 - 5e-6 - 3 * 2e-6 - 2 * 1e-6)
    assert _traced_host_s(gap, graph) == pytest.approx(8e-6)
    assert _traced_host_s(Task("overhead", "T2.op", "host overhead"), graph) == 0.0
    assert _traced_host_s(Task("overhead", "T2.op", "host overhead", measured_s=1e-6),
                          graph) == 0.0


def test_attribution_takes_the_profilers_cost_out_of_gaps_and_unmodelled_nodes():
    """As the overhead table's samples are taken: per gap one profiler cost, per
    unmodelled node one per recorded node, and the host's waits; floored at 0."""
    from perfmodel.replay.rerun import _traced_s
    from perfmodel.trace.graph import Task

    gap = Task("overhead", "T1.op.op", "host overhead", measured_s=10e-6, waited_s=1e-6)
    leaf = Task("unmodelled", "aten::pow", "unmodelled", measured_s=10e-6, n_nodes=3)
    op = Task("op", "aten::linear", "gemm", op="linear", direction="forward", measured_s=10e-6)
    assert _traced_s(gap, False, 2e-6) == pytest.approx(7e-6)
    assert _traced_s(leaf, False, 2e-6) == pytest.approx(4e-6)
    assert _traced_s(op, False, 2e-6) == 10e-6
    assert _traced_s(gap, False, 20e-6) == 0.0
    assert _traced_s(Task("overhead", "T2.op", "host overhead"), False, 2e-6) == 0.0
