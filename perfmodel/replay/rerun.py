"""Predict stored replay cases again with the current code (``perfmodel replay``).

Each case (:mod:`perfmodel.replay.case`) under ``results/<key>/replay/`` is priced
with a stored fit (default: the newest fit of the case's thread count, as
:func:`perfmodel.fit.fitting.load_latest_fit` picks; on a CUDA device the newest
fit) and the device's shared overhead table (as the E2E path builds it:
:func:`perfmodel.e2e.single.shared_table`), simulated, and compared with the
measured iteration. Several ranks are simulated together on the host they
shared (:func:`perfmodel.e2e.ranks.predict_ranks`). Nothing here touches torch
or a device, so any machine replays any device's corpus, and the same inputs
give the same output, bit for bit.

Attribution (:func:`attribute`): each task's predicted seconds against its
traced seconds (host time on a CPU; on CUDA the device time of its kernels
where it has any; a host gap or an unmodelled node less the profiler's own
cost in it and the host's waits for the device, as the overhead table's
samples are taken, :func:`perfmodel.trace.overheads.samples_from_graph`), and
its contribution to the E2E error,
``(predicted - traced) / measured``. A covered task (the later autograd nodes
of one op's backward, timed with it) counts as traced time of the nearest
earlier op task of the same op and direction. Tasks the trace did not time
(no Kineto event matched) are left out of the families and ops and counted
apart. Per family (the breakdown's categories) the contributions sum to
``(Σ predicted - Σ traced) / measured`` over the timed tasks; the E2E error is
that sum, plus the same over the untimed tasks, plus ``(Σ traced - measured) /
measured`` (what the trace shows that the measurement does not: the profiler's
cost in op tasks, noise), plus ``(predicted - Σ predicted) / measured`` (the schedule:
overlap, waits).

On CUDA the families compare device time, which says little about an iteration
the host bounds (the DLRMs at small batch). A device case also gets the host's
side (:func:`host_side`): per family the host seconds the simulation gives each
task (launches, gaps, host-only nodes) against the host time the trace shows for
it, less the profiler's cost per recorded node and per kernel launch and the
host's waits for the device; and the sums of both beside the measured iteration.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from perfmodel.replay.case import ReplayCase, ReplayError, load_case
from perfmodel.store import paths

#: Individual ops listed by ``--attribute``, by |contribution|.
TOP_OPS = 10
#: Width of a family's or an op's name in ``--attribute``'s text (longer ones are cut).
NAME_WIDTH = 64


@dataclass(frozen=True)
class Attribution:
    """Predicted against traced seconds of a family or one op, and its
    contribution to the E2E error (a fraction of the measured time)."""

    name: str
    predicted_s: float
    traced_s: float
    contribution: float
    count: int = 1


@dataclass
class Replayed:
    """One case predicted again (s); ``problem`` says why it could not be."""

    workload: str
    device_key: str
    predicted_s: float | None
    measured_s: float | None
    traced_s: float | None
    fit: str | None
    recorded_predicted_s: float | None = None
    problem: str | None = None
    families: list[Attribution] = field(default_factory=list)
    ops: list[Attribution] = field(default_factory=list)
    #: Σ predicted - Σ traced over the timed tasks, the same over the untimed ones
    #: (and their count), Σ traced - measured, predicted - Σ predicted (s)
    tasks_delta_s: float | None = None
    untimed_delta_s: float | None = None
    untimed_tasks: int = 0
    trace_delta_s: float | None = None
    schedule_delta_s: float | None = None
    #: (share of the cold-cache ops' data left in the last-level cache, bytes the
    #: step moves) when they were priced between warm and cold
    #: (:func:`perfmodel.simulate.predict.warm_share`), else None
    warm_share: tuple[float, float] | None = None
    #: CUDA: the host's side per family (:func:`host_side`; contributions are
    #: (predicted - traced host seconds) / measured), and its sums (s)
    host_families: list[Attribution] = field(default_factory=list)
    host_predicted_s: float | None = None
    host_traced_s: float | None = None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured, or None."""
        if self.predicted_s is None or not self.measured_s:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass
class DeviceReplay:
    """Every case of one device, replayed with one fit and overhead table."""

    device_key: str
    fits: list[str]
    table_workloads: list[str]
    cases: list[Replayed]
    problems: list[str] = field(default_factory=list)

    @property
    def gmae(self) -> float | None:
        """GMAE of the replayed cases' errors (:func:`perfmodel.fit.metrics.gmae`)."""
        from perfmodel.fit.metrics import gmae

        done = [c for c in self.cases if c.error is not None]
        if not done:
            return None
        return gmae([c.predicted_s for c in done], [c.measured_s for c in done])


def replay_devices(root: Path) -> list[str]:
    """The device keys under ``root`` that hold replay cases, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and paths.replay_files(p))


def replay_device(root: Path, device_key: str, fit_path: Path | None = None,
                  workloads: list[str] | None = None, attribution: bool = False
                  ) -> DeviceReplay:
    """Replay the cases of ``device_key`` under ``root`` (``workloads``: only
    those; ValueError naming a missing one) with the fit at ``fit_path`` (a
    predictors folder) or the newest stored one of each case's thread count.
    :class:`~perfmodel.fit.fitting.StaleFit` (one line naming the command that
    refits) when that fit is stale for today's code."""
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import require_current
    from perfmodel.store.results import ResultStore

    store = ResultStore(Path(root), device_key)
    files = paths.replay_files(store.dir)
    if workloads:
        missing = sorted(set(workloads) - set(files))
        if missing:
            raise ValueError(f"no replay case for {', '.join(missing)} under "
                             f"{paths.replay_dir(store.dir)}; cases: {', '.join(files) or 'none'}")
        files = {w: p for w, p in files.items() if w in workloads}
    out = DeviceReplay(device_key, [], [], [])
    table_dir = store.dir
    given, fit_label = None, None
    if fit_path is not None:
        given = resolve_fit(Path(root), Path(fit_path))
        source_dir = given.path.parent.parent
        source_key = given.device_key or source_dir.name
        require_current(given, source_key)
        fit_label = str(given.path)
        if source_key != device_key:
            given, fit_label = _moved_fit(given, fit_label, source_dir, store)
            table_dir = source_dir  # nothing learned on the target: its overheads neither
    fits: dict[int | None, tuple] = {}
    tables: dict[float, object] = {}
    for path in files.values():
        try:
            case = load_case(path)
        except ReplayError as exc:
            out.problems.append(str(exc))
            continue
        if given is not None:
            fit, fit_name = given, fit_label
        else:
            threads = None if case.on_device else case.threads
            if threads not in fits:
                fits[threads] = latest_fit(store, threads, out.problems)
            fit, fit_name = fits[threads]
            require_current(fit, device_key)  # never replay from a stale fit
        if case.bandwidth_Bps not in tables:
            table, problems = shared_table(table_dir, case.bandwidth_Bps)
            out.problems += problems
            tables[case.bandwidth_Bps] = table
        table = tables[case.bandwidth_Bps]
        if fit is None:
            out.cases.append(_failed(case, None, f"no stored fit for {case.threads} thread(s) "
                                                 f"under {store.dir}"))
            continue
        if fit_name not in out.fits:
            out.fits.append(fit_name)
        out.cases.append(replay_case(case, fit, table, fit_name, attribution))
        for name in table.workloads:
            if name not in out.table_workloads:
                out.table_workloads.append(name)
    out.fits.sort()
    out.table_workloads.sort()
    return out


def resolve_fit(root: Path, given: Path):
    """The fit ``--fit`` names, loaded: a fit's folder as given, or, for a device
    key (a folder under ``root`` holding ``predictors/``) or a device's folder,
    that device's newest fit. ValueError naming the path otherwise."""
    from perfmodel.fit.fitting import load_fit, load_latest_fit
    from perfmodel.store.results import ResultStore

    for device_dir in (root / given, given):
        if device_dir.is_dir() and (paths.predictors_dir(device_dir).is_dir()
                                    or paths.spec_file(device_dir).is_file()):
            fit, _ = load_latest_fit(ResultStore(device_dir.parent, device_dir.name))
            if fit is None or fit.path is None:
                raise ValueError(f"--fit {given}: no usable fit under "
                                 f"{paths.predictors_dir(device_dir)}")
            return fit
    if not given.is_dir():
        raise ValueError(f"--fit {given}: not a predictors folder "
                         f"(RESULTS/<key>/predictors/<run-id>) nor a device key under {root}")
    return load_fit(given)


def _moved_fit(fit, label: str, source_dir: Path, target_store) -> tuple[object, str]:
    """``fit`` of the device at ``source_dir`` moved to ``target_store``'s device
    by the two stored specs' data-sheet ratios (:mod:`perfmodel.fit.transfer`)."""
    from perfmodel.fit.fitting import stored_spec
    from perfmodel.fit.transfer import transfer_fit
    from perfmodel.store.results import ResultStore

    source = stored_spec(ResultStore(source_dir.parent, source_dir.name), None)
    target = stored_spec(target_store, None)
    return (transfer_fit(fit, source, target),
            f"{label}, moved from {source.key} to {target.key} by data-sheet ratios, with "
            f"{source.key}'s overhead table")


def latest_fit(store, threads: int | None, problems: list[str]) -> tuple[object, str | None]:
    """The fit :func:`perfmodel.fit.fitting.load_latest_fit` picks (the newest
    loadable one, of ``threads`` when given) and its folder relative to the
    device folder; unloadable fits go to ``problems``. (None, None) for none."""
    from perfmodel.fit.fitting import load_latest_fit

    fit, skipped = load_latest_fit(store, threads=threads)
    problems.extend(skipped)
    if fit is None:
        return None, None
    return fit, fit.path.relative_to(store.dir).as_posix()


def _failed(case: ReplayCase, fit_name: str | None, problem: str) -> Replayed:
    return Replayed(case.workload, case.device_key, None, case.measured_s, case.traced_s,
                    fit_name, case.recorded.get("predicted_s"), problem)


def replay_case(case: ReplayCase, fit, table, fit_name: str | None = None,
                attribution: bool = False, bias: dict[str, float] | None = None) -> Replayed:
    """``case`` predicted with ``fit`` and the overhead ``table``, with its
    attribution when asked (see the module docstring). ``bias`` plants a
    prediction error (:func:`perfmodel.simulate.predict.parse_bias`; None: none),
    as the replay gate's ``--perfmodel-plant-bias`` does."""
    try:
        total, sims = _simulate(case, fit, table, bias)
    except (LookupError, ValueError) as exc:
        return _failed(case, fit_name, f"cannot predict: {exc}")
    out = Replayed(case.workload, case.device_key, total, case.measured_s, case.traced_s,
                   fit_name, case.recorded.get("predicted_s"))
    if attribution and case.measured_s:
        attribute(out, case, sims, total)
        if not case.on_device:
            from perfmodel.simulate.predict import warm_share

            out.warm_share = warm_share(case.graphs, fit)
    return out


def _simulate(case: ReplayCase, fit, table, bias: dict[str, float] | None = None
              ) -> tuple[float, list[list]]:
    """The predicted iteration (s) and each rank's SimTask list."""
    if case.ranks is None and len(case.graphs) == 1:
        from perfmodel.simulate.predict import back_to_back_s, sim_tasks

        tasks, _ = sim_tasks(case.graphs[0], fit, table, case.on_device, bias)
        # on a device, as measured: blocks of `number` iterations back to back
        iterations = max(1, case.measured.number) if case.on_device else 1
        return back_to_back_s(tasks, iterations), [tasks]
    from perfmodel.e2e.ranks import predict_ranks

    prediction = predict_ranks(case.graphs, fit, table, bias, keep_timeline=False,
                               host=_host_model(case, fit))
    return prediction.total_s, [_rank_tasks(case, fit, table, g, bias) for g in case.graphs]


def _rank_tasks(case: ReplayCase, fit, table, graph, bias: dict[str, float] | None = None
                ) -> list:
    """One rank's SimTasks as :func:`perfmodel.e2e.ranks.predict_ranks` prices them."""
    from perfmodel.e2e.ranks import comm_pricer
    from perfmodel.simulate.predict import NON_OP_CATEGORIES, shared_step_bytes, sim_tasks

    host = _host_model(case, fit)
    tasks, _ = sim_tasks(graph, fit, table, False, bias, comm_pricer(fit), host.op_seconds,
                         moved_bytes=shared_step_bytes(case.graphs, fit))
    for task in tasks:
        if task.category in NON_OP_CATEGORIES:
            host.slow_host_work(task)
    return tasks


def _host_model(case: ReplayCase, fit):
    """The :class:`~perfmodel.simulate.host.HostModel` of a multi-rank case, as
    :func:`perfmodel.e2e.ranks.result_record` builds it."""
    from perfmodel.measure.contention import Contention
    from perfmodel.measure.drift import HostDrift, HostSpeed, OpDrift
    from perfmodel.simulate.host import HostModel

    ranks = case.ranks or {}
    try:
        contention = Contention(**ranks["contention"]) if ranks.get("contention") else None
        speed = (HostSpeed.from_dict(ranks["host_speed"], case.workload)
                 if ranks.get("host_speed") else None)
    except TypeError as exc:
        raise ValueError(f"bad ranks figures: {exc}") from None
    drift = (HostDrift.between(speed, fit.host_speed, case.bandwidth_Bps)
             if speed is not None and getattr(fit, "host_speed", None) is not None else None)
    if ranks.get("op_drift"):
        try:
            drift = OpDrift({str(k): float(v) for k, v in dict(ranks["op_drift"]).items()}, drift)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad ranks figures: op_drift: {exc}") from None
    threads = int(ranks.get("threads_per_rank", case.threads or 1))
    cores = int(ranks.get("cores", threads * len(case.graphs)))
    return HostModel.of_ranks(len(case.graphs), threads, cores, contention, drift)


def attribute(out: Replayed, case: ReplayCase, sims: list[list], total_s: float) -> None:
    """Fill ``out``'s families, worst ops and error decomposition (see the module
    docstring); several ranks count as their mean per rank."""
    measured = case.measured_s
    n_ranks = len(case.graphs)
    rows: list[dict] = []  # name, family, predicted, traced, listed (not a gap)
    for rank, (graph, sim) in enumerate(zip(case.graphs, sims)):
        sim_iter = iter(sim)
        last_op: dict[tuple, dict] = {}
        for index, task in enumerate(graph.tasks):
            traced = _traced_s(task, case.on_device, graph.profiler_overhead_s) / n_ranks
            host_traced = _traced_host_s(task, graph) / n_ranks if case.on_device else 0.0
            owner = last_op.get((task.op, task.direction)) if task.kind == "covered" else None
            if owner is not None:
                owner["traced"] += traced
                owner["host_traced"] += host_traced
                continue
            if task.kind == "covered":  # no earlier op task: its own row, predicted 0
                family, predicted, host_predicted = task.family, 0.0, None
            else:
                st = next(sim_iter)
                family = st.category
                predicted = (sum(d for _, d in st.kernels) if st.kernels else st.host_s) / n_ranks
                host_predicted = st.host_s / n_ranks
            row = {"name": _label(task, index, rank if n_ranks > 1 else None), "family": family,
                   "predicted": predicted, "traced": traced, "listed": task.kind != "overhead",
                   "timed": task.measured_s is not None or (case.on_device and task.kernels),
                   "host_predicted": host_predicted, "host_traced": host_traced,
                   "host_timed": host_predicted is not None and task.measured_s is not None}
            rows.append(row)
            if task.kind == "op":
                last_op[(task.op, task.direction)] = row
    if case.on_device:
        host_side(out, [row for row in rows if row["host_timed"]], measured)
    untimed = [row for row in rows if not row["timed"]]
    rows = [row for row in rows if row["timed"]]
    out.families = _by_family(rows, "predicted", "traced", measured)
    out.ops = _sorted([Attribution(r["name"], r["predicted"], r["traced"],
                                   (r["predicted"] - r["traced"]) / measured)
                       for r in rows if r["listed"]])[:TOP_OPS]
    sum_pred = sum(a.predicted_s for a in out.families)
    sum_traced = sum(a.traced_s for a in out.families)
    untimed_pred = sum(r["predicted"] for r in untimed)
    untimed_traced = sum(r["traced"] for r in untimed)  # covered nodes of an untimed op
    out.tasks_delta_s = sum_pred - sum_traced
    out.untimed_delta_s = untimed_pred - untimed_traced
    out.untimed_tasks = len(untimed)
    out.trace_delta_s = sum_traced + untimed_traced - measured
    out.schedule_delta_s = total_s - sum_pred - untimed_pred


def host_side(out: Replayed, rows: list[dict], measured: float) -> None:
    """Fill ``out``'s host side of a device case from :func:`attribute`'s rows of
    the tasks the trace timed: per family (the SimTask's category) the host
    seconds the simulation gives them against the host seconds the trace shows
    (:func:`_traced_host_s`, a covered task's counted with its op's row)."""
    out.host_families = _by_family(rows, "host_predicted", "host_traced", measured)
    out.host_predicted_s = sum(a.predicted_s for a in out.host_families)
    out.host_traced_s = sum(a.traced_s for a in out.host_families)


def _by_family(rows: list[dict], predicted: str, traced: str,
               measured: float) -> list[Attribution]:
    """One :class:`Attribution` per family of ``rows``, summing their ``predicted``
    and ``traced`` fields, largest contribution first."""
    families: dict[str, list] = {}
    for row in rows:
        fam = families.setdefault(row["family"], [0.0, 0.0, 0])
        fam[0] += row[predicted]
        fam[1] += row[traced]
        fam[2] += 1
    return _sorted([Attribution(name, p, t, (p - t) / measured, n)
                    for name, (p, t, n) in families.items()])


def _sorted(rows: list[Attribution]) -> list[Attribution]:
    return sorted(rows, key=lambda a: (-abs(a.contribution), a.name))


def _traced_s(task, on_device: bool, profiler_overhead_s: float) -> float:
    """Traced seconds of a task: its kernels' device time on CUDA where it has
    any, its host time otherwise (0 when untimed); a gap's or an unmodelled
    node's host time less the profiler's cost per gap (per recorded node) and
    the host's waits, floored at 0: what the overhead table prices."""
    if on_device and task.kernels:
        return sum(k.dur_s for k in task.kernels)
    if task.measured_s is None:
        return 0.0
    if task.kind == "overhead":
        return max(0.0, task.measured_s - task.waited_s - profiler_overhead_s)
    if task.kind == "unmodelled":
        return max(0.0, task.measured_s - task.waited_s - profiler_overhead_s * task.n_nodes)
    return task.measured_s


def _traced_host_s(task, graph) -> float:
    """Host seconds the trace shows for ``task`` (0 when untimed): its duration
    less the host's waits for the device, the profiler's cost per recorded node
    (one per gap) and its further cost per kernel launch, floored at 0: what the
    overhead table's samples take out (:func:`perfmodel.trace.overheads.samples_from_graph`)."""
    if task.measured_s is None:
        return 0.0
    nodes = 1 if task.kind == "overhead" else task.n_nodes
    return max(0.0, task.measured_s - task.waited_s - graph.profiler_overhead_s * nodes
               - graph.profiler_launch_overhead_s * len(task.kernels))


def _label(task, index: int, rank: int | None) -> str:
    """``#<index> op.direction(params) dtype``, or the node's name."""
    where = f"#{index}" if rank is None else f"r{rank}#{index}"
    if task.op is None:
        return f"{where} {task.name}"
    params = ",".join(f"{k}={v}" for k, v in sorted((task.params or {}).items()))
    return f"{where} {task.op}.{task.direction}({params}) {task.dtype}"


# -- output ----------------------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _pct(fraction: float | None) -> str:
    return "n/a" if fraction is None or not math.isfinite(fraction) else f"{fraction:+.2%}"


def format_text(devices: list[DeviceReplay], attribution: bool = False) -> list[str]:
    """The lines ``perfmodel replay`` prints: per device its fit and table, per
    case predicted, measured and error, and the GMAE; with ``attribution`` per
    case its families, worst ops and error decomposition."""
    lines: list[str] = []
    for dev in devices:
        lines.append(f"device {dev.device_key}: fit {', '.join(dev.fits) or 'none'}; overhead "
                     f"table of {len(dev.table_workloads)} workload(s)")
        lines.append(f"  {'workload':<24}{'predicted':>14}{'measured':>14}{'error':>10}")
        for case in dev.cases:
            if case.problem:
                lines.append(f"  {case.workload:<24}  not replayed: {case.problem}")
                continue
            lines.append(f"  {case.workload:<24}{_ms(case.predicted_s):>14}"
                         f"{_ms(case.measured_s):>14}{_pct(case.error):>10}")
        gmae = dev.gmae
        done = sum(1 for c in dev.cases if c.error is not None)
        lines.append(f"  geomean |error| (GMAE) {'n/a' if gmae is None else f'{gmae:.2%}'} "
                     f"over {done} case(s)")
        for problem in dev.problems:
            lines.append(f"  skipped: {problem}")
        if attribution:
            for case in dev.cases:
                lines += _attribution_lines(case)
    return lines


def _attribution_lines(case: Replayed) -> list[str]:
    if case.problem or case.tasks_delta_s is None:
        return []
    m = case.measured_s
    lines = [(f"{case.device_key} {case.workload}: error {_pct(case.error)} = timed tasks "
              f"{_pct(case.tasks_delta_s / m)} + untimed tasks ({case.untimed_tasks}) "
              f"{_pct(case.untimed_delta_s / m)} + trace vs measured "
              f"{_pct(case.trace_delta_s / m)} + schedule {_pct(case.schedule_delta_s / m)}")]
    if case.warm_share is not None:
        share, moved = case.warm_share
        lines.append(f"  cold-cache ops priced {share:.0%} warm, {1 - share:.0%} cold "
                     f"(the step moves {moved / 2**20:.1f} MiB)")
    header = f"    {'':<{NAME_WIDTH}}{'predicted':>13}{'traced':>13}{'contrib':>10}"
    lines.append(f"  per family (calls){header[len('  per family (calls)'):]}")
    for a in case.families:
        lines.append(f"    {f'{a.name} ({a.count})':<{NAME_WIDTH}}{_ms(a.predicted_s):>13}"
                     f"{_ms(a.traced_s):>13}{_pct(a.contribution):>10}")
    lines.append(f"  worst {len(case.ops)} ops and nodes")
    for a in case.ops:
        name = a.name if len(a.name) <= NAME_WIDTH else a.name[:NAME_WIDTH - 3] + "..."
        lines.append(f"    {name:<{NAME_WIDTH}}{_ms(a.predicted_s):>13}{_ms(a.traced_s):>13}"
                     f"{_pct(a.contribution):>10}")
    if case.host_families:
        lines.append(f"  host side: predicted {_ms(case.host_predicted_s)}, traced "
                     f"{_ms(case.host_traced_s)} (the profiler's cost out), measured "
                     f"iteration {_ms(m)}")
        lines.append(f"  host per family (calls){header[len('  host per family (calls)'):]}")
        for a in case.host_families:
            lines.append(f"    {f'{a.name} ({a.count})':<{NAME_WIDTH}}{_ms(a.predicted_s):>13}"
                         f"{_ms(a.traced_s):>13}{_pct(a.contribution):>10}")
    return lines


def to_plain(devices: list[DeviceReplay], attribution: bool = False) -> dict:
    """The replay as plain data (``perfmodel replay --json``)."""
    out = {}
    for dev in devices:
        cases = {}
        for case in dev.cases:
            row = {"predicted_s": case.predicted_s, "measured_s": case.measured_s,
                   "traced_s": case.traced_s, "error": case.error, "fit": case.fit,
                   "recorded_predicted_s": case.recorded_predicted_s, "problem": case.problem}
            if attribution and case.tasks_delta_s is not None:
                row["attribution"] = {
                    "families": [asdict(a) for a in case.families],
                    "ops": [asdict(a) for a in case.ops],
                    "tasks_delta_s": case.tasks_delta_s,
                    "untimed_delta_s": case.untimed_delta_s, "untimed_tasks": case.untimed_tasks,
                    "trace_delta_s": case.trace_delta_s,
                    "schedule_delta_s": case.schedule_delta_s,
                    "warm_share": None if case.warm_share is None else case.warm_share[0],
                    "step_bytes": None if case.warm_share is None else case.warm_share[1]}
                if case.host_families:
                    row["attribution"]["host"] = {
                        "families": [asdict(a) for a in case.host_families],
                        "predicted_s": case.host_predicted_s,
                        "traced_s": case.host_traced_s}
            cases[case.workload] = row
        out[dev.device_key] = {"fits": dev.fits, "overhead_workloads": dev.table_workloads,
                               "gmae": dev.gmae, "cases": cases, "problems": dev.problems}
    return {"devices": out}


def format_json(devices: list[DeviceReplay], attribution: bool = False) -> str:
    return json.dumps(to_plain(devices, attribution), indent=2, sort_keys=True)
