"""The plugin from the outside: markers, options, the gate's exit status and lines."""

import json
import subprocess
import sys

import pytest

from tests.helpers import (BASE, GATE_SUITE, THREADS, plant_baseline, run_lines, run_paths,
                           run_plugin)

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")


def test_gate_passes_on_unchanged_baseline(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile(GATE_SUITE.format(predicted=0.104))  # error 4%
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == 0
    out.stdout.fnmatch_lines(["ok   mlp_small: E2E error +4.00% within baseline +4.00% ± "
                              "3.0×spread 1.00% (allowed |error| ≤ 7.00%)"])
    assert "FAIL" not in out.stdout.str()


def test_gate_fails_on_planted_regression(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile(GATE_SUITE.format(predicted=0.108))  # error 8%
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["FAIL mlp_small: E2E error +8.00% outside baseline +4.00% ± "
                              "3.0×spread 1.00% (allowed |error| ≤ 7.00%)"])
    assert "Traceback" not in out.stdout.str() + out.stderr.str()
    out.assert_outcomes(passed=1)


def test_a_failing_error_is_measured_again_before_the_gate_decides(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile("""
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
def test_planted(perfmodel_session):
    calls = []
    # 100 ms measured for 200 ms predicted: +100%, far outside the baseline
    first = MeasuredIteration("mlp_small", IterationTiming(0.1, 0.001, 15, 3, 2560.0), 0.2)
    again = perfmodel_session.confirm_e2e(first, lambda: calls.append(1), 8)
    assert len(calls) == 2 + 5 * 2  # the smoke profile's warmup + repeat x number
    assert again.first_measured_s == 0.1 and again.measured.repeat == 5
    perfmodel_session.record_e2e(again)
""")
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED  # an empty step is no closer to 200 ms
    out.stdout.fnmatch_lines(["mlp_small: E2E error +100.00% failed the gate's error check, "
                              "so it was measured again: * (the repeat decides)",
                              "FAIL mlp_small: E2E error *"])
    records = [json.loads(line) for path in run_paths(results / key)
               for line in run_lines(path)]
    e2e = [r for r in records if r.get("kind") == "e2e"]
    assert len(e2e) == 1 and e2e[0]["first_measured_s"] == 0.1


def test_spread_multiplier_and_ceiling_come_from_pyproject(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makefile(".toml", pyproject="[tool.perfmodel]\ne2e_spread_k = 30\n")
    pytester.makepyfile(GATE_SUITE.format(predicted=0.125))
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == 0
    out.stdout.fnmatch_lines(["ok   mlp_small: * within baseline +4.00% ± 30.0×spread 1.00%*"])
    pytester.makefile(".toml", pyproject="[tool.perfmodel]\ne2e_spread_k = 30\n"
                                         "[tool.perfmodel.e2e_ceilings]\nmlp_small = 0.2\n")
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["FAIL mlp_small: E2E error +25.00% exceeds the ceiling 20.00%*"])


def test_missing_workload_fails_unless_deselected(pytester, planted_results):
    from perfmodel.gate.baseline import save_baseline

    results, key = planted_results
    save_baseline(results / key / "baseline-smoke.json", key,
                  {"mlp_small": BASE, "dlrm_random": BASE}, {})
    pytester.makepyfile("""
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
@pytest.mark.perfmodel_workloads("mlp_small", "dlrm_random")
def test_e2e(workload, perfmodel_session):
    if workload == "mlp_small":  # dlrm_random produces no result
        perfmodel_session.record_e2e(
            MeasuredIteration(workload, IterationTiming(0.1, 0.001, 15, 3, 2560.0), 0.104))
""")
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["FAIL dlrm_random: in the baseline but produced no E2E result"])
    out = run_plugin(pytester, results, "-m", "e2e", "-k", "mlp_small")
    assert out.ret == 0 and "dlrm_random" not in out.stdout.str()


def test_baseline_from_another_device_warns(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE, device_key="cpu-other-4c")
    pytester.makepyfile(GATE_SUITE.format(predicted=0.104))
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == 0
    out.stdout.fnmatch_lines(["WARN baseline was saved on device 'cpu-other-4c'*"])


def test_missing_baseline_is_a_message_not_a_crash(pytester, planted_results):
    results, key = planted_results
    pytester.makepyfile(GATE_SUITE.format(predicted=0.125))
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == 0
    out.stdout.fnmatch_lines([f"no baseline at {results / key / 'baseline-smoke.json'}; not gating. "
                              f"Build one from the runs of separate sessions spread over at "
                              f"least 4 h: `perfmodel baseline --last 5 --profile smoke`*"])


def test_save_baseline_then_gate(pytester, planted_results):
    results, key = planted_results
    pytester.makepyfile(GATE_SUITE.format(predicted=0.11))
    assert run_plugin(pytester, results, "-m", "e2e", "--perfmodel-save-baseline").ret == 0
    saved = json.loads((results / key / "baseline-smoke.json").read_text())
    assert saved["workloads"]["mlp_small"]["mean"] == pytest.approx(0.1)
    assert run_plugin(pytester, results, "-m", "e2e").ret == 0


def test_corrupt_baseline_fails_the_gate_with_its_path(pytester, planted_results):
    results, key = planted_results
    path = results / key / "baseline-smoke.json"
    path.write_text("{not json")
    pytester.makepyfile(GATE_SUITE.format(predicted=0.11))
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines([f"FAIL perfmodel gate: {path}: *"])
    assert "Traceback" not in out.stdout.str()


MICRO_SUITE = """
import pytest
pytestmark = pytest.mark.perfmodel_ops("addmm")

@pytest.mark.microbench
def test_microbench(op_case, perfmodel_session):
    perfmodel_session.benchmark(op_case)

@pytest.mark.accuracy
def test_accuracy(op_target, perfmodel_session):
    perfmodel_session.check_accuracy(*op_target)

def test_unmarked():
    pass
"""


def test_markers_select_and_accuracy_reads_stored_data(pytester, planted_results):
    results, key = planted_results
    pytester.makepyfile(MICRO_SUITE)
    pytester.makefile(".toml", pyproject="[tool.perfmodel]\nsmoke_gmae_threshold = 5.0\n")
    out = run_plugin(pytester, results, "--strict-markers", "-m", "microbench",
                     "--perfmodel-budget=0.01")
    out.assert_outcomes(passed=32, deselected=2)  # 16 smoke configs x 2 dtypes
    runs = run_paths(results / key)
    assert len(runs) == 1 and runs[0].name.endswith(".jsonl.gz")  # compacted when it closed
    lines = [json.loads(line) for line in run_lines(runs[0])]
    assert lines[0]["kind"] == "header" and len(lines) == 1 + 32 * 2  # two replicates each
    assert {"device_key", "threads", "torch", "fbgemm", "commit"} <= set(lines[1]["env"])
    # the host's speed beside each record (one sample: the session is under a minute)
    speeds = {json.dumps(line["host_speed"], sort_keys=True) for line in lines[1:]}
    assert len(speeds) == 1 and set(lines[1]["host_speed"]) == {"addmm", "copy"}
    assert {line["timed_beside"] for line in lines[1:]} == {0}  # one process: alone

    # A corrupt file beside the good run: reported by path, the rest still loads.
    bad = results / key / "runs" / "zz-corrupt.jsonl"
    bad.write_text("this is not json\n")
    out = run_plugin(pytester, results, "--strict-markers", "-m", "accuracy", "-v")
    out.assert_outcomes(passed=1, deselected=33)
    out.stdout.fnmatch_lines(["addmm.fwd *32",
                              f"WARNING unreadable result data skipped: {bad}: line 1 is not JSON*"])
    (fit,) = (results / key / "predictors").iterdir()
    assert json.loads((fit / "index.json").read_text())["host_speed"] == lines[1]["host_speed"]
    # Same data, same fit: a second session reuses it instead of refitting.
    run_plugin(pytester, results, "-m", "accuracy").assert_outcomes(passed=1, deselected=33)
    assert len(list((results / key / "predictors").iterdir())) == 1


def test_accuracy_threshold_failure_is_one_clear_line(pytester, planted_results):
    results, key = planted_results
    pytester.makepyfile(MICRO_SUITE)
    pytester.makefile(".toml", pyproject="[tool.perfmodel]\nsmoke_gmae_threshold = 0.0001\n")
    out = run_plugin(pytester, results, "-m", "microbench or accuracy", "--perfmodel-budget=0.01")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["addmm.forward: held-out GMAE * > threshold 0.0% (noise floor *"])


def test_accuracy_without_data_says_what_to_do(pytester, planted_results):
    results, _ = planted_results
    pytester.makepyfile(MICRO_SUITE)
    out = run_plugin(pytester, results, "-m", "accuracy")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["*no measurements or fitted predictors under*run `pytest -m microbench` first"])


def test_accuracy_of_an_op_never_measured_here_is_skipped_with_how_to_measure_it(
        pytester, planted_results):
    """A fresh device has no collective measurements until a multi-rank run: its
    accuracy items (time, host CPU and time under load) skip, naming the
    command, while the measured ops are scored."""
    results, key = planted_results
    pytester.makepyfile(MICRO_SUITE.replace('perfmodel_ops("addmm")',
                                            'perfmodel_ops("addmm", "all_reduce")'))
    pytester.makefile(".toml", pyproject="[tool.perfmodel]\nsmoke_gmae_threshold = 5.0\n")
    assert run_plugin(pytester, results, "-m", "microbench", "-k", "addmm",
                      "--perfmodel-budget=0.01").ret == 0
    out = run_plugin(pytester, results, "-m", "accuracy", "-rs")
    outcomes = out.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("skipped"), out.ret) == (1, 3, 0)
    out.stdout.fnmatch_lines([f"SKIPPED*all_reduce.forward: no measurements under "
                              f"{results / key}; collectives are measured on several ranks: "
                              f"*--perfmodel-ranks 2*"])


def test_plugin_import_is_light():
    code = ("import sys, pytest_perfmodel.plugin; "
            "heavy = [m for m in ('torch', 'sklearn', 'pandas') if m in sys.modules]; "
            "print(heavy); sys.exit(bool(heavy))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


USER_MODEL_SUITE = """
import torch
import torch.nn.functional as F

def test_my_model(perfmodel_predict):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    batch = (torch.randn(4, 8), torch.randn(4, 1))
    result = perfmodel_predict(model, batch, lambda m, b: F.mse_loss(m(b[0]), b[1]), optimizer)
    assert result.predicted_s > 0 and result.measured.median_s > 0
    assert result.breakdown_s["gemm"] > 0 and result.measured.items_per_s > 0
"""


def test_user_model_fixture_predicts_and_measures(pytester, planted_results):
    """The fixture a newcomer tries first, with the repository's newest committed fit
    (older ones may predate today's predictor kinds: stale, they would be refitted)."""
    import shutil
    from pathlib import Path

    results, key = planted_results
    committed = sorted((Path(__file__).parents[1] / "results").glob("*/predictors/*/index.json"),
                       key=lambda p: p.parent.name)
    assert committed, "the repository should hold at least one fitted predictor set"
    copy = results / key / "predictors" / committed[-1].parent.name
    shutil.copytree(committed[-1].parent, copy)
    index = json.loads((copy / "index.json").read_text())  # sessions load their thread count's fit
    (copy / "index.json").write_text(json.dumps({**index, "threads": THREADS}))
    pytester.makepyfile(USER_MODEL_SUITE)
    out = run_plugin(pytester, results)
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines(["workload*measured*predicted*", "user_model *"])


def test_bad_planted_bias_is_a_usage_error(pytester, planted_results):
    results, _ = planted_results
    pytester.makepyfile("def test_x():\n    pass\n")
    out = run_plugin(pytester, results, "--perfmodel-plant-bias=linear=oops")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    assert "--perfmodel-plant-bias: bad bias 'linear=oops'" in out.stderr.str()


def _perfmodel_section(out) -> list[str]:
    lines = out.stdout.lines
    start = next(i for i, line in enumerate(lines) if "perfmodel" in line and "=" in line)
    return [line for line in lines[start + 1:] if not line.startswith("=")]


def test_summary_shows_baseline_verdict_and_decision(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile(GATE_SUITE.format(predicted=0.104))  # error +4%, baseline +4%
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == 0
    out.stdout.fnmatch_lines([
        f"device {key} (planted test CPU), profile smoke",
        "workload*measured*sd*predicted*error*own-ovh*unmod*baseline  floor  verdict",
        "mlp_small *100.00ms*1.00ms*104.00ms*+4.0%*n/a*0.0%*+4.0%    n/a  ok",
        "perfmodel gate: pass, 1 workload(s) within their baseline"])
    # a gate verdict and the results path stay one line (the path's length is the tmp dir's)
    assert all(len(line) <= 100 for line in _perfmodel_section(out)
               if not line.startswith(("ok ", "FAIL ", "results ")))


DRIFTED_RANKS = """
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
def test_planted(perfmodel_session):
    drift = {{"compute": 1.15, "memory": 1.05, "bandwidth_Bps": 2e10}}
    perfmodel_session.record_e2e(MeasuredIteration(
        "ddp_mlp@2", IterationTiming(0.11, 0.001, 15, 3, 2560.0), 0.11, fit_data="f1",
        host_drift=drift, predicted_fit_speed_s={at_fit_speed}))
"""


@pytest.mark.parametrize("at_fit_speed", [0.1, 0.11])
def test_a_prediction_moved_by_the_hosts_drift_is_not_a_model_drift(pytester, planted_results,
                                                                     at_fit_speed):
    """The baseline predicted 100 ms with the same fit; the host is slower now
    and the prediction, 110 ms, with it. The drift check compares the prediction
    at the fit's speed: it passes at 100 ms and fails at 110 ms (the model
    moved). The summary shows the host's drift."""
    from perfmodel.gate.baseline import save_baseline

    results, key = planted_results
    save_baseline(results / key / "baseline-smoke.json", key, {"ddp_mlp@2": [0.0, 0.0, 0.0]},
                  {}, predicted_by_workload={"ddp_mlp@2": [0.1, 0.1, 0.1]},
                  fit_data={"ddp_mlp@2": "f1"})
    pytester.makepyfile(DRIFTED_RANKS.format(at_fit_speed=at_fit_speed))
    out = run_plugin(pytester, results, "-m", "e2e")
    moved = at_fit_speed != 0.1
    assert out.ret == (1 if moved else 0), out.stdout.str()
    out.stdout.fnmatch_lines([f"  ddp_mlp@2 host since the fit: compute x1.15, memory x1.05 "
                              f"(at the fit's speed {at_fit_speed * 1e3:.2f}ms)"])
    assert ("FAIL ddp_mlp@2: prediction moved +10.00%" in out.stdout.str()) == moved


TWO_WORKLOADS = """
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
@pytest.mark.parametrize("name,predicted_s,own_s", [("mlp_small", 0.104, 0.101),
                                                    ("cnn_resnet", 0.091, 0.09)])
def test_planted(perfmodel_session, name, predicted_s, own_s):
    perfmodel_session.record_e2e(MeasuredIteration(name, IterationTiming(0.1, 0.001, 15, 3, 2560.0),
                                           predicted_s, predicted_own_s=own_s))
"""


def test_summary_shows_each_workloads_floor_and_the_geomeans(pytester, planted_results):
    """The floor column comes from the baseline runs' measured times (predicted /
    (1 + error)): mlp_small's 100, 80 and 125 ms give 15%, cnn_resnet's 100 and
    90.9 ms (median 95.5 ms) 4.8%; the geomeans are of |error| 4% and 9% (shared:
    6.0%), of 1% and 10% (own: 3.2%), and of the floors (8.5%)."""
    from perfmodel.gate.baseline import save_baseline

    results, key = planted_results
    save_baseline(results / key / "baseline-smoke.json", key,
                  {"mlp_small": [0.0, 0.25, -0.2], "cnn_resnet": [0.0, 0.1]}, {},
                  predicted_by_workload={"mlp_small": [0.1, 0.1, 0.1],
                                         "cnn_resnet": [0.1, 0.1]})
    pytester.makepyfile(TWO_WORKLOADS)
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == 0, out.stdout.str()
    out.stdout.fnmatch_lines([
        "mlp_small *104.00ms*+4.0%*1.0%*+1.7%  15.0%  ok",
        "cnn_resnet *91.00ms*-9.0%*10.0%*+5.0%   4.8%  ok",
        "geomean |error| of 2 workloads: 6.0% shared, 3.2% own overheads; floor 8.5%"])


def test_summary_warns_of_ops_predicted_beyond_the_fitted_configs(pytester, planted_results):
    results, _ = planted_results
    pytester.makepyfile("""
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration
from perfmodel.simulate.result import IterationPrediction

@pytest.mark.e2e
def test_planted(perfmodel_session):
    perfmodel_session.record_e2e(MeasuredIteration(
        "mlp_small", IterationTiming(0.1, 0.001, 15, 3, 2560.0), IterationPrediction(
            0.1, beyond_fit={"linear.forward": (3, 94.2), "relu.backward": (2, 6.1)})))
""")
    out = run_plugin(pytester, results, "-m", "e2e")
    out.stdout.fnmatch_lines([
        "WARN mlp_small: extrapolated beyond the fitted configs: linear.fwd (3 calls, up to 94x*",
        "*fitted config's FLOPs or bytes), relu.bwd (2 calls, up to 6x)"])
    record = next(json.loads(line) for f in run_paths(results / planted_results[1])
                  for line in run_lines(f) if '"e2e"' in line)
    assert record["beyond_fit"] == {"linear.forward": [3, 94.2], "relu.backward": [2, 6.1]}


def test_summary_quiet_prints_only_failures(pytester, planted_results):
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile(GATE_SUITE.format(predicted=0.108))  # error +8% > allowed 7%
    out = run_plugin(pytester, results, "-m", "e2e")
    out.stdout.fnmatch_lines(["mlp_small *+8.0%*+4.0%    n/a  FAIL",
                              "FAIL perfmodel gate: 1 of 1 workload(s) failed (mlp_small)"])
    out = run_plugin(pytester, results, "-m", "e2e", "-q")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    section = [line for line in _perfmodel_section(out) if line.strip()]
    assert not [line for line in section if line.startswith(("workload", "mlp_small", "ok"))]
    assert [line for line in section if line.startswith("FAIL")] == [
        "FAIL mlp_small: E2E error +8.00% outside baseline +4.00% ± 3.0×spread 1.00% "
        "(allowed |error| ≤ 7.00%)",
        "FAIL perfmodel gate: 1 of 1 workload(s) failed (mlp_small)"]


def test_summary_quiet_has_no_perfmodel_section_when_all_passed(pytester, planted_results):
    from perfmodel.measure.env import environment
    from perfmodel.gate.baseline import save_baseline

    results, key = planted_results
    save_baseline(results / key / "baseline-smoke.json", key, {"mlp_small": BASE},
                  environment(key, None))  # same software: no warning either
    pytester.makepyfile(GATE_SUITE.format(predicted=0.104))  # error +4%, the baseline's mean
    out = run_plugin(pytester, results, "-m", "e2e", "-q")
    assert out.ret == 0, out.stdout.str()
    assert not [line for line in out.stdout.lines if "= perfmodel =" in line]


SUITE_OF = """
import pytest
from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops({ops})
"""


def test_sweep_deals_each_ops_configs_over_rounds_with_collectives_first(pytester,
                                                                         planted_results):
    """Microbench items run collectives first, then in 8 rounds: round r takes every
    8th config of each op from the r-th on, ops in the order first seen; the accuracy
    items follow in file order."""
    from perfmodel.ops import get_op
    from pytest_perfmodel.plugin import SWEEP_ROUNDS

    results, _ = planted_results
    pytester.makepyfile(test_a=SUITE_OF.format(ops='"relu", "add"'),
                        test_b=SUITE_OF.format(ops='"all_reduce"'))
    out = run_plugin(pytester, results, "--collect-only", "-q", "--perfmodel-profile", "quick")
    ids = [line.split("::", 1)[1] for line in out.stdout.lines if "::" in line]
    cases = {op: [f"test_microbench[{c.id}]" for c in get_op(op).cases("quick")]
             for op in ("relu", "add", "all_reduce")}
    assert len(cases["relu"]) > SWEEP_ROUNDS and len(cases["add"]) > SWEEP_ROUNDS
    dealt = [case for r in range(SWEEP_ROUNDS) for op in ("relu", "add")
             for case in cases[op][r::SWEEP_ROUNDS]]
    bench = len(cases["all_reduce"]) + len(dealt)
    assert ids[:bench] == cases["all_reduce"] + dealt
    assert all(i.startswith("test_accuracy[") for i in ids[bench:])
    assert ids[bench:bench + 2] == ["test_accuracy[relu.forward]", "test_accuracy[relu.backward]"]


BUDGET_PROBE = """
def test_budgets(perfmodel_session):
    settings = perfmodel_session.timer_settings
    collective = perfmodel_session.collective_timer_settings
    assert (settings.budget_s, collective.budget_s) == ({expected})
"""


@pytest.mark.parametrize("args, expected", [
    ((), "0.15, 1.0"),                          # quick defaults: BUDGET_S, COLLECTIVE_BUDGET_S
    (("--perfmodel-profile=smoke",), "0.1, 0.1"),
    (("--perfmodel-budget=0.05",), "0.05, 0.05"),  # an explicit budget sets both
])
def test_collectives_get_their_own_default_budget(pytester, tmp_path, args, expected):
    pytester.makepyfile(test_probe=BUDGET_PROBE.format(expected=expected))
    profile = () if any("profile" in a for a in args) else ("--perfmodel-profile=quick",)
    assert run_plugin(pytester, tmp_path / "results", *profile, *args).ret == 0


DEVICE_SUITE = """
def test_device(perfmodel_session):
    assert perfmodel_session.device.kind == "cpu"
"""


@pytest.mark.parametrize("profile, noted", [("gpu", True), ("smoke", False)])
def test_a_profile_sized_for_another_device_is_noted(pytester, planted_results, profile, noted):
    """The gpu profile on a CPU says what it does there (full-size workloads,
    GPU-sized configs skipped past the per-call limit); a CPU profile says nothing."""
    results, _ = planted_results
    pytester.makepyfile(DEVICE_SUITE)
    out = run_plugin(pytester, results, f"--perfmodel-profile={profile}")
    out.assert_outcomes(passed=1)
    assert ("profile gpu on a CPU: its configs are sized for a GPU" in out.stdout.str()) == noted


def test_profile_notes_name_the_profile_that_fits():
    from perfmodel.session import profile_note

    assert "--perfmodel-profile gpu" in profile_note("quick", "cuda")
    assert profile_note("quick", "cpu") is None and profile_note("gpu", "cuda") is None


def test_summary_warns_of_measurements_that_spread_wide(pytester, planted_results, monkeypatch):
    """Every measurement counts as wide (the threshold planted below 0): one WARN
    line counts them and names the first three; a quiet run shows it too."""
    results, _ = planted_results
    pytester.makepyfile(MICRO_SUITE)
    monkeypatch.setattr("perfmodel.measure.timer.WIDE_SPREAD_REL_IQR", -1.0)
    out = run_plugin(pytester, results, "-m", "microbench", "-k", "float32-M1-", "-q",
              "--perfmodel-budget=0.01")
    n = out.parseoutcomes()["passed"]
    assert n >= 1
    out.stdout.fnmatch_lines([f"WARN {2 * n} of {2 * n} measurements spread wide (IQR over *% "
                              f"of the median: a noisy host?):",
                              "     addmm-forward-float32-M1-* (replicate 0), *"])
