"""Multi-rank end to end: trace, predict and measure a workload on W ranks.

:func:`run_multirank` starts ``mpiexec -n W python -m perfmodel.e2e.ranks ...``
and waits for it (with a timeout). Every rank (:func:`rank_main`) joins the
torch.distributed process group (:func:`perfmodel.world.init_distributed`,
gloo on a CPU), pins torch to its share of the cores, builds its part of the
workload, measures with the others how much slower compute and memory-bound
work run beside them (:func:`perfmodel.measure.contention.measure_contention`),
captures its own trace (``<workload>@<W>.rank<r>.*`` in the device's traces
folder) and then times the iteration; rank 0 times the host's speed alone
before, between and after (:func:`perfmodel.measure.drift.measure_host_speed`, the
median of the three). Rank 0 builds every rank's task graph, prices it with
the stored per-op fit (collectives by their fitted communication predictor,
:mod:`perfmodel.fit.comm_model`) and the device's shared overhead table, simulates
the ranks together (:func:`perfmodel.simulate.walk.simulate_ranks`) on a host
they share as that contention, the host's drift and the thread counts below say
(one :class:`~perfmodel.simulate.host.HostModel`) and writes one JSON result, which
the parent turns into a :class:`~perfmodel.e2e.result.MeasuredIteration` named
``<workload>@<W>``.

Thread counts. The ranks share the cores this process may run on: each runs
:func:`rank_threads` torch threads (``max(1, cores // W)``: 1 at 2 and 4 ranks
on 2 cores). Ops are priced with the fit measured at exactly that thread count
(``load_latest_fit(store, threads=...)``; a 2-thread fit runs a GEMM about
twice as fast as a 1-thread rank does). Such a fit comes from a pytest session
run with ``--perfmodel-threads <t>``: its microbench items measure at ``t``
threads and its fit uses only those records (plus the collectives, measured by
ranks sharing the host and kept in every fit). :func:`run_multirank` checks
for it before starting any rank and raises :class:`MultirankError` naming the
command to run when there is none (:func:`require_fit`). When the ranks'
threads leave no core free for gloo's worker threads, a collective's CPU time
(the ``host_cpu`` predictor) is taken from its rank's compute rather than
overlapped with it (:func:`~perfmodel.simulate.host.comm_host_share`: 1 at 2
ranks on 2 cores); when they outnumber the cores, the workers get almost no
core while the hosts compute (the collective's ``loaded`` time) and take none
from them (0 at 4 ranks). And when the ranks' threads outnumber the cores (4
one-thread ranks on 2 cores) each rank gets only a share of a core: its ops and
host work run slower by the compute slowdown the ranks measure together (the
contention's c: about the ratio of threads to cores there or somewhat above
it, about 1 at 2 ranks; :func:`~perfmodel.simulate.host.oversubscription`,
that ratio, where it was not measured). There, too, a rank that sleeps in a
collective waits for a core when it wakes: the ranks measure that wake-up lag (``sync`` of
:func:`perfmodel.measure.contention.measure_contention`), and each rank's host
runs again that much later after each wait for a collective.

Measured time: after warm-up, each of ``repeat`` blocks of ``number``
iterations starts at a ``torch.distributed`` barrier (gloo's, which blocks
instead of spinning like an MPI barrier would on an oversubscribed CPU); every
rank times its blocks; a block's time is the *maximum* over ranks (the
iteration is done when the slowest rank is), and the result is the median and
sd over blocks of those maxima, per iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from perfmodel.store import paths as store_paths
from perfmodel.measure.contention import Contention, measure_contention
from perfmodel.measure.drift import (HostDrift, HostSpeed, OpDrift, measure_host_speed,
                                     op_drift_factors)
from perfmodel.store.results import read_run_file, read_run_header, run_start_s
from perfmodel.e2e.result import IterationTiming, MeasuredIteration
from perfmodel.e2e.single import (MEASURE, TRACE_ITERATIONS, TRACE_WARMUP, shared_table,
                                  traces_dir)
from perfmodel.trace.graph import Graph, build_graph
from perfmodel.trace.overheads import OverheadTable, samples_from_graph, table_from_samples
from perfmodel.plaindata import write_json_atomic
from perfmodel.fit.generic import generic_model
from perfmodel.simulate.predict import (NON_OP_CATEGORIES, CommPrice, beyond_fit, coverage,
                                        graph_prediction, shared_step_bytes, sim_tasks)
from perfmodel.simulate.result import IterationPrediction
from perfmodel.ops.collective import HOST_CPU, LOADED
from perfmodel.simulate.host import HostModel, oversubscription
from perfmodel.simulate.walk import simulate_ranks
from perfmodel.trace.parse import TraceFiles, capture_trace, load_trace

#: Default wall-clock limit of one multi-rank run (s).
DEFAULT_TIMEOUT_S = 600.0
#: Workload size per profile, as for single-rank E2E on a CPU.
SIZES = {"smoke": "tiny", "quick": "registered", "gpu": "registered", "full": "registered"}


class MultirankError(RuntimeError):
    """The ranks failed or timed out (the message ends with the tail of their
    output), or there is no fit for the ranks' thread count."""


def rank_threads(world_size: int, cores: int | None = None) -> int:
    """Torch threads of each of ``world_size`` ranks on one host sharing
    ``cores`` cores (default: those this process may run on)."""
    from perfmodel.device.probe import usable_cpus
    from perfmodel.world import threads_per_rank

    return threads_per_rank(cores or usable_cpus(), world_size)


def missing_fit_message(store_dir: Path, threads: int, profile: str = "quick",
                        why: str = "no fit") -> str:
    """The one line telling the user how to produce a ``threads``-thread fit."""
    return (f"{why} for {threads} thread(s) under {store_dir}: run `pytest suites/ -m "
            f"microbench --perfmodel-profile {profile} --perfmodel-threads {threads}` first")


def predictor_kinds(fit) -> tuple[bool, bool]:
    """Whether ``fit`` holds (any per-op predictor, any collective predictor): the
    ranks need both."""
    from perfmodel.ops import get_op

    collective = [get_op(op).family == "collective" for op, _ in fit.predictors]
    return not all(collective), any(collective)


def require_fit(store, threads: int, profile: str = "quick"):
    """The newest fit of ``store`` (a :class:`~perfmodel.store.results.ResultStore`)
    measured at ``threads`` torch threads; :class:`MultirankError` when there is
    none, it has no per-op (non-collective) predictor or no collective one, or
    some are stale."""
    from perfmodel.fit.fitting import load_latest_fit, refit_command

    fit, _ = load_latest_fit(store, threads=threads)
    if fit is None:
        raise MultirankError(missing_fit_message(store.dir, threads, profile))
    if fit.stale:
        names = ", ".join(f"{op}.{direction}" for op, direction in fit.stale)
        raise MultirankError(missing_fit_message(
            store.dir, threads, profile, f"stale predictors, fitted before their ops or the "
            f"predictor kinds changed ({names})"))
    per_op, collective = predictor_kinds(fit)
    if not per_op:
        raise MultirankError(missing_fit_message(store.dir, threads, profile,
                                                 "only collective predictors in the fit"))
    if not collective:
        raise MultirankError(
            f"no collective predictor in the {threads}-thread fit under {store.dir}: run "
            f"`pytest suites/test_collective.py -m 'microbench and collective' --perfmodel-profile "
            f"{profile} --perfmodel-ranks N` for N = 2 and 4, then "
            f"`{refit_command(store.device_key, threads)}`")
    return fit


def drift_unavailable(fit, threads: int, profile: str = "quick") -> str | None:
    """Why the ranks' predictions cannot follow the host's drift since ``fit``
    (its records carry no host speed, or one timed with reference ops older than
    :data:`perfmodel.measure.drift.REFERENCE`), with the command that refits; None when
    they can."""
    if fit.host_speed is not None and fit.host_speed.comparable:
        return None
    why = ("records no host speed" if fit.host_speed is None else
           f"timed the host's speed with older reference ops ({', '.join(fit.host_speed.seconds)})")
    return (f"the {threads}-thread fit {why}, so its predictions do not follow the host's "
            f"drift; refit: pytest suites/ -m 'microbench and not collective' "
            f"--perfmodel-profile {profile} --perfmodel-threads {threads}")


#: The old result type of :func:`predict_ranks`, kept for one release: a
#: multi-rank prediction is an :class:`IterationPrediction` with its ranks now.
RanksPrediction = IterationPrediction


#: A sweep at the host's own thread count started at most this long before or
#: after the newest measurements of the ranks' fit counts as taken beside them (s).
BESIDE_FIT_S = 12 * 3600.0
#: A run with at least this many measurement records is a whole sweep: reading
#: runs for either side of :func:`sweep_op_drift` stops at one.
SWEEP_RECORDS = 500
#: Most run files read for either side of :func:`sweep_op_drift`.
MAX_RUNS_READ = 4

_OP_DRIFT_CACHE: dict[tuple, tuple[dict[str, float], str]] = {}


def sweep_op_drift(store, fit, sweep_threads: int) -> tuple[dict[str, float], str]:
    """Each op's own drift since ``fit`` (the ranks' fit, measured at their
    thread count), read from two sweeps of ``store`` at ``sweep_threads`` torch
    threads, the count a session sweeps at: the newest one, and the one started
    nearest the fit's newest measurements (within :data:`BESIDE_FIT_S`).
    Returns :func:`~perfmodel.measure.drift.op_drift_factors` (``"op.direction"``
    to now over then; empty when there is no such pair) and one line saying
    which runs gave them. Each side reads runs newest or nearest first, an op's
    records from the first run that has any, until it has read a whole sweep
    (:data:`SWEEP_RECORDS`) or :data:`MAX_RUNS_READ` runs. The result is kept
    per store, fit and set of runs, so one session's multi-rank items read the
    runs once."""
    runs = []
    for path in store_paths.run_files(store.dir):
        try:
            header = read_run_header(path)
        except ValueError:
            continue
        run_id = store_paths.run_id_of(path)
        start = run_start_s(run_id)
        if (header.get("device_key") == store.device_key and start is not None
                and (header.get("env") or {}).get("threads") == sweep_threads):
            runs.append((start, run_id, path))
    fit_starts = [t for t in map(run_start_s, fit.data_runs) if t is not None]
    if not runs or not fit_starts:
        return {}, f"no op drift: no {sweep_threads}-thread sweep or no dated fit data"
    key = (str(store.dir), store.device_key, fit.data_id, sweep_threads,
           tuple(r[1] for r in runs))
    if key not in _OP_DRIFT_CACHE:
        fit_at = max(fit_starts)
        beside = sorted((r for r in runs if abs(r[0] - fit_at) <= BESIDE_FIT_S),
                        key=lambda r: (abs(r[0] - fit_at), r[1]))
        if not beside:
            _OP_DRIFT_CACHE[key] = ({}, f"no op drift: no {sweep_threads}-thread sweep within "
                                        f"{BESIDE_FIT_S / 3600:g} h of the fit's data")
        else:
            now, now_ids = _sweep_records(sorted(runs, reverse=True), store.device_key)
            then, then_ids = _sweep_records(beside, store.device_key)
            factors = op_drift_factors(now, then)
            _OP_DRIFT_CACHE[key] = (factors, f"op drift of {len(factors)} op(s): "
                                             f"{sweep_threads}-thread runs {', '.join(now_ids)} "
                                             f"over {', '.join(then_ids)}")
    return _OP_DRIFT_CACHE[key]


def _sweep_records(runs: list[tuple[float, str, Path]], device_key: str
                   ) -> tuple[list[dict], list[str]]:
    """Measurement records of ``runs`` in their order, each (op, direction) from
    the first run that has it (see :func:`sweep_op_drift`), and the ids of the
    runs they came from."""
    out: list[dict] = []
    seen: set[tuple[str, str]] = set()
    read: list[str] = []
    for _, run_id, path in runs[:MAX_RUNS_READ]:
        records, _ = read_run_file(path, device_key)
        records = [r for r in records if r["kind"] == "measurement"]
        fresh = {(r["op"], r["direction"]) for r in records} - seen
        if fresh:
            read.append(run_id)
            out.extend(r for r in records if (r["op"], r["direction"]) in fresh)
            seen |= fresh
        if len(records) >= SWEEP_RECORDS:
            break
    return out, read


def comm_pricer(fit) -> Callable[[str, dict[str, int]], CommPrice]:
    """``(op, params) ->`` :class:`~perfmodel.simulate.predict.CommPrice` of a collective
    from ``fit``'s communication predictors: its time (a median), the host CPU
    time a rank spends in it (the ``host_cpu`` predictor, a mean per call: with
    a long tail of slow calls it can exceed the median time; None when ``fit``
    has none, which counts the whole time as CPU) and its time while the ranks
    compute (the ``loaded`` predictor; None when ``fit`` has none or did not
    measure it at this world size: a loaded time does not carry over between
    world sizes, as an idle one does). LookupError naming the
    suite to run when the time predictor is missing."""
    def optional(op: str, direction: str, params: dict[str, int],
                 measured_world_only: bool = False) -> float | None:
        try:
            predictor = fit.predictor(op, direction)
        except LookupError:
            return None
        if measured_world_only and params["world_size"] not in measured_world_sizes(predictor):
            return None
        return max(0.0, float(predictor.predict("float32", [params])[0]))

    def price(op: str, params: dict[str, int]) -> CommPrice:
        try:
            predictor = fit.predictor(op, "forward")
        except LookupError:
            from perfmodel.fit.fitting import refit_command

            raise LookupError(
                f"no fitted predictor for collective {op!r}; measure it first: mpiexec -n "
                f"{params['world_size']} pytest suites/test_collective.py -m "
                f"'microbench and collective', then fit it into "
                f"the ranks' fit: "
                f"{refit_command(fit.device_key or '<device-key>', fit.threads)}") from None
        wall = max(0.0, float(predictor.predict("float32", [params])[0]))
        return CommPrice(wall, optional(op, HOST_CPU, params),
                         optional(op, LOADED, params, measured_world_only=True))

    return price


def measured_world_sizes(predictor) -> set[int]:
    """The world sizes a fitted communication predictor was measured at."""
    return {int(w) for w in getattr(predictor.estimator, "world_", ())}


def predict_ranks(graphs: list[Graph], fit, table: OverheadTable,
                  bias: dict[str, float] | None = None, keep_timeline: bool = True,
                  host: HostModel | None = None) -> IterationPrediction:
    """Predict one iteration of the ranks whose task graphs are ``graphs``
    (rank order) on a host they share as ``host`` says (None: nothing but the
    collectives' loaded times; see :mod:`perfmodel.simulate.host`): the
    predicted time is the slowest rank's, the breakdowns and regions the mean
    per rank, the unmodelled nodes' shares the mean per rank, the coverage that
    of every rank's traced time, and each rank's own prediction is in
    :attr:`~perfmodel.simulate.result.IterationPrediction.ranks`. Each op's
    fitted time is priced by :meth:`~perfmodel.simulate.host.HostModel.op_seconds` (the host's drift
    since the fit, then the contention beside the other ranks), the other host
    work and each collective's CPU time by
    :meth:`~perfmodel.simulate.host.HostModel.slow_host_work`; the collectives'
    times are not slowed: they were measured on ranks sharing the CPU."""
    host = host or HostModel()
    comm = comm_pricer(fit)
    per_rank, rank_missing, missing = [], [], {}
    moved = shared_step_bytes(graphs, fit)  # the ranks share the host's last-level cache
    for graph in graphs:
        tasks, missed = sim_tasks(graph, fit, table, False, bias, comm, host.op_seconds,
                                  moved_bytes=moved)
        for task in tasks:
            if task.category in NON_OP_CATEGORIES:  # ops were priced by op_seconds
                host.slow_host_work(task)
        per_rank.append(tasks)
        rank_missing.append(missed)
        for key, n in missed.items():
            missing[key] = missing.get(key, 0) + n
    sim = simulate_ranks(per_rank, keep_timeline, host)
    generic = generic_model(fit) is not None
    ranks = [graph_prediction(g, walk, missed, beyond_fit(g.tasks, fit), comm_priced=True,
                              generic=generic)
             for g, walk, missed in zip(graphs, sim.ranks, rank_missing)]
    every_task = [t for g in graphs for t in g.tasks]
    traced = [g.measured_s for g in graphs if g.measured_s is not None]
    return IterationPrediction(
        sim.total_s, _mean_over_ranks(r.breakdown_s for r in sim.ranks),
        _mean_over_ranks(r.regions_s for r in sim.ranks),
        coverage(every_task, missing, comm_priced=True, generic=generic),
        _unmodelled_over_ranks(graphs),
        missing, len(every_task), max(traced) if traced else None,
        beyond_fit(every_task, fit), ranks=ranks, collective_start_s=sim.collective_start_s)


def _unmodelled_over_ranks(graphs: list[Graph]) -> list[tuple[str, int, float]]:
    """(name, count over ranks, mean share of a rank's traced time) of every
    unmodelled node name, largest share first."""
    unmodelled: dict[str, list] = {}
    for graph in graphs:
        for name, count, time_share in graph.unmodelled():
            row = unmodelled.setdefault(name, [name, 0, 0.0])
            row[1] += count
            row[2] += (time_share or 0.0) / len(graphs)
    return [tuple(row) for row in sorted(unmodelled.values(),
                                         key=lambda r: (-r[2], -r[1], r[0]))]


def _mean_over_ranks(tables) -> dict[str, float]:
    tables = list(tables)
    out: dict[str, float] = {}
    for table in tables:
        for key, value in table.items():
            out[key] = out.get(key, 0.0) + value / len(tables)
    return dict(sorted(out.items()))


def measure_ranks(step: Callable[[], object], barrier: Callable[[], object],
                  gather: Callable[[list[float]], list[list[float]] | None], items: int,
                  warmup: int, repeat: int, number: int,
                  clock: Callable[[], float] = time.perf_counter
                  ) -> tuple[IterationTiming, list[float]] | None:
    """Time ``step`` on every rank (all ranks call this together): ``repeat``
    blocks of ``number`` iterations, each after ``barrier()``. ``gather`` brings
    every rank's per-iteration block times to rank 0 (None elsewhere). Returns,
    on rank 0, the timing over blocks of the slowest rank's time per block
    and each rank's median (s); None on the other ranks."""
    if repeat < 2 or number < 1:
        raise ValueError(f"need repeat >= 2 and number >= 1, got {repeat} and {number}")
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeat):
        barrier()
        start = clock()
        for _ in range(number):
            step()
        samples.append((clock() - start) / number)
    gathered = gather(samples)
    if gathered is None:
        return None
    slowest = [max(block) for block in zip(*gathered)]
    median = statistics.median(slowest)
    return (IterationTiming(median, statistics.stdev(slowest), repeat, number, items / median),
            [statistics.median(s) for s in gathered])


# -- the parent ---------------------------------------------------------------------------

def run_multirank(workload: str, world_size: int, results_root: Path, device_key: str,
                  bandwidth_B_per_s: float, profile: str = "quick", cores: int | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, bias: dict[str, float] | None = None,
                  replay: Path | None = None) -> MeasuredIteration:
    """Run ``workload`` on ``world_size`` ranks under ``mpiexec`` and return its
    result as ``<workload>@<world_size>``. The fit and overhead table are read
    from ``results_root/<device_key>/``; ``cores`` (default: this process's)
    are shared out among the ranks, and the fit must be one measured at the
    ranks' thread count (:func:`rank_threads`). Raises :class:`MultirankError`
    when there is no such fit (before starting any rank), or when the ranks
    fail or run past ``timeout_s``. ``replay``: a file where rank 0 saves the
    ranks' capture as a replay case (:func:`save_ranks_replay`)."""
    from perfmodel.device.probe import usable_cpus
    from perfmodel.world import mpiexec_path
    from perfmodel.store.results import ResultStore
    from perfmodel.workloads import get_multirank_workload

    cfg = get_multirank_workload(workload)
    cores = cores or usable_cpus()
    threads = rank_threads(world_size, cores)
    store = ResultStore(Path(results_root), device_key)
    fit = require_fit(store, threads, profile)
    op_drift, _ = sweep_op_drift(store, fit, cores) if cores != threads else ({}, "")
    note = None if op_drift else drift_unavailable(fit, threads, profile)
    if note:
        warnings.warn(f"{cfg.name}@{world_size}: {note}", stacklevel=2)
    with tempfile.TemporaryDirectory(prefix="perfmodel-multirank-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [mpiexec_path(), "-n", str(world_size), sys.executable, "-m", "perfmodel.e2e.ranks",
               "--workload", cfg.name, "--results", str(results_root), "--device-key",
               device_key, "--bandwidth", repr(bandwidth_B_per_s), "--profile", profile,
               "--cores", str(cores), "--bias", json.dumps(bias or {}),
               "--op-drift", json.dumps(op_drift), "--out", str(out)]
        if replay is not None:
            cmd += ["--replay", str(replay)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_child_environment(), start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stdout, stderr = _end_session(proc)
            raise MultirankError(f"{cfg.name}@{world_size}: ranks still running after "
                                 f"{timeout_s:g} s; stopped; their stacks:\n"
                                 f"{_tail(stdout, stderr, limit=16000)}") from None
        if proc.returncode != 0 or not out.is_file():
            raise MultirankError(f"{cfg.name}@{world_size}: mpiexec exited with "
                                 f"{proc.returncode}\n{_tail(stdout, stderr)}")
        return MeasuredIteration.from_plain(json.loads(out.read_text(encoding="utf-8")))


def _child_environment() -> dict[str, str]:
    """This environment without an enclosing MPI job's variables, so that a
    parent that is itself an MPI rank still starts a separate job."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HYDRA_"))}


def _end_session(proc: subprocess.Popen) -> tuple[str, str]:
    """Stop ``proc``'s session (mpiexec and its ranks): SIGTERM, then SIGKILL
    after 5 s; returns what they wrote."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            continue
    return proc.communicate()


def _tail(*streams, limit: int = 4000) -> str:
    """The last ``limit`` characters of the ranks' output, without profiler chatter."""
    text = "\n".join(s.decode() if isinstance(s, bytes) else s or "" for s in streams)
    return "\n".join(line for line in text.splitlines() if "USDT:" not in line)[-limit:]


# -- the ranks ------------------------------------------------------------------------------

def dump_stacks_on_sigterm() -> None:
    """On SIGTERM (what :func:`run_multirank` sends on its timeout), write every
    thread's Python stack to stderr before dying, so that the timeout's message
    shows where each rank was stuck."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)


def rank_main(argv: list[str] | None = None) -> int:
    """One rank of :func:`run_multirank` (``python -m perfmodel.e2e.ranks``). An
    error on any rank ends every rank at once (``MPI_Abort``) with one line
    naming the workload and the error, after its traceback."""
    from perfmodel.world import init_distributed, shutdown_distributed

    args = _parser().parse_args(argv)
    dump_stacks_on_sigterm()
    world = init_distributed("cpu")
    label = f"{args.workload}@{world.size}"
    try:
        _run_rank(args, world, label)
    except Exception as exc:  # the other ranks would wait for this one until the timeout
        traceback.print_exc()
        world.abort(f"{label}: {type(exc).__name__}: {exc}")
    world.barrier()
    shutdown_distributed()
    return 0


def _run_rank(args: argparse.Namespace, world, label: str) -> None:
    """The work of :func:`rank_main` on one rank: build, measure the contention,
    trace, time; and on rank 0 predict and write the JSON result."""
    import torch
    import torch.distributed as dist

    from perfmodel.measure.allocator import keep_freed_memory
    from perfmodel.device.probe import cpu_cache_sizes
    from perfmodel.world import threads_per_rank
    from perfmodel.store.results import ResultStore
    from perfmodel.workloads import get_multirank_workload

    torch.set_num_threads(threads_per_rank(args.cores, world.local_size))
    keep_freed_memory()
    cfg = get_multirank_workload(args.workload)
    if SIZES[args.profile] == "tiny":
        cfg = cfg.tiny()
    step = cfg.build("cpu", seed=0)
    store = ResultStore(Path(args.results), args.device_key)
    oversubscribed = oversubscription(world.local_size, torch.get_num_threads(), args.cores) > 1
    contention = measure_contention(world, cpu_cache_sizes()[1],
                                    sync=_small_all_to_all(world.size) if oversubscribed else None)

    def host_speed():  # alone, as for the contention's bandwidth alone
        return world.on_rank0_alone(measure_host_speed, "the host speed")

    # One sample can move markedly within seconds: the run's speed is the
    # median of three, before the trace, after it and after the timing.
    speeds = [host_speed()]
    files = [_files(traces_dir(store.dir), f"{label}.rank{r}") for r in range(world.size)]
    capture_trace(step.step, traces_dir(store.dir), f"{label}.rank{world.rank}",
                  TRACE_ITERATIONS, TRACE_WARMUP)
    speeds.append(host_speed())
    warmup, repeat, number = MEASURE[args.profile]
    timing = measure_ranks(step.step, dist.barrier, lambda s: world.comm.gather(s, root=0),
                           step.items, warmup, repeat, number)
    speeds.append(host_speed())
    if world.rank == 0:
        speed = HostSpeed.median_of(speeds)
        fit = require_fit(store, torch.get_num_threads(), args.profile)
        table, _ = shared_table(store.dir, args.bandwidth)
        graphs = [build_graph(load_trace(f.et, f.kineto, f.calibration)) for f in files]
        record = result_record(label, graphs, fit, table, args.bandwidth, timing,
                               json.loads(args.bias), torch.get_num_threads(), args.cores,
                               contention, speed, json.loads(args.op_drift))
        write_json_atomic(Path(args.out), record)
        if args.replay:
            save_ranks_replay(Path(args.replay), record, graphs, timing[0], args.device_key,
                              args.bandwidth, args.cores, cfg, SIZES[args.profile])


def save_ranks_replay(path: Path, record: dict, graphs: list[Graph], measured: IterationTiming,
                      device_key: str, bandwidth_B_per_s: float, cores: int, config,
                      size: str) -> Path:
    """Save the ranks' capture (every rank's task graph, the measured iteration and
    what their shared host needs: threads, cores, contention, rank 0's host speed, op drift;
    ``record``: :func:`result_record`'s; ``config`` the workload's at ``size``) as a
    replay case at ``path`` (:mod:`perfmodel.replay.case`)."""
    from perfmodel.measure.env import environment
    from perfmodel.replay.case import ReplayCase, measured_timing, plain_config, save_case

    threads = record["threads_per_rank"]
    label = record["workload"]
    return save_case(path, ReplayCase(
        label, device_key, False, bandwidth_B_per_s, threads, graphs,
        measured_timing(measured.median_s, measured.sd_s, measured.repeat, measured.number,
                        measured.items_per_s),
        plain_config(environment(device_key, threads)),
        {"world_size": len(graphs), "size": size, **plain_config(config)},
        ranks=plain_config({"threads_per_rank": threads, "cores": cores,
                            "contention": record["contention"],
                            "host_speed": record["host_speed"],
                            "op_drift": record.get("op_drift")}),
        recorded=plain_config({"predicted_s": record["predicted_s"],
                               "fit_data": record["fit_data"], "bias": record["bias"]})))


def _small_all_to_all(world_size: int) -> Callable[[], object]:
    """A blocking gloo ``all_to_all`` of 1 KiB per rank pair: the sync of the
    contention's wake-up lag."""
    import torch
    import torch.distributed as dist

    send = torch.zeros(256 * world_size)
    receive = torch.empty_like(send)
    return lambda: dist.all_to_all_single(receive, send)


def result_record(label: str, graphs: list[Graph], fit, table: OverheadTable,
                  bandwidth_B_per_s: float, timing: tuple[IterationTiming, list[float]],
                  bias: dict[str, float], threads: int, cores: int,
                  contention: Contention | None = None,
                  host_speed: HostSpeed | None = None,
                  op_drift: dict[str, float] | None = None) -> dict:
    """Rank 0's JSON result: measured and predicted iteration (s), breakdown
    (mean per rank, s), per-rank predictions and medians, what was unmodelled,
    the ``contention`` the ranks measured (None: not measured), rank 0's
    ``host_speed`` and the drift from the fit's (None: either not measured),
    each op's own drift (``op_drift``, :func:`sweep_op_drift`; ops without one
    move with the host's), and the prediction at the fit's host speed
    (``predicted_fit_speed_s``)."""
    measured, rank_medians = timing
    probe = (HostDrift.between(host_speed, fit.host_speed, bandwidth_B_per_s)
             if host_speed is not None and fit.host_speed is not None else None)
    drift = OpDrift(dict(op_drift), probe) if op_drift else probe
    host = HostModel.of_ranks(len(graphs), threads, cores, contention, drift)
    shared = predict_ranks(graphs, fit, table, bias, host=host)
    own_table = table_from_samples([samples_from_graph(f"{label}.rank{r}", g, bandwidth_B_per_s)
                                    for r, g in enumerate(graphs)], bandwidth_B_per_s)
    own = predict_ranks(graphs, fit, own_table, bias, keep_timeline=False, host=host)
    at_fit_speed = shared if drift is None else predict_ranks(
        graphs, fit, table, bias, keep_timeline=False, host=replace(host, drift=None))
    return {
        "workload": label, "world_size": len(graphs), "threads_per_rank": threads,
        "cores": cores, "cpu_share": host.cpu_share, "comm_host_share": host.comm_host_share,
        "contention": None if contention is None else contention.to_dict(),
        "host_speed": None if host_speed is None else host_speed.to_dict(),
        "host_drift": None if probe is None else probe.to_dict(),
        "op_drift": dict(op_drift) if op_drift else None,
        "measured": {"median_s": measured.median_s, "sd_s": measured.sd_s,
                     "repeat": measured.repeat, "number": measured.number,
                     "items_per_s": measured.items_per_s},
        "measured_rank_median_s": rank_medians,
        "predicted_s": shared.total_s, "predicted_own_s": own.total_s,
        "predicted_fit_speed_s": at_fit_speed.total_s,
        "predicted_rank_s": [r.predicted_s for r in shared.ranks],
        "collective_start_s": shared.collective_start_s,
        "breakdown_s": shared.breakdown_s, "regions_s": shared.regions_s,
        "unmodelled": [list(row) for row in shared.unmodelled],
        "no_predictor": shared.no_predictor, "n_tasks": shared.n_tasks,
        "beyond_fit": shared.beyond_fit, "traced_s": shared.traced_s,
        "coverage": None if shared.coverage is None else asdict(shared.coverage),
        "overhead_workloads": list(table.workloads), "bias": bias,
        "fit_data": fit.data_id}


def _files(directory: Path, name: str) -> TraceFiles:
    return TraceFiles(*store_paths.trace_files(directory, name))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.e2e.ranks",
                                     description="one rank of a multi-rank E2E run")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--results", required=True, help="results root")
    parser.add_argument("--device-key", required=True)
    parser.add_argument("--bandwidth", type=float, required=True, help="memory bandwidth, B/s")
    parser.add_argument("--profile", default="quick", choices=sorted(SIZES))
    parser.add_argument("--cores", type=int, required=True, help="cores shared by the ranks")
    parser.add_argument("--bias", default="{}", help="planted prediction error, JSON")
    parser.add_argument("--op-drift", default="{}",
                        help="each op's own drift since the fit (sweep_op_drift), JSON")
    parser.add_argument("--out", required=True, help="rank 0's JSON result")
    parser.add_argument("--replay", default=None, help="rank 0's replay case (gzip JSON)")
    return parser


if __name__ == "__main__":
    sys.exit(rank_main())
