"""`perfmodel compare`, `predict` and `stats`: exit codes, one-line errors, tables."""

import pytest

from perfmodel.cli.main import main

KEY = "cpu-test-2c"


@pytest.fixture
def runs(tmp_path):
    """Four quick runs of one device: an e2e record and an op measurement each,
    and a baseline. Returns (results root, run ids)."""
    from perfmodel.gate.baseline import save_baseline
    from perfmodel.store.results import ResultStore

    store = ResultStore(tmp_path / "results", KEY)
    ids = []
    for i, predicted in enumerate([0.105, 0.11, 0.10, 0.095]):
        run = f"2026010{i + 1}T000000Z-1-a"
        writer = store.open_run({}, "quick", run)
        writer.append({"kind": "e2e", "workload": "mlp_small", "measured_s": 0.1,
                       "predicted_s": predicted, "error": abs(predicted - 0.1) / 0.1, "env": {}})
        writer.append({"kind": "measurement", "op": "addmm", "direction": "forward",
                       "dtype": "float32", "config": {"M": 8}, "replicate": 0,
                       "measurement": {"median_s": 1e-3 if i == 0 else 2e-3 * (1 + i / 100)},
                       "env": {}})
        writer.close()
        ids.append(run)
    save_baseline(store.baseline_path("quick"), KEY, {"mlp_small": [0.0, 0.1]}, {})
    return tmp_path / "results", ids


def test_stats_table_and_exit_status(runs, capsys):
    results, ids = runs
    assert main(["stats", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "profile quick: 4 e2e run(s), 4 op run(s)" in out
    row = next(line for line in out.splitlines() if line.startswith("mlp_small"))
    assert row.split()[1:3] == ["4", "100.00ms"] and row.endswith("ok")
    assert "addmm.fwd" in out
    # Against the first run, the op is twice as slow in every later run: beyond its spread.
    code = main(["stats", "--results", str(results), "--reference", ids[0]])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL addmm.forward float32 M=8: diff +104.00% beyond bound" in out


def test_compare_runs_and_baselines(runs, capsys):
    results, ids = runs
    assert main(["compare", ids[0], str(results / KEY / "runs" / f"{ids[3]}.jsonl"),
                 "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "mlp_small" in out and "+5.00%" in out and "-5.00%" in out
    assert any(line.split()[:3] == ["addmm.fwd", "1", "2.060"] for line in out.splitlines())
    baseline = str(results / KEY / "baseline-quick.json")
    assert main(["compare", baseline, baseline]) == 0
    assert "+0.00%" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["stats", "--min-runs", "5"], "stats needs at least 5 runs of profile quick, found 4"),
    (["stats", "--profile", "full"], "stats needs at least 3 runs of profile full, found 0"),
    (["stats", "--reference", "nope"], "reference run nope holds no records"),
    (["stats", "--device", "cpu-none-1c"], "no results for device 'cpu-none-1c'"),
    (["compare", "nope", "x"], "'nope' is not a run file (.jsonl), a baseline file"),
    (["compare", "20260101T000000Z-1-a", "{baseline}"], "cannot compare a run"),
])
def test_bad_arguments_are_one_line_and_exit_2(runs, capsys, argv, message):
    results, _ = runs
    argv = [a.format(baseline=results / KEY / "baseline-quick.json") for a in argv]
    assert main([*argv, "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_missing_results_root(tmp_path, capsys):
    assert main(["stats", "--results", str(tmp_path / "none")]) == 2
    assert f"no results folder at {tmp_path / 'none'}" in capsys.readouterr().err


def test_predict_without_a_fit_says_what_to_do(planted_results, capsys):
    results, key = planted_results
    args = ["--results", str(results), "--device", "cpu", "--threads", "1"]
    assert main(["predict", "mlp_small", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"perfmodel predict: error: no fitted predictors under "
                   f"{results / key / 'predictors'}; run `pytest suites/ -m microbench` first")


@pytest.mark.parametrize("argv, message", [
    (["predict"], "give a workload name or --trace ET_FILE"),
    (["predict", "no_such_workload"], "unknown workload 'no_such_workload'"),
    (["predict", "--trace", "missing.et.json"], "trace file missing.et.json does not exist"),
    (["predict", "--trace", "x.et.json", "--measure"], "--measure needs a workload"),
])
def test_predict_bad_arguments(planted_results, capsys, argv, message):
    results, _ = planted_results
    assert main([*argv, "--results", str(results), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("command", ["compare", "predict", "stats"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0 and f"usage: perfmodel {command}" in capsys.readouterr().out


def test_forecast_lines_name_the_ops_beyond_the_fit():
    from perfmodel.simulate.result import IterationPrediction

    lines = IterationPrediction(
        0.0124, {"gemm": 0.001}, device_key="cuda-h200-141gb",
        beyond_fit={"linear.forward": (3, 94.2), "relu.forward": (2, 6.0)}).lines("mlp_small")
    assert lines[0] == "mlp_small on cuda-h200-141gb: predicted 12.40 ms"
    assert ("  extrapolated beyond the fitted configs (calls, most x the largest fitted FLOPs "
            "or bytes): linear.forward 3, 94x, relu.forward 2, 6x") in lines
    assert not any("extrapolated" in line
                   for line in IterationPrediction(0.01, {"gemm": 0.01}).lines("m"))
