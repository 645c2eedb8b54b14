"""Predict one training iteration from the command line: a registered workload
or a saved trace, with the device's stored fit and shared overhead table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from perfmodel.e2e.result import MeasuredIteration
from perfmodel.simulate.result import IterationPrediction

#: The old result type of :func:`forecast_trace` and :func:`forecast_workload`, kept
#: for one release: the first returns an :class:`IterationPrediction` now and the
#: second a :class:`MeasuredIteration` (NaN measured figures unless ``measure``),
#: both printed by their ``lines`` method.
Forecast = IterationPrediction


def _device_and_fit(results_root: Path, device: str | None, threads: int | None):
    """(DeviceSpec, torch device, fit, shared overhead table, problems: the
    stored files passed over); ValueError when no fit is stored,
    :class:`~perfmodel.fit.fitting.StaleFit` (one) when the stored fit is stale."""
    from perfmodel.device.probe import detect_device
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_latest_fit, require_current
    from perfmodel.store.results import ResultStore

    spec = detect_device(device, results_root, threads=threads)
    store = ResultStore(results_root, spec.key)
    fit, problems = load_latest_fit(store, threads=spec.threads)
    if fit is None:
        why = f" ({problems[0]})" if problems else ""
        raise ValueError(f"no fitted predictors under {store.predictors_dir}{why}; run "
                         f"`pytest suites/ -m microbench` first")
    require_current(fit, spec.key)
    table, table_problems = shared_table(store.dir, spec.mem_bandwidth_Bps)
    torch_device = "cpu" if spec.kind == "cpu" else f"cuda:{spec.index or 0}"
    return spec, torch_device, fit, table, problems + table_problems


def forecast_workload(name: str, results_root: Path, device: str | None = None,
                      size: str = "registered", seed: int = 0, measure: bool = False,
                      threads: int | None = None) -> MeasuredIteration:
    """Build workload ``name`` (``size``, ``seed``), trace it, predict it and,
    with ``measure``, measure it (as :data:`perfmodel.e2e.single.MEASURE` says for
    the quick profile; NaN figures without). Its prediction names the device key and the stored files passed
    over (``problems``)."""
    from perfmodel.e2e.single import predict_step
    from perfmodel.workloads import build_workload, get_workload

    get_workload(name)  # an unknown name fails before the device is detected
    spec, torch_device, fit, table, problems = _device_and_fit(results_root, device, threads)
    step = build_workload(name, torch_device, seed=seed, size=size)
    result = predict_step(step.step, step.items, name, fit, table, torch_device,
                          spec.mem_bandwidth_Bps, measure)
    return replace(result, prediction=replace(result.prediction, device_key=spec.key,
                                              problems=problems))


def forecast_trace(et: Path, kineto: Path | None, calibration: Path | None,
                   results_root: Path, device: str | None = None,
                   threads: int | None = None) -> IterationPrediction:
    """Predict the last iteration of a saved trace (ET file, and optionally its
    Kineto and calibration files for timings and the profiler's cost); the
    prediction names the device key and the stored files passed over
    (``problems``). Its lines are printed under :func:`trace_name`."""
    from perfmodel.trace.graph import build_graph
    from perfmodel.simulate.predict import predict_graph
    from perfmodel.trace.parse import load_trace

    for path in (et, kineto, calibration):
        if path is not None and not path.is_file():
            raise ValueError(f"trace file {path} does not exist")
    spec, torch_device, fit, table, problems = _device_and_fit(results_root, device, threads)
    graph = build_graph(load_trace(et, kineto, calibration))  # TraceError is a ValueError
    pred = predict_graph(graph, fit, table, torch_device.startswith("cuda"))
    return replace(pred, device_key=spec.key, problems=problems)


def trace_name(et: Path) -> str:
    """The name ``perfmodel predict --trace`` gives a saved trace: its ET file's
    name without ``.json`` and ``.et``."""
    return et.name.removesuffix(".json").removesuffix(".et")
