"""A smoke run of the real suites: every stage runs end to end on this machine."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import run_lines

REPO = Path(__file__).resolve().parents[1]


def test_suites_run_end_to_end_in_the_smoke_profile(tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--strict-markers",
         str(REPO / "suites"), "--perfmodel-profile=smoke", f"--perfmodel-results={results}",
         "--perfmodel-budget=0.1"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        # run as a plain session even when this test runs in a pytest-xdist worker,
        # whose variables would make the plugin share the cores out (1 thread each)
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    from perfmodel.ops import OPS

    rows = {line.split()[0] for line in out.splitlines() if line.strip()}
    for op in OPS.values():
        for direction in op.directions:
            name = f"{op.name}.{ {'forward': 'fwd', 'backward': 'bwd'}[direction]}"
            assert name in rows, f"accuracy row {name} missing:\n{out[-5000:]}"
    assert "mlp_small" in out and "no baseline at" in out
    (device_dir,) = results.iterdir()
    (run_file,) = (device_dir / "runs").iterdir()
    kinds = [json.loads(line)["kind"] for line in run_lines(run_file)]
    from perfmodel.workloads import WORKLOADS

    assert kinds[0] == "header" and kinds.count("measurement") > 100
    # every registered workload, tiny; the multi-rank ones skip: a fresh store has no
    # fit at their one thread per rank (tests/test_multirank.py runs them on a planted one)
    assert kinds.count("e2e") == len(WORKLOADS)
    assert (device_dir / "device.json").is_file()
    assert len(list((device_dir / "predictors").glob("*/index.json"))) == 1
