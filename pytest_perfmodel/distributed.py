"""pytest side of multi-rank runs (the logic lives in :mod:`perfmodel.world`;
collectives are measured by :func:`perfmodel.session.benchmark_collective`).

- ``--perfmodel-ranks N`` re-runs the same pytest command under ``mpiexec -n N``
  and exits with its status.
- Under ``mpiexec`` (or any MPI launcher): rank 0 reports; the other ranks write
  their terminal output to a per-rank log file. Collective items run on every
  rank, other microbenchmark items are sharded (item i runs on rank i mod N),
  and accuracy/e2e items run on rank 0 once every rank has finished measuring.
  Each rank pins torch to its share of the host's cores and writes its own run file.
- Under pytest-xdist, each worker pins torch to its share of the cores and, on
  CUDA, to device ``cuda:<worker index mod device count>``.

Nothing here imports mpi4py or torch unless this process runs under a launcher
that needs them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from perfmodel.session import Unavailable, default_threads
from perfmodel.world import (DEFAULT_TIMEOUT_S, launcher_world, local_ranks, mpi_world,
                             mpiexec_path, threads_per_rank)
from pytest_perfmodel.keys import SESSION_KEY

_SYNCED = pytest.StashKey[bool]()
#: whether the session measures microbenchmarks other than collectives (on any rank)
_SWEEPS = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfmodel")
    group.addoption("--perfmodel-ranks", type=int, default=None, metavar="N",
                    help="run this pytest command under `mpiexec -n N` (collectives on N ranks, "
                         "other microbenchmarks sharded over them)")
    group.addoption("--perfmodel-collective-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    metavar="SECONDS", help="abort every rank when one collective takes longer "
                                            f"(default {DEFAULT_TIMEOUT_S:g})")


def launch_command(ranks: int, args, python: str = sys.executable) -> list[str]:
    """``mpiexec -n ranks python -m pytest args`` with ``--perfmodel-ranks`` removed."""
    try:
        found = mpiexec_path(python)
    except FileNotFoundError as exc:
        raise pytest.UsageError(f"--perfmodel-ranks: {exc}") from None
    kept, skip = [], False
    for arg in map(str, args):
        if skip:
            skip = False
        elif arg == "--perfmodel-ranks":
            skip = True
        elif not arg.startswith("--perfmodel-ranks="):
            kept.append(arg)
    # Hydra (MPICH) kills every rank the moment one exits; without that the
    # survivors get to report which rank died in which collective, then abort.
    hydra = ["-disable-auto-cleanup"] if _is_hydra(found) else []
    return [found, *hydra, "-n", str(ranks), python, "-m", "pytest", *kept]


def _is_hydra(mpiexec: str) -> bool:
    try:
        done = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in done.stdout


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config):
    ranks = config.option.perfmodel_ranks
    if ranks is None or launcher_world() is not None:
        return None  # a rank itself: run the tests
    from pytest_perfmodel.options import check_options

    check_options(config)  # here, once, rather than in every rank's pytest_configure
    command = launch_command(ranks, config.invocation_params.args)
    sys.stdout.flush()
    return subprocess.call(command, cwd=config.invocation_params.dir)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    pm = config.stash.get(SESSION_KEY, None)
    if pm is None:
        return
    world = mpi_world()
    world.timeout_s = config.option.perfmodel_collective_timeout
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is not None:  # an abort's message must reach the real stderr
        world.before_abort = capture.suspend_global_capture
    # pytest-xdist gives its workers `config.workerinput`; its environment variables
    # would also reach pytest runs that a test starts (pytester, subprocesses), which
    # are no workers
    workerinput = getattr(config, "workerinput", None) or {}
    worker = str(workerinput.get("workerid", ""))
    workers = int(workerinput.get("workercount", 1) or 1)
    if launcher_world() is not None:
        index, share = local_ranks()
    elif worker:
        index, share = int(re.sub(r"\D", "", worker) or 0), workers
    else:
        return
    if config.option.perfmodel_threads is None:
        pm.options.threads = threads_per_rank(default_threads(), share)
    if worker and workers > 1:
        pm.host_speed_source = "off"
    pm.timed_beside = share - 1
    pm.options.device = _pinned_device(pm.options.device, index)
    if world.size > 1:
        pm.run_id = f"{pm.run_id}-rank{world.rank}"
        if world.rank == 0:
            pm.notes.append(f"{world.size} ranks; the others log to {_log_dir()}/"
                            f"<run id>-rank<N>.log")
        else:
            _quiet(config, _log_dir() / f"{pm.run_id}.log")


def _pinned_device(device: str | None, index: int) -> str | None:
    """``cuda:<index mod device count>`` when this process would use CUDA without
    an explicit index; ``device`` otherwise."""
    if device not in (None, "cuda"):
        return device
    import torch

    if not torch.cuda.is_available():
        return device
    return f"cuda:{index % torch.cuda.device_count()}"


def _log_dir() -> Path:
    return Path(tempfile.gettempdir()) / "perfmodel-rank-logs"


def _quiet(config: pytest.Config, log: Path) -> None:
    """Send this rank's terminal output to ``log`` instead of the console."""
    from _pytest.terminal import TerminalReporter

    log.parent.mkdir(parents=True, exist_ok=True)
    stream = open(log, "w", encoding="utf-8")  # closed when the process ends
    old = config.pluginmanager.get_plugin("terminalreporter")
    if old is not None:
        config.pluginmanager.unregister(old, "terminalreporter")
    config.pluginmanager.register(TerminalReporter(config, stream), "terminalreporter")


def is_collective(item: pytest.Item) -> bool:
    """Whether ``item`` measures a collective (it then runs on every rank, in step)."""
    case = getattr(getattr(item, "callspec", None), "params", {}).get("op_case")
    if item.get_closest_marker("collective") is not None and case is None:
        return True
    if case is None:
        return False
    from perfmodel.ops import get_op

    return get_op(case.op).family == "collective"


def shard_items(items: list, rank: int, size: int, is_microbench, is_collective):
    """(kept, deselected): collective items on every rank; the i-th other
    microbenchmark item on rank i mod size; everything else on rank 0."""
    kept, dropped, index = [], [], 0
    for item in items:
        if is_collective(item):
            keep = True
        elif is_microbench(item):
            keep, index = index % size == rank, index + 1
        else:
            keep = rank == 0
        (kept if keep else dropped).append(item)
    return kept, dropped


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    world = launcher_world()
    if world is None or world[1] == 1:
        return
    config.stash[_SWEEPS] = any(i.get_closest_marker("microbench") is not None
                                and not is_collective(i) for i in items)
    kept, dropped = shard_items(items, world[0], world[1],
                                lambda i: i.get_closest_marker("microbench") is not None,
                                is_collective)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before a sharded sweep, rank 0 times the host's speed while the other
    ranks wait, and every rank stores that sample with its records (timed
    during the sweep, it would be timed beside the other ranks' work)."""
    config = session.config
    pm = config.stash.get(SESSION_KEY, None)
    if pm is None or not config.stash.get(_SWEEPS, False) or config.option.collectonly:
        return
    def timed() -> dict | None:
        try:
            return pm.host_speed()
        except Unavailable:  # the device is unavailable: its items skip
            return None

    world = mpi_world()
    pm.fix_host_speed(world.comm.bcast(world.on_rank0_alone(timed, "the host speed"), root=0))


def _sync_once(config: pytest.Config) -> None:
    """Meet every rank once, after its measurements (so rank 0 fits on all of them)."""
    if launcher_world() is not None and not config.stash.get(_SYNCED, False):
        config.stash[_SYNCED] = True
        mpi_world().barrier("every rank finished measuring")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("microbench") is None:
        _sync_once(item.config)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    _sync_once(session.config)
    world = launcher_world()
    if world is not None and world[0] != 0 and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK  # this rank's share was empty


def pytest_unconfigure(config: pytest.Config) -> None:
    if "torch.distributed" in sys.modules and mpi_world().device is not None:
        from perfmodel.world import shutdown_distributed

        shutdown_distributed()

