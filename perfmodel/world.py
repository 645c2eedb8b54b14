"""Ranks of a multi-process run: MPI starts and coordinates them, torch.distributed
runs the collectives.

Under ``mpiexec`` each process is one rank of an MPI world (mpi4py); rank 0 picks
a TCP port, broadcasts it, and every rank joins a ``torch.distributed`` process
group on it (gloo on CPU, NCCL on CUDA) with a per-collective timeout. A plain
process is a world of one (no MPI, a local store). mpi4py is imported only when
the launcher's environment variables say this process is an MPI rank.

A collective that fails or times out on one rank aborts every rank (``MPI_Abort``)
after one line on stderr naming the ranks that did not complete it.
"""

from __future__ import annotations

import array
import os
import shutil
import socket
import stat
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
        raise FileNotFoundError("mpiexec not found (pip install 'perfmodel[mpi]', or put "
                                "an MPI's mpiexec on PATH)")
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
            from perfmodel.extras import require

            comm = require("mpi4py.MPI", "mpi").COMM_WORLD
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
                           "perfmodel.world.init_distributed() first")
    return _WORLD


def shutdown_distributed() -> None:
    """Leave the process group, if this process joined one."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    if _WORLD is not None:
        _WORLD.device = _WORLD.store = None
