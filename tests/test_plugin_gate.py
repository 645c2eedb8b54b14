"""The E2E gate from the outside: it runs once per run (not under --collect-only,
not once per xdist worker), and a baseline it cannot write or read, or a long
list of failed workloads, is one whole ``FAIL perfmodel gate`` line."""

import json

import pytest

from tests.helpers import (BASE, GATE_SUITE, THREADS, plant_baseline, planted_settings,
                           run_lines, run_paths, run_plugin)

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")

#: One planted E2E result of ``name``: 100 ms measured, ``predicted_s`` predicted.
PLANTED = """
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
def test_planted(perfmodel_session):
    perfmodel_session.record_e2e(
        MeasuredIteration("{name}", IterationTiming(0.1, 0.001, 15, 3, 2560.0), {predicted_s}))
"""


def test_collect_only_does_not_gate(pytester, planted_results):
    """Nothing ran, so nothing is missing: no FAIL line, exit 0 (the same run
    without --collect-only fails the gate: the workload produced no result)."""
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile("""
import pytest

@pytest.mark.e2e
@pytest.mark.perfmodel_workloads("mlp_small")
def test_e2e(workload):
    pass
""")
    out = run_plugin(pytester, results, "-m", "e2e", "--collect-only")
    assert out.ret == 0, out.stdout.str()
    assert "FAIL" not in out.stdout.str() and "perfmodel gate" not in out.stdout.str()
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["FAIL mlp_small: in the baseline but produced no E2E result"])


def test_a_baseline_that_cannot_be_saved_is_one_fail_line(pytester, planted_results):
    results, key = planted_results
    path = results / key / "baseline-smoke.json"
    path.mkdir()  # a directory where the file goes: the write fails (OSError)
    pytester.makepyfile(GATE_SUITE.format(predicted=0.11))
    out = run_plugin(pytester, results, "-m", "e2e", "--perfmodel-save-baseline")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    text = out.stdout.str() + out.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text
    fails = [line for line in out.stdout.lines if line.startswith("FAIL")]
    assert fails == [f"FAIL perfmodel gate: cannot save the baseline {path}: Is a directory"]
    out.assert_outcomes(passed=1)


def test_a_baseline_that_cannot_be_read_is_one_fail_line(pytester, planted_results):
    results, key = planted_results
    path = results / key / "baseline-smoke.json"
    path.mkdir()
    pytester.makepyfile(GATE_SUITE.format(predicted=0.11))
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    assert "Traceback" not in out.stdout.str() + out.stderr.str()
    fails = [line for line in out.stdout.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(f"FAIL perfmodel gate: {path}: "), fails


def test_the_gate_decision_names_every_failed_workload(pytester, planted_results):
    """Five missing workloads make the decision line longer than the summary's
    100 columns: it stays whole, every name in it."""
    from perfmodel.gate.baseline import save_baseline

    names = ["transformer_encoder", "transformer_decoder", "cnn_mobilenet", "dlrm_mlperf",
             "dlrm_random"]
    results, key = planted_results
    save_baseline(results / key / "baseline-smoke.json", key, {n: BASE for n in names}, {})
    pytester.makepyfile(f"""
import pytest

@pytest.mark.e2e
@pytest.mark.perfmodel_workloads({", ".join(map(repr, names))})
def test_e2e(workload):
    pass  # produces no result: each workload is missing
""")
    out = run_plugin(pytester, results, "-m", "e2e")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    (decision,) = [line for line in out.stdout.lines if line.startswith("FAIL perfmodel gate:")]
    assert decision.startswith("FAIL perfmodel gate: 5 of 5 workload(s) failed (")
    assert decision.endswith(")") and len(decision) > 100
    listed = decision.split("(", 2)[2].rstrip(")").split(", ")
    assert sorted(listed) == sorted(names)


# -- pytest-xdist: the workers send their results, the controller gates once --------


def run_xdist(pytester, results, *args):
    """pytest -n 2, one test file per worker (--dist loadfile), in a subprocess."""
    planted_settings(pytester)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
        f"--perfmodel-results={results}", f"--perfmodel-threads={THREADS}", *args,
        timeout=300)


def two_workers_files(pytester, cnn_predicted_s: float) -> None:
    pytester.makepyfile(
        test_a=PLANTED.format(name="mlp_small", predicted_s=0.104),  # +4%: the baseline's
        test_b=PLANTED.format(name="cnn_resnet", predicted_s=cnn_predicted_s))


def e2e_run_files(results, key) -> list[str]:
    """The names of the run files that hold an E2E record (one per process)."""
    return [path.name for path in run_paths(results / key)
            if any(json.loads(line).get("kind") == "e2e" for line in run_lines(path))]


@pytest.mark.parametrize("cnn_predicted_s, fails", [(0.104, False), (0.108, True)])
def test_xdist_gates_once_on_the_controller_over_every_workers_results(
        pytester, planted_results, cnn_predicted_s, fails):
    """Each worker runs one workload. Before, the controller did not gate (a
    regression passed) and each worker counted the other's workload as missing."""
    pytest.importorskip("xdist")
    from perfmodel.gate.baseline import save_baseline

    results, key = planted_results
    save_baseline(results / key / "baseline-smoke.json", key,
                  {"mlp_small": BASE, "cnn_resnet": BASE}, {})
    two_workers_files(pytester, cnn_predicted_s)
    out = run_xdist(pytester, results, "-m", "e2e")
    text = out.stdout.str()
    assert out.ret == (pytest.ExitCode.TESTS_FAILED if fails else 0), text
    assert "missing" not in text and "produced no E2E result" not in text
    assert len(e2e_run_files(results, key)) == 2  # one run file per worker: both ran one
    out.stdout.fnmatch_lines([f"device {key} (planted test CPU), profile smoke",
                              "mlp_small *+4.0%*ok"])
    if fails:
        out.stdout.fnmatch_lines(["cnn_resnet *+8.0%*FAIL",
                                  "FAIL cnn_resnet: E2E error +8.00% outside baseline*",
                                  "FAIL perfmodel gate: 1 of 2 workload(s) failed (cnn_resnet)"])
    else:
        out.stdout.fnmatch_lines(["perfmodel gate: pass, 2 workload(s) within their baseline"])
        assert "FAIL" not in text
    assert text.count("perfmodel gate") == 1  # once, on the controller


def test_xdist_saves_one_baseline_of_every_workers_workloads(pytester, planted_results):
    pytest.importorskip("xdist")
    results, key = planted_results
    two_workers_files(pytester, 0.11)
    out = run_xdist(pytester, results, "-m", "e2e", "--perfmodel-save-baseline")
    assert out.ret == 0, out.stdout.str()
    saved = json.loads((results / key / "baseline-smoke.json").read_text())
    assert sorted(saved["workloads"]) == ["cnn_resnet", "mlp_small"]
    assert saved["workloads"]["cnn_resnet"]["mean"] == pytest.approx(0.1)
    assert saved["device_key"] == key
    out.stdout.fnmatch_lines(["baseline saved to *: 2 workloads, *"])


def test_xdist_collect_only_does_not_gate(pytester, planted_results):
    pytest.importorskip("xdist")
    results, key = planted_results
    plant_baseline(results, key, BASE)
    two_workers_files(pytester, 0.104)
    out = run_xdist(pytester, results, "-m", "e2e", "--collect-only")
    assert out.ret == 0, out.stdout.str()
    assert "perfmodel gate" not in out.stdout.str()


STABILITY_SUITE = """
import json
from types import SimpleNamespace

import pytest
import perfmodel.gate.stability

@pytest.mark.stability
def test_stability(perfmodel_session, monkeypatch):
    # planted pieces: no fit, trace or measurement; 100 ms measured, each
    # variant predicted at its own bias of 104 ms
    pm = perfmodel_session
    monkeypatch.setattr(pm, "_required_fit", lambda: SimpleNamespace(data_id=None, stale=()))
    monkeypatch.setattr(pm, "_build", lambda name: SimpleNamespace(step=None, items=1))
    monkeypatch.setattr(pm, "_trace", lambda name, step: name)
    monkeypatch.setattr(pm, "_shared_table", lambda: None)
    monkeypatch.setattr(pm, "_measure_workload", lambda name: 0.1)  # a failing error's repeat
    rounds_seen = []

    def measure_variants(step, items, graph, fit, table, device, variants, profile):
        rounds_seen.append(graph)
        biased = {v: 0.104 * max(perfmodel.gate.stability.variant_bias(v).values(), default=1.0)
                  for v in variants}
        return 0.1, biased, {v: (0.0, 0.0) for v in variants}

    monkeypatch.setattr(perfmodel.gate.stability, "measure_variants", measure_variants)
    pm.run_stability(3)
    assert rounds_seen == ["mlp_small"] * 3
    (path,) = (pm.store.dir / "stability").glob("*.json")
    saved = json.loads(path.read_text())
    assert saved["rounds"] == 3 and saved["run_id"] == pm.run_id
    assert saved["variants"]["none"]["failed_rounds"] == 0  # +4%: the baseline's mean
    assert saved["variants"]["linear=1.1"]["failed_rounds"] == 3  # +14.4%: caught each round
"""


def test_stability_rounds_run_through_run_rounds(pytester, planted_results):
    """The gate-stability experiment runs its rounds through
    :func:`perfmodel.gate.stability.run_rounds`: each round traced and measured once,
    the tally saved after them and its lines in the summary (all planted)."""
    results, key = planted_results
    plant_baseline(results, key, BASE)
    pytester.makepyfile(STABILITY_SUITE)
    out = run_plugin(pytester, results, "-m", "stability")
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines(["gate stability: 3 round(s);*", "stability tally written to *"])


def _session(tmp_path):
    from perfmodel.session import Options, Session
    from perfmodel.settings import Settings

    return Session(Options(None, "smoke", tmp_path, 1, False, 0.1, 0.02, False), Settings(),
                   tmp_path)


def test_worker_results_reach_the_controller_whole(tmp_path):
    """What a worker sends survives the trip (tuples, numpy numbers); the
    workloads gated are those every worker could build; lines are not repeated."""
    import numpy as np

    from perfmodel.e2e.result import IterationTiming, MeasuredIteration
    from perfmodel.simulate.result import Coverage, IterationPrediction
    from pytest_perfmodel.workers import merge_worker_output, worker_output

    prediction = IterationPrediction(
        np.float64(0.104), breakdown_s={"gemm": 0.05, "host overhead": 0.01},
        coverage=Coverage(0.9, 0.08, 0.02, 0.1), unmodelled=[("bwd:PowBackward0", 2, 0.017)],
        beyond_fit={"linear.forward": (3, 94.2)})
    result = MeasuredIteration("mlp_small", IterationTiming(0.1, 0.001, 15, 3, 2560.0),
                               prediction, overhead_workloads=("mlp_small", "cnn_resnet"),
                               fit_data="f1", traced_gaps_s=0.011)
    first, second = _session(tmp_path), _session(tmp_path)
    first.e2e.append(result)
    first.e2e_expected = {"mlp_small"}  # it found cnn_resnet cannot be built
    first.gate.lines.append("WARN cnn_resnet: not run, so not gated (no module named x)")
    first.notes.append("a note")
    second.e2e_expected = {"mlp_small", "cnn_resnet"}
    second.notes.append("a note")

    controller = _session(tmp_path)
    merge_worker_output(controller, worker_output(first))
    merge_worker_output(controller, worker_output(second))
    assert controller.e2e == [result]
    assert type(controller.e2e[0].predicted_s) is float
    assert controller.e2e[0].beyond_fit == {"linear.forward": (3, 94.2)}
    assert controller.e2e_expected == {"mlp_small"}
    assert controller.gate.lines == first.gate.lines and controller.notes == ["a note"]
    assert controller.workers_reported == 2
