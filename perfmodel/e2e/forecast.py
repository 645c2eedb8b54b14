"""Predict one training iteration from the command line: a registered workload
or a saved trace, with the device's stored fit and shared overhead table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel.e2e.single import IterationTiming
from perfmodel.simulate.predict import furthest_beyond


@dataclass
class Forecast:
    """A predicted iteration (seconds), and its measurement when taken."""

    name: str
    device_key: str
    predicted_s: float
    breakdown_s: dict[str, float]
    regions_s: dict[str, float] = field(default_factory=dict)
    unmodelled: list = field(default_factory=list)  # (name, count, share of traced time)
    traced_s: float | None = None
    measured: IterationTiming | None = None
    #: op.direction -> (calls, largest ratio) beyond the fitted configs
    #: (:func:`perfmodel.simulate.predict.beyond_fit`; None: the fit does not say)
    beyond_fit: dict[str, tuple[int, float]] | None = None
    #: Stored files passed over on the way (a newer fit or an overhead samples
    #: file that could not be read), one line each naming the file.
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Predicted time, breakdown by category and region (ms and share),
        the largest unmodelled nodes, the measured time and error, and the
        stored files passed over."""
        total = self.predicted_s
        out = [f"{self.name} on {self.device_key}: predicted {total * 1e3:.2f} ms"]
        for title, parts in (("breakdown", self.breakdown_s), ("regions", self.regions_s)):
            if parts:
                out.append(f"  {title}:")
                out += [f"    {k:<24}{v * 1e3:>10.3f} ms {v / total if total else 0:>7.1%}"
                        for k, v in sorted(parts.items(), key=lambda kv: -kv[1])]
        top = [f"{n} x{c}" + (f" {s:.1%}" if s is not None else "")
               for n, c, s in self.unmodelled[:3]]
        if top:
            out.append(f"  unmodelled: {', '.join(top)}"[:100])
        far = furthest_beyond(self.beyond_fit)
        if far:
            out.append("  extrapolated beyond the fitted configs (calls, most x the largest "
                       "fitted FLOPs or bytes): "
                       + ", ".join(f"{k} {n}, {r:.0f}x" for k, (n, r) in far))
        if self.traced_s:
            out.append(f"  traced iteration {self.traced_s * 1e3:.2f} ms (under the profiler)")
        m = self.measured
        if m is not None and math.isfinite(m.median_s):
            error = (total - m.median_s) / m.median_s
            out.append(f"  measured {m.median_s * 1e3:.2f} ms (sd {m.sd_s * 1e3:.2f}, "
                       f"{m.repeat} x {m.number} iterations), error {error:+.1%}")
        out += [f"  skipped: {problem}" for problem in self.problems]
        return out


def _device_and_fit(results_root: Path, device: str | None, threads: int | None):
    """(DeviceSpec, torch device, fit, shared overhead table, problems: the
    stored files passed over); ValueError when no fit is stored."""
    from perfmodel.device.probe import detect_device
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.store.results import ResultStore

    spec = detect_device(device, results_root, threads=threads)
    store = ResultStore(results_root, spec.key)
    fit, problems = load_latest_fit(store, threads=spec.threads)
    if fit is None:
        why = f" ({problems[0]})" if problems else ""
        raise ValueError(f"no fitted predictors under {store.predictors_dir}{why}; run "
                         f"`pytest suites/ -m microbench` first")
    table, table_problems = shared_table(store.dir, spec.mem_bandwidth_Bps)
    torch_device = "cpu" if spec.kind == "cpu" else f"cuda:{spec.index or 0}"
    return spec, torch_device, fit, table, problems + table_problems


def forecast_workload(name: str, results_root: Path, device: str | None = None,
                      size: str = "registered", seed: int = 0, measure: bool = False,
                      threads: int | None = None) -> Forecast:
    """Build workload ``name`` (``size``, ``seed``), trace it, predict it and,
    with ``measure``, measure it (30 blocks of 5 iterations)."""
    from perfmodel.e2e.single import predict_step
    from perfmodel.workloads import build_workload, get_workload

    get_workload(name)  # an unknown name fails before the device is detected
    spec, torch_device, fit, table, problems = _device_and_fit(results_root, device, threads)
    step = build_workload(name, torch_device, seed=seed, size=size)
    result = predict_step(step.step, step.items, name, fit, table, torch_device,
                          spec.mem_bandwidth_Bps, measure)
    return Forecast(name, spec.key, result.predicted_s, result.breakdown_s, result.regions_s,
                    result.unmodelled, result.traced_s, result.measured if measure else None,
                    result.beyond_fit, problems)


def forecast_trace(et: Path, kineto: Path | None, calibration: Path | None,
                   results_root: Path, device: str | None = None,
                   threads: int | None = None) -> Forecast:
    """Predict the last iteration of a saved trace (ET file, and optionally its
    Kineto and calibration files for timings and the profiler's cost)."""
    from perfmodel.trace.graph import build_graph
    from perfmodel.simulate.predict import predict_graph
    from perfmodel.trace.parse import load_trace

    for path in (et, kineto, calibration):
        if path is not None and not path.is_file():
            raise ValueError(f"trace file {path} does not exist")
    spec, torch_device, fit, table, problems = _device_and_fit(results_root, device, threads)
    graph = build_graph(load_trace(et, kineto, calibration))  # TraceError is a ValueError
    pred = predict_graph(graph, fit, table, torch_device.startswith("cuda"))
    name = et.name.removesuffix(".json").removesuffix(".et")
    return Forecast(name, spec.key, pred.total_s, pred.breakdown_s,
                    dict(sorted(pred.sim.regions_s.items())), pred.unmodelled, graph.measured_s,
                    beyond_fit=pred.beyond_fit, problems=problems)
