"""The replay gate (perfmodel/gate/replay.py, suites/test_replay.py, `pytest -m replay`):
committed replay cases predicted again with today's code pass unchanged, and a planted
2% bias in one op's predictor or in the host-overhead model fails them, on a CPU corpus
and on a CUDA device's, with no torch.cuda; the baseline is plain JSON; the fit is the
committed one or a deterministic refit, and the summary says which."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.gate.replay import (ReplayBaseline, ReplayEntry, ReplayGate, check_replay,
                                   choose_fit, judge, load_replay_baseline, replay_items,
                                   save_replay_baseline)
from perfmodel.replay.case import MeasuredTiming, ReplayCase, save_case
from perfmodel.replay.rerun import Replayed
from perfmodel.store import paths
from perfmodel.trace.graph import Graph, Task
from perfmodel.trace.parse import Kernel
from tests.helpers import REPO, THREADS, forbid_cuda, run_plugin

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")

CUDA_KEY = "cuda-planted-80gb"
SUITE = (REPO / "suites" / "test_replay.py").read_text()


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The task graph of a real capture of the tiny ``mlp_small`` on the CPU."""
    from perfmodel.e2e.single import capture_graph
    from perfmodel.workloads import build_workload

    step = build_workload("mlp_small", "cpu", size="tiny")
    return capture_graph(step.step, tmp_path_factory.mktemp("traces"), "mlp_small", "cpu")


def _case(graph: Graph, workload: str, key: str, on_device: bool = False,
          threads: int | None = THREADS, measured_s: float = 0.01) -> ReplayCase:
    return ReplayCase(workload, key, on_device, 3e10, threads, [graph],
                      MeasuredTiming(measured_s, measured_s / 50, 30, 5, 1000.0),
                      env={"device_key": key, "threads": threads}, config={"size": "tiny"})


def _linear_params(graph: Graph) -> dict:
    return next(dict(t.params) for t in graph.op_tasks() if t.op == "linear")


def _cuda_case(graph: Graph, workload: str = "gpu_model") -> ReplayCase:
    """A synthetic CUDA case: one linear op as two kernels between two host gaps."""
    linear = Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                  dtype="float32", params=_linear_params(graph), measured_s=2e-5,
                  kernels=[Kernel("a", 7, 0.0, 3e-5, 0.0, 1e-6),
                           Kernel("b", 7, 3e-5, 1e-5, 1e-6, 1e-6)])
    gap = Task("overhead", "T1.op.op", "host overhead", measured_s=5e-6)
    return _case(Graph([gap, linear, gap], 6e-5), workload, CUDA_KEY, on_device=True,
                 threads=None, measured_s=7e-5)


#: FLOP/s of the planted linear predictor (before :func:`corpus` rebalances it): slow
#: enough that the tiny mlp's linear ops take a large share of its predicted iteration.
LINEAR_FLOPS = 2e7


def _linear_records(flops_per_s: float = LINEAR_FLOPS):
    from perfmodel.ops import get_op

    linear = get_op("linear")
    cases = [c for direction in ("forward", "backward")
             for c in [c for c in linear.cases("quick") if c.direction == direction][:10]]
    return [{"kind": "measurement", "op": "linear", "direction": c.direction,
             "dtype": c.dtype, "config": c.params, "replicate": r, "run_id": "planted",
             "env": {"threads": THREADS},
             "measurement": {"median_s": 5e-6 + linear.flops(c.params, c.direction)
                             / flops_per_s}}
            for c in cases for r in (0, 1)]


@pytest.fixture
def linear_fit(planted_results):
    """``planted_results`` plus a 1-thread fit of linear (forward and backward at
    5 µs + FLOPs / :data:`LINEAR_FLOPS`) saved as ``predictors/planted``."""
    root, key = planted_results
    _save_linear_fit(root, key, LINEAR_FLOPS)
    return root, key


def _save_linear_fit(root, key: str, flops_per_s: float) -> None:
    from perfmodel.fit.fitting import fit_predictors, save_fit
    from perfmodel.store.results import ResultStore
    from tests.helpers import planted_spec

    shutil.rmtree(paths.fit_dir(paths.device_dir(root, key), "planted"), ignore_errors=True)
    save_fit(fit_predictors(_linear_records(flops_per_s), planted_spec(root, key)),
             ResultStore(root, key), "planted", ["planted"])


def _rebalance_linear(case: ReplayCase, root, key: str) -> None:
    """Refit the planted linear so that it takes about half of ``case``'s predicted
    iteration and the host-overhead model about the rest, whatever this host's
    traced gaps: so a 2% bias in either moves the error by about 1 pp."""
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_fit
    from perfmodel.replay.rerun import replay_case

    folder = paths.device_dir(root, key)
    table, _ = shared_table(folder, case.bandwidth_Bps)
    replayed = replay_case(case, load_fit(paths.fit_dirs(folder)[-1]), table, attribution=True)
    linear = sum(f.predicted_s for f in replayed.families if f.name == "gemm")
    rest = replayed.predicted_s - linear
    assert 0 < linear and 0 < rest, replayed.families
    _save_linear_fit(root, key, LINEAR_FLOPS * linear / rest)


def _measured_as_predicted(case: ReplayCase, folder) -> ReplayCase:
    """``case`` with its measured time set so that its prediction is 5% above it (the
    planted fit is no model of this host: so the planted biases move the error as
    they would in a well-modelled corpus)."""
    from dataclasses import replace

    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_fit
    from perfmodel.replay.rerun import replay_case

    table, _ = shared_table(folder, case.bandwidth_Bps)
    fit = load_fit(paths.fit_dirs(folder)[-1])
    predicted = replay_case(case, fit, table).predicted_s
    return replace(case, measured=MeasuredTiming(predicted / 1.05, predicted / 50, 30, 5))


def _copy_fit(root, key: str, to_key: str) -> None:
    fit = paths.fit_dirs(root / key)[-1]
    target = paths.fit_dir(paths.device_dir(root, to_key), fit.name)
    target.mkdir(parents=True)
    for member in fit.iterdir():
        (target / member.name).write_bytes(member.read_bytes())


@pytest.fixture
def corpus(captured, linear_fit):
    """A results root with the planted 1-thread linear fit, the CPU device's overhead
    table and its ``mlp_small`` case, and a CUDA device (a copy of the fit, no
    overhead table) with a synthetic case. Returns (root, cpu key)."""
    from perfmodel.trace.overheads import samples_from_graph, save_samples

    root, key = linear_fit
    folder = paths.device_dir(root, key)
    save_samples(paths.overhead_file(folder, "mlp_small"),
                 samples_from_graph("mlp_small", captured, 3e10))
    _rebalance_linear(_case(captured, "mlp_small", key), root, key)
    save_case(paths.replay_file(folder, "mlp_small"),
              _measured_as_predicted(_case(captured, "mlp_small", key), folder))
    _copy_fit(root, key, CUDA_KEY)
    cuda = paths.device_dir(root, CUDA_KEY)
    save_case(paths.replay_file(cuda, "gpu_model"),
              _measured_as_predicted(_cuda_case(captured), cuda))
    return root, key


#: The suite's accuracy-gate item: one skipped item when no fit's training runs are
#: committed, as in these corpora (tests/test_accuracy_gate.py gates fits).
NO_FIT_TO_RESCORE = 1


def _suite(pytester) -> None:
    pytester.makepyfile(test_replay=SUITE)


def _fails(out) -> list[str]:
    """The distinct FAIL lines (an item's own report repeats its gate line)."""
    return list(dict.fromkeys(line for line in out.stdout.lines if line.startswith("FAIL")))


def _section_end(out) -> str:
    """The last line of the perfmodel section of the terminal summary."""
    lines = out.stdout.lines
    start = next(i for i, line in enumerate(lines) if "= perfmodel =" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[end - 1]


# -- through pytest ------------------------------------------------------------------------

def test_unchanged_code_passes_and_a_planted_bias_fails(pytester, corpus, monkeypatch):
    forbid_cuda(monkeypatch, "the replay gate")
    root, key = corpus
    _suite(pytester)
    out = run_plugin(pytester, root, "-m", "replay")  # no baseline yet: new, not gated
    assert out.ret == 0, out.stdout.str()
    out.stdout.fnmatch_lines([f"no replay baseline at {root / key / 'replay-baseline.json'}*"])
    out = run_plugin(pytester, root, "-m", "replay", "--perfmodel-save-replay-baseline")
    assert out.ret == 0, out.stdout.str()
    out.assert_outcomes(passed=2, skipped=NO_FIT_TO_RESCORE)
    for device in (key, CUDA_KEY):
        saved = load_replay_baseline(paths.replay_baseline_file(root / device))
        assert saved is not None and saved.fits == ("predictors/planted",)
    out.stdout.fnmatch_lines([f"replay {key}: 1 case(s); fit: committed predictors/planted"])

    for _ in range(2):  # unchanged code passes, every time
        out = run_plugin(pytester, root, "-m", "replay")
        assert out.ret == 0, out.stdout.str()
        out.assert_outcomes(passed=2, skipped=NO_FIT_TO_RESCORE)
        assert _section_end(out).startswith("perfmodel replay gate: pass, 2 case(s) within "
                                            "0.50 pp"), out.stdout.str()

    out = run_plugin(pytester, root, "-m", "replay", "--perfmodel-plant-bias", "linear=1.02")
    assert out.ret == pytest.ExitCode.TESTS_FAILED, out.stdout.str()
    out.assert_outcomes(failed=2, skipped=NO_FIT_TO_RESCORE)
    fails = _fails(out)
    print("\n".join(fails))
    assert any(f.startswith(f"FAIL {key}/mlp_small: replayed ") for f in fails), fails
    assert any(f.startswith(f"FAIL {CUDA_KEY}/gpu_model: replayed ") for f in fails), fails
    assert all("tolerance 0.50 pp" in f for f in fails if "replayed" in f), fails
    decision = [line for line in out.stdout.lines if line.startswith("FAIL perfmodel replay")]
    assert len(decision) == 1
    assert decision[0].startswith("FAIL perfmodel replay gate: 2 of 2 case(s) failed (")
    assert f"{CUDA_KEY}/gpu_model" in decision[0] and f"{key}/mlp_small" in decision[0]
    assert _section_end(out) == decision[0]  # the gate's decision ends the summary


def test_a_planted_host_overhead_bias_fails(pytester, corpus):
    root, key = corpus
    _suite(pytester)
    assert run_plugin(pytester, root, "-m", "replay", "--perfmodel-save-replay-baseline",
                      "-k", "mlp_small").ret == 0
    out = run_plugin(pytester, root, "-m", "replay", "-k", "mlp_small",
                     "--perfmodel-plant-bias", "overhead=1.02")
    assert out.ret == pytest.ExitCode.TESTS_FAILED, out.stdout.str()
    fails = _fails(out)
    print("\n".join(fails))
    assert fails[0].startswith(f"FAIL {key}/mlp_small: replayed "), fails


def test_a_cuda_corpus_alone_fails_a_planted_linear_bias(pytester, captured, linear_fit):
    """A committed GPU corpus gates on a CPU machine (its linear kernels dominate)."""
    root, key = linear_fit
    _copy_fit(root, key, CUDA_KEY)
    cuda = paths.device_dir(root, CUDA_KEY)
    save_case(paths.replay_file(cuda, "gpu_model"),
              _measured_as_predicted(_cuda_case(captured), cuda))
    _suite(pytester)
    assert run_plugin(pytester, root, "-m", "replay", "--perfmodel-save-replay-baseline").ret == 0
    assert run_plugin(pytester, root, "-m", "replay").ret == 0
    out = run_plugin(pytester, root, "-m", "replay", "--perfmodel-plant-bias", "linear=1.02")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    (line,) = [f for f in _fails(out) if f.startswith(f"FAIL {CUDA_KEY}/gpu_model")]
    assert "tolerance 0.50 pp" in line


def test_a_corrupted_case_is_one_error_naming_the_file(pytester, corpus):
    root, key = corpus
    _suite(pytester)
    assert run_plugin(pytester, root, "-m", "replay", "--perfmodel-save-replay-baseline").ret == 0
    bad = paths.replay_file(root / key, "broken")
    bad.write_bytes(b"not gzip")
    out = run_plugin(pytester, root, "-m", "replay")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.assert_outcomes(passed=2, failed=1, skipped=NO_FIT_TO_RESCORE)
    text = out.stdout.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text
    mine = [f for f in _fails(out) if f.startswith(f"FAIL {key}/broken")]
    assert mine == [f"FAIL {key}/broken: {bad}: not a complete gzip file (Not a gzipped file "
                    f"(b'no'))"], _fails(out)


def test_an_unreadable_baseline_fails_each_case_naming_it(pytester, corpus):
    root, key = corpus
    path = paths.replay_baseline_file(root / key)
    path.write_text('{"format": "perfmodel.replay-baseline", "schema": 1, "device_key": "x", '
                    '"workloads": {"mlp_small": {"error": NaN, "predicted_s": 1}}}')
    _suite(pytester)
    out = run_plugin(pytester, root, "-m", "replay", "-k", "mlp_small")
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    assert _fails(out)[0].startswith(f"FAIL {key}/mlp_small: {path}: ")


# -- the library -----------------------------------------------------------------------------

def _replayed(error: float | None, predicted_s: float = 1.0, workload: str = "w",
              fit: str | None = "f") -> Replayed:
    measured = None if error is None else predicted_s / (1 + error)
    return Replayed(workload, "cpu-x", predicted_s, measured, None, fit)


def _entry(error: float | None, predicted_s: float = 1.0) -> ReplayEntry:
    return ReplayEntry(error, predicted_s, None if error is None else predicted_s / (1 + error),
                       "f")


def test_judge_with_planted_numbers():
    tol = 0.005
    assert judge("d", _replayed(0.100), _entry(0.100), tol).status == "ok"
    assert judge("d", _replayed(0.104), _entry(0.100), tol).status == "ok"
    grown = judge("d", _replayed(0.107), _entry(0.100), tol)
    assert grown.status == "regressed" and grown.failed
    assert grown.line() == ("FAIL d/w: replayed error +10.70% outside baseline +10.00% "
                            "(tolerance 0.50 pp)")
    better = judge("d", _replayed(0.090), _entry(0.100), tol)  # moved, though better
    assert better.status == "moved" and better.line().startswith(
        "FAIL d/w: replayed prediction moved -1.00 pp")
    assert judge("d", _replayed(0.090), _entry(0.100), tol,
                 fail_on_improvement=False).status == "ok"
    # crossing zero: |error| shrinks from 10% to 4%, but the prediction moved 14 pp
    assert judge("d", _replayed(-0.04), _entry(0.10), tol).status == "moved"
    assert judge("d", _replayed(0.2), None, tol).status == "new"
    # a case without a measured time: its prediction's relative change
    assert judge("d", _replayed(None, 1.004), _entry(None), tol).status == "ok"
    assert judge("d", _replayed(None, 1.006), _entry(None), tol).status == "moved"
    other_fit = judge("d", _replayed(0.2, fit="refit:abc"), _entry(0.1), tol)
    assert "fit refit:abc, baseline's f" in other_fit.line()


@given(base=st.floats(-0.5, 0.5), change=st.floats(0.0, 0.98),
       sign=st.sampled_from([-1, 1]), tol=st.sampled_from([0.001, 0.005, 0.02]))
def test_a_change_below_the_tolerance_passes(base, change, sign, tol):
    verdict = judge("d", _replayed(base + sign * change * tol), _entry(base), tol)
    assert verdict.status == "ok", verdict.line()


@given(base=st.floats(-0.5, 0.5), change=st.floats(1.02, 40.0),
       sign=st.sampled_from([-1, 1]), tol=st.sampled_from([0.001, 0.005, 0.02]),
       on_improvement=st.booleans())
def test_a_change_above_the_tolerance_fails_unless_an_allowed_improvement(
        base, change, sign, tol, on_improvement):
    new = base + sign * change * tol
    verdict = judge("d", _replayed(new), _entry(base), tol, fail_on_improvement=on_improvement)
    if on_improvement or abs(new) > abs(base) + 1e-12:
        assert verdict.failed, verdict.line()
    if abs(new) - abs(base) > tol * 1.0001:
        assert verdict.status == "regressed"


def test_check_replay_against_its_own_baseline_and_a_planted_one(corpus, tmp_path, captured):
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.replay.rerun import replay_case
    from perfmodel.store.results import ResultStore

    root, key = corpus
    fit, _ = load_latest_fit(ResultStore(root, key))
    table, _ = shared_table(root / key, 3e10)
    case = _measured_as_predicted(_case(captured, "mlp_small", key), root / key)
    now = replay_case(case, fit, table, "predictors/planted")
    path = save_replay_baseline(tmp_path / "b.json", key, [now])
    data = json.loads(path.read_text())
    assert data["workloads"]["mlp_small"]["predicted_s"] == now.predicted_s
    assert data["fits"] == ["predictors/planted"] and data["device_key"] == key
    baseline = load_replay_baseline(path)
    assert check_replay(case, fit, table, baseline, 0.005).status == "ok"
    assert check_replay(case, fit, table, baseline, 0.005,
                        bias={"linear": 1.02}).status in ("regressed", "moved")
    planted = ReplayBaseline(key, {"mlp_small": ReplayEntry(now.error - 0.01 * (
        1 if now.error > 0 else -1), now.predicted_s, now.measured_s, "x")})
    assert check_replay(case, fit, table, planted, 0.005).status == "regressed"
    assert check_replay(case, fit, table, planted, 0.02).status == "ok"


@pytest.mark.parametrize("text, what", [
    ("not json", "not readable JSON"),
    ('{"error": NaN}', "not readable JSON"),
    ("[]", "top level is a JSON list"),
    ('{"format": "other"}', "'format'"),
    ('{"format": "perfmodel.replay-baseline", "schema": 9}', "'schema' = 9"),
    ('{"format": "perfmodel.replay-baseline", "schema": 1, "device_key": "d", '
     '"workloads": {"w": {"error": "1%", "predicted_s": 1}}}', "workloads.w.error"),
    ('{"format": "perfmodel.replay-baseline", "schema": 1, "device_key": "d", '
     '"workloads": {"w": {"error": 0.1}}}', "workloads.w.predicted_s"),
])
def test_a_bad_replay_baseline_is_one_error_naming_the_file(tmp_path, text, what):
    path = tmp_path / "replay-baseline.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_replay_baseline(path)
    assert str(info.value).startswith(f"{path}: ") and what in str(info.value)
    assert load_replay_baseline(tmp_path / "none.json") is None


def test_replay_items_list_every_device_with_cases(corpus):
    root, key = corpus
    assert replay_items(root) == sorted([(key, "mlp_small"), (CUDA_KEY, "gpu_model")])


def test_a_stale_committed_fit_is_refitted_from_the_committed_runs(corpus, captured):
    """A committed fit chosen among other predictor kinds than today's is stale: the
    gate refits linear from the committed run, the same way twice, and says so."""
    from perfmodel.store.results import ResultStore

    root, key = corpus
    store = ResultStore(root, key)
    writer = store.open_run({"threads": THREADS}, "smoke", "planted")
    for record in _linear_records():
        writer.append({k: v for k, v in record.items() if k != "run_id"})
    writer.close()
    index = paths.fit_index(paths.fit_dir(store.dir, "planted"))
    data = json.loads(index.read_text())
    for entry in data["entries"]:
        entry["candidate_kinds"] = ["an-old-kind"]
    index.write_text(json.dumps(data))
    case = _case(captured, "mlp_small", key)
    first = choose_fit(store.dir, THREADS, [case])
    assert first.fit is not None and first.name.startswith("refit:")
    assert first.summary.startswith("fit: refitted from 1 committed runs (committed fit stale: "
                                    "2 predictor(s) the cases need: linear.")
    again = choose_fit(store.dir, THREADS, [case])
    gate = ReplayGate(root)
    assert gate.check(key, "mlp_small").status == "new"
    lines, failed = gate.finish()
    assert not failed and lines[0].startswith(f"replay {key}: 1 case(s); fit: refitted from 1 ")
    from perfmodel.e2e.single import shared_table
    from perfmodel.replay.rerun import replay_case

    table, _ = shared_table(store.dir, 3e10)
    assert replay_case(case, first.fit, table).predicted_s == \
        replay_case(case, again.fit, table).predicted_s


# -- CI: the repository's own committed corpus ------------------------------------------------

def _committed_gated_devices() -> list[str]:
    root = paths.default_root(REPO)
    return [key for key, _ in sorted(set(replay_items(root)))
            if paths.replay_baseline_file(paths.device_dir(root, key)).is_file()]


def test_committed_corpus_replays_within_baseline():
    """`pytest -m replay` over the repository's results/ passes (read only), in < 90 s."""
    devices = sorted(set(_committed_gated_devices()))
    if not devices:
        pytest.skip("no device under results/ has both replay cases (replay/*.json.gz) and a "
                    "replay baseline (replay-baseline.json) committed")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "replay", "suites/test_replay.py",
                          "-k", "not test_replay_accuracy",  # tests/test_accuracy_gate.py's
                          "-p", "no:cacheprovider", "-q"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    took = time.monotonic() - start
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert took < 90, f"the replay gate over {devices} took {took:.0f} s (budget 90 s)"


def test_a_worker_gates_hand_their_verdicts_to_the_controller(corpus):
    """Under pytest-xdist each worker replays some cases; the controller's gate,
    given their plain data, decides and saves as one gate would."""
    root, key = corpus
    workers = [ReplayGate(root, save=True), ReplayGate(root, save=True)]
    workers[0].check(key, "mlp_small")
    workers[1].check(CUDA_KEY, "gpu_model")
    controller = ReplayGate(root, save=True)
    for worker in workers:
        controller.merge_plain(json.loads(json.dumps(worker.to_plain())))
    lines, failed = controller.finish()
    assert not failed, lines
    assert load_replay_baseline(paths.replay_baseline_file(root / key)).workloads.keys() == \
        {"mlp_small"}
    gate = ReplayGate(root)
    for device, workload in replay_items(root):
        assert gate.check(device, workload).status == "ok"


#: The committed GPU corpus the next test gates (a campaign's full-size captures).
GPU_CORPUS = "cuda-h200-141gb"


def test_the_committed_gpu_corpus_fails_a_planted_linear_bias(pytester, monkeypatch):
    """The committed H200 corpus, gated through pytest on a CPU: unchanged code
    passes; a 2% bias planted in ``linear`` fails every workload it moves."""
    import shutil

    forbid_cuda(monkeypatch, "the replay gate")
    committed = paths.device_dir(paths.default_root(REPO), GPU_CORPUS)
    if not paths.replay_baseline_file(committed).is_file():
        pytest.skip(f"no replay baseline committed for {GPU_CORPUS}")
    root = pytester.path / "results"
    device = paths.device_dir(root, GPU_CORPUS)
    for part in (paths.replay_dir(committed), paths.overheads_dir(committed)):
        shutil.copytree(part, device / part.name)
    shutil.copy(paths.replay_baseline_file(committed), paths.replay_baseline_file(device))
    newest = paths.fit_dirs(committed)[-1]  # the fit replay picks
    shutil.copytree(newest, paths.predictors_dir(device) / newest.name)
    _suite(pytester)
    cases = len(paths.replay_files(device))
    out = run_plugin(pytester, root, "-m", "replay")
    assert out.ret == 0, out.stdout.str()
    out.assert_outcomes(passed=cases, skipped=NO_FIT_TO_RESCORE)
    out = run_plugin(pytester, root, "-m", "replay", "--perfmodel-plant-bias", "linear=1.02")
    assert out.ret == pytest.ExitCode.TESTS_FAILED, out.stdout.str()
    failed = {f.split()[1].split("/")[1].rstrip(":") for f in _fails(out) if "replayed" in f}
    assert {"hf_gpt2", "transformer_encoder", "transformer_decoder", "mlp_small"} <= failed, failed
