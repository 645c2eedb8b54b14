"""One session of measuring, fitting, predicting and gating, without pytest.

:class:`Session` holds the policy that the pytest plugin drives and a script
may drive the same way: the device, this run's file, host-speed sampling, the
fit, E2E runs (with one repeat when the error alone fails the gate), the
gate-stability experiment, saving a baseline and gating against it
(:meth:`Session.finish`). See docs/scripting.md.

Where a step cannot run here it raises :class:`Unavailable`; where a check
fails, :class:`CheckFailed`. The plugin turns them into ``pytest.skip`` and
``pytest.fail`` with the same message. Heavy modules (torch, scikit-learn) are
imported on first use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel.gate.baseline import (FLOOR_SPAN_S, Verdict, WorkloadRuns, built_from_repeats,
                                     check_errors, error_fails, load_baseline, save_baseline)
from perfmodel.settings import Settings
from perfmodel.store.results import ResultStore, new_run_id


class Unavailable(Exception):
    """A step that cannot run here: the device is absent, the case unsupported,
    a package missing, the world size another. Its message says why."""


class CheckFailed(Exception):
    """A check that failed: a predictor above its GMAE threshold, nothing to fit,
    a multi-rank run that broke, a slow prediction. Its message is one line."""


def default_threads() -> int:
    """CPU threads to pin torch to: the cores this process may run on."""
    from perfmodel.device.probe import usable_cpus

    return usable_cpus()


@dataclass
class Options:
    """What a session measures and where it stores it.

    ``None`` picks the default: ``threads`` the usable cores, ``budget_s`` the
    profile's :data:`~perfmodel.measure.bench.BUDGET_S`, ``collective_budget_s``
    ``budget_s`` when that was given, else the profile's
    :data:`~perfmodel.measure.bench.COLLECTIVE_BUDGET_S`."""

    device: str | None = None  # cpu, cuda, cuda:N; None: cuda when present
    profile: str = "smoke"
    results_root: Path = Path("results")
    threads: int | None = None
    save_baseline: bool = False  # finish() saves a baseline instead of gating
    budget_s: float | None = None  # sampling budget per config and replicate
    target_rel_ci: float = 0.02
    cold_cache: bool = False
    bias: dict[str, float] = field(default_factory=dict)  # planted prediction error
    collective_budget_s: float | None = None
    save_replay_baseline: bool = False  # finish() saves the replay baseline instead of gating

    def __post_init__(self) -> None:
        from perfmodel.measure.bench import BUDGET_S, COLLECTIVE_BUDGET_S

        self.results_root = Path(self.results_root)
        if self.threads is None:
            self.threads = default_threads()
        if self.collective_budget_s is None:
            self.collective_budget_s = (COLLECTIVE_BUDGET_S[self.profile] if self.budget_s is None
                                        else self.budget_s)
        if self.budget_s is None:
            self.budget_s = BUDGET_S[self.profile]


@dataclass
class GateOutcome:
    """What the gate decided after the run; ``lines`` are its report."""

    verdicts: list[Verdict] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    failed: bool = False

    def decision(self) -> str | None:
        """One line with the decision over the verdicts; None without verdicts."""
        if not self.verdicts:
            return None
        failed = [v.workload for v in self.verdicts if v.failed]
        if failed:
            return (f"FAIL perfmodel gate: {len(failed)} of {len(self.verdicts)} workload(s) "
                    f"failed ({', '.join(failed)})")  # whole: every name, to be searched for
        new = sum(v.status == "new" for v in self.verdicts)
        extra = f", {new} new (no baseline entry)" if new else ""
        return (f"perfmodel gate: pass, {len(self.verdicts) - new} workload(s) within their "
                f"baseline{extra}")


def measure_hint(op: str) -> str:
    """How to measure ``op`` (collectives need several ranks)."""
    from perfmodel.ops import get_op

    if get_op(op).family == "collective":
        return ("collectives are measured on several ranks: pytest suites/test_collective.py "
                "-m 'microbench and collective' --perfmodel-ranks 2 (and 4)")
    return f"run `pytest -m microbench -k {op}` first"


def profile_note(profile: str, device_kind: str) -> str | None:
    """A summary line when ``profile`` is sized for another kind of device than
    ``device_kind`` (``"cpu"`` or ``"cuda"``), else None."""
    if profile == "gpu" and device_kind == "cpu":
        return ("profile gpu on a CPU: its configs are sized for a GPU (those over the "
                "per-call limit are skipped) and its E2E workloads run at full size")
    if profile == "quick" and device_kind != "cpu":
        return ("profile quick on a GPU: its configs are sized for a CPU, and the full-size "
                "workloads' op calls lie beyond them; --perfmodel-profile gpu covers them")
    return None


class Session:
    """The device, the run file, the fit and the E2E results of one session.

    ``settings`` default to :class:`~perfmodel.settings.Settings` (the plugin
    reads ``[tool.perfmodel]``); ``rootdir`` is where the commit is read
    (default: the working directory); ``device``, a
    :class:`~perfmodel.device.spec.DeviceSpec` to use instead of detecting one."""

    def __init__(self, options: Options, settings: Settings | None = None,
                 rootdir: Path | None = None, device=None):
        self.options = options
        self.settings = settings if settings is not None else Settings()
        self.rootdir = Path.cwd() if rootdir is None else Path(rootdir)
        self.run_id = new_run_id()
        self._device = device
        #: Why the requested device cannot be used (CUDA asked for but absent), or None.
        self.device_unavailable: str | None = None
        self._env: dict | None = None
        self._writer = None
        self._fit = None
        #: (name, recorded accuracy) of the newest stored fit trained on other runs than
        #: :meth:`fit`'s (:func:`perfmodel.fit.fitting.recorded_accuracy`): the previous
        #: fit, a fresh sweep's reference
        self._previous_fit: tuple = (None, {})
        #: (monotonic s, record field) of the last host speed sample, or None
        self._host_speed: tuple[float, dict] | None = None
        #: where the host speed comes from: "sampled" (this process, once a minute),
        #: "fixed" (one sample taken alone by rank 0 of a sharded sweep) or "off"
        #: (xdist workers: they would time it beside each other)
        self.host_speed_source = "sampled"
        #: other processes timing microbenchmarks on this host at the same time (the
        #: other ranks of a sharded sweep on one host, or the other xdist workers); a
        #: CPU record carries it as ``timed_beside`` (see
        #: :func:`perfmodel.fit.fitting.newest_per_config`)
        self.timed_beside = 0
        self.accuracy: list = []  # OpAccuracy of the accuracy checks that ran
        self.e2e: list = []  # MeasuredIteration of the E2E runs (gated)
        self.user_models: list = []  # MeasuredIteration of predict_model calls (not gated)
        #: (half, MeasuredIteration) of the zoo models run (not gated)
        self.zoo: list[tuple[str, object]] = []
        self.e2e_expected: set[str] = set()  # workloads this session gates
        #: sessions of other processes (pytest-xdist workers) merged into this one
        #: (:meth:`merge_worker_state`)
        self.workers_reported = 0
        self._graphs: dict = {}  # workload -> task Graph traced this session
        self.notes: list[str] = []  # informational lines for the summary
        #: why E2E items were skipped -> their names (:meth:`_note_not_run`)
        self._not_run: dict[str, list[str]] = {}
        #: thread counts whose stored runs were fitted for the ranks (:meth:`_refit_for_ranks`)
        self._refitted_for_ranks: set[int] = set()
        #: Microbench measurements taken, and the ids of those whose spread was
        #: wide (:attr:`perfmodel.measure.timer.Measurement.wide_spread`), for the summary.
        self.measured = 0
        self.wide_spread: list[str] = []
        self.problems: list[str] = []  # unreadable result files, reported in the summary
        self.gate = GateOutcome()
        #: the replay gate (:class:`perfmodel.gate.replay.ReplayGate`), made by the
        #: first :meth:`run_replay`
        self.replay = None
        #: the accuracy gate on committed fits (:class:`perfmodel.gate.accuracy.AccuracyGate`),
        #: made by the first :meth:`run_accuracy_replay`
        self.accuracy_gate = None

    # -- lazily created ------------------------------------------------------------
    @property
    def device(self):
        """The :class:`~perfmodel.device.spec.DeviceSpec` in use (detected once);
        :class:`Unavailable` when the requested device is absent."""
        if self._device is None:
            if self.device_unavailable:
                raise Unavailable(self.device_unavailable)
            import torch

            from perfmodel.device.probe import detect_device
            from perfmodel.measure.allocator import keep_freed_memory

            torch.set_num_threads(self.options.threads)
            keep_freed_memory()
            try:
                self._device = detect_device(self.options.device, self.options.results_root,
                                             threads=self.options.threads)
            except RuntimeError as exc:  # e.g. --perfmodel-device cuda without CUDA
                self.device_unavailable = f"--perfmodel-device {self.options.device}: {exc}"
                raise Unavailable(self.device_unavailable) from None
            if note := profile_note(self.options.profile, self._device.kind):
                self.notes.append(note)
        return self._device

    @property
    def device_detected(self) -> bool:
        """Whether this session has its device (replay items never detect one)."""
        return self._device is not None

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
            from perfmodel.measure.env import environment

            self._env = environment(self.device.key, self.options.threads, cwd=self.rootdir)
        return self._env

    def append_record(self, record: dict) -> None:
        """Append ``record`` to this session's run file (opened on the first record)."""
        if self._writer is None:
            self._writer = self.store.open_run(self.env, self.options.profile, self.run_id)
        self._writer.append(record)

    @property
    def timer_settings(self):
        from perfmodel.measure.bench import TimerSettings

        return TimerSettings(target_rel_ci=self.options.target_rel_ci,
                             budget_s=self.options.budget_s, cold_cache=self.options.cold_cache)

    @property
    def collective_timer_settings(self):
        """:attr:`timer_settings` with the collectives' sampling budget."""
        from dataclasses import replace

        budget = self.options.collective_budget_s
        return replace(self.timer_settings,
                       budget_s=self.options.budget_s if budget is None else budget)

    # -- measuring -------------------------------------------------------------------
    def benchmark(self, case) -> list:
        """Measure ``case`` and append its records to this run's file; returns
        its :class:`~perfmodel.measure.timer.Measurement` replicates (none for a
        collective, measured on every rank by :func:`benchmark_collective`)."""
        from perfmodel.measure.bench import (MAX_CALL_S, CaseUnsupported, benchmark_case,
                                             measurement_record, replicates_for)
        from perfmodel.ops import get_op

        if get_op(case.op).family == "collective":  # on every rank; rank 0 stores
            benchmark_collective(self, case)
            self._fit = None
            return []
        try:
            timings = benchmark_case(case, self.device, self.torch_device,
                                     self.timer_settings, MAX_CALL_S[self.options.profile],
                                     replicates_for(case, self.options.profile))
        except CaseUnsupported as exc:
            raise Unavailable(str(exc)) from None
        speed = self.host_speed()
        for replicate, timing in enumerate(timings):
            m = timing.measurement
            self.measured += 1
            if m.wide_spread:
                self.wide_spread.append(f"{case.id} (replicate {replicate})")
            record = measurement_record(case, m, replicate, self.env, timing.warm)
            if speed is not None:
                record["host_speed"] = speed
            if self.device.kind == "cpu":
                record["timed_beside"] = self.timed_beside
            self.append_record(record)
        self._fit = None  # new data: refit before the next accuracy or e2e step
        return [t.measurement for t in timings]

    def host_speed(self) -> dict | None:
        """On a CPU, the host's speed (:class:`~perfmodel.measure.drift.HostSpeed`, as
        a record field): see :attr:`host_speed_source`; when sampled, measured
        now if the last sample is older than :data:`~perfmodel.measure.drift.SPEED_INTERVAL_S`.
        None on other devices and when off.

        The reference ops must run alone: beside another rank's op, the earlier
        memory-bound reference (a 4M-element ``add``) took 1.8-3.6 ms per call in
        a sweep over 2 ranks on cpu-amd-epyc-f25m1-2c, against 1.7-1.75 ms alone."""
        if self.host_speed_source == "off" or self.device.kind != "cpu":
            return None
        if self.host_speed_source == "fixed":
            return None if self._host_speed is None else self._host_speed[1]
        from perfmodel.measure.drift import SPEED_INTERVAL_S, measure_host_speed

        now = time.monotonic()
        if self._host_speed is None or now - self._host_speed[0] > SPEED_INTERVAL_S:
            self._host_speed = (now, measure_host_speed().to_dict())
        return self._host_speed[1]

    def fresh_host_speed(self) -> dict | None:
        """As :meth:`host_speed`, sampled now whatever the last sample's age (an
        E2E measurement's neighbours: the host moves within a minute)."""
        if self.host_speed_source != "sampled" or self.device.kind != "cpu":
            return None
        from perfmodel.measure.drift import measure_host_speed

        self._host_speed = (time.monotonic(), measure_host_speed().to_dict())
        return self._host_speed[1]

    def host_speed_note(self) -> str | None:
        """One line when the host ran the reference ops more than
        :data:`~perfmodel.measure.drift.E2E_SPEED_NOTE` faster or slower around the
        single-rank E2E measurements than over the fit's records (median of the
        samples taken just before and after each): their errors move with it."""
        from perfmodel.measure.drift import E2E_SPEED_NOTE, HostSpeed, e2e_speed_ratio

        fit = self._fit.host_speed if self._fit is not None else None
        seen = [r.host_speed_seen for r in self.e2e if r.host_speed_seen]
        if fit is None or not seen:
            return None
        ratio = e2e_speed_ratio([HostSpeed.from_dict(s[k], "host_speed_seen")
                                 for s in seen for k in ("before", "after")], fit)
        if ratio is None or all(abs(v - 1.0) <= E2E_SPEED_NOTE for v in ratio.values()):
            return None
        return (f"host speed: around the E2E measurements the reference ops took "
                f"addmm x{ratio['addmm']:.2f}, copy x{ratio['copy']:.2f} their time in the "
                f"fit's sweep (below 1: the host ran faster); single-rank errors move with "
                f"it (docs/gate.md#a-host-that-moves)")

    def fix_host_speed(self, speed: dict | None) -> None:
        """Use ``speed`` (a record field, timed alone elsewhere) for every
        record of this session."""
        self.host_speed_source = "fixed"
        self._host_speed = None if speed is None else (time.monotonic(), speed)

    # -- fitting ---------------------------------------------------------------------
    def fit(self):
        """Predictors fitted on the stored measurements of this device taken
        at this session's thread count and host allocator policy; collectives
        at any (:func:`perfmodel.fit.fitting.current_fit`: the newest stored fit
        when nothing new qualifies, else a fresh one, saved). None when there
        is nothing to fit or load."""
        if self._fit is None:
            from perfmodel.fit.fitting import current_fit, recorded_accuracy

            self._fit, problems = current_fit(self.store, self.device, self.run_id)
            if self._fit is not None:
                threads = self.device.threads if self.device.kind == "cpu" else None
                self._previous_fit = recorded_accuracy(self.store.dir, threads,
                                                       self._fit.data_runs)
            self._note_problems(problems)
        return self._fit

    def _required_fit(self):
        """:meth:`fit`; :class:`CheckFailed` when there is nothing to fit or load."""
        fit = self.fit()
        if fit is None:
            raise CheckFailed(f"no measurements or fitted predictors under {self.store.dir}; "
                              f"run `pytest -m microbench` first")
        return fit

    def _current_fit(self):
        """:meth:`_required_fit`, refused with :class:`CheckFailed` (the
        :class:`~perfmodel.fit.fitting.StaleFit` line: the fit, how many predictors
        are stale and why, the command that refits) when it is stale: that is,
        when :meth:`fit` found no measurements at this session's thread count and
        allocator policy to refit from."""
        from perfmodel.fit.fitting import StaleFit, require_current

        fit = self._required_fit()
        try:
            return require_current(fit, self.device.key)
        except StaleFit as exc:
            raise CheckFailed(str(exc)) from None

    def _shared_table(self):
        """The device's shared overhead table; unreadable sample files are noted."""
        from perfmodel.e2e.single import shared_table

        table, problems = shared_table(self.store.dir, self.device.mem_bandwidth_Bps)
        self._note_problems(problems)
        return table

    def check_accuracy(self, op: str, direction: str) -> None:
        """:class:`CheckFailed` when the held-out GMAE of ``op.direction`` is above
        its threshold; :class:`Unavailable` when the op was never measured here."""
        fit = self._required_fit()
        acc = fit.accuracy.get((op, direction))
        if acc is None and (op, direction) in fit.skipped:
            raise CheckFailed(f"{op}.{direction}: cannot score: {fit.skipped[(op, direction)]}")
        if acc is None:  # nothing measured on this device yet: nothing to score
            raise Unavailable(f"{op}.{direction}: no measurements under {self.store.dir}; "
                              f"{measure_hint(op)}")
        self.accuracy.append(acc)
        name, recorded = self._previous_fit
        previous = None
        if name is not None:
            entry = recorded.get(f"{op}.{direction}")
            previous = None if entry is None else entry[1:]
        threshold = self.settings.fresh_threshold(op, direction, self.options.profile, previous,
                                                  acc.n_configs)
        if acc.gmae > threshold:
            floor = "n/a" if acc.noise_floor is None else f"{acc.noise_floor:.1%}"
            whence = ("" if previous is None or threshold < previous[0] + self.settings.fresh_gmae_slack
                      else f"; the previous fit {name} scored {previous[0]:.1%} + slack "
                           f"{self.settings.fresh_gmae_slack * 100:.0f} pp")
            raise CheckFailed(f"{op}.{direction}: held-out GMAE {acc.gmae:.1%} > threshold "
                              f"{threshold:.1%} (noise floor {floor}, predictor {acc.chosen}, "
                              f"{acc.n_configs} configs{whence})")

    # -- end to end ------------------------------------------------------------------
    def run_e2e(self, workload: str) -> None:
        """Trace, predict and measure ``workload`` (``baseline_runs`` times when
        saving a baseline), and record its error for the gate."""
        fit = self._current_fit()
        self._trace_expected_workloads()
        runs = self.settings.baseline_runs if self.options.save_baseline else 1
        for run in range(runs):
            step = self._build(workload)
            graph = self._graphs.get(workload) if run == 0 else None
            if graph is None:
                graph = self._trace(workload, step)
            result = self._predict_and_measure(workload, step, graph, fit)
            if not self.options.save_baseline:
                result = self.confirm_e2e(result, step.step, step.items)
            self.record_e2e(result)
            self.save_replay(result)
            del step

    def _predict_and_measure(self, workload: str, step, graph, fit):
        """:func:`perfmodel.e2e.single.predict_and_measure` of ``workload``'s built
        ``step`` on this session's device and shared overhead table, with the host's
        speed sampled just before and after the measurement (``host_speed_seen``)."""
        from perfmodel.e2e.single import predict_and_measure

        table = self._shared_table()
        before = self.fresh_host_speed()
        result = predict_and_measure(workload, step.step, step.items, graph, fit, table,
                                     self.torch_device, self.device.mem_bandwidth_Bps,
                                     bias=self.options.bias, profile=self.options.profile)
        after = self.fresh_host_speed()
        if before is not None and after is not None:
            result.host_speed_seen = {"before": before, "after": after}
        return result

    def save_replay(self, result) -> None:
        """Save ``result``'s capture as its workload's replay case under
        ``results/<key>/replay/``, replacing the last one (a failure is noted)."""
        from perfmodel.e2e.single import (GPU_WORKLOAD_SIZE, WORKLOAD_SIZE, save_replay,
                                          workload_config)

        sizes = WORKLOAD_SIZE if self.device.kind == "cpu" else GPU_WORKLOAD_SIZE
        try:
            save_replay(self.store.replay_path(result.workload), result,
                        self.device.key, self.torch_device, self.device.mem_bandwidth_Bps,
                        self.device.threads, self.env,
                        workload_config(result.workload, sizes[self.options.profile]))
        except (OSError, ValueError, LookupError) as exc:
            self.notes.append(f"{result.workload}: replay case not saved: {exc}")

    def confirm_e2e(self, result, step, items: int):
        """``result``, with ``step`` (one iteration over ``items`` samples) measured
        once more when the error alone fails the gate against the stored baseline
        (:func:`perfmodel.gate.baseline.error_fails`): the repeat decides."""
        from perfmodel.e2e.single import measure_again

        try:
            baseline = load_baseline(self.store.baseline_path(self.options.profile))
        except (ValueError, OSError):
            return result  # the gate reports the unreadable baseline at the end
        if baseline is None or not error_fails(result.workload, result.signed_error, baseline,
                                               self.settings.gate_policy()):
            return result
        again = measure_again(result, step, items, self.torch_device, self.options.profile)
        self.notes.append(f"{result.workload}: E2E error {result.signed_error:+.2%} failed the "
                          f"gate's error check, so it was measured again: "
                          f"{again.signed_error:+.2%} (the repeat decides)")
        return again

    def _note_not_run(self, name: str, why: str) -> None:
        """One summary line per reason, naming every E2E item skipped for it: pytest
        shows a skip's reason only under ``-rs``, and the command that makes them run
        must not go unseen."""
        names = self._not_run.setdefault(why, [])
        before = f"WARN {', '.join(names)}: not run ({why})"
        names.append(name)
        line = f"WARN {', '.join(names)}: not run ({why})"
        if before in self.notes:
            self.notes[self.notes.index(before)] = line
        else:
            self.notes.append(line)

    def _refit_for_ranks(self, threads: int) -> bool:
        """When no usable fit of ``threads`` torch threads is stored (none yet, or a
        stale one) but measurement runs at that count are: fit them
        (:func:`perfmodel.fit.fitting.refit`, deterministic), save the fit, say so
        in the summary, and return True. False when there is nothing to fit (the
        sweep at that count was never run here: no runs, or only collectives')."""
        import shutil

        from perfmodel.e2e.ranks import predictor_kinds
        from perfmodel.fit.fitting import refit

        if threads in self._refitted_for_ranks:
            return False  # fitted once in this session already
        self._refitted_for_ranks.add(threads)
        try:
            fit, folder, _ = refit(self.store, threads=threads)
        except ValueError:
            return False
        if not predictor_kinds(fit)[0]:
            shutil.rmtree(folder)  # only collectives stored at that count: the sweep is
            return False           # missing, and each session would save the same fit
        self.notes.append(f"no usable {threads}-thread fit was stored for the multi-rank "
                          f"workloads' ranks: fitted the stored {threads}-thread runs "
                          f"({len(fit.data_runs)}) as {folder.parent.name}/{folder.name}")
        return True

    def run_e2e_multirank(self, workload: str, world_size: int) -> None:
        """Trace, predict and measure multi-rank ``workload`` on ``world_size``
        ranks under mpiexec (``baseline_runs`` times when saving a baseline), and
        record its error as ``<workload>@<world_size>`` for the gate.

        The ranks share this host's usable cores and load the fit of their own
        thread count (:func:`perfmodel.e2e.ranks.rank_threads`). When this
        session runs at that count (``--perfmodel-threads 1`` for 2 or 4 ranks
        on 2 cores) its fit is refreshed and saved first; otherwise the newest
        stored fit of that count is used (noted in the summary). When none is
        usable but runs at that count are stored, they are fitted first
        (:meth:`_refit_for_ranks`); when there are none, :class:`Unavailable`
        names the sweep to run, and the summary lists the items skipped for it
        (like a missing package: the sweep goes on)."""
        from perfmodel.e2e.ranks import MultirankError, rank_threads, require_fit, run_multirank

        threads = rank_threads(world_size)
        if self.device.kind == "cpu" and self.device.threads == threads:
            if self.fit() is not None:  # a fresh fit of the ranks' thread count is saved
                self._current_fit()        # for them; a stale one that cannot be is refused
        else:
            problem: MultirankError | None = None
            try:
                require_fit(self.store, threads, self.options.profile)
            except MultirankError as exc:
                problem = exc
            if problem is not None and self._refit_for_ranks(threads):
                try:
                    require_fit(self.store, threads, self.options.profile)
                    problem = None
                except MultirankError as exc:
                    problem = exc
            if problem is not None:
                self._note_not_run(f"{workload}@{world_size}", str(problem))
                raise Unavailable(f"{workload}@{world_size}: {problem}")
            note = (f"{workload}@{world_size}: ranks run {threads} thread(s), this session "
                    f"{self.device.threads}; they use the stored {threads}-thread fit")
            if note not in self.notes:
                self.notes.append(note)
        runs = self.settings.baseline_runs if self.options.save_baseline else 1
        for _ in range(runs):
            try:
                result = run_multirank(workload, world_size, self.options.results_root,
                                       self.device.key, self.device.mem_bandwidth_Bps,
                                       profile=self.options.profile, bias=self.options.bias,
                                       replay=self.store.replay_path(f"{workload}@{world_size}"))
            except (MultirankError, FileNotFoundError) as exc:
                raise CheckFailed(str(exc)) from None
            self.record_e2e(result)

    def _trace_expected_workloads(self) -> None:
        """Before the first prediction, trace every selected workload once, so
        the shared overhead table pools all of them (not only those done so far)."""
        for name in sorted(self.e2e_expected - set(self._graphs)):
            try:
                self._trace(name, self._build(name))
            except Unavailable:
                continue

    def _build(self, workload: str):
        """``workload`` built on this device (full size on a GPU); when a package
        it needs is missing, drops it from the gate with a warning and raises
        :class:`Unavailable`."""
        from perfmodel.e2e.single import GPU_WORKLOAD_SIZE, WORKLOAD_SIZE
        from perfmodel.workloads import build_workload

        sizes = WORKLOAD_SIZE if self.device.kind == "cpu" else GPU_WORKLOAD_SIZE
        try:
            return build_workload(workload, self.torch_device, size=sizes[self.options.profile])
        except ImportError as exc:
            self.e2e_expected.discard(workload)
            line = f"WARN {workload}: not run, so not gated ({exc})"
            if line not in self.gate.lines:
                self.gate.lines.append(line)
            raise Unavailable(f"{workload}: {exc}") from None

    def _trace(self, workload: str, step, save_samples: bool = True):
        """Trace ``step``, save its overhead samples (unless not ``save_samples``),
        and keep its task graph."""
        from perfmodel.e2e.single import trace_workload

        self._graphs[workload] = trace_workload(workload, step.step, self.store.dir,
                                                self.torch_device, self.device.mem_bandwidth_Bps,
                                                teach_table=save_samples)
        return self._graphs[workload]

    def run_zoo(self, workload: str) -> None:
        """Trace, predict and measure zoo model ``workload`` (not gated; shown per
        half in the summary and stored as a ``zoo`` record). Only the tuning
        half's traces add samples to the shared overhead table: the scoring
        half is predicted with what the project's workloads and the tuning half
        taught, and only the tuning half's captures are kept as replay cases
        (see docs/zoo.md)."""
        from perfmodel.workloads.zoo import zoo_half

        half = zoo_half(workload)
        fit = self._current_fit()
        self._trace_expected_workloads()
        step = self._build(workload)
        graph = self._trace(workload, step, save_samples=half == "tuning")
        result = self._predict_and_measure(workload, step, graph, fit)
        if result.fit_data is None and self._fit is not None:
            result.fit_data = self._fit.data_id
        self.append_record({**result.record(self.env), "kind": "zoo", "half": half})
        self.zoo.append((half, result))
        if half == "tuning":  # the scoring half is only reported, never studied offline
            self.save_replay(result)
        del step

    def predict_model(self, model, batch, loss_fn, optimizer, *, items: int | None = None,
                      name: str = "user_model", measure: bool = True):
        """:func:`perfmodel.e2e.single.predict_model` on this session's device, fit and
        overhead table; the result shows in the summary but is not gated."""
        from perfmodel.e2e.single import batch_items, predict_step, training_step

        fit = self._current_fit()
        table = self._shared_table()
        result = predict_step(training_step(model, batch, loss_fn, optimizer),
                              items if items is not None else batch_items(batch), name, fit,
                              table, self.torch_device, self.device.mem_bandwidth_Bps, measure)
        self.user_models.append(result)
        return result

    def time_prediction(self, workload: str, tasks: int, limit_s: float) -> None:
        """Time the prediction of ``workload``'s graph repeated to ``tasks`` tasks;
        :class:`CheckFailed` when it takes longer than ``limit_s``."""
        from perfmodel.e2e.single import time_prediction

        fit = self._current_fit()
        graph = self._graphs.get(workload) or self._trace(workload, self._build(workload))
        table = self._shared_table()
        n, seconds = time_prediction(graph, fit, table, tasks, self.device.kind != "cpu")
        self.notes.append(f"prediction speed: {n} tasks predicted and simulated in "
                          f"{seconds * 1e3:.0f} ms")
        if seconds > limit_s:
            raise CheckFailed(f"predicting {n} tasks took {seconds:.2f} s > {limit_s} s")

    def record_e2e(self, result) -> None:
        """Store a :class:`~perfmodel.e2e.result.MeasuredIteration` (with the id of the training
        data of the fit that predicted it: its own, as a multi-rank result names
        its ranks' fit, else this session's) and hand it to the gate."""
        if result.fit_data is None and self._fit is not None:
            result.fit_data = self._fit.data_id
        self.append_record(result.record(self.env))
        self.e2e.append(result)

    def _fit_data(self) -> dict[str, str | None]:
        """Per workload, the training-data id of the fit that predicted it."""
        return {r.workload: r.fit_data for r in self.e2e}

    # -- the replay gate -----------------------------------------------------------------
    def run_replay(self, device_key: str, workload: str):
        """Replay the committed case of ``workload`` on ``device_key`` under the
        results root with today's code (and the planted bias) and judge it against
        the device's replay baseline (:mod:`perfmodel.gate.replay`); or, with
        ``options.save_replay_baseline``, keep it for the new baseline.
        :class:`CheckFailed` with the verdict's line when it fails. No device is
        detected and torch.cuda is never asked."""
        if self.replay is None:
            from perfmodel.gate.replay import ReplayGate

            self.replay = ReplayGate(self.options.results_root, self.settings.replay_tolerance,
                                     self.settings.replay_fail_on_improvement,
                                     self.options.bias, self.options.save_replay_baseline)
        verdict = self.replay.check(device_key, workload)
        if verdict.failed:
            raise CheckFailed(verdict.line())
        return verdict

    def run_accuracy_replay(self, device_key: str, threads: int | None, target: str):
        """Re-score ``target`` (``"op.direction"``) of the committed fit of
        ``device_key`` at ``threads`` on its committed runs with today's fitting
        code, against the GMAE that fit recorded (:mod:`perfmodel.gate.accuracy`).
        :class:`CheckFailed` with the verdict's line when it fails."""
        if self.accuracy_gate is None:
            self.accuracy_gate = self._new_accuracy_gate()
        verdict = self.accuracy_gate.check(device_key, threads, target)
        if verdict.failed:
            raise CheckFailed(verdict.line())
        return verdict

    def _new_accuracy_gate(self):
        from perfmodel.gate.accuracy import AccuracyGate

        return AccuracyGate(self.options.results_root, self.settings.accuracy_tolerance,
                            self.options.bias)

    # -- the gate-stability experiment -------------------------------------------------
    def run_stability(self, rounds: int) -> None:
        """The gate-stability experiment (:mod:`perfmodel.gate.stability`): ``rounds`` times,
        trace and measure every workload of the baseline once and score each planted-bias
        variant with the gate against that same measurement. The tally goes to the
        notes and, after every round, to ``results/<key>/stability/<run-id>.json``."""
        from perfmodel.gate.stability import (StabilityTally, measure_variants, run_rounds,
                                              workloads_to_run)
        from perfmodel.plaindata import write_json_atomic
        from perfmodel.workloads import WORKLOADS

        fit = self._current_fit()
        path = self.store.baseline_path(self.options.profile)
        try:
            baseline = load_baseline(path)
        except (ValueError, OSError) as exc:
            raise CheckFailed(str(exc)) from None
        if baseline is None:
            raise CheckFailed(f"no baseline at {path} to score the gate against; save one with "
                              f"--perfmodel-save-baseline")
        tally = StabilityTally(baseline, self.settings.gate_policy(), fit_data=fit.data_id)
        names = workloads_to_run(baseline, WORKLOADS)
        out = self.store.dir / "stability" / f"{self.run_id}.json"

        def run_round() -> tuple:
            """One round: the arguments of :meth:`StabilityTally.add_round`."""
            graphs = {}
            for name in names:  # a fresh trace of every workload first: one shared table
                if name not in tally.skipped:
                    try:
                        graphs[name] = self._trace(name, self._build(name))
                    except Unavailable as exc:
                        tally.skipped[name] = str(exc)
            if not graphs:
                raise CheckFailed(f"no workload of {path} could run: {tally.skipped}")
            table = self._shared_table()
            measured, predicted, overhead = {}, {}, {}
            for name, graph in graphs.items():
                step = self._build(name)
                measured[name], predicted[name], overhead[name] = measure_variants(
                    step.step, step.items, graph, fit, table, self.torch_device,
                    tally.variants, self.options.profile)
                del step
            return measured, predicted, overhead, self._measure_workload

        def save(index: int, result) -> None:  # after every round
            write_json_atomic(out, {**tally.to_dict(), "run_id": self.run_id,
                                    "device_key": self.device.key,
                                    "profile": self.options.profile, "baseline": str(path),
                                    "env": self.env})

        run_rounds(tally, rounds, run_round, on_round=save)
        self.notes.extend(tally.lines())
        self.notes.append(f"stability tally written to {out}")

    def _measure_workload(self, name: str) -> float:
        """A fresh build of workload ``name``, measured once (median, s)."""
        from perfmodel.e2e.single import measure_profile

        step = self._build(name)
        return measure_profile(step.step, step.items, self.torch_device,
                               self.options.profile).median_s

    def _note_problems(self, problems: list[str]) -> None:
        for problem in problems:
            if problem not in self.problems:
                self.problems.append(problem)

    # -- other processes' sessions -----------------------------------------------------
    def to_worker_state(self) -> dict:
        """What this session produced, as plain data (numpy numbers aside), for
        :meth:`merge_worker_state` in another process's session: results,
        accuracy scores, summary lines, device and environment."""
        from dataclasses import asdict

        return {
            "e2e": [r.to_plain() for r in self.e2e],
            "user_models": [r.to_plain() for r in self.user_models],
            "zoo": [[half, r.to_plain()] for half, r in self.zoo],
            "accuracy": [asdict(a) for a in self.accuracy],
            # every worker collects every item: the workloads this run gates, less
            # those this worker found it cannot build (a missing package)
            "expected": sorted(self.e2e_expected),
            "gate_lines": list(self.gate.lines),
            "notes": list(self.notes),
            "problems": list(self.problems),
            "measured": self.measured,
            "wide_spread": list(self.wide_spread),
            "device": None if self._device is None else self._device.to_dict(),
            "env": self._env,
            "device_unavailable": self.device_unavailable,
            "replay": None if self.replay is None else self.replay.to_plain(),
            "accuracy_gate": (None if self.accuracy_gate is None
                              else self.accuracy_gate.to_plain()),
        }

    def merge_worker_state(self, data: dict) -> None:
        """Add another session's :meth:`to_worker_state` to this one. The workloads
        gated are those every merged session expected (one that could not build
        a workload drops it, and its WARN line says so); lines are not repeated."""
        from perfmodel.e2e.result import MeasuredIteration

        self.e2e.extend(MeasuredIteration.from_plain(r) for r in data["e2e"])
        self.user_models.extend(MeasuredIteration.from_plain(r) for r in data["user_models"])
        self.zoo.extend((half, MeasuredIteration.from_plain(r)) for half, r in data.get("zoo", ()))
        if data["accuracy"]:
            from perfmodel.fit.fitting import OpAccuracy

            self.accuracy.extend(OpAccuracy(**a) for a in data["accuracy"])
        expected = set(data["expected"])
        self.e2e_expected = (expected if self.workers_reported == 0
                             else self.e2e_expected & expected)
        self.workers_reported += 1
        self.measured += data["measured"]
        self.wide_spread.extend(data["wide_spread"])
        for mine, theirs in ((self.gate.lines, data["gate_lines"]), (self.notes, data["notes"]),
                             (self.problems, data["problems"])):
            mine.extend(line for line in theirs if line not in mine)
        if self._device is None and data["device"] is not None:
            from perfmodel.device.spec import DeviceSpec

            self._device = DeviceSpec.from_dict(data["device"])
        if self._env is None and data["env"] is not None:
            self._env = data["env"]
        if data.get("replay") is not None:
            if self.replay is None:
                from perfmodel.gate.replay import ReplayGate

                self.replay = ReplayGate(self.options.results_root,
                                         self.settings.replay_tolerance,
                                         self.settings.replay_fail_on_improvement,
                                         self.options.bias, self.options.save_replay_baseline)
            self.replay.merge_plain(data["replay"])
        if data.get("accuracy_gate") is not None:
            if self.accuracy_gate is None:
                self.accuracy_gate = self._new_accuracy_gate()
            self.accuracy_gate.merge_plain(data["accuracy_gate"])
        if data["device_unavailable"] and self.device_unavailable is None:
            self.device_unavailable = data["device_unavailable"]

    # -- end of session ---------------------------------------------------------------
    def close(self) -> None:
        """Close this session's run file (if it opened one)."""
        if self._writer is not None:
            self._writer.close()

    def finish(self) -> GateOutcome:
        """Close the run file, then save the baseline (``options.save_baseline``)
        or gate the E2E results against it. A baseline that cannot be written
        or read fails the gate with one line naming its file. The replay gate's
        lines (and decision) come first, when replay items ran."""
        self.close()
        if self.replay is not None:
            lines, failed = self.replay.finish()
            self.gate.lines.extend(lines)
            self.gate.failed = self.gate.failed or failed
        if self.accuracy_gate is not None:
            lines, failed = self.accuracy_gate.finish()
            self.gate.lines.extend(lines)
            self.gate.failed = self.gate.failed or failed
        if self.device_unavailable:  # every step skipped: nothing ran, nothing to gate
            return self.gate
        if not self.e2e and not self.e2e_expected:
            return self.gate
        runs = WorkloadRuns.of(self.e2e)
        errors, predicted, overhead = runs.errors, runs.predicted_s, runs.overhead_s
        speed_note = self.host_speed_note()
        if speed_note:
            self.notes.append(speed_note)
        path = self.store.baseline_path(self.options.profile)
        if self.options.save_baseline:
            if errors:
                try:
                    saved = save_baseline(
                        path, self.device.key, errors, self.env,
                        predicted_by_workload=predicted, fit_data=self._fit_data(),
                        overhead_by_workload={w: p for w, p in overhead.items()
                                              if len(p) == len(errors[w])},
                        built=built_from_repeats(self.settings.baseline_runs, self.run_id))
                except OSError as exc:
                    return self._fail_gate(f"cannot save the baseline {path}: "
                                           f"{exc.strerror or exc}")
                except ValueError as exc:  # names the file and the workload
                    return self._fail_gate(str(exc))
                self.gate.lines.append(
                    f"baseline saved to {path}: {len(errors)} workloads, "
                    f"{self.settings.baseline_runs} runs each")
                self.gate.lines.append(saved.floor_note())
            return self.gate
        try:
            baseline = load_baseline(path)
        except ValueError as exc:  # names the file
            return self._fail_gate(str(exc))
        except OSError as exc:
            return self._fail_gate(f"cannot read the baseline {path}: {exc.strerror or exc}")
        if baseline is None:
            self.gate.lines.append(
                f"no baseline at {path}; not gating. Build one from the runs of separate "
                f"sessions spread over at least {FLOOR_SPAN_S / 3600:.0f} h: `perfmodel baseline "
                f"--last 5 --profile {self.options.profile}` (--perfmodel-save-baseline repeats "
                f"the workloads inside one run, which sets no noise floor)")
            return self.gate
        report = check_errors({w: e[-1] for w, e in errors.items()}, baseline,
                              self.settings.gate_policy(), expected=self.e2e_expected,
                              device_key=self.device.key, env=self.env,
                              predicted_s={w: p[-1] for w, p in predicted.items()},
                              fit_data=self._fit_data(),
                              overhead_s={w: p[-1] for w, p in overhead.items()})
        self.gate.verdicts = report.verdicts
        note = baseline.floor_note()
        if note is not None:
            self.gate.lines.append(note)
        self.gate.lines.extend(report.lines())
        self.gate.failed = report.failed
        return self.gate

    def _fail_gate(self, why: str) -> GateOutcome:
        """Fail the gate with one ``FAIL perfmodel gate: <why>`` line."""
        self.gate.failed = True
        self.gate.lines.append(f"FAIL perfmodel gate: {why}")
        return self.gate

    def write_report(self) -> None:
        """Write the HTML report of the stored results (rank 0 only under MPI); its
        path, or why it was not written, goes to the notes."""
        from perfmodel.report import build_report
        from perfmodel.world import launcher_world

        world = launcher_world()
        if world is not None and world[0] != 0:
            return
        device = self._device.key if self._device is not None else self.options.device
        try:
            path = build_report(self.options.results_root, device, self.options.profile,
                                settings=self.settings)
        except (ValueError, OSError) as exc:
            self.notes.append(f"WARN perfmodel report not written: {exc}")
            return
        self.notes.append(f"report written to {path}")


def benchmark_collective(session: Session, case) -> None:
    """Measure collective ``case`` on every rank of this MPI world; rank 0
    stores the records. :class:`Unavailable` for a case written for another
    world size."""
    from perfmodel.measure.bench import REPLICATES
    from perfmodel.measure.collectives import collective_record, measure_collective
    from perfmodel.world import init_distributed, mpi_world

    world = mpi_world()
    wanted = case.params["world_size"]
    if wanted != world.size:
        raise Unavailable(f"{case.id}: needs {wanted} ranks, this run has {world.size} "
                          f"(run it with mpiexec -n {wanted} or --perfmodel-ranks {wanted})")
    world = init_distributed(session.torch_device, world.timeout_s)
    settings = session.collective_timer_settings
    for replicate, result in enumerate(measure_collective(case, world, settings, REPLICATES)):
        session.append_record(collective_record(case, result, replicate, session.env))
