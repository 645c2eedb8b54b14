"""The `perfmodel` command line: output, exit codes, one-line errors."""

import json

from perfmodel.cli.main import main


def test_devices_prints_the_cached_spec(planted_results, capsys):
    results, key = planted_results
    assert main(["devices", "--device", "cpu", "--results", str(results), "--threads", "1"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["key"] == key and spec["name"] == "planted test CPU"


def test_bad_device_is_one_line_and_exit_2(capsys):
    assert main(["devices", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("perfmodel devices: error: unknown device 'tpu': "
                           "expected cpu, cuda or cuda:N")


def test_baseline_from_stored_runs(planted_results, capsys):
    from perfmodel.gate.baseline import load_baseline
    from perfmodel.store.results import ResultStore

    results, key = planted_results
    store = ResultStore(results, key)
    for run, predicted in (("20260101T000000Z-1-a", 0.11), ("20260102T000000Z-1-b", 0.09)):
        writer = store.open_run({"torch": "2.13.0"}, "quick", run)
        writer.append({"kind": "e2e", "workload": "mlp_small", "measured_s": 0.1,
                       "predicted_s": predicted, "error": abs(predicted - 0.1) / 0.1,
                       "breakdown_s": {"host overhead": 0.002}, "traced_gaps_s": 0.0025,
                       "env": {"torch": "2.13.0"}})
        writer.close()
    args = ["baseline", "--device", "cpu", "--results", str(results), "--threads", "1"]
    assert main([*args, "--last", "2"]) == 0
    out = capsys.readouterr().out
    assert "mlp_small" in out and "n 2  floor  0.00%" in out  # measured 100 ms both times
    assert "host-overhead model: predicted/traced 0.800x, 0.800x over 2 run(s)" in out
    entry = load_baseline(store.baseline_path("quick")).entries["mlp_small"]
    assert entry.mean == 0.0 or abs(entry.mean) < 1e-12
    assert entry.overhead_s == ((0.002, 0.0025), (0.002, 0.0025))
    assert main([*args, "--last", "3"]) == 2
    assert "need 3 run(s) of profile 'quick'" in capsys.readouterr().err


def test_baseline_judges_each_run_by_the_band_of_the_others(planted_results, capsys):
    """The leave-one-run-out check: how often the saved band would fail a run of
    unchanged code, estimated from the runs it was built from."""
    from perfmodel.store.results import ResultStore

    results, key = planted_results
    store = ResultStore(results, key)
    runs = (("20260101T000000Z-1-a", 0.090), ("20260101T060000Z-1-b", 0.091),
            ("20260101T120000Z-1-c", 0.089), ("20260101T180000Z-1-d", 0.090),
            ("20260102T000000Z-1-e", 0.060))
    for run, predicted in runs:
        writer = store.open_run({"torch": "2.13.0"}, "quick", run)
        for workload, scale in (("mlp_small", 1.0), ("cnn_resnet", 1.0 if run[-1] != "e" else 1.5)):
            writer.append({"kind": "e2e", "workload": workload, "measured_s": 0.1,
                           "predicted_s": predicted * scale,
                           "error": abs(predicted * scale - 0.1) / 0.1,
                           "env": {"torch": "2.13.0"}})
        writer.close()
    assert main(["baseline", "--device", "cpu", "--results", str(results), "--threads", "1",
                 "--last", "5"]) == 0
    out = capsys.readouterr().out
    assert "leave one run out: each run judged against the other runs (k " in out
    assert "mlp_small              1 of 5 failed; tightest error 20260102T000000Z-1-e: " \
           "-40.00% against " in out
    assert "cnn_resnet             0 of 5 failed;" in out  # its fifth run is -10%, as the others
    assert "runs failed by the others: 1 of 5 (20260102T000000Z-1-e)" in out
    # the same check from the file alone, writing nothing
    path = store.baseline_path("quick")
    before = path.read_bytes()
    assert main(["baseline", "--check", str(path)]) == 0
    checked = capsys.readouterr().out
    assert "mlp_small              mean -16.00%  spread" in checked and "allowed" in checked
    assert "runs failed by the others: 1 of 5 (20260102T000000Z-1-e)" in checked
    assert path.read_bytes() == before
    assert main(["baseline", "--check", str(path.with_name("missing.json"))]) == 2
    assert "missing.json: no such baseline file" in capsys.readouterr().err


def test_baseline_keeps_each_workloads_own_fit_id(planted_results, capsys):
    """Multi-rank workloads predict with their ranks' fit: one workload's fits
    do not switch off another's drift check."""
    from perfmodel.gate.baseline import load_baseline
    from perfmodel.store.results import ResultStore

    results, key = planted_results
    store = ResultStore(results, key)
    runs = (("20260101T000000Z-1-a", "1111111111111111"),
            ("20260102T000000Z-1-b", "2222222222222222"))
    for run, ranks_fit in runs:
        writer = store.open_run({"torch": "2.13.0"}, "quick", run)
        for workload, fit in (("mlp_small", "aaaaaaaaaaaaaaaa"), ("ddp_mlp@2", ranks_fit)):
            writer.append({"kind": "e2e", "workload": workload, "measured_s": 0.1,
                           "predicted_s": 0.105, "error": 0.05, "fit_data": fit,
                           "env": {"torch": "2.13.0"}})
        writer.close()
    assert main(["baseline", "--device", "cpu", "--results", str(results), "--threads", "1",
                 "--last", "2"]) == 0
    assert "ddp_mlp@2's runs used different fits" in capsys.readouterr().err
    saved = load_baseline(store.baseline_path("quick"))
    assert saved.fit_data_for("mlp_small") == "aaaaaaaaaaaaaaaa"
    assert saved.fit_data_for("ddp_mlp@2") is None
