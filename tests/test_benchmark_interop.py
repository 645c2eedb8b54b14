"""Microbench items reported to pytest-benchmark from perfmodel's own samples."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.measure.timer import Measurement
from tests.helpers import BASE, GATE_SUITE, plant_baseline, run_lines, run_paths, run_plugin

SUITE = """
import pytest
from pytest_perfmodel.suite import test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("add")
"""
#: One cheap config: a few microseconds per call, timed in blocks.
ONE_CASE = "add-forward-float32-ROWS278-COLS8"

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")


def run(pytester, results, *args):
    """The plugin run over ``SUITE``, timing ``ONE_CASE`` only."""
    pytester.makepyfile(SUITE)
    return run_plugin(pytester, results, "--perfmodel-budget=0.01", "-k", ONE_CASE, *args)


def stored_samples(results, key):
    """Every sample of every stored replicate, by run file, in order."""
    out = {}
    for path in run_paths(results / key):
        records = [json.loads(line) for line in run_lines(path)[1:]]
        out[path] = [s for r in records for s in Measurement.from_dict(r["measurement"]).samples_s]
    return out


def test_json_holds_our_samples_and_statistics(pytester, planted_results):
    results, key = planted_results
    out = run(pytester, results, "--benchmark-json=out.json")
    out.assert_outcomes(passed=1)
    assert "benchmark: 1 tests" not in out.stdout.str()  # its table only when asked for
    (samples,) = stored_samples(results, key).values()
    (bench,) = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    assert bench["name"] == f"test_microbench[{ONE_CASE}]"
    stats = bench["stats"]
    assert stats["data"] == samples and stats["rounds"] == len(samples)
    assert stats["median"] == pytest.approx(statistics.median(samples), rel=1e-12)
    assert stats["min"] == min(samples) and stats["max"] == max(samples)
    extra = bench["extra_info"]["perfmodel"]
    assert extra["replicates"] == 2 and stats["iterations"] == extra["numbers"][0]
    assert bench["options"]["timer"] == "perfmodel.measure.timer.Timer(perf_counter)"


def test_saved_runs_load_in_pytest_benchmark_compare(pytester, planted_results):
    results, _ = planted_results
    storage = pytester.path / "bench-storage"
    for _ in range(2):
        out = run(pytester, results, "--benchmark-save=perfmodel",
                  f"--benchmark-storage={storage}")
        out.assert_outcomes(passed=1)
    saved = sorted(storage.rglob("*.json"))
    assert len(saved) == 2
    cli = Path(sys.executable).with_name("pytest-benchmark")
    done = subprocess.run([str(cli), "--storage", str(storage), "compare", *map(str, saved)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(f"test_microbench[{ONE_CASE}]") == 2


@pytest.mark.parametrize("flag", [["-p", "no:benchmark"], ["--benchmark-disable"],
                                  ["--benchmark-skip"]])
def test_measures_and_stores_without_pytest_benchmark(pytester, planted_results, flag):
    results, key = planted_results
    out = run(pytester, results, *flag)
    out.assert_outcomes(passed=1)
    assert "benchmark: 1 tests" not in out.stdout.str()
    assert "not used at all" not in out.stdout.str() + out.stderr.str()
    (samples,) = stored_samples(results, key).values()
    assert samples


@pytest.mark.parametrize("args, table", [([], False), (["--perfmodel-benchmark-table"], True),
                                         (["--benchmark-enable"], True)])
def test_its_table_only_when_asked_for_and_the_gate_verdict_ends_the_session(
        pytester, planted_results, args, table):
    """pytest-benchmark's table of the microbench items shows only with
    --perfmodel-benchmark-table (or its own --benchmark-enable); either way the
    perfmodel section comes last, closed by the gate's decision."""
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile(test_micro=SUITE, test_gate=GATE_SUITE.format(predicted=0.104))
    out = run_plugin(pytester, results, "--perfmodel-budget=0.01", "-k",
                     f"{ONE_CASE} or planted", *args)
    out.assert_outcomes(passed=2)
    lines = out.stdout.lines
    shown = [i for i, line in enumerate(lines) if "benchmark: 1 tests" in line]
    assert bool(shown) == table
    if table:
        out.stdout.fnmatch_lines(["*benchmark: 1 tests*", f"test_microbench?{ONE_CASE}?*"])
    (section,) = [i for i, line in enumerate(lines) if "= perfmodel =" in line]
    assert all(i < section for i in shown)
    # the last group: the perfmodel section, its gate decision, then pytest's final line
    assert lines[-2:] == ["perfmodel gate: pass, 1 workload(s) within their baseline",
                          lines[-1]] and "2 passed" in lines[-1]
    assert not [line for line in lines[section + 1:-1] if line.startswith(("---", "Name ("))]
