"""Bad options and bad ``[tool.perfmodel]`` settings: each is pytest's usage error
(exit code 4) with one line that names the offending option or key and its value,
and never a traceback."""

from __future__ import annotations

import pytest

SUITE = """
import pytest
pytestmark = pytest.mark.perfmodel_ops("relu")

@pytest.mark.microbench
def test_microbench(op_case, perfmodel_session):
    perfmodel_session.benchmark(op_case)
"""


def usage_error(pytester, tmp_path, *args):
    """Run pytest; return the one stderr line naming the problem."""
    pytester.makepyfile(SUITE)
    out = pytester.runpytest_inprocess("-p", "no:cacheprovider",
                                       f"--perfmodel-results={tmp_path / 'results'}", *args)
    text = out.stdout.str() + out.stderr.str()
    assert out.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "Traceback" not in text and "passed" not in text
    # argparse prints pytest's usage line first; the error itself is one line.
    lines = [line for line in out.stderr.lines
             if line.strip() and not line.startswith(("ERROR: usage:", "  inifile:", "  rootdir:"))]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("args, expected", [
    (["--perfmodel-device=tpu"], "ERROR: --perfmodel-device: unknown device 'tpu'"),
    (["--perfmodel-device=cuda:x"], "ERROR: --perfmodel-device: unknown device 'cuda:x'"),
    (["--perfmodel-device="], "ERROR: --perfmodel-device: unknown device ''"),
    (["--perfmodel-profile=huge"], "argument --perfmodel-profile: invalid choice: 'huge'"),
    (["--perfmodel-threads=two"], "argument --perfmodel-threads: invalid int value: 'two'"),
    (["--perfmodel-threads=0"], "ERROR: --perfmodel-threads must be >= 1, got 0"),
    # 0 is not "the default": every bad number is named with its value
    (["--perfmodel-budget=0"],
     "ERROR: --perfmodel-budget: must be a positive number of seconds, got 0"),
    (["--perfmodel-budget=-1"],
     "ERROR: --perfmodel-budget: must be a positive number of seconds, got -1"),
    (["--perfmodel-budget=nan"],
     "ERROR: --perfmodel-budget: must be a positive number of seconds, got nan"),
    (["--perfmodel-budget=inf"],
     "ERROR: --perfmodel-budget: must be a positive number of seconds, got inf"),
    (["--perfmodel-collective-timeout=0"],
     "ERROR: --perfmodel-collective-timeout: must be a positive number of seconds, got 0"),
    (["--perfmodel-collective-timeout=nan"],
     "ERROR: --perfmodel-collective-timeout: must be a positive number of seconds, got nan"),
    (["--perfmodel-target-ci=1.5"],
     "ERROR: --perfmodel-target-ci: must be a fraction in (0, 1), got 1.5"),
    (["--perfmodel-target-ci=nan"],
     "ERROR: --perfmodel-target-ci: must be a fraction in (0, 1), got nan"),
    (["--perfmodel-ranks=0"], "ERROR: --perfmodel-ranks must be >= 1, got 0"),
    (["--perfmodel-plant-bias=conv9d=1.1"], "ERROR: --perfmodel-plant-bias: bad bias 'conv9d=1.1'"),
    (["--perfmodel-plant-bias=linear=0"], "ERROR: --perfmodel-plant-bias: bad bias 'linear=0'"),
    (["--perfmodel-rounds=0"], "ERROR: --perfmodel-rounds must be >= 1, got 0"),
])
def test_bad_option_is_one_line_and_exit_4(pytester, tmp_path, args, expected):
    line = usage_error(pytester, tmp_path, *args)
    assert expected in line, line


@pytest.mark.parametrize("toml, expected", [
    ('[tool.perfmodel.gmae_thresholds]\n"conv9d.forward" = 0.1\n',
     "[tool.perfmodel.gmae_thresholds] 'conv9d.forward' is not a known '<op>.<direction>'"),
    ('[tool.perfmodel.gmae_thresholds]\n"relu.sideways" = 0.1\n', "'relu.sideways' is not a known"),
    ('[tool.perfmodel.gmae_thresholds]\n"relu.forward" = "0.1"\n',
     "gmae_thresholds.relu.forward = '0.1' is not a fraction"),
    ('[tool.perfmodel.gmae_thresholds]\n"relu.forward" = -0.1\n',
     "gmae_thresholds.relu.forward = -0.1 is not a fraction"),
    ('[tool.perfmodel.gmae_thresholds]\n"relu.forward" = nan\n',
     "gmae_thresholds.relu.forward = nan is not a fraction"),
    ("[tool.perfmodel]\ngmae_thresholds = 0.2\n", "gmae_thresholds must be a table"),
    # pytest reads pyproject.toml first, and reports bad TOML itself
    ("[tool.perfmodel]\ndefault_gmae_threshold = 15%\n", "(at line 2, column 28)"),
    ("[tool.perfmodel]\ndefault_gmae_threshold = true\n", "default_gmae_threshold = True is not"),
    ("[tool.perfmodel]\ne2e_spread_k = inf\n", "e2e_spread_k = inf is not a positive number"),
    ("[tool.perfmodel]\nbaseline_runs = 1\n", "baseline_runs = 1 is not a whole number"),
    ("[tool.perfmodel]\ne2e_tolerance = 0.1\n", "e2e_tolerance = 0.1 is no longer supported"),
    ("[tool.perfmodel]\ngmae_treshold = 0.1\n", "unknown key [tool.perfmodel] 'gmae_treshold'"),
    ("[tool.perfmodel.e2e_ceilings]\nresnet9000 = 0.3\n", "'resnet9000' is not a known workload"),
    ("[tool]\nperfmodel = 5\n", "[tool.perfmodel] must be a table, got 5"),
])
def test_bad_pyproject_is_one_line_and_exit_4(pytester, tmp_path, toml, expected):
    pytester.makefile(".toml", pyproject=toml)
    line = usage_error(pytester, tmp_path)
    assert line.startswith(f"ERROR: {pytester.path / 'pyproject.toml'}: "), line
    assert expected in line, line


@pytest.mark.parametrize("args, expected", [
    (["--perfmodel-budget=0"],
     "ERROR: --perfmodel-budget: must be a positive number of seconds, got 0"),
    (["--perfmodel-collective-timeout=-5"],
     "ERROR: --perfmodel-collective-timeout: must be a positive number of seconds, got -5"),
    (["--perfmodel-device=tpu"], "ERROR: --perfmodel-device: unknown device 'tpu'"),
])
def test_the_ranks_parent_checks_options_before_it_launches_mpiexec(pytester, tmp_path,
                                                                    monkeypatch, args, expected):
    """``--perfmodel-ranks`` re-runs pytest under mpiexec from ``pytest_cmdline_main``,
    before ``pytest_configure``: the parent checks the options first, so a bad one
    is one line, not one per rank, and nothing is launched."""
    import subprocess

    launched = []
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: launched.append(a) or 0)
    line = usage_error(pytester, tmp_path, "--perfmodel-ranks=2", *args)
    assert expected in line, line
    assert launched == []
