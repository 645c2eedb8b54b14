"""Per-pytest-session state: the device, the run file, the fit, the E2E results.

Each method is a thin call into the ``perfmodel`` library; heavy modules
(torch, scikit-learn) are imported on first use, not when pytest starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from perfmodel.gate import Verdict, check_errors, load_baseline, save_baseline
from perfmodel.settings import Settings
from perfmodel.store import ResultStore, new_run_id


@dataclass
class Options:
    """The plugin's command-line options, parsed."""

    device: str | None
    profile: str
    results_root: Path
    threads: int
    save_baseline: bool
    budget_s: float
    target_rel_ci: float
    cold_cache: bool
    bias: dict[str, float] = field(default_factory=dict)  # planted prediction error


@dataclass
class GateOutcome:
    """What the gate decided after the run; ``lines`` are printed in the summary."""

    verdicts: list[Verdict] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    failed: bool = False


class PerfmodelSession:
    """State shared by the perfmodel items of one pytest session."""

    def __init__(self, options: Options, settings: Settings, rootdir: Path):
        self.options = options
        self.settings = settings
        self.rootdir = rootdir
        self.run_id = new_run_id()
        self._device = None
        self._env: dict | None = None
        self._writer = None
        self._fit = None
        self.accuracy: list = []  # OpAccuracy of the accuracy items that ran
        self.e2e: list = []  # E2EResult of the e2e items that ran
        self.user_models: list = []  # E2EResult of perfmodel_predict calls (not gated)
        self.e2e_expected: set[str] = set()  # workloads of the collected e2e items
        self._graphs: dict = {}  # workload -> task Graph traced this session
        self.notes: list[str] = []  # informational lines for the summary
        self.problems: list[str] = []  # unreadable result files, reported in the summary
        self.gate = GateOutcome()

    # -- lazily created ------------------------------------------------------------
    @property
    def device(self):
        """The :class:`~perfmodel.device.DeviceSpec` in use (detected once)."""
        if self._device is None:
            import torch

            from perfmodel.device import detect_device

            torch.set_num_threads(self.options.threads)
            self._device = detect_device(self.options.device, self.options.results_root,
                                         threads=self.options.threads)
        return self._device

    @property
    def torch_device(self) -> str:
        spec = self.device
        return "cpu" if spec.kind == "cpu" else f"cuda:{spec.index or 0}"

    @property
    def store(self) -> ResultStore:
        return ResultStore(self.options.results_root, self.device.key)

    @property
    def env(self) -> dict:
        if self._env is None:
            from perfmodel.env import environment

            self._env = environment(self.device.key, self.options.threads, cwd=self.rootdir)
        return self._env

    def _append(self, record: dict) -> None:
        if self._writer is None:
            self._writer = self.store.open_run(self.env, self.options.profile, self.run_id)
        self._writer.append(record)

    @property
    def timer_settings(self):
        from perfmodel.bench import TimerSettings

        return TimerSettings(target_rel_ci=self.options.target_rel_ci,
                             budget_s=self.options.budget_s, cold_cache=self.options.cold_cache)

    # -- items -----------------------------------------------------------------------
    def benchmark(self, case) -> None:
        """Measure ``case`` and append its records to this run's file."""
        from perfmodel.bench import MAX_CALL_S, CaseUnsupported, benchmark_case, measurement_record

        try:
            measurements = benchmark_case(case, self.device, self.torch_device,
                                          self.timer_settings, MAX_CALL_S[self.options.profile])
        except CaseUnsupported as exc:
            pytest.skip(str(exc))
        for replicate, m in enumerate(measurements):
            self._append(measurement_record(case, m, replicate, self.env))
        self._fit = None  # new data: refit before the next accuracy or e2e item

    def fit(self):
        """Predictors fitted on every stored measurement of this device.

        The newest stored fit is reused when it was trained on exactly the run
        files present now (so repeated ``-m e2e`` runs predict with the same
        model); otherwise, including after new measurements, it refits and
        saves the fit. With no measurements at all the newest fit is used.
        """
        if self._fit is None:
            from perfmodel.fitting import fit_predictors, load_latest_fit, save_fit

            loaded = self.store.load("measurement")
            latest, problems = load_latest_fit(self.store)
            self._note_problems(loaded.problems + problems)
            runs = sorted({r["run_id"] for r in loaded.records})
            if loaded.records and (latest is None or list(latest.data_runs) != runs):
                self._fit = fit_predictors(loaded.records, self.device)
                save_fit(self._fit, self.store, self.run_id, runs)
            else:
                self._fit = latest
        return self._fit

    def _required_fit(self):
        """:meth:`fit`, failing the item when there is nothing to fit or load."""
        fit = self.fit()
        if fit is None:
            pytest.fail(f"no measurements or fitted predictors under {self.store.dir}; "
                        f"run `pytest -m microbench` first", pytrace=False)
        return fit

    def _shared_table(self):
        """The device's shared overhead table; unreadable sample files are noted."""
        from perfmodel.e2e import shared_table

        table, problems = shared_table(self.store.dir, self.device.mem_bandwidth_Bps)
        self._note_problems(problems)
        return table

    def check_accuracy(self, op: str, direction: str) -> None:
        """Fail the item when the held-out GMAE of ``op.direction`` is above its threshold."""
        fit = self._required_fit()
        acc = fit.accuracy.get((op, direction))
        if acc is None:
            why = fit.skipped.get((op, direction), "no measurements of it were found")
            pytest.fail(f"{op}.{direction}: cannot score: {why}", pytrace=False)
        self.accuracy.append(acc)
        threshold = self.settings.gmae_threshold(op, direction, self.options.profile)
        if acc.gmae > threshold:
            floor = "n/a" if acc.noise_floor is None else f"{acc.noise_floor:.1%}"
            pytest.fail(f"{op}.{direction}: held-out GMAE {acc.gmae:.1%} > threshold "
                        f"{threshold:.1%} (noise floor {floor}, predictor {acc.chosen}, "
                        f"{acc.n_configs} configs)", pytrace=False)

    def run_e2e(self, workload: str) -> None:
        """Trace, predict and measure ``workload`` (``baseline_runs`` times when
        saving a baseline), and record its error for the gate."""
        from perfmodel.e2e import predict_and_measure

        fit = self._required_fit()
        self._trace_expected_workloads()
        runs = self.settings.baseline_runs if self.options.save_baseline else 1
        for run in range(runs):
            step = self._build(workload)
            graph = self._graphs.get(workload) if run == 0 else None
            if graph is None:
                graph = self._trace(workload, step)
            table = self._shared_table()
            result = predict_and_measure(workload, step.step, step.items, graph, fit, table,
                                         self.torch_device, self.device.mem_bandwidth_Bps,
                                         bias=self.options.bias, profile=self.options.profile)
            self.record_e2e(result)
            del step

    def _trace_expected_workloads(self) -> None:
        """Before the first prediction, trace every selected workload once, so
        the shared overhead table pools all of them (not only those done so far)."""
        for name in sorted(self.e2e_expected - set(self._graphs)):
            try:
                self._trace(name, self._build(name))
            except pytest.skip.Exception:
                continue

    def _build(self, workload: str):
        """``workload`` built on this device (full size on a GPU); skips the item,
        and drops it from the gate with a warning, when a package it needs is
        missing."""
        from perfmodel.e2e import GPU_WORKLOAD_SIZE, WORKLOAD_SIZE
        from perfmodel.workloads import build_workload

        sizes = WORKLOAD_SIZE if self.device.kind == "cpu" else GPU_WORKLOAD_SIZE
        try:
            return build_workload(workload, self.torch_device, size=sizes[self.options.profile])
        except ImportError as exc:
            self.e2e_expected.discard(workload)
            line = f"WARN {workload}: not run, so not gated ({exc})"
            if line not in self.gate.lines:
                self.gate.lines.append(line)
            pytest.skip(f"{workload}: {exc}")

    def _trace(self, workload: str, step):
        """Trace ``step``, save its overhead samples, and keep its task graph."""
        from perfmodel.e2e import trace_workload

        self._graphs[workload] = trace_workload(workload, step.step, self.store.dir,
                                                self.torch_device, self.device.mem_bandwidth_Bps)
        return self._graphs[workload]

    def predict_model(self, model, batch, loss_fn, optimizer, *, items: int | None = None,
                      name: str = "user_model", measure: bool = True):
        """:func:`perfmodel.e2e.predict_model` on this session's device, fit and
        overhead table; the result shows in the summary but is not gated."""
        from perfmodel.e2e import batch_items, predict_step, training_step

        fit = self._required_fit()
        table = self._shared_table()
        result = predict_step(training_step(model, batch, loss_fn, optimizer),
                              items if items is not None else batch_items(batch), name, fit,
                              table, self.torch_device, self.device.mem_bandwidth_Bps, measure)
        self.user_models.append(result)
        return result

    def time_prediction(self, workload: str, tasks: int, limit_s: float) -> None:
        """Time the prediction of ``workload``'s graph repeated to ``tasks`` tasks;
        fail the item when it takes longer than ``limit_s``."""
        from perfmodel.e2e import time_prediction

        fit = self._required_fit()
        graph = self._graphs.get(workload) or self._trace(workload, self._build(workload))
        table = self._shared_table()
        n, seconds = time_prediction(graph, fit, table, tasks, self.device.kind != "cpu")
        self.notes.append(f"prediction speed: {n} tasks predicted and simulated in "
                          f"{seconds * 1e3:.0f} ms")
        if seconds > limit_s:
            pytest.fail(f"predicting {n} tasks took {seconds:.2f} s > {limit_s} s", pytrace=False)

    def _note_problems(self, problems: list[str]) -> None:
        for problem in problems:
            if problem not in self.problems:
                self.problems.append(problem)

    def record_e2e(self, result) -> None:
        """Store an :class:`~perfmodel.e2e.E2EResult` and hand it to the gate."""
        self._append(result.record(self.env))
        self.e2e.append(result)

    # -- end of session ---------------------------------------------------------------
    def finish(self) -> GateOutcome:
        """Close the run file, save the baseline when asked, and run the gate."""
        if self._writer is not None:
            self._writer.close()
        if not self.e2e and not self.e2e_expected:
            return self.gate
        errors: dict[str, list[float]] = {}
        for r in self.e2e:
            errors.setdefault(r.workload, []).append(r.signed_error)
        path = self.store.baseline_path(self.options.profile)
        if self.options.save_baseline:
            if errors:
                save_baseline(path, self.device.key, errors, self.env)
                self.gate.lines.append(
                    f"baseline saved to {path}: {len(errors)} workloads, "
                    f"{self.settings.baseline_runs} runs each")
            return self.gate
        try:
            baseline = load_baseline(path)
        except ValueError as exc:
            self.gate.failed = True
            self.gate.lines.append(f"FAIL perfmodel gate: {exc}")
            return self.gate
        if baseline is None:
            self.gate.lines.append(f"no baseline at {path}; not gating. Create one with "
                                   f"--perfmodel-save-baseline")
            return self.gate
        report = check_errors({w: e[-1] for w, e in errors.items()}, baseline,
                              self.settings.gate_policy(), expected=self.e2e_expected,
                              device_key=self.device.key, env=self.env)
        self.gate.verdicts = report.verdicts
        self.gate.lines.extend(report.lines())
        self.gate.failed = report.failed
        return self.gate


def default_threads() -> int:
    """CPU threads to pin torch to: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
