"""A script saves a baseline and gates with :class:`perfmodel.session.Session`, no
pytest plugin involved: the example of docs/scripting.md, run on planted results."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, THREADS, run_lines, run_paths

#: The example code of docs/scripting.md (its first python block).
EXAMPLE = re.search(r"```python\n(.*?)```", (REPO / "docs" / "scripting.md").read_text(),
                    re.DOTALL).group(1)


@pytest.fixture
def planted_runs(monkeypatch):
    """``Session.run_e2e`` records planted results instead of tracing and timing:
    100 ms measured, each run predicted at the next of ``predicted`` (a list the
    test fills)."""
    from perfmodel.e2e.result import IterationTiming, MeasuredIteration
    from perfmodel.session import Session

    predicted: list[float] = []

    def run_e2e(self, workload):
        runs = self.settings.baseline_runs if self.options.save_baseline else 1
        for _ in range(runs):
            self.record_e2e(MeasuredIteration(workload,
                                              IterationTiming(0.1, 0.001, 15, 3, 2560.0),
                                              predicted.pop(0)))

    monkeypatch.setattr(Session, "run_e2e", run_e2e)
    return predicted


def test_a_script_saves_a_baseline_then_gates(planted_results, planted_runs, capsys):
    results, key = planted_results
    namespace = {"__name__": "gate"}
    exec(compile(EXAMPLE, "docs/scripting.md", "exec"), namespace)
    save_or_gate = namespace["save_or_gate"]
    options = {"results_root": results, "threads": THREADS}  # the planted CPU's threads

    # five baseline runs: errors +3%, +4%, +5%, +4%, +4%
    planted_runs.extend([0.103, 0.104, 0.105, 0.104, 0.104])
    assert save_or_gate(["mlp_small"], save_baseline=True, **options)
    path = results / key / "baseline-smoke.json"
    assert f"baseline saved to {path}: 1 workloads, 5 runs each" in capsys.readouterr().out
    saved = json.loads(path.read_text())["workloads"]["mlp_small"]
    assert saved["mean"] == pytest.approx(0.04)

    planted_runs.append(0.104)  # +4%: the baseline's mean
    assert save_or_gate(["mlp_small"], **options)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("ok   mlp_small: E2E error +4.00% within")]
    assert out[-1] == "perfmodel gate: pass, 1 workload(s) within their baseline"

    planted_runs.append(0.2)  # +100%: far outside
    assert not save_or_gate(["mlp_small"], **options)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("FAIL mlp_small: E2E error +100.00% outside")]
    assert out[-1] == "FAIL perfmodel gate: 1 of 1 workload(s) failed (mlp_small)"

    # each session wrote its own run file, with every E2E result it recorded
    runs = run_paths(results / key)
    e2e = [[r for r in map(json.loads, run_lines(p)) if r.get("kind") == "e2e"]
           for p in runs]
    assert sorted(map(len, e2e)) == [1, 1, 5]


def test_a_workload_without_a_result_fails_the_scripts_gate(planted_results, capsys,
                                                            monkeypatch):
    """``e2e_expected`` is what the gate counts on: a workload of the baseline that
    produced no result fails it, as a missing item does under pytest."""
    from perfmodel.session import Session
    from tests.helpers import BASE, plant_baseline

    results, key = planted_results
    plant_baseline(results, key, BASE)
    namespace = {"__name__": "gate"}
    exec(compile(EXAMPLE, "docs/scripting.md", "exec"), namespace)
    monkeypatch.setattr(Session, "run_e2e", lambda self, workload: None)
    assert not namespace["save_or_gate"](["mlp_small"], results_root=results, threads=THREADS)
    assert "FAIL mlp_small: in the baseline but produced no E2E result" in capsys.readouterr().out


def test_the_session_imports_without_pytest():
    code = ("import sys, perfmodel.session; "
            "heavy = [m for m in ('pytest', '_pytest', 'torch') if m in sys.modules]; "
            "print(heavy); sys.exit(bool(heavy))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
