"""Concurrent writers: a microbench sweep split over 4 xdist workers loses and
duplicates nothing. Each worker is its own pytest session and writes its own run
file (the store's one-file-per-run rule); readers merge them."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from perfmodel.measure.bench import REPLICATES
from perfmodel.store.results import ResultStore
from perfmodel.store import paths
from tests.helpers import REPO, case_id, plant_cpu_spec, run_paths

pytest.importorskip("xdist")


def test_four_xdist_workers_write_every_record_exactly_once(tmp_path):
    root = tmp_path / "results"
    key = plant_cpu_spec(root)
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "4",
         "suites/test_elementwise.py", "-m", "microbench", "-k", "relu or mul",
         "--perfmodel-profile", "smoke", f"--perfmodel-results={root}",
         "--perfmodel-threads=1", "--perfmodel-budget=0.01", f"--junitxml={junit}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    cases = ET.parse(junit).getroot().iter("testcase")
    passed = [c.get("name") for c in cases
              if not any(child.tag in ("failure", "error", "skipped") for child in c)]
    assert len(passed) == 16  # relu and mul: 8 smoke items each

    loaded = ResultStore(root, key).load()
    assert loaded.problems == []
    runs = sorted({r["run_id"] for r in loaded.records})
    files = sorted(paths.run_id_of(p) for p in run_paths(root / key))
    assert runs == files and len(files) >= 2, files  # one file per worker that ran items
    # Exact count, none lost, none duplicated.
    assert len(loaded.records) == len(passed) * REPLICATES
    keys = Counter((case_id(r), r["replicate"], r["run_id"]) for r in loaded.records)
    assert max(keys.values()) == 1
    per_case = Counter(case_id(r) for r in loaded.records)
    assert sorted(per_case) == sorted(name.removeprefix("test_microbench[")[:-1]
                                      for name in passed)
    assert set(per_case.values()) == {REPLICATES}
    print(f"{len(passed)} items passed on {len(files)} workers' run files: "
          f"{len(loaded.records)} records, {len(keys)} unique (case, replicate, run) keys")
    # Each case was measured by exactly one worker.
    assert all(len({r["run_id"] for r in loaded.records if case_id(r) == case}) == 1
               for case in per_case)
    # Workers would time the host's speed beside each other: none is recorded.
    assert not any("host_speed" in r for r in loaded.records)
    assert {r["timed_beside"] for r in loaded.records} == {3}  # beside 3 other workers
