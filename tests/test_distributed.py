"""Multi-rank runs: launcher detection, sharding, the --perfmodel-ranks launcher, one
result per run, and a killed rank ending the run with a message that names it."""

import array
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from perfmodel.device.probe import usable_cpus
from perfmodel.world import FAULT_VAR, World, _OneRank, launcher_world, local_ranks, parse_fault, threads_per_rank
from pytest_perfmodel.distributed import launch_command, shard_items
from perfmodel.store import paths
from tests.helpers import THREADS, run_lines, run_paths

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).with_name("mpiexec")
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.is_file(), reason="mpiexec not installed")

SUITE = """
import pytest
from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("all_reduce", "add")
"""


def test_launcher_environment_is_read_without_mpi():
    assert launcher_world({}) is None
    assert launcher_world({"PMI_RANK": "1", "PMI_SIZE": "4"}) == (1, 4)
    assert launcher_world({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}) == (0, 2)
    env = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert local_ranks(env) == (1, 2)
    assert local_ranks({"PMI_RANK": "3", "PMI_SIZE": "4"}) == (3, 4)  # one host assumed
    assert [threads_per_rank(16, n) for n in (1, 2, 4, 32)] == [16, 8, 4, 1]


def test_fault_hook_values_parse_and_bad_ones_name_the_variable():
    assert parse_fault("") is None
    assert parse_fault("exit:1") == ("exit", 1, "idle")
    assert parse_fault("hang:0:loaded") == ("hang", 0, "loaded")
    for bad in ("exit", "hang:x", "stop:1", "hang:1:later"):
        with pytest.raises(ValueError, match=f"{FAULT_VAR}='{bad}'"):
            parse_fault(bad)


def test_launch_command_reruns_pytest_under_mpiexec_without_the_option(tmp_path):
    python = tmp_path / "python"
    (tmp_path / "mpiexec").write_text("#!/bin/sh\necho 'HYDRA build details:'\n")
    (tmp_path / "mpiexec").chmod(0o755)
    cmd = launch_command(3, ["-m", "microbench", "--perfmodel-ranks", "3", "suites",
                             "--perfmodel-ranks=3"], python=str(python))
    assert cmd == [str(tmp_path / "mpiexec"), "-disable-auto-cleanup", "-n", "3", str(python),
                   "-m", "pytest", "-m", "microbench", "suites"]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_sharding_runs_each_item_exactly_once_and_collectives_everywhere(size):
    items = [("mb", i) for i in range(10)] + [("coll", i) for i in range(3)] + [("acc", 0)]
    shares = [shard_items(items, rank, size, lambda i: i[0] == "mb", lambda i: i[0] == "coll")
              for rank in range(size)]
    kept = Counter(item for k, _ in shares for item in k)
    assert all(kept[("mb", i)] == 1 for i in range(10))
    assert all(kept[("coll", i)] == size for i in range(3))
    assert kept[("acc", 0)] == 1 and ("acc", 0) in shares[0][0]
    for k, dropped in shares:
        assert sorted(k + dropped) == sorted(items)


class _Store:
    def __init__(self, reported):
        self.keys = {f"perfmodel/failed/{r}" for r in reported}

    def set(self, key, value):
        self.keys.add(key)

    def check(self, keys):
        return all(k in self.keys for k in keys)


def test_a_timeout_names_the_ranks_that_did_not_report(monkeypatch):
    monkeypatch.setattr("perfmodel.world.REPORT_GRACE_S", 0.05)
    world = World(0, 4, 0, 4, _OneRank(), timeout_s=3, store=_Store(reported=[2]))
    line = world.describe_failure("all_gather", {"world_size": 4, "bytes": 64},
                                  RuntimeError("Operation timed out!\nmore"))
    assert line == ("ranks 1, 3 did not complete all_gather (world_size=4, bytes=64) within "
                    "3 s (RuntimeError: Operation timed out!)")
    everyone = World(0, 2, 0, 2, _OneRank(), store=_Store(reported=[1]))
    assert "failed on every rank" in everyone.describe_failure("broadcast", {}, RuntimeError("x"))


class _FakeTime:
    """A clock that only the fake ``sleep`` advances; on the ``read_on``-th sleep
    the launcher "reads" the pipe (``on_read``)."""

    def __init__(self, read_on=None, on_read=None):
        self.now, self.sleeps, self.read_on, self.on_read = 0.0, [], read_on, on_read

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        if len(self.sleeps) == self.read_on:
            self.on_read()


def _unread(fd):
    import fcntl
    import termios

    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def test_an_abort_waits_until_its_output_pipe_has_been_read(tmp_path):
    from perfmodel.world import _wait_until_read

    message = b"perfmodel rank 0: ...\n"
    read, write = os.pipe()
    try:
        os.write(write, message)
        # nobody reads: it polls every 0.25 s until the 1 s limit, then gives up
        fake = _FakeTime()
        _wait_until_read((write,), limit_s=1.0, poll_s=0.25, clock=fake.clock, sleep=fake.sleep)
        assert fake.sleeps == [0.25] * 4 and fake.now == 1.0
        assert _unread(write) == len(message)  # still unread: it gave up, not saw it drained
        # the launcher reads during the third sleep: it returns at the next check
        fake = _FakeTime(read_on=3, on_read=lambda: os.read(read, 100))
        _wait_until_read((write,), limit_s=5.0, poll_s=0.25, clock=fake.clock, sleep=fake.sleep)
        assert fake.sleeps == [0.25] * 3 and _unread(write) == 0
    finally:
        os.close(read)
        os.close(write)
    with open(tmp_path / "log", "w") as log:  # not a pipe: nothing to wait for
        log.write("perfmodel rank 0: ...\n")
        fake = _FakeTime()
        _wait_until_read((log.fileno(),), limit_s=5.0, clock=fake.clock, sleep=fake.sleep)
        assert fake.sleeps == []


def _run(pytester, results, *args, env=None, timeout=240):
    pytester.makepyfile(test_suite=SUITE)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--perfmodel-results={results}",
         f"--perfmodel-threads={THREADS}", "--perfmodel-budget=0.02", *args],
        cwd=pytester.path, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})})
    return done, time.monotonic() - start


@needs_mpiexec
def test_two_ranks_store_every_record_once_and_report_once(pytester, planted_results):
    results, key = planted_results
    # this checks the records' bookkeeping; 4 smoke configs fit no better than noise
    pytester.makepyprojecttoml("[tool.perfmodel]\nsmoke_gmae_threshold = 9.0\n")
    done, _ = _run(pytester, results, "--perfmodel-ranks", "2")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    from perfmodel.ops import get_op

    runs = run_paths(results / key)
    assert len(runs) == 2 and {paths.run_id_of(p)[-6:] for p in runs} == {"-rank0", "-rank1"}
    records = [json.loads(line) for p in runs for line in run_lines(p)[1:]]
    keys = Counter((r["op"], json.dumps(r["config"], sort_keys=True), r["dtype"], r["replicate"])
                   for r in records)
    assert max(keys.values()) == 1  # nothing twice
    add_cases = get_op("add").cases("smoke")
    world2 = [c for c in get_op("all_reduce").cases("smoke") if c.params["world_size"] == 2]
    assert Counter(r["op"] for r in records) == {"add": 2 * len(add_cases),
                                                 "all_reduce": 2 * len(world2)}
    # file names start with each rank's own time stamp and pid, so pick rank 1's by its suffix
    rank1_file, = (p for p in runs if paths.run_id_of(p).endswith("-rank1"))
    rank1 = [json.loads(line) for line in run_lines(rank1_file)[1:]]
    assert rank1 and all(r["op"] == "add" for r in rank1)  # its shard; collectives go to rank 0
    # one host speed, timed by rank 0 alone before the sweep, beside every rank's records
    speeds = {json.dumps(r.get("host_speed"), sort_keys=True) for r in records if r["op"] == "add"}
    assert len(speeds) == 1 and set(json.loads(speeds.pop())) == {"addmm", "copy"}
    assert not any("host_speed" in r for r in records if r["op"] == "all_reduce")
    # each rank timed its shard beside the other rank (the fit prefers alone timings)
    assert {r.get("timed_beside") for r in records} == {1, None}
    assert not any("timed_beside" in r for r in records if r["op"] == "all_reduce")
    assert all({"latency_p95_s", "algbw_Bps", "busbw_Bps"} <= set(r) for r in records
               if r["op"] == "all_reduce")
    assert out.count("= perfmodel =") == 1 and out.count("all_reduce.fwd") == 1
    assert "needs 1 ranks, this run has 2" not in out  # skips are counted, not shown


@needs_mpiexec
def test_a_rank_killed_mid_collective_ends_the_run_naming_it(pytester, planted_results):
    results, _ = planted_results
    done, seconds = _run(pytester, results, "--perfmodel-ranks", "2", "-k", "all_reduce",
                         "--perfmodel-collective-timeout", "5",
                         env={"PERFMODEL_FAULT": "exit:1"}, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert seconds < 90
    assert "rank 1 did not complete all_reduce (world_size=2, bytes=64)" in out, out[-4000:]


@needs_mpiexec
@pytest.mark.skipif(usable_cpus() < 2, reason="2 ranks would time-share one core: no loaded phase")
def test_a_rank_hung_in_a_collective_under_load_ends_the_run_naming_it(pytester,
                                                                       planted_results):
    # the hang is in rank 1's waiter thread of the loaded phase while its own thread
    # keeps computing (the collective itself completes, so rank 0 waits at the next
    # barrier): rank 1's computing thread must give up past the timeout and end the run
    results, _ = planted_results
    done, seconds = _run(pytester, results, "--perfmodel-ranks", "2", "-k", "all_reduce",
                         "--perfmodel-collective-timeout", "5",
                         env={FAULT_VAR: "hang:1:loaded"}, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert seconds < 90
    assert ("perfmodel rank 1: all_reduce (world_size=2, bytes=64) under compute load: not "
            "complete within 5 s") in out, out[-4000:]
