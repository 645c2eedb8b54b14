"""Ranks of a multi-process run: MPI starts and coordinates them, torch.distributed
runs the collectives.

Under ``mpiexec`` each process is one rank of an MPI world (mpi4py); rank 0 picks
a TCP port, broadcasts it, and every rank joins a ``torch.distributed`` process
group on it (gloo on CPU, NCCL on CUDA) with a per-collective timeout. A plain
process is a world of one (no MPI, a local store). mpi4py is imported only when
the launcher's environment variables say this process is an MPI rank.

Timing (:func:`measure_collective`): before every sample the ranks meet at a
torch.distributed barrier; each rank times its own calls; a sample is the *maximum* over ranks
of the per-rank durations (the collective is done when its slowest rank is).
PARAM instead times a loop of iterations per rank after one barrier and reports
p50/p95 across ranks; per-sample maxima give the distribution a synchronous
training step sees. Rank 0 gathers the per-rank samples with ``comm.gather`` and
decides, for every rank, when to stop (same rules as :mod:`perfmodel.timing`).

A collective that fails or times out on one rank aborts every rank (``MPI_Abort``)
after one line on stderr naming the ranks that did not complete it.
"""

from __future__ import annotations

import array
import math
import os
import shutil
import socket
import stat
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn

#: Environment variables with this process's rank / world size / rank and count
#: on its host, set by MPICH/Hydra (PMI_*, MPI_LOCAL*), Open MPI and PMIx launchers.
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
#: Test hook: ``exit:R`` makes rank R exit, ``hang:R`` makes it hang, inside its
#: first collective (after issuing it), to check the failure path; with a
#: phase, ``exit:R:loaded`` or ``hang:R:loaded``, inside its first collective
#: timed under compute load (:func:`_time_loaded`) instead.
FAULT_VAR = "PERFMODEL_FAULT"
#: Phases of a collective's measurement that :data:`FAULT_VAR` can name.
FAULT_PHASES = ("idle", "loaded")
#: Default per-collective timeout (s).
DEFAULT_TIMEOUT_S = 60.0
#: How long a rank that saw a collective fail waits for the others to report (s).
REPORT_GRACE_S = 2.0
#: Longest an abort waits for the launcher to read this rank's last output (s).
OUTPUT_DRAIN_S = 2.0
#: Warm-up calls per replicate (the first pays one-off costs; the rest size blocks).
WARMUP_CALLS = 3
#: Shortest block of calls one sample times (s), as in :class:`perfmodel.timing.Timer`.
MIN_BLOCK_S = 2e-5
#: Most samples per replicate.
MAX_SAMPLES = 2000
#: Calls timed under compute load per replicate, after one warm-up call: as many
#: as fit in :data:`LOADED_BUDGET_S` at the warm-up's pace, within these bounds
#: (see :func:`loaded_calls`). A short loaded call's time comes in steps of the
#: scheduler's slice (about 3.7 ms here: a 4 KiB all_reduce at 2 ranks took 3.6,
#: 7.5 or 12 ms), so one needs many.
LOADED_CALLS = (9, 41)
#: A loaded call at least this long (s) spans dozens of scheduler slices, and
#: :data:`LOADED_CALLS_LONG` of them are enough (a 64 MiB all_gather at 4 ranks
#: on 2 cores took 1.2 s loaded: 9 calls and 2 replicates were 22 s per config).
LONG_LOADED_S = 0.1
LOADED_CALLS_LONG = 3
#: Time the loaded calls of one replicate aim to take (s).
LOADED_BUDGET_S = 0.3
#: Shape of the compute unit a rank repeats while its collective runs under load:
#: (M, K, N) of a float32 matrix product, about 85 us on one Zen 4 thread, so the
#: completion is seen within that much of when it happens.
LOAD_UNIT_MKN = (64, 256, 256)


def _first_int(environ: Mapping[str, str], names) -> int | None:
    for name in names:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return None


def launcher_world(environ: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """(rank, size) from an MPI launcher's environment, or None outside one."""
    rank, size = _first_int(environ, RANK_VARS), _first_int(environ, SIZE_VARS)
    return None if rank is None or size is None else (rank, size)


def local_ranks(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(this rank's index on its host, ranks on its host); (0, 1) when unknown."""
    world = launcher_world(environ)
    local_rank = _first_int(environ, LOCAL_RANK_VARS)
    local_size = _first_int(environ, LOCAL_SIZE_VARS)
    if local_rank is None or local_size is None:
        return (world[0], world[1]) if world else (0, 1)  # assume one host
    return local_rank, local_size


def mpiexec_path(python: str = sys.executable) -> str:
    """The ``mpiexec`` next to ``python`` (a venv's, from the ``mpich`` package),
    else the first on ``PATH``; FileNotFoundError when there is none."""
    local = Path(python).with_name("mpiexec")
    found = str(local) if local.is_file() else shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("mpiexec not found (pip install mpich, or put an MPI's "
                                "mpiexec on PATH)")
    return found


def threads_per_rank(cores: int, ranks_on_host: int) -> int:
    """CPU threads each rank pins torch to: its share of the host's cores (>= 1)."""
    return max(1, cores // max(1, ranks_on_host))


class _OneRank:
    """The MPI calls this module uses, for a world of one process."""

    def Get_rank(self) -> int:
        return 0

    def Get_size(self) -> int:
        return 1

    def gather(self, obj, root=0):
        return [obj]

    def bcast(self, obj, root=0):
        return obj

    def Abort(self, code=1):
        os._exit(code)


@dataclass
class World:
    """This process's place among the ranks, and the handles that coordinate them."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    comm: Any  # mpi4py COMM_WORLD, or _OneRank
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: str | None = None  # set once torch.distributed is initialised
    store: Any = None  # the torch.distributed store, used to report failures
    peers: list = field(default_factory=list)  # (host name, pid) of every rank
    #: Called before an abort writes its message (e.g. to stop output capture).
    before_abort: Callable[[], None] | None = None
    _fault: tuple[str, int, str] | None = field(default=None, repr=False)

    def barrier(self, what: str = "the barrier", poll_s: float = 1e-3) -> None:
        """Wait for every rank, sleeping between polls (MPI's blocking barrier
        spins, and a spinning rank steals the core of a rank still measuring).
        Aborts the run when a rank on this host has exited meanwhile."""
        if self.size == 1:
            return
        request = self.comm.Ibarrier()
        next_check = time.monotonic() + 1.0
        while not request.Test():
            time.sleep(poll_s)
            if time.monotonic() > next_check:
                next_check += 1.0
                gone = self.exited_ranks()
                if gone:
                    self.abort(f"rank {', '.join(map(str, gone))} exited before {what}")

    def on_rank0_alone(self, fn: Callable[[], Any], what: str) -> Any:
        """Run ``fn`` on rank 0 while the other ranks wait (sleeping, see
        :meth:`barrier`) for ``what``; its result at rank 0, None elsewhere."""
        self.barrier(what)
        result = fn() if self.rank == 0 else None
        self.barrier(what)
        return result

    def exited_ranks(self) -> list[int]:
        """Ranks on this host whose process no longer exists."""
        host, gone = socket.gethostname(), []
        for rank, (peer_host, pid) in enumerate(self.peers):
            if peer_host == host and rank != self.rank:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    gone.append(rank)
                except PermissionError:
                    pass
        return gone

    def abort(self, message: str, code: int = 1) -> NoReturn:
        """Write ``message`` to stderr and end every rank; does not return.

        Under mpiexec a rank's output reaches the console through a pipe that the
        launcher reads; MPICH's launcher (Hydra) kills the job on ``MPI_Abort``
        without reading what is still in that pipe, so this waits (at most
        :data:`OUTPUT_DRAIN_S`) until the launcher has read the message. MPICH's
        ``MPI_Abort`` returns once the launcher has been told; this process then
        exits rather than run on."""
        if self.before_abort is not None:
            self.before_abort()
        sys.stderr.write(f"perfmodel rank {self.rank}: {message}\n")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _wait_until_read((1, 2), OUTPUT_DRAIN_S)
        self.comm.Abort(code)
        os._exit(code)

    def wait(self, work, op: str, params: Mapping[str, int], phase: str = "idle") -> None:
        """Wait for a collective's ``work`` handle, up to ``timeout_s``; on failure
        report the ranks that did not complete it and abort the run. ``phase``
        (one of :data:`FAULT_PHASES`) is where the wait is, for the fault hook."""
        if self._fault is not None and self._fault[1:] == (self.rank, phase):
            if self._fault[0] == "exit":
                os._exit(1)
            time.sleep(10 * self.timeout_s + 60)
        try:
            work.wait(timeout=timedelta(seconds=self.timeout_s))
        except Exception as exc:  # gloo/NCCL errors and timeouts; nothing is recoverable
            self.abort(self.describe_failure(op, params, exc))

    def describe_failure(self, op: str, params: Mapping[str, int], exc: BaseException) -> str:
        """One line naming the ranks that did not report this failure within
        :data:`REPORT_GRACE_S` (the dead or hung ones) and the collective."""
        what = collective_label(op, params)
        error = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        missing = self._unreported_ranks()
        if not missing:
            return f"{what} failed on every rank: {error}"
        ranks = ", ".join(str(r) for r in missing)
        noun = "rank" if len(missing) == 1 else "ranks"
        return (f"{noun} {ranks} did not complete {what} within {self.timeout_s:g} s "
                f"({type(exc).__name__}: {error})")

    def _unreported_ranks(self) -> list[int]:
        if self.store is None or self.size == 1:
            return []
        try:
            self.store.set(f"perfmodel/failed/{self.rank}", "1")
            deadline = time.monotonic() + REPORT_GRACE_S
            while True:
                missing = [r for r in range(self.size)
                           if not self.store.check([f"perfmodel/failed/{r}"])]
                if not missing or time.monotonic() > deadline:
                    return missing
                time.sleep(0.05)
        except Exception:  # the store lives on rank 0: it is the one gone
            return [0]


def collective_label(op: str, params: Mapping[str, int]) -> str:
    """How failure messages name a collective: ``all_reduce (world_size=2, bytes=64)``."""
    return f"{op} (world_size={params.get('world_size')}, bytes={params.get('bytes')})"


def _wait_until_read(fds, limit_s: float, poll_s: float = 1e-3,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], object] = time.sleep) -> None:
    """Wait until every byte written to the pipes among ``fds`` (file descriptors;
    others are skipped) has been read from them, or ``limit_s`` (s) has passed;
    ``poll_s`` (s) is the sleep between checks. ``clock`` (s) and ``sleep`` are
    the time source and the wait (a test passes fakes)."""
    import fcntl
    import termios

    pipes = []
    for fd in fds:
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                pipes.append(fd)
        except OSError:  # closed
            pass
    unread = array.array("i", [0])
    deadline = clock() + limit_s
    for fd in pipes:
        while clock() < deadline:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, unread)
            except OSError:  # the reader is gone: nothing more will be read
                break
            if unread[0] == 0:
                break
            sleep(poll_s)


_WORLD: World | None = None


def mpi_world() -> World:
    """This process's :class:`World` (MPI under mpiexec, else a world of one);
    does not start torch.distributed."""
    global _WORLD
    if _WORLD is None:
        if launcher_world() is None:
            comm: Any = _OneRank()
        else:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        local_rank, local_size = local_ranks()
        peers = comm.allgather((socket.gethostname(), os.getpid())) if launcher_world() else []
        fault = parse_fault(os.environ.get(FAULT_VAR, ""))
        _WORLD = World(comm.Get_rank(), comm.Get_size(), local_rank, local_size, comm,
                       peers=peers, _fault=fault)
    return _WORLD


def parse_fault(spec: str) -> tuple[str, int, str] | None:
    """(mode, rank, phase) of a :data:`FAULT_VAR` value (``hang:1``,
    ``exit:0:loaded``); None when it is empty; ValueError naming the variable
    and the value otherwise (a mistyped fault must not let a test pass)."""
    if not spec:
        return None
    mode, _, rest = spec.partition(":")
    rank, _, phase = rest.partition(":")
    phase = phase or "idle"
    if mode not in ("exit", "hang") or not rank.isdigit() or phase not in FAULT_PHASES:
        raise ValueError(f"{FAULT_VAR}={spec!r}: expected exit:<rank> or hang:<rank>, "
                         f"optionally followed by :<phase> with a phase in {FAULT_PHASES}")
    return mode, int(rank), phase


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def init_distributed(device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> World:
    """Join every rank into the default torch.distributed process group (once)
    and return this process's :class:`World`.

    ``device`` is ``"cpu"`` (gloo) or ``"cuda[:N]"`` (NCCL; a rank without an index
    uses ``cuda:<local rank mod device count>``). ``timeout_s`` bounds every
    collective (s). The rendezvous address is ``MASTER_ADDR`` when set, else
    loopback when all ranks share a host, else rank 0's host name.
    """
    import torch
    import torch.distributed as dist

    world = mpi_world()
    if world.device is not None:
        return world
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or world.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(index)
        device, backend = f"cuda:{index}", "nccl"
    else:
        backend = "gloo"
    timeout = timedelta(seconds=timeout_s)
    if world.size == 1:
        store = dist.HashStore()
    else:
        same_host = world.local_size == world.size
        address = os.environ.get("MASTER_ADDR") or (
            "127.0.0.1" if same_host else socket.gethostname())
        port = world.comm.bcast(_free_port() if world.rank == 0 else None, root=0)
        store = dist.TCPStore(address, port, world.size, world.rank == 0, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=world.rank, world_size=world.size,
                            timeout=timeout)
    world.device, world.store, world.timeout_s = device, store, timeout_s
    return world


def current_world() -> World:
    """The world :func:`init_distributed` set up; RuntimeError before that."""
    if _WORLD is None or _WORLD.device is None:
        raise RuntimeError("torch.distributed is not initialised: call "
                           "perfmodel.distributed.init_distributed() first")
    return _WORLD


def shutdown_distributed() -> None:
    """Leave the process group, if this process joined one."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    if _WORLD is not None:
        _WORLD.device = _WORLD.store = None


# -- measuring ----------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveResult:
    """One replicate of a collective, at rank 0: the measurement (its samples are
    per-sample maxima over ranks, seconds), each rank's own median (s) and each
    rank's process CPU seconds per call over the sampled blocks."""

    measurement: Any  # perfmodel.timing.Measurement
    rank_median_s: tuple[float, ...]
    rank_cpu_s: tuple[float, ...] = ()
    #: Mean over calls of the slowest rank's time under compute load (s): a
    #: mean, since an iteration pays the long tail of slow calls too; None
    #: where it is not measured (see :func:`measures_loaded`).
    loaded_s: float | None = None


def measure_collective(case, world: World, settings, replicates: int = 2
                       ) -> list[CollectiveResult]:
    """Measure the collective ``case`` ``replicates`` times on every rank of
    ``world`` (all ranks must call this together). Returns the results on rank 0,
    an empty list elsewhere. ``settings`` is a :class:`perfmodel.bench.TimerSettings`.
    """
    import torch
    import torch.distributed as dist

    from perfmodel.device import usable_cpus
    from perfmodel.ops import get_op

    op = get_op(case.op)
    runner = op.make_runner(case.params, case.dtype, case.direction, world.device)
    sync = torch.cuda.synchronize if world.device.startswith("cuda") else (lambda: None)
    loaded = None
    if measures_loaded(world, torch.get_num_threads(), usable_cpus()):
        issue = op.make_issue(case.params, case.dtype, world.device)

        def loaded() -> list[float] | None:
            return _time_loaded(world, issue, case.op, case.params)

    def time_block(number: int) -> tuple[float, float]:
        """Wall and process CPU seconds of ``number`` calls."""
        sync()
        dist.barrier()  # the collectives' own transport: blocks without spinning
        sync()
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(number):
            runner()
        sync()
        return (time.perf_counter_ns() - start) / 1e9, (time.process_time_ns() - cpu) / 1e9

    try:
        results = [_replicate(world, time_block, settings, loaded) for _ in range(replicates)]
    except Exception as exc:  # a barrier timed out, a peer vanished, ...: end every rank
        world.abort(world.describe_failure(case.op, case.params, exc))
    return [r for r in results if r is not None]


def _replicate(world: World, time_block, settings, loaded=None) -> CollectiveResult | None:
    """One replicate: warm up, agree on a block size, sample, then (with
    ``loaded``) time the calls under compute load; the result at rank 0."""
    import torch

    from perfmodel.timing import block_size

    warm = [time_block(1)[0] for _ in range(WARMUP_CALLS)]
    slowest = _max_over_ranks(world, [min(warm[1:])])
    number = world.comm.bcast(slowest and block_size(slowest[0], MIN_BLOCK_S), root=0)
    result = _sample(world, time_block, number, settings)
    loaded_times = loaded() if loaded is not None else None
    if result is None:
        return None
    samples, per_rank, cpu_per_rank, reason = result
    return CollectiveResult(_measurement(samples, number, reason, torch.get_num_threads()),
                            tuple(float(statistics.median(s)) for s in per_rank),
                            tuple(float(c) for c in cpu_per_rank),
                            statistics.fmean(loaded_times) if loaded_times else None)


def measures_loaded(world: World, threads: int, cores: int) -> bool:
    """Whether this world's collectives are also timed under compute load: on a
    CPU, where gloo's threads share the cores with the ranks' compute (NCCL's
    kernels run on the GPU beside it), when the ranks on this host, ``threads``
    torch threads each, fit on its ``cores`` cores. With more compute threads
    than cores the multi-rank prediction already stretches each rank's host work
    by the time-sharing and charges it the collectives' CPU time, and it does
    not use loaded times there (:func:`perfmodel.multirank.comm_pricer`)."""
    return (world.device or "").startswith("cpu") and world.local_size * threads <= cores


def _time_loaded(world: World, issue, op: str, params: Mapping[str, int]
                 ) -> list[float] | None:
    """Wall seconds from issue to completion of :func:`loaded_calls` calls (after
    one warm-up, which sets their number) while every rank's own thread keeps
    computing (repeated :data:`LOAD_UNIT_MKN` products, as a rank's backward
    does while DDP's all-reduce runs); per call the slowest rank's, at rank 0
    (None elsewhere).
    A call not complete within the world's timeout aborts the run like any.

    A helper thread waits for the work handle (gloo's reduce_scatter handle never
    reports ``is_completed()`` and has no future) and the computing thread
    stops when it has."""
    import threading

    import torch
    import torch.distributed as dist

    m, k, n = LOAD_UNIT_MKN
    a, b = torch.ones(m, k), torch.ones(k, n)
    times: list[float] = []
    calls = None
    while calls is None or len(times) < calls:
        dist.barrier()
        done = threading.Event()

        def wait_for(work) -> None:
            world.wait(work, op, params, phase="loaded")
            done.set()

        start = time.perf_counter()
        waiter = threading.Thread(target=wait_for, args=(issue(),), daemon=True)
        waiter.start()
        deadline = start + world.timeout_s + REPORT_GRACE_S + OUTPUT_DRAIN_S + 1.0
        while not done.is_set():
            torch.mm(a, b)
            if time.perf_counter() > deadline:  # the waiter is stuck past its own timeout
                world.abort(f"{collective_label(op, params)} under compute load: not "
                            f"complete within {world.timeout_s:g} s")
        elapsed = time.perf_counter() - start
        waiter.join()
        if calls is None:
            slowest = _max_over_ranks(world, [elapsed])
            calls = world.comm.bcast(slowest and loaded_calls(slowest[0]), root=0)
        else:
            times.append(elapsed)
    return _max_over_ranks(world, times)


def loaded_calls(warm_s: float) -> int:
    """How many calls to time under load after a warm-up call of ``warm_s`` (s):
    as many as fit in :data:`LOADED_BUDGET_S`, within :data:`LOADED_CALLS`, or
    :data:`LOADED_CALLS_LONG` for calls of :data:`LONG_LOADED_S` or more."""
    if warm_s >= LONG_LOADED_S:
        return LOADED_CALLS_LONG
    low, high = LOADED_CALLS
    return min(high, max(low, math.ceil(LOADED_BUDGET_S / max(warm_s, 1e-9))))


def _max_over_ranks(world: World, values: list[float]) -> list[float] | None:
    """Element-wise maxima of every rank's ``values``, at rank 0 (None elsewhere)."""
    gathered = world.comm.gather(values, root=0)
    return None if gathered is None else [max(v) for v in zip(*gathered)]


def _sample(world: World, time_block, number: int, settings):
    """Sample in chunks until rank 0 calls a stop; (maxima, per-rank samples,
    per-rank CPU seconds per call, stop reason) at rank 0, None elsewhere."""
    from perfmodel.timing import ci_is_tight

    maxima: list[float] = []
    per_rank: list[list[float]] | None = None
    start = time.perf_counter()
    chunk, taken, cpu_s = settings.min_samples, 0, 0.0
    while True:
        blocks = [time_block(number) for _ in range(chunk)]
        local = [wall / number for wall, _ in blocks]
        cpu_s += sum(cpu for _, cpu in blocks)
        taken += chunk
        gathered = world.comm.gather(local, root=0)
        reason = None
        if world.rank == 0:
            per_rank = [p + g for p, g in zip(per_rank, gathered)] if per_rank else gathered
            maxima.extend(max(v) for v in zip(*gathered))
            if ci_is_tight(sorted(maxima), settings.target_rel_ci):
                reason = "ci"
            elif taken >= MAX_SAMPLES:
                reason = "max_samples"
            elif time.perf_counter() - start > settings.budget_s:
                reason = "budget"
        reason = world.comm.bcast(reason, root=0)
        if reason is not None:
            cpu_per_rank = world.comm.gather(cpu_s / (taken * number), root=0)
            return (maxima, per_rank, cpu_per_rank, reason) if world.rank == 0 else None
        chunk = max(1, min(MAX_SAMPLES - taken, math.ceil(taken / 8)))  # same on every rank


def _measurement(samples: list[float], number: int, reason: str, threads: int):
    from perfmodel.timing import Measurement

    return Measurement.from_samples(samples, number=number, warmup_n=WARMUP_CALLS,
                                    stop_reason=reason, timer="perf_counter", cache="hot",
                                    threads=threads)


def collective_record(case, result: CollectiveResult, replicate: int, env: dict) -> dict:
    """The store record of one replicate: a ``measurement`` record plus
    ``latency_p95_s`` (s), ``algbw_Bps`` and ``busbw_Bps`` (B/s, from the median),
    ``rank_median_s`` (each rank's own median, s), ``rank_cpu_s`` (each rank's
    process CPU seconds per call: what :data:`perfmodel.ops.collective.HOST_CPU`
    predictors are fitted on) and, where measured, ``loaded_s`` (the time under
    compute load, s: what :data:`perfmodel.ops.collective.LOADED` predictors are
    fitted on)."""
    import numpy as np

    from perfmodel.bench import measurement_record
    from perfmodel.ops import get_op

    op, m = get_op(case.op), result.measurement
    record = measurement_record(case, m, replicate, env)
    algbw = op.algo_bytes(case.params) / m.median_s
    record.update(latency_p95_s=float(np.percentile(m.samples_s, 95)), algbw_Bps=algbw,
                  busbw_Bps=algbw * op.bus_factor(case.params["world_size"]),
                  rank_median_s=list(result.rank_median_s),
                  rank_cpu_s=list(result.rank_cpu_s))
    if result.loaded_s is not None:
        record["loaded_s"] = result.loaded_s
    return record
