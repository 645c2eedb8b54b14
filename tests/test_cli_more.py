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
    assert main(["compare", ids[0], str(results / KEY / "runs" / f"{ids[3]}.jsonl.gz"),
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
    (["compare", "nope", "x"], "'nope' is not a run file (.jsonl, .jsonl.gz), a baseline file"),
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


# -- `perfmodel refit`, and `perfmodel replay` refusing a stale fit ---------------------------

def _stale(folder):
    """Make a saved fit stale for today's code (its index predates the record
    of the predictor kinds each op was chosen among)."""
    import json

    from perfmodel.store import paths

    index = json.loads(paths.fit_index(folder).read_text())
    for entry in index["entries"]:
        del entry["candidate_kinds"]
    paths.fit_index(folder).write_text(json.dumps(index))


def _linear_runs(root, key, threads):
    """Two runs of linear forward measurements (5 us + FLOPs / 1 GFLOP/s) at
    ``threads`` torch threads under ``key``."""
    from perfmodel.measure.allocator import KEEP_FREED
    from perfmodel.ops import get_op
    from perfmodel.store.results import ResultStore

    linear = get_op("linear")
    cases = [c for c in linear.cases("quick") if c.direction == "forward"][:10]
    store = ResultStore(root, key)
    for run in ("20260101T000000Z-1-aaaa", "20260101T000001Z-1-bbbb"):
        writer = store.open_run({"threads": threads, "cpu_allocator": KEEP_FREED}, "quick", run)
        for c in cases:
            writer.append({"kind": "measurement", "op": "linear", "direction": c.direction,
                           "dtype": c.dtype, "config": c.params, "replicate": 0,
                           "env": {"threads": threads, "cpu_allocator": KEEP_FREED},
                           "measurement": {"median_s": 5e-6 + linear.flops(c.params,
                                                                          c.direction) / 1e9}})
        writer.close()
    return store


def test_refit_prints_the_new_fit_and_replaces_a_stale_one(planted_results, capsys):
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.store import paths
    from tests.helpers import THREADS

    root, key = planted_results
    store = _linear_runs(root, key, THREADS)
    argv = ["refit", "--results", str(root), "--device", key, "--threads", str(THREADS)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    first = paths.fit_dirs(store.dir)[-1]
    assert out[0].startswith(f"refit {key}, {THREADS} thread(s): 2 run(s), ")
    assert out[1].startswith(f"fit {first.name}: ") and out[1].endswith(f"in {first}")
    assert out[2].startswith("per-op GMAE over 1 predictors (0 skipped): median ")
    _stale(first)
    assert load_latest_fit(store, threads=THREADS)[0].stale
    assert main(argv) == 0  # a second one, beside the first (never deleted)
    capsys.readouterr()
    fits = paths.fit_dirs(store.dir)
    assert len(fits) == 2 and fits[0] == first
    fit, _ = load_latest_fit(store, threads=THREADS)
    assert fit.stale == () and fit.data_runs == ("20260101T000000Z-1-aaaa",
                                                 "20260101T000001Z-1-bbbb")
    # nothing at another thread count: one line, exit 2, nothing saved
    assert main([*argv[:-1], "7"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfmodel refit: error: no device spec for 7 thread(s) under ")
    assert len(paths.fit_dirs(store.dir)) == 2


def test_replay_refuses_a_stale_fit_with_one_line(planted_linear_fit, capsys):
    from perfmodel.ops import get_op
    from perfmodel.replay.case import MeasuredTiming, ReplayCase, save_case
    from perfmodel.store import paths
    from perfmodel.trace.graph import Graph, Task
    from tests.helpers import THREADS

    root, key = planted_linear_fit
    case = next(c for c in get_op("linear").cases("quick") if c.direction == "forward")
    task = Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                dtype="float32", params=dict(case.params), measured_s=1e-5)
    save_case(paths.replay_file(root / key, "mlp_small"),
              ReplayCase("mlp_small", key, False, 3e10, THREADS, [Graph([task], 2e-5)],
                         MeasuredTiming(1e-5, 1e-7, 30, 5, 1000.0),
                         env={"device_key": key, "threads": THREADS}, config={},
                         recorded={}))
    assert main(["replay", "--results", str(root), "--device", key]) == 0
    capsys.readouterr()
    _stale(paths.fit_dirs(root / key)[-1])
    assert main(["replay", "--results", str(root), "--device", key]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("stale fit ")
    assert err.endswith(f"; run `perfmodel refit --device {key} --threads {THREADS}`\n")


def test_replay_of_a_device_without_cases_names_the_devices_that_have_some(tmp_path, capsys):
    from perfmodel.replay.case import MeasuredTiming, ReplayCase, save_case
    from perfmodel.store import paths
    from perfmodel.trace.graph import Graph

    save_case(paths.replay_file(tmp_path / "cpu-a-2c", "w"),
              ReplayCase("w", "cpu-a-2c", False, 3e10, 2, [Graph([], 2e-5)],
                         MeasuredTiming(1e-5, 1e-7, 30, 5, 1000.0),
                         env={"device_key": "cpu-a-2c", "threads": 2}, config={}, recorded={}))
    assert main(["replay", "--results", str(tmp_path), "--device", "cuda-b-80gb"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "no replay cases for cuda-b-80gb" in err and "devices with cases: cpu-a-2c" in err
