"""Interrupted microbenchmark sessions: a real ``pytest suites/... -m microbench`` run
killed with SIGINT or SIGKILL at a random point must leave a loadable store holding
every record of every item pytest reported as passed.

The fast version (CI) kills 3 sessions, each a few items into its sweep; the long
one (``-m faults_long``) kills ``PERFMODEL_KILLS`` sessions (default 24, half of
each signal)::

    .venv/bin/pytest tests/test_faults_interrupt.py -m faults_long -s
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfmodel.store.results import ResultStore
from perfmodel.store import paths
from tests.helpers import REPO, case_id, plant_cpu_spec, run_paths

#: 32 cheap smoke items (8 configs each), about 0.3 s apiece here.
SELECT = "relu or mul or sigmoid or tanh"
#: Sampling budget per item and replicate (s): ~0.25 s per item, ~8 s per sweep.
BUDGET_S = 0.1
PASSED = re.compile(r"::test_microbench\[(?P<id>[^\]]+)\] PASSED")
#: The CI test's signals come this many PASSED items into the 32-item sweep, plus a
#: seeded delay of at most ``CI_MAX_DELAY_S``: 28 items are still to run then, each
#: of them at least two 20 ms warm-ups long (one per replicate), so the signal finds
#: the session mid-sweep however fast the CPU.
CI_KILL_AFTER = 4
CI_MAX_DELAY_S = 0.2
#: How long a session may take to print the PASSED line the kill waits for (s).
PASSED_TIMEOUT_S = 120


@dataclass
class Kill:
    """What one killed session left behind."""

    signal: str
    delay_s: float
    killed: bool  # False when the session had already finished when the signal was due
    returncode: int
    passed: list[str]  # case ids pytest printed PASSED for before it died
    records: int  # records in the session's run file
    cases: dict[str, int]  # case id -> records of it in the run file
    problems: list[str]


def kill_session(root: Path, key: str, sig: signal.Signals, delay_s: float,
                 after_passed: int = 1) -> Kill:
    """Start a microbench session writing into ``root``, kill it ``delay_s`` after
    its ``after_passed``-th PASSED item (unless it has ended by then), and account
    for what it wrote. Fails, showing the session's last output, when that PASSED
    line does not come within ``PASSED_TIMEOUT_S`` or before the session ends."""
    store = ResultStore(root, key)
    before = {paths.run_id_of(p) for p in run_paths(store.dir)}
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
         "suites/test_elementwise.py", "-m", "microbench", "-k", SELECT, "-v",
         "--perfmodel-profile", "smoke", f"--perfmodel-results={root}",
         "--perfmodel-threads=1", f"--perfmodel-budget={BUDGET_S}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # A shell's background job inherits SIGINT ignored, and Python then never
        # raises KeyboardInterrupt: restore the default so SIGINT really interrupts.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    passes = [0]  # PASSED lines read so far
    ended = threading.Event()  # the session's output ended
    due = threading.Event()  # set at the after_passed-th PASSED line, or when output ends

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if PASSED.search(line):
                passes[0] += 1
                if passes[0] == after_passed:
                    due.set()
        ended.set()
        due.set()  # wake the waiter, which then finds too few PASSED lines

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reached = due.wait(timeout=PASSED_TIMEOUT_S) and passes[0] >= after_passed
    if not reached:
        why = "before the session ended" if ended.is_set() else f"within {PASSED_TIMEOUT_S} s"
        proc.kill()
        proc.wait(timeout=120)
        reader.join(timeout=30)
        pytest.fail(f"{sig.name} session printed {passes[0]} PASSED lines {why}, not the "
                    f"{after_passed} the signal waits for; its output ends:\n"
                    + "".join(lines[-40:]), pytrace=False)
    time.sleep(delay_s)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(sig)
    proc.wait(timeout=120)
    reader.join(timeout=30)
    passed = [m["id"] for line in lines if (m := PASSED.search(line))]
    if killed and sig == signal.SIGINT and proc.returncode == 0:
        killed = False  # the signal came as the session was exiting after its last item
    new = sorted({paths.run_id_of(p) for p in run_paths(store.dir)} - before)
    assert len(new) <= 1, new  # one session, one run file
    loaded = store.load()
    mine = [r for r in loaded.records if new and r["run_id"] == new[0]]
    cases: dict[str, int] = {}
    for r in mine:
        cases[case_id(r)] = cases.get(case_id(r), 0) + 1
    return Kill(sig.name, delay_s, killed, proc.returncode, passed, len(mine), cases,
                loaded.problems)


def check(kill: Kill) -> None:
    """The store's promises after one kill."""
    if kill.killed:  # it died of the signal: SIGKILL; for SIGINT pytest's "interrupted"
        # exit 2, or -2 when the KeyboardInterrupt came after pytest's main loop returned
        assert kill.returncode in ((-9,) if kill.signal == "SIGKILL" else (2, -2)), kill
    for problem in kill.problems:  # at most a truncated final line, named by path
        assert "truncated last line skipped" in problem and ".jsonl" in problem, problem
    for case in kill.passed:  # every passed item: both replicates on disk
        assert kill.cases.get(case) == 2, (case, kill)
    assert all(n <= 2 for n in kill.cases.values()), kill  # nothing duplicated
    # At most the item in flight when the signal came has records but no PASSED line.
    assert 2 * len(kill.passed) <= kill.records <= 2 * len(kill.passed) + 2, kill


def run_kills(root: Path, signals: list[signal.Signals], seed: int, max_delay_s: float,
              after_passed: int = 1) -> list[Kill]:
    """Kill one session per signal, one after the other, all into ``root``."""
    key = plant_cpu_spec(root)
    rng = random.Random(seed)
    kills = []
    for sig in signals:  # until each signal has hit a running session (at most 3 tries)
        for _ in range(3):
            kill = kill_session(root, key, sig, rng.uniform(0, max_delay_s), after_passed)
            check(kill)
            kills.append(kill)
            if kill.killed:
                break
    # All the killed sessions' run files still merge, nothing lost across them.
    loaded = ResultStore(root, key).load()
    assert len(loaded.records) == sum(k.records for k in kills)
    return kills


def run_kills_at_once(root: Path, signals: list[signal.Signals], seed: int,
                      max_delay_s: float, after_passed: int = 1) -> list[Kill]:
    """The same, with the sessions running side by side, each into its own root
    (start-up, mostly importing torch, dominates a session: this keeps CI short)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(seed)
    jobs = [(root / f"kill{i}", sig, rng.uniform(0, max_delay_s))
            for i, sig in enumerate(signals)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        kills = list(pool.map(lambda job: kill_session(job[0], plant_cpu_spec(job[0]), *job[1:],
                                                       after_passed), jobs))
    for kill in kills:
        check(kill)
    return kills


def report(kills: list[Kill]) -> str:
    rows = [f"{'#':>3} {'signal':<8}{'delay':>7}{'rc':>4}{'passed':>8}{'records':>9}"
            f"{'problems':>10}"]
    rows += [f"{i:>3} {k.signal:<8}{k.delay_s:>6.2f}s{k.returncode:>4}{len(k.passed):>8}"
             f"{k.records:>9}{len(k.problems):>10}" + ("" if k.killed else "  finished first")
             for i, k in enumerate(kills)]
    hit = [k for k in kills if k.killed]
    rows.append(f"{len(hit)} kills ({sum(k.signal == 'SIGINT' for k in hit)} SIGINT, "
                f"{sum(k.signal == 'SIGKILL' for k in hit)} SIGKILL) of {len(kills)} sessions; "
                f"{sum(len(k.passed) for k in hit)} items passed before them, "
                f"{sum(k.records for k in hit)} records kept, "
                f"{sum(len(k.problems) for k in hit)} truncated lines")
    return "\n".join(rows)


def test_killed_sessions_keep_every_passed_record(tmp_path):
    """CI: one SIGINT and two SIGKILLs, each at most ``CI_MAX_DELAY_S`` after the
    ``CI_KILL_AFTER``-th of the 32 items passed: always mid-sweep."""
    kills = run_kills_at_once(tmp_path, [signal.SIGINT, signal.SIGKILL, signal.SIGKILL],
                              seed=1, max_delay_s=CI_MAX_DELAY_S, after_passed=CI_KILL_AFTER)
    print(report(kills))
    assert all(k.killed for k in kills)  # the kills landed mid-sweep
    assert sum(len(k.passed) for k in kills) >= 3


@pytest.mark.faults_long
def test_many_killed_sessions_keep_every_passed_record(tmp_path):
    """Long: ``PERFMODEL_KILLS`` sessions (default 24), alternating SIGINT and SIGKILL,
    each killed up to 3 s after its first passed item (the other 31 items take 4-8 s, by
    CPU: with a 7 s window a faster CPU finished 23 of 45 sessions before the signal)."""
    n = int(os.environ.get("PERFMODEL_KILLS", "24"))
    signals = [signal.SIGINT if i % 2 else signal.SIGKILL for i in range(n)]
    kills = run_kills(tmp_path / "results", signals, seed=7, max_delay_s=3.0)
    print(report(kills))
    hit = [k for k in kills if k.killed]
    assert len(hit) == n and {k.signal for k in hit} == {"SIGINT", "SIGKILL"}
