"""Interrupted microbenchmark sessions: a real ``pytest suites/... -m microbench`` run
killed with SIGINT or SIGKILL at a random point must leave a loadable store holding
every record of every item pytest reported as passed.

The fast version (CI) kills 3 sessions; the long one (``-m faults_long``) kills
``PERFMODEL_KILLS`` sessions (default 24, half of each signal)::

    .venv/bin/pytest tests/test_faults_interrupt.py -m faults_long -s
"""

from __future__ import annotations

import json
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

from perfmodel.ops import OpCase, get_op
from perfmodel.store import ResultStore

REPO = Path(__file__).resolve().parents[1]
#: 32 cheap smoke items (8 configs each), about 0.3 s apiece here.
SELECT = "relu or mul or sigmoid or tanh"
#: Sampling budget per item and replicate (s): ~0.25 s per item, ~8 s per sweep.
BUDGET_S = 0.1
PASSED = re.compile(r"::test_microbench\[(?P<id>[^\]]+)\] PASSED")


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


def planted_root(root: Path) -> str:
    """A results root whose cached CPU spec spares the session the CPU measurement."""
    from perfmodel.device import cpu_device_key

    key = cpu_device_key()
    (root / key).mkdir(parents=True, exist_ok=True)
    spec = {"kind": "cpu", "name": "planted test CPU", "key": key, "index": None,
            "peak_flops": {"float32": 1e11, "bfloat16": 3e9}, "mem_bandwidth_Bps": 3e10,
            "l2_bytes": 1 << 20, "llc_bytes": 32 << 20, "compute_units": 2, "clock_hz": None,
            "threads": 1, "source": "measured"}
    (root / key / "device.json").write_text(json.dumps(spec))
    return key


def case_id(record: dict) -> str:
    op = get_op(record["op"])
    config = tuple((p, record["config"][p]) for p in op.params)
    return OpCase(record["op"], record["direction"], record["dtype"], config).id


def kill_session(root: Path, key: str, sig: signal.Signals, delay_s: float) -> Kill:
    """Start a microbench session writing into ``root``, kill it ``delay_s`` after
    its first PASSED item (or when it ends first), and account for what it wrote."""
    store = ResultStore(root, key)
    before = set(store.runs_dir.glob("*.jsonl")) if store.runs_dir.is_dir() else set()
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
    first_pass = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if PASSED.search(line):
                first_pass.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    first_pass.wait(timeout=120)
    time.sleep(delay_s)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(sig)
    proc.wait(timeout=120)
    reader.join(timeout=30)
    passed = [m["id"] for line in lines if (m := PASSED.search(line))]
    if killed and sig == signal.SIGINT and proc.returncode == 0:
        killed = False  # the signal came as the session was exiting after its last item
    new = sorted(set(store.runs_dir.glob("*.jsonl")) - before) if store.runs_dir.is_dir() else []
    assert len(new) <= 1, new  # one session, one run file
    loaded = store.load()
    mine = [r for r in loaded.records if new and r["run_id"] == new[0].stem]
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
        assert "truncated last line skipped" in problem and ".jsonl:" in problem, problem
    for case in kill.passed:  # every passed item: both replicates on disk
        assert kill.cases.get(case) == 2, (case, kill)
    assert all(n <= 2 for n in kill.cases.values()), kill  # nothing duplicated
    # At most the item in flight when the signal came has records but no PASSED line.
    assert 2 * len(kill.passed) <= kill.records <= 2 * len(kill.passed) + 2, kill


def run_kills(root: Path, signals: list[signal.Signals], seed: int,
              max_delay_s: float) -> list[Kill]:
    """Kill one session per signal, one after the other, all into ``root``."""
    key = planted_root(root)
    rng = random.Random(seed)
    kills = []
    for sig in signals:  # until each signal has hit a running session (at most 3 tries)
        for _ in range(3):
            kill = kill_session(root, key, sig, rng.uniform(0, max_delay_s))
            check(kill)
            kills.append(kill)
            if kill.killed:
                break
    # All the killed sessions' run files still merge, nothing lost across them.
    loaded = ResultStore(root, key).load()
    assert len(loaded.records) == sum(k.records for k in kills)
    return kills


def run_kills_at_once(root: Path, signals: list[signal.Signals], seed: int,
                      max_delay_s: float) -> list[Kill]:
    """The same, with the sessions running side by side, each into its own root
    (start-up, mostly importing torch, dominates a session: this keeps CI short)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(seed)
    jobs = [(root / f"kill{i}", sig, rng.uniform(0, max_delay_s))
            for i, sig in enumerate(signals)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        kills = list(pool.map(lambda job: kill_session(job[0], planted_root(job[0]), *job[1:]),
                              jobs))
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
    """CI: one SIGINT and two SIGKILLs, each within 2 s of the first passed item."""
    kills = run_kills_at_once(tmp_path, [signal.SIGINT, signal.SIGKILL, signal.SIGKILL],
                              seed=1, max_delay_s=2.0)
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
