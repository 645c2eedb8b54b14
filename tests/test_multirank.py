"""Multi-rank E2E smoke: two mpiexec ranks trace, measure and predict the tiny
model-parallel DLRM (DDP all-reduces and the pooled-embedding all_to_all), and
the driver's failure paths. Prediction accuracy is not asserted here."""

import json
import re

import pytest

from perfmodel.world import mpiexec_path
from perfmodel.e2e.ranks import MultirankError, measure_ranks, run_multirank
from perfmodel.simulate.host import comm_host_share, oversubscription
from tests.helpers import SPEC, ConstantFit, planted_records

def _mpi_missing() -> str | None:
    """Why the mpiexec tests cannot run here, or None."""
    try:
        import mpi4py  # noqa: F401
        mpiexec_path()
    except (ImportError, FileNotFoundError) as exc:
        return str(exc)
    return None


needs_mpi = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))

BANDWIDTH = 3e10


@pytest.fixture
def planted_fit(planted_results):
    """``planted_results`` plus a saved 1-thread fit (the planted spec's): the
    collectives (t = 30 µs + bytes / 2 GB/s on two ranks) and a linear forward
    at 1 GFLOP/s, measured on a host whose reference ops took 2 ms (addmm) and
    1 ms (add); other ops are priced by the (empty) overhead table."""
    from perfmodel.device.spec import DeviceSpec
    from perfmodel.fit.fitting import fit_predictors, save_fit
    from perfmodel.ops import get_op
    from perfmodel.store.results import ResultStore

    root, key = planted_results
    spec = DeviceSpec.from_dict(json.loads((root / key / "device.json").read_text()))
    assert spec.threads == 1  # what the ranks run at on 2 cores
    records = [{"kind": "measurement", "op": op, "direction": "forward", "dtype": "float32",
                "config": {"world_size": 2, "bytes": 1 << e}, "replicate": r, "run_id": "planted",
                "measurement": {"median_s": 30e-6 + (1 << e) / 2e9}}
               for op in ("all_reduce", "all_to_all") for e in range(4, 24, 2) for r in (0, 1)]
    linear = get_op("linear")
    cases = [c for c in linear.cases("quick") if c.direction == "forward"][:8]
    records += [{"kind": "measurement", "op": "linear", "direction": "forward",
                 "dtype": "float32", "config": c.params, "replicate": r, "run_id": "planted",
                 "env": {"threads": 1}, "host_speed": {"addmm": 2e-3, "copy": 1e-3},
                 "measurement": {
                     "median_s": 5e-6 + linear.flops(c.params, "forward") / 1e9}}
                for c in cases for r in (0, 1)]
    save_fit(fit_predictors(records, spec), ResultStore(root, key), "planted", ["planted"])
    return root, key


@needs_mpi
def test_two_ranks_trace_measure_and_predict_dlrm_mp(planted_fit):
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.trace.graph import build_graph
    from perfmodel.store.results import ResultStore
    from perfmodel.trace.parse import load_trace

    root, key = planted_fit
    result = run_multirank("dlrm_mp", 2, root, key, BANDWIDTH, profile="smoke", cores=2,
                           timeout_s=120)
    assert result.workload == "dlrm_mp@2"
    assert result.measured.median_s > 0 and result.predicted_s > 0
    assert result.breakdown_s["communication"] > 0
    assert "all_to_all.forward" not in result.no_predictor
    # both ranks have a core: they measured the triad alone and side by side
    assert result.contention["ranks_together"] == 2 and result.contention["slowdown"] >= 1.0
    ranks_fit, _ = load_latest_fit(ResultStore(root, key), threads=1)
    assert result.fit_data == ranks_fit.data_id  # the gate checks its drift against that fit
    # rank 0 timed the reference ops: the host's speed against the planted fit's
    drift = result.host_drift
    assert drift["compute"] > 0 and drift["memory"] > 0 and drift["bandwidth_Bps"] == BANDWIDTH
    assert result.predicted_fit_speed_s > 0
    traces = root / key / "traces"
    for rank in (0, 1):
        graph = build_graph(load_trace(traces / f"dlrm_mp@2.rank{rank}.et.json",
                                       traces / f"dlrm_mp@2.rank{rank}.kineto.json"))
        comm = [(t.op, t.params["world_size"]) for t in graph.tasks if t.kind == "collective"]
        # pooled embeddings out and their gradients back; DDP's bucket(s) of MLP gradients
        assert comm.count(("all_to_all", 2)) == 2 and ("all_reduce", 2) in comm
        a2a = next(t for t in graph.tasks if t.op == "all_to_all")
        tiny_rows = 2 * 8  # the global batch: two ranks of batch 8
        assert a2a.params["bytes"] == tiny_rows * 2 * 4 * 4  # 2 tables of D=4 per rank, fp32
        assert not any(t.name.startswith("gloo:") for t in graph.tasks)


@needs_mpi
def test_a_run_past_its_timeout_is_stopped(planted_fit):
    root, key = planted_fit
    with pytest.raises(MultirankError, match=r"ddp_mlp@2: ranks still running after 0.5 s"):
        run_multirank("ddp_mlp", 2, root, key, BANDWIDTH, profile="smoke", cores=2,
                      timeout_s=0.5)


@needs_mpi
def test_an_error_on_one_rank_ends_every_rank_at_once(planted_fit, tmp_path):
    """Rank 0 fails after the measurement (a malformed bias, read only there)
    while the others wait at the last barrier: the job ends with its error,
    not at the timeout."""
    import subprocess
    import sys
    import time

    root, key = planted_fit
    start = time.monotonic()
    done = subprocess.run(
        [mpiexec_path(), "-n", "2", sys.executable, "-m", "perfmodel.e2e.ranks", "--workload",
         "ddp_mlp", "--results", str(root), "--device-key", key, "--bandwidth", str(BANDWIDTH),
         "--profile", "smoke", "--cores", "2", "--bias", "{not json", "--out",
         str(tmp_path / "out.json")], capture_output=True, text=True, timeout=170)
    assert done.returncode != 0 and time.monotonic() - start < 150
    assert "perfmodel rank 0: ddp_mlp@2: JSONDecodeError" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "out.json").exists()


def test_a_terminated_rank_writes_its_stack_first():
    """What a rank leaves in the timeout's message: each thread's Python stack."""
    import signal
    import subprocess
    import sys

    code = ("import time\nfrom perfmodel.e2e.ranks import dump_stacks_on_sigterm\n"
            "dump_stacks_on_sigterm()\n"
            "def stuck_in_a_collective():\n    print('ready', flush=True)\n    time.sleep(60)\n"
            "stuck_in_a_collective()\n")  # 'ready' from inside: the signal finds it there
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert "thread" in stderr and "in stuck_in_a_collective" in stderr


def test_a_fit_without_a_comparable_host_speed_is_named_with_the_refit_command():
    from types import SimpleNamespace

    from perfmodel.measure.drift import HostSpeed
    from perfmodel.e2e.ranks import drift_unavailable

    def fit(speed):
        return SimpleNamespace(host_speed=speed)

    assert drift_unavailable(fit(HostSpeed({"addmm": 1e-3, "copy": 7e-3})), 1) is None
    legacy = drift_unavailable(fit(HostSpeed({"addmm": 1e-3, "add": 2e-3})), 1)
    assert "older reference ops (addmm, add)" in legacy
    assert "--perfmodel-profile quick --perfmodel-threads 1" in legacy
    assert "records no host speed" in drift_unavailable(fit(None), 2, "smoke")


def test_unknown_workload_is_refused_before_starting_ranks(tmp_path):
    with pytest.raises(ValueError, match="unknown multi-rank workload 'nope'"):
        run_multirank("nope", 2, tmp_path, "k", BANDWIDTH)


def test_measured_iteration_is_the_slowest_rank_per_block():
    """Two fake ranks: rank 1 is slower in the first block, rank 0 in the others."""
    blocks = {0: [1.0, 4.0, 6.0], 1: [2.0, 3.0, 5.0]}
    barriers = []
    timing, medians = measure_ranks(lambda: None, lambda: barriers.append(1),
                                    lambda samples: [blocks[0], blocks[1]], items=8, warmup=1,
                                    repeat=3, number=2)
    assert len(barriers) == 3  # one before each block
    assert timing.median_s == 4.0 and timing.number == 2 and medians == [4.0, 3.0]
    assert measure_ranks(lambda: None, lambda: None, lambda samples: None, 1, 0, 2, 1) is None


def test_collectives_take_host_time_when_no_core_is_left_for_gloo():
    assert comm_host_share(2, 1, 2) == 1.0
    assert comm_host_share(4, 1, 2) == 0.0 and comm_host_share(3, 1, 2) == 0.0  # time-shared
    assert comm_host_share(2, 1, 4) == 0.0 and comm_host_share(2, 2, 8) == 0.0
    assert comm_host_share(2, 1, 3) == 0.5


def test_oversubscription_counts_busy_threads_per_core():
    assert oversubscription(2, 1, 2) == 1.0 and oversubscription(1, 2, 2) == 1.0
    assert oversubscription(4, 1, 2) == 2.0 and oversubscription(8, 2, 4) == 4.0


def _gloo_trace(tmp_path, with_worker_scope=True):
    """A synthetic 4-rank DDP trace (as captured on rank 3): the observer nested
    ops under the wrong parents while gloo's worker scope was open. Returns the
    ET and Kineto paths; times in the Kineto file are µs."""
    from perfmodel.trace.parse import ITERATION_MARK

    def node(id, name, parent, tid=1):
        empty = {"values": [], "shapes": [], "types": []}
        return {"id": id, "name": name, "ctrl_deps": parent, "inputs": empty, "outputs": empty,
                "attrs": [{"name": "tid", "value": tid}]}

    backward, accumulate = ("autograd::engine::evaluate_function: AddmmBackward0",
                            "autograd::engine::evaluate_function: AccumulateGrad")
    # (id, name, ET parent as recorded, start µs, duration µs); truth in the comments
    ops = [(4, backward, 3, 1, 20), (5, "aten::mm", 4, 2, 10),
           (7, "aten::t", 5, 13, 2),  # under 4: it starts after mm ended
           (8, accumulate, 4, 30, 10),  # under the iteration: after backward ended
           (9, "c10d::allreduce_", 8, 32, 5),
           (10, "aten::_foreach_mul_", 3, 50, 20),
           (11, "aten::mul_", 3, 52, 5)]  # under 10: inside its interval
    nodes = [node(1, "[pytorch|profiler|execution_trace|process]", 1),
             node(2, "[pytorch|profiler|execution_trace|thread]", 1),
             node(3, ITERATION_MARK, 2)] + [node(i, n, p) for i, n, p, _, _ in ops]
    events = [{"ph": "X", "cat": "user_annotation", "name": ITERATION_MARK, "ts": 0, "dur": 100,
               "tid": 1}] + [{"ph": "X", "cat": "cpu_op", "name": n, "ts": ts, "dur": dur,
                              "tid": 1} for _, n, _, ts, dur in ops]
    if with_worker_scope:
        nodes.append(node(6, "gloo:all_reduce", 5, tid=2))
        events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce",
                       "ts": 5, "dur": 50, "tid": 2})
    et, kineto = tmp_path / "r.et.json", tmp_path / "r.kineto.json"
    et.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": nodes}))
    kineto.write_text(json.dumps({"traceEvents": events}))
    return et, kineto


def test_ops_misplaced_while_a_gloo_scope_was_open_are_reparented_by_time(tmp_path):
    """Regression (ddp_mlp@4): an all-reduce nested in an earlier backward op
    vanished from two ranks' graphs; the ranks then disagreed on collectives."""
    from perfmodel.trace.parse import load_trace

    trace = load_trace(*_gloo_trace(tmp_path))
    parent = {n.id: n.parent for n in trace.nodes.values()}
    assert parent[7] == 4 and parent[8] == 3 and parent[9] == 8 and parent[11] == 10
    assert [c.id for c in trace.last_iteration().children] == [4, 8, 10]
    assert [c.id for c in trace.nodes[4].children] == [5, 7]
    assert [w.name for w in trace.worker_nodes] == ["gloo:all_reduce"]


def test_without_a_worker_scope_the_observers_tree_is_kept(tmp_path):
    from perfmodel.trace.parse import load_trace

    trace = load_trace(*_gloo_trace(tmp_path, with_worker_scope=False))
    assert trace.nodes[7].parent == 5 and trace.nodes[11].parent == 3


def test_ranks_share_the_cores_as_threads():
    from perfmodel.e2e.ranks import rank_threads

    assert rank_threads(2, 2) == rank_threads(4, 2) == 1 and rank_threads(2, 8) == 4


def test_no_fit_at_the_ranks_thread_count_is_one_clear_error(planted_results):
    """Only a 2-thread fit stored: 2 ranks on 2 cores run 1 thread each, so the
    run is refused before any rank starts (no mpiexec needed)."""
    from perfmodel.device.spec import DeviceSpec
    from perfmodel.fit.fitting import fit_predictors, save_fit
    from perfmodel.store.results import ResultStore

    root, key = planted_results
    spec = DeviceSpec.from_dict({**json.loads((root / key / "device.json").read_text()),
                                 "threads": 2})
    records = [{"kind": "measurement", "op": "all_reduce", "direction": "forward",
                "dtype": "float32", "config": {"world_size": 2, "bytes": 1 << e}, "replicate": 0,
                "run_id": "r2", "measurement": {"median_s": 1e-5 * e}} for e in range(4, 14)]
    store = ResultStore(root, key)
    save_fit(fit_predictors(records, spec), store, "two", ["r2"])
    message = (rf"^no fit for 1 thread\(s\) under {store.dir}: run `pytest suites/ -m "
               rf"microbench --perfmodel-profile quick --perfmodel-threads 1` first$")
    with pytest.raises(MultirankError, match=message):
        run_multirank("ddp_mlp", 2, root, key, BANDWIDTH, cores=2)
    save_fit(fit_predictors(records, DeviceSpec.from_dict({**spec.to_dict(), "threads": 1})),
             store, "one", ["r2"])  # collectives only: nothing to price the compute with
    with pytest.raises(MultirankError, match=r"^only collective predictors in the fit for 1"):
        run_multirank("ddp_mlp", 4, root, key, BANDWIDTH, profile="smoke", cores=2)


def test_a_stale_fit_at_the_ranks_thread_count_is_one_clear_error(planted_results, monkeypatch):
    """A 1-thread fit whose linear predictor predates a new linear param would price
    the ranks' layers as unmodelled nodes; require_fit refuses it, naming the op."""
    from perfmodel.fit.fitting import FitReport, fit_op, samples_from_records, save_fit
    from perfmodel.e2e.ranks import require_fit
    from perfmodel.ops import get_op
    from perfmodel.store.results import ResultStore

    root, key = planted_results
    store = ResultStore(root, key)
    report = FitReport(threads=1)
    linear = ("linear", "forward")
    report.predictors[linear], report.accuracy[linear] = fit_op(
        *linear, samples_from_records(planted_records())[linear], SPEC, kinds=["shape"])
    save_fit(report, store, "one", ["r1"])
    with pytest.raises(MultirankError, match=r"^no collective predictor in the 1-thread fit "
                                             r"under .*: run `pytest suites/test_collective.py"):
        require_fit(store, 1)  # the ranks could not price their collectives
    reduce = ("all_reduce", "forward")
    records = [{"kind": "measurement", "op": "all_reduce", "direction": "forward",
                "dtype": "float32", "config": {"world_size": 2, "bytes": 1 << e},
                "replicate": 0, "run_id": "r1", "measurement": {"median_s": 1e-5 * e}}
               for e in range(4, 14)]
    report.predictors[reduce], report.accuracy[reduce] = fit_op(
        *reduce, samples_from_records(records)[reduce], SPEC)
    save_fit(report, store, "two", ["r1"])
    assert require_fit(store, 1) is not None
    op = get_op("linear")
    monkeypatch.setattr(type(op), "params", op.params + ("EXTRA",))
    monkeypatch.setattr(type(op), "param_defaults", {**op.param_defaults, "EXTRA": 1})
    with pytest.raises(MultirankError, match=r"^stale predictors, fitted before their ops or "
                                             r"the predictor kinds changed \(linear.forward\) "
                                             r"for 1 thread"):
        require_fit(store, 1)


def _collective_record(nbytes, seconds, cpu, replicate=0):
    return {"kind": "measurement", "op": "all_reduce", "direction": "forward",
            "dtype": "float32", "config": {"world_size": 4, "bytes": nbytes},
            "measurement": {"median_s": seconds}, "run_id": "r1", "replicate": replicate,
            "rank_cpu_s": cpu}


def test_collective_cpu_and_loaded_times_are_fitted_and_priced_beside_its_time():
    """A collective record's ``rank_cpu_s`` (mean over ranks) trains the
    ``host_cpu`` predictor and its ``loaded_s`` the ``loaded`` one; the pricer
    returns (time, CPU time, loaded time), and None for what the fit lacks; a
    loaded time only at a measured world size. Malformed CPU lists and loaded
    times are skipped."""
    from perfmodel.fit.fitting import FitReport, fit_op, samples_from_records
    from perfmodel.e2e.ranks import comm_pricer
    from perfmodel.ops.collective import HOST_CPU, LOADED

    sizes = [2 ** k for k in range(4, 24, 2)]
    records = [_collective_record(s, 1e-4 + s / 1e9, [0.3 * (1e-4 + s / 1e9), 0.5 * (
        1e-4 + s / 1e9)], r) for s in sizes for r in (0, 1)]
    for r in records:
        r["loaded_s"] = 3 * r["measurement"]["median_s"]
    records += [_collective_record(64, 1e-4, bad) for bad in ([], [-1.0], ["x"], None, [True])]
    for bad, r in zip((-1.0, "x", True, float("nan")), records[-5:]):
        r["loaded_s"] = bad
    grouped = samples_from_records(records)
    cpu = grouped[("all_reduce", HOST_CPU)]
    assert len(cpu) == 2 * len(sizes) and len(grouped[("all_reduce", "forward")]) == \
        2 * len(sizes) + 5 and len(grouped[("all_reduce", LOADED)]) == 2 * len(sizes)
    assert cpu[0].seconds == pytest.approx(0.4 * (1e-4 + 16 / 1e9))
    report = FitReport(threads=1)
    for key in (("all_reduce", "forward"), ("all_reduce", HOST_CPU), ("all_reduce", LOADED)):
        report.predictors[key], report.accuracy[key] = fit_op(*key, grouped[key], SPEC,
                                                              kinds=["comm_interp"])
    params = {"world_size": 4, "bytes": 2 ** 20}
    wall, cpu_s, loaded_s = comm_pricer(report)("all_reduce", params)
    assert wall == pytest.approx(1e-4 + 2 ** 20 / 1e9, rel=0.05)
    assert cpu_s == pytest.approx(0.4 * wall, rel=0.05)
    assert loaded_s == pytest.approx(3 * wall, rel=0.05)
    # measured at 4 ranks only: the idle times carry over to 2 ranks, the loaded one not
    at_two = comm_pricer(report)("all_reduce", {"world_size": 2, "bytes": 2 ** 20})
    assert at_two.wall_s > 0 and at_two.cpu_s > 0 and at_two.loaded_s is None
    del report.predictors[("all_reduce", HOST_CPU)], report.predictors[("all_reduce", LOADED)]
    assert comm_pricer(report)("all_reduce", params)[1:] == (None, None)


def _comm_fit():
    """Ops take 1 ms; all_reduce 1 ms idle and 10 ms loaded (measured at 2 ranks)."""
    from types import SimpleNamespace

    from perfmodel.ops.collective import LOADED

    return ConstantFit({"forward": 1e-3, LOADED: 10e-3}, estimator=SimpleNamespace(world_=[2]))


def test_a_collective_runs_at_its_loaded_pace_beside_compute_and_idle_after():
    """The collective runs beside 1 ms of compute, then the host waits for it."""
    from perfmodel.trace.graph import Graph, Task
    from perfmodel.e2e.ranks import predict_ranks
    from perfmodel.simulate.host import HostModel
    from perfmodel.trace.overheads import table_from_samples

    def graph():
        return Graph([Task("collective", "c10d::allreduce_", "communication", op="all_reduce",
                           params={"world_size": 2, "bytes": 1024}, outputs=(7,)),
                      Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                           dtype="float32", params={}),
                      Task("op", "aten::relu", "elementwise", op="relu", direction="forward",
                           dtype="float32", params={}, inputs=(7,))], None)

    table = table_from_samples([], BANDWIDTH)
    own_cores = predict_ranks([graph(), graph()], _comm_fit(), table,
                              host=HostModel(cpu_share=1.0))
    # a tenth of the work beside the 1 ms GEMM, the rest at the idle pace, then 1 ms of relu
    assert own_cores.total_s == pytest.approx(2.9e-3)
    shared = predict_ranks([graph(), graph()], _comm_fit(), table,
                           host=HostModel(cpu_share=2.0, comm_host_share=comm_host_share(4, 1, 2)))
    # time-shared: each host op takes 2 ms and nothing of the collective's CPU time; the
    # collective does a fifth of its work beside the GEMM, the rest (0.8 ms) at the idle pace
    assert shared.total_s == pytest.approx(4.8e-3)
    charged = predict_ranks([graph(), graph()], _comm_fit(), table,
                            host=HostModel(cpu_share=2.0, comm_host_share=1.0))
    assert charged.total_s > shared.total_s


def test_the_contention_prices_ops_and_the_cpu_share_the_rest_once():
    """Time-shared ranks (c = k = 2): an op takes twice its time alone, and so
    does an unmodelled node (by cpu_share); neither is slowed twice."""
    from perfmodel.measure.contention import Contention
    from perfmodel.trace.graph import Graph, Task
    from perfmodel.e2e.ranks import predict_ranks
    from perfmodel.simulate.host import HostModel
    from perfmodel.trace.overheads import table_from_samples

    graph = Graph([Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                        dtype="float32", params={"B": 256, "IN": 100, "OUT": 256}),
                   Task("unmodelled", "aten::foo", "unmodelled", bytes=1e6)], None)
    table = table_from_samples([], BANDWIDTH)
    alone = predict_ranks([graph], _comm_fit(), table)
    assert alone.breakdown_s["gemm"] == pytest.approx(1e-3)
    both = Contention(2.0, BANDWIDTH, BANDWIDTH / 2, 4, compute_slowdown=2.0)
    for contention in (both, None):
        shared = predict_ranks([graph], _comm_fit(), table,
                               host=HostModel(cpu_share=2.0, contention=contention))
        assert shared.breakdown_s["gemm"] == pytest.approx(2e-3)
        assert shared.breakdown_s["unmodelled"] == pytest.approx(
            2 * alone.breakdown_s["unmodelled"])


def test_ops_are_moved_by_the_hosts_drift_before_the_contention():
    """Two 1 ms ops on a host twice as slow as at the fit take 2 ms each; beside
    the other ranks (a pure stream 1.5x slower) a streaming op takes 1.5x that."""
    from perfmodel.measure.contention import Contention
    from perfmodel.measure.drift import HostDrift
    from perfmodel.trace.graph import Graph, Task
    from perfmodel.e2e.ranks import predict_ranks
    from perfmodel.simulate.host import HostModel
    from perfmodel.ops import get_op
    from perfmodel.trace.overheads import table_from_samples

    sgd = {"NTENSORS": 14, "NUMEL": 37017}  # 1 ms at its bytes / bandwidth below
    bandwidth = get_op("sgd_foreach").bytes_moved(sgd, "float32", "forward") / 1e-3

    def graph(op, params):
        return Graph([Task("op", f"aten::{op}", "optimizer", op=op, direction="forward",
                           dtype="float32", params=params)], None)

    table = table_from_samples([], BANDWIDTH)
    sgd_graph = graph("sgd_foreach", sgd)
    plain = predict_ranks([sgd_graph], _comm_fit(), table).total_s
    slow = predict_ranks([sgd_graph], _comm_fit(), table,
                         host=HostModel(drift=HostDrift(2.0, 2.0, bandwidth))).total_s
    assert slow - plain == pytest.approx(1e-3)
    memory_only = HostDrift(1.0, 2.0, bandwidth)
    assert predict_ranks([sgd_graph], _comm_fit(), table,
                         host=HostModel(drift=memory_only)).total_s == pytest.approx(slow)
    beside = Contention(1.5, bandwidth, bandwidth / 1.5, 2)
    both = predict_ranks([sgd_graph], _comm_fit(), table,
                         host=HostModel(drift=memory_only, contention=beside)).total_s
    # the drifted 2 ms needs its bytes for half its time: 2 x (1 + 0.5 x 0.5) ms
    assert both - plain == pytest.approx(2.5e-3 - 1e-3)


def test_ops_drift_by_the_sweeps_at_the_hosts_thread_count_now_and_beside_the_fit(tmp_path):
    """The newest 2-thread sweep over the one started nearest the 1-thread fit's
    data, op by op; runs at another thread count and sweeps too far from the
    fit's data are not read."""
    from types import SimpleNamespace

    from perfmodel.e2e import ranks
    from perfmodel.store.results import ResultStore

    store = ResultStore(tmp_path, "cpu-x-2c")

    def sweep(run_id, threads, seconds):
        run = store.open_run({"threads": threads}, "quick", run_id)
        for op, s in seconds.items():
            for n in range(4):
                run.append({"kind": "measurement", "op": op, "direction": "forward",
                            "dtype": "float32", "config": {"N": n}, "replicate": 0,
                            "env": {"threads": threads},
                            "measurement": {"median_s": s * (n + 1), "cache": "hot"}})
        run.close()

    sweep("20261126T060000Z-1-aaaa", 2, {"linear": 1.0, "relu": 1.0})  # nearest the fit's data
    sweep("20261126T020000Z-2-bbbb", 2, {"linear": 9.0, "relu": 9.0})  # farther
    sweep("20261126T070000Z-3-cccc", 1, {"linear": 0.1, "relu": 0.1})  # the ranks' count
    sweep("20261128T010000Z-4-dddd", 2, {"linear": 1.5})  # a sweep of one op
    sweep("20261128T020000Z-5-eeee", 2, {"relu": 3.0})  # the newest
    sweep("20261128T030000Z-6-ffff", 1, {"linear": 7.0, "relu": 7.0})
    fit = SimpleNamespace(data_runs=("20261125T000000Z-7-0000", "20261126T070000Z-3-cccc"),
                          data_id="planted")
    factors, note = ranks.sweep_op_drift(store, fit, 2)
    assert factors == {"linear.forward": pytest.approx(1.5), "relu.forward": pytest.approx(3.0)}
    assert "20261128T020000Z-5-eeee, 20261128T010000Z-4-dddd over 20261126T060000Z-1-aaaa" in note
    far = SimpleNamespace(data_runs=("20261120T000000Z-7-0000",), data_id="far")
    assert ranks.sweep_op_drift(store, far, 2)[0] == {}
    assert "no 2-thread sweep within 12 h" in ranks.sweep_op_drift(store, far, 2)[1]
    assert ranks.sweep_op_drift(store, fit, 4) == ({}, "no op drift: no 4-thread sweep or no "
                                                        "dated fit data")


def test_multirank_items_without_their_fit_are_named_in_the_summary(pytester, planted_results,
                                                                    heavy_modules_loaded_once):
    """A session at 2 threads with no stored 1-thread fit (a new machine's main job)
    skips the multi-rank items, and the perfmodel summary says so in one line that
    names each of them and the command that makes them run (a skip's reason alone
    shows only under ``-rs``)."""
    from tests.helpers import REPO, run_plugin

    root, key = planted_results
    pytester.makepyfile(test_mr=(REPO / "suites" / "test_e2e_multirank.py").read_text())
    out = run_plugin(pytester, root, "--perfmodel-threads=2", "--perfmodel-profile=smoke",
                     "-k", "ddp_mlp")
    out.assert_outcomes(skipped=2)
    summary = re.sub(r"\s+", " ", out.stdout.str())  # the summary wraps long lines
    line = (f"WARN ddp_mlp@2, ddp_mlp@4: not run (no fit for 1 thread(s) under {root / key}: "
            f"run `pytest suites/ -m microbench --perfmodel-profile smoke --perfmodel-threads 1` "
            f"first)")
    assert summary.count(line) == 1 and summary.count("not run (") == 1, out.stdout.str()


def test_a_session_fits_the_stored_runs_at_the_ranks_thread_count_once(planted_results):
    """A 2-thread session whose store holds 1-thread runs but no 1-thread fit (the
    sweep the skip line names was run, nothing fitted it) fits them for the ranks,
    saves the fit and says so in the summary; with no such runs, nothing is fitted."""
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.session import Options, Session
    from perfmodel.settings import Settings
    from perfmodel.store import paths
    from perfmodel.store.results import ResultStore
    from tests.helpers import planted_spec

    root, key = planted_results
    store = ResultStore(root, key)
    two = Session(Options("cpu", "smoke", root, 2), Settings(), root)
    two._device = planted_spec(root, key)
    assert not two._refit_for_ranks(1)  # no 1-thread spec nor runs: nothing to fit
    one = {**json.loads(paths.spec_file(store.dir).read_text()), "threads": 1}
    paths.threads_spec_file(store.dir, 1).write_text(json.dumps(one))
    run = store.open_run({"threads": 2}, "smoke", run_id="20261206T000000Z-1-0001")
    for e in range(4, 14):  # collectives only: they qualify at any thread count
        run.append({"kind": "measurement", "op": "all_reduce", "direction": "forward",
                    "dtype": "float32", "config": {"world_size": 2, "bytes": 1 << e},
                    "replicate": 0, "run_id": "20261206T000000Z-1-0001", "env": {"threads": 2},
                    "measurement": {"median_s": 1e-5 * e}})
    run.close()
    collectives = Session(Options("cpu", "smoke", root, 2), Settings(), root)
    collectives._device = planted_spec(root, key)
    assert not collectives._refit_for_ranks(1)  # nothing but collectives: no fit is kept
    assert load_latest_fit(store, threads=1)[0] is None and not collectives.notes
    run = store.open_run({"threads": 1}, "smoke", run_id="20261207T000000Z-1-0001")
    for record in planted_records():
        run.append({**record, "run_id": "20261207T000000Z-1-0001", "env": {"threads": 1}})
    run.close()
    again = Session(Options("cpu", "smoke", root, 2), Settings(), root)
    again._device = planted_spec(root, key)
    assert load_latest_fit(store, threads=1)[0] is None
    assert again._refit_for_ranks(1)
    fit, _ = load_latest_fit(store, threads=1)
    assert fit is not None and ("linear", "forward") in fit.predictors
    assert list(fit.data_runs) == ["20261206T000000Z-1-0001", "20261207T000000Z-1-0001"]
    assert ("all_reduce", "forward") in fit.predictors  # the collectives join the ranks' fit
    (note,) = [n for n in again.notes if "fitted the stored 1-thread runs" in n]
    assert fit.path is not None and note.endswith(f"(2) as predictors/{fit.path.name}")
    assert not again._refit_for_ranks(1)  # once per session
