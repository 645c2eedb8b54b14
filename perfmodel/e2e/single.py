"""End-to-end: trace a training iteration, predict it, and measure it.

Pipeline per workload (see DESIGN.md): capture an execution trace of a few
iterations (:mod:`perfmodel.trace.parse`), build the task graph of the last one
(:mod:`perfmodel.trace.graph`), price it with the fitted op predictors and the
device's shared overhead table (:mod:`perfmodel.trace.overheads`), simulate it
(:mod:`perfmodel.simulate.walk`), and compare with the measured iteration time.

Measurement follows the repeat × number method of the training benchmarks in
the seed work: warm up, then ``repeat`` timed blocks of ``number`` iterations
each; the per-iteration time of each block is one sample, and the median and
standard deviation are taken over the blocks.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from perfmodel.store import paths as store_paths
from perfmodel.trace.graph import Graph, build_graph
from perfmodel.trace.overheads import (OverheadTable, load_all_samples, load_samples,
                                 samples_from_graph, save_samples, table_from_samples,
                                 traced_gaps_s, with_earlier_leaves)
from perfmodel.e2e.result import IterationTiming, MeasuredIteration
from perfmodel.e2e.result import traced_breakdown  # noqa: F401  (its old home)
from perfmodel.simulate.predict import predict_graph
from perfmodel.trace.parse import capture_trace, load_trace

#: Iterations captured per trace (the last one is predicted) and warm-up before.
TRACE_ITERATIONS = 3
TRACE_WARMUP = 3
#: Workload size per profile on a CPU (``smoke`` keeps CI fast) and on a GPU.
WORKLOAD_SIZE = {"smoke": "tiny", "quick": "registered", "gpu": "full", "full": "registered"}
GPU_WORKLOAD_SIZE = {"smoke": "tiny", "quick": "full", "gpu": "full", "full": "full"}
#: ``measure_iteration`` arguments (warmup, repeat, number) per profile. Quick
#: times 20 blocks: the standard error of their median (about 1.25 sd/sqrt(20),
#: 1.6-3.9% of the iteration at the block spreads this project's CPU workloads
#: show) stays well under the spread between separate sessions that the gate
#: allows for, and 30 blocks would add a third to the E2E items' time for a
#: quarter less of that error (docs/journal/2026-11-28-main-job-time-2.md).
MEASURE = {"smoke": (2, 5, 2), "quick": (10, 20, 5), "gpu": (10, 30, 5), "full": (20, 50, 10)}


#: The old name of :class:`~perfmodel.e2e.result.MeasuredIteration`, kept for one
#: release: other modules and users' scripts still import it from here.
E2EResult = MeasuredIteration


def measure_iteration(step: Callable[[], object], items: int, warmup: int = 10, repeat: int = 30,
                      number: int = 5, sync: Callable[[], object] = lambda: None,
                      clock: Callable[[], float] = time.perf_counter) -> IterationTiming:
    """Time ``step`` (one training iteration over ``items`` samples)."""
    if repeat < 2 or number < 1:
        raise ValueError(f"need repeat >= 2 and number >= 1, got {repeat} and {number}")
    for _ in range(warmup):
        step()
    sync()
    samples = []
    for _ in range(repeat):
        start = clock()
        for _ in range(number):
            step()
        sync()
        samples.append((clock() - start) / number)
    median = statistics.median(samples)
    return IterationTiming(median, statistics.stdev(samples), repeat, number, items / median)


# -- the pieces -----------------------------------------------------------------------

def traces_dir(results_dir: Path) -> Path:
    """Where a device's captured traces go (``results/<device-key>/traces``)."""
    return store_paths.traces_dir(results_dir)


def overheads_dir(results_dir: Path) -> Path:
    """Where a device's per-workload overhead samples go."""
    return store_paths.overheads_dir(results_dir)


def capture_graph(step: Callable[[], object], out_dir: Path, name: str, device: str) -> Graph:
    """Capture ``step``'s trace files under ``out_dir`` and build the task graph
    of its last iteration."""
    files = capture_trace(step, out_dir, name, TRACE_ITERATIONS, TRACE_WARMUP, device)
    return build_graph(load_trace(files.et, files.kineto, files.calibration))


def trace_workload(name: str, step: Callable[[], object], results_dir: Path, device: str,
                   bandwidth_B_per_s: float, teach_table: bool = True) -> Graph:
    """Capture ``step``'s trace under ``results_dir``, build its graph, and save
    its overhead samples as workload ``name``'s contribution to the table: this
    trace's gaps, and the unmodelled-node samples of its last
    :data:`~perfmodel.trace.overheads.LEAF_TRACES` traces (an unreadable earlier file is
    kept beside it as ``<name>.json.unreadable``, with a warning). Without
    ``teach_table`` the table learns nothing from it (a held-out model)."""
    graph = capture_graph(step, traces_dir(results_dir), name, device)
    if not teach_table:
        return graph
    path = store_paths.overhead_file(results_dir, name)
    try:
        earlier = load_samples(path) if path.is_file() else None
    except ValueError as exc:
        earlier = None
        kept = store_paths.unreadable_copy(path)
        path.replace(kept)
        warnings.warn(f"{exc}; kept as {kept}, starting {name}'s samples afresh", stacklevel=2)
    save_samples(path, with_earlier_leaves(samples_from_graph(name, graph, bandwidth_B_per_s),
                                           earlier))
    return graph


def shared_table(results_dir: Path, bandwidth_B_per_s: float) -> tuple[OverheadTable, list[str]]:
    """The device's overhead table pooled over every workload's saved samples,
    and a problem line per unreadable samples file."""
    samples, problems = load_all_samples(overheads_dir(results_dir))
    return table_from_samples(samples, bandwidth_B_per_s), problems


def predict_and_measure(name: str, step: Callable[[], object], items: int, graph: Graph, fit,
                        table: OverheadTable, device: str, bandwidth_B_per_s: float,
                        measure: bool = True, bias: dict[str, float] | None = None,
                        profile: str = "quick") -> MeasuredIteration:
    """Predict ``graph`` with the shared ``table`` and with its own overheads,
    then measure ``step`` as :data:`MEASURE` says for ``profile`` (unless
    ``measure`` is False: measured is then NaN). ``bias`` plants a prediction
    error (see :func:`perfmodel.simulate.predict.parse_bias`)."""
    on_device = device.startswith("cuda")
    number = MEASURE[profile][2]  # iterations per measured block, back to back
    shared = predict_graph(graph, fit, table, on_device, bias=bias, iterations=number)
    own = predict_graph(graph, fit, table_from_samples(
        [samples_from_graph(name, graph, bandwidth_B_per_s)], bandwidth_B_per_s), on_device,
        keep_timeline=False, bias=bias, iterations=number)
    if measure:
        measured = measure_profile(step, items, device, profile)
    else:
        nan = float("nan")
        measured = IterationTiming(nan, nan, 0, 0, nan)
    return MeasuredIteration(name, measured, shared, own.predicted_s, table.workloads,
                             dict(bias or {}), traced_gaps_s(graph), graph=graph)


def save_replay(path: Path, result: MeasuredIteration, device_key: str, device: str,
                bandwidth_B_per_s: float, threads: int | None, env: dict | None = None,
                config: Mapping[str, Any] | None = None) -> Path:
    """Save ``result``'s capture (its task graph and measured time, on ``device``)
    as a replay case at ``path``, replacing the one there
    (:mod:`perfmodel.replay.case`)."""
    from perfmodel.replay.case import ReplayCase, measured_timing, plain_config, save_case

    m = result.measured
    return save_case(path, ReplayCase(
        result.workload, device_key, device.startswith("cuda"), bandwidth_B_per_s, threads,
        [result.graph], measured_timing(m.median_s, m.sd_s, m.repeat, m.number, m.items_per_s),
        plain_config(dict(env or {})), plain_config(dict(config or {})),
        recorded={"predicted_s": result.predicted_s, "fit_data": result.fit_data,
                  "bias": dict(result.bias)}))


def workload_config(name: str, size: str) -> dict:
    """Workload ``name``'s config at ``size`` (as :func:`perfmodel.workloads.build_workload`
    builds it) as plain data, with the size."""
    from perfmodel.replay.case import plain_config
    from perfmodel.workloads import get_workload

    cfg = get_workload(name)
    cfg = cfg.tiny() if size == "tiny" else cfg.full_size() if size == "full" else cfg
    return {"size": size, **plain_config(cfg)}


def measure_again(result: MeasuredIteration, step: Callable[[], object], items: int,
                  device: str, profile: str = "quick") -> MeasuredIteration:
    """``result`` with its iteration measured once more (as :data:`MEASURE` says for
    ``profile``) and the first measurement's median kept in ``first_measured_s``.

    The gate asks for it when a measurement fails its error check: a burst of load
    on a shared machine can slow one whole measurement (see
    docs/journal/2026-11-22-gate-on-cpu-amd-epyc-2c.md), and the repeat decides."""
    return replace(result, measured=measure_profile(step, items, device, profile),
                   first_measured_s=result.measured.median_s)


def measure_profile(step: Callable[[], object], items: int, device: str,
                    profile: str = "quick") -> IterationTiming:
    """:func:`measure_iteration` of ``step`` with ``profile``'s (warmup, repeat,
    number) from :data:`MEASURE`, synchronising ``device``."""
    warmup, repeat, number = MEASURE[profile]
    return measure_iteration(step, items=items, warmup=warmup, repeat=repeat, number=number,
                             sync=_sync_for(device))


def time_prediction(graph: Graph, fit, table: OverheadTable, tasks: int = 10_000,
                    on_device: bool = False) -> tuple[int, float]:
    """The size of a graph of at least ``tasks`` tasks (``graph``'s tasks
    repeated) and the seconds to predict it, batched predictor calls and
    simulation included."""
    if not graph.tasks:
        raise ValueError("cannot time the prediction of an empty graph")
    copies = -(-tasks // len(graph.tasks))
    big = replace(graph, tasks=graph.tasks * copies)
    start = time.perf_counter()
    predict_graph(big, fit, table, on_device, keep_timeline=False)
    return len(big.tasks), time.perf_counter() - start


def _sync_for(device: str) -> Callable[[], object]:
    if device.startswith("cuda"):
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


# -- the user's own model ---------------------------------------------------------------

def training_step(model: Any, batch: Any, loss_fn: Callable[[Any, Any], Any],
                  optimizer: Any) -> Callable[[], None]:
    """One training iteration as a callable: ``optimizer.zero_grad()``, then
    ``loss_fn(model, batch).backward()``, then ``optimizer.step()``."""
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        optimizer.step()

    return step


def predict_model(model: Any, batch: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any,
                  *, items: int | None = None, name: str = "user_model",
                  results: str | Path = "results", device: str | None = None,
                  threads: int | None = None, measure: bool = True,
                  replay: str | Path | None = None) -> MeasuredIteration:
    """Predict (and measure) one training iteration of a user's model: a
    :class:`~perfmodel.e2e.result.MeasuredIteration` (its ``prediction`` an
    :class:`~perfmodel.simulate.result.IterationPrediction`; NaN measured figures
    with ``measure=False``).

    ``loss_fn(model, batch)`` returns the loss tensor of one batch; one
    iteration is zero_grad, loss, backward, ``optimizer.step()``. Predictions
    use the fitted predictors and the shared overhead table stored under
    ``results/<device-key>/`` (run ``pytest suites/ -m "microbench or e2e"``
    first to create them); a stale stored fit is refused with
    :class:`~perfmodel.fit.fitting.StaleFit`, which names the command that
    refits it. ``items`` (samples per batch, for items/s) defaults
    to the leading dim of the first tensor in ``batch``. The model's own
    overhead samples are not added to the shared table. ``replay``: a file to save
    the capture to as a replay case (:func:`save_replay`).
    """
    from perfmodel.device.probe import detect_device
    from perfmodel.fit.fitting import load_latest_fit, require_current
    from perfmodel.store.results import ResultStore

    spec = detect_device(device, Path(results), threads=threads)
    torch_device = "cpu" if spec.kind == "cpu" else f"cuda:{spec.index or 0}"
    store = ResultStore(Path(results), spec.key)
    fit, problems = load_latest_fit(store, threads=spec.threads)
    if fit is None:
        raise LookupError(f"no fitted predictors under {store.dir}; run "
                          f"`pytest suites/ -m microbench` first")
    require_current(fit, spec.key)  # StaleFit: never predict from a stale fit
    table, table_problems = shared_table(store.dir, spec.mem_bandwidth_Bps)
    for problem in problems + table_problems:
        warnings.warn(f"skipped: {problem}", stacklevel=2)
    result = predict_step(training_step(model, batch, loss_fn, optimizer),
                          items if items is not None else batch_items(batch), name, fit, table,
                          torch_device, spec.mem_bandwidth_Bps, measure)
    if replay is not None:
        from perfmodel.measure.env import environment

        save_replay(Path(replay), result, spec.key, torch_device, spec.mem_bandwidth_Bps,
                    spec.threads, environment(spec.key, spec.threads))
    return result


def predict_step(step: Callable[[], object], items: int, name: str, fit, table: OverheadTable,
                 device: str, bandwidth_B_per_s: float, measure: bool = True
                 ) -> MeasuredIteration:
    """Trace ``step`` into a temporary folder, predict it with ``fit`` and
    ``table``, and measure it: :func:`predict_model` with everything given.
    The host allocator keeps freed memory from here on, as in the sweeps the
    fit was trained on (:func:`perfmodel.measure.allocator.keep_freed_memory`)."""
    import tempfile

    from perfmodel.measure.allocator import keep_freed_memory

    keep_freed_memory()

    with tempfile.TemporaryDirectory(prefix="perfmodel-trace-") as tmp:
        graph = capture_graph(step, Path(tmp), name, device)
    return predict_and_measure(name, step, items, graph, fit, table, device, bandwidth_B_per_s,
                               measure)


def batch_items(batch: Any) -> int:
    """Samples in ``batch``: the leading dim of its first tensor (1 if none)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    if isinstance(values, (list, tuple)) or hasattr(values, "__iter__"):
        for value in values:
            if isinstance(value, torch.Tensor) and value.dim():
                return int(value.shape[0])
    return 1
