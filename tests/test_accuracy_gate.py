"""The accuracy gate on committed data (perfmodel/gate/accuracy.py, `pytest -m replay`):
each committed fit's predictors, re-scored with today's fitting code on the runs the
fit was trained on, pass unchanged and fail when a predictor gets worse by more than
the tolerance; fits whose runs are not committed are named, not scored; the
repository's own committed fits pass."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfmodel.gate.accuracy import AccuracyGate, accuracy_items, gated_fits, item_id
from perfmodel.store import paths
from tests.helpers import REPO, THREADS, run_plugin

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")

SUITE = (REPO / "suites" / "test_replay.py").read_text()
RUN = "20261207T000000Z-1-abcd"


def _records():
    """linear forward and backward, ten configs each, at 5 µs + FLOPs / 1 GFLOP/s
    with a config-dependent error of up to ±20% (so the held-out GMAE is not 0)."""
    from perfmodel.measure.allocator import keep_freed_memory
    from perfmodel.ops import get_op

    policy = keep_freed_memory()  # what a session in this process sets: its runs qualify
    linear = get_op("linear")
    cases = [c for direction in ("forward", "backward")
             for c in [c for c in linear.cases("quick") if c.direction == direction][:10]]
    return [{"kind": "measurement", "op": "linear", "direction": c.direction,
             "dtype": c.dtype, "config": c.params, "replicate": r,
             "env": {"threads": THREADS, "cpu_allocator": policy},
             "measurement": {"median_s": (5e-6 + linear.flops(c.params, c.direction) / 1e9)
                             * (1 + 0.2 * math.sin(3 * i))}}
            for i, c in enumerate(cases) for r in (0, 1)]


@pytest.fixture
def committed(planted_results):
    """A results root with one committed run of linear measurements and the fit
    ``perfmodel refit`` makes of it. Returns (root, key)."""
    from perfmodel.fit.fitting import refit
    from perfmodel.store.results import ResultStore

    root, key = planted_results
    store = ResultStore(root, key)
    writer = store.open_run({"threads": THREADS, "device_key": key}, run_id=RUN)
    for record in _records():
        writer.append(record)
    writer.close()
    refit(store, key, THREADS)
    return root, key


def test_a_fit_on_committed_runs_is_gated_and_one_on_pruned_runs_is_named(committed):
    root, key = committed
    fits, notes = gated_fits(root)
    assert [(f.device_key, f.threads, f.runs) for f in fits] == [(key, THREADS, (RUN,))]
    assert sorted(fits[0].entries) == ["linear.backward", "linear.forward"]
    assert accuracy_items(root) == [(key, THREADS, "linear.backward"),
                                    (key, THREADS, "linear.forward")]
    assert notes == []
    paths.run_files(paths.device_dir(root, key))[0].unlink()  # the run pruned
    fits, notes = gated_fits(root)
    assert fits == []
    assert len(notes) == 1 and notes[0].startswith(f"accuracy {key}/{THREADS}t: fit ")
    assert notes[0].endswith("not re-scored: 1 of the 1 runs it was trained on are not committed")


def test_unchanged_code_reproduces_the_committed_gmae_exactly(committed):
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.store.results import ResultStore

    root, key = committed
    fit, _ = load_latest_fit(ResultStore(root, key), threads=THREADS)
    gate = AccuracyGate(root)
    for direction in ("forward", "backward"):
        verdict = gate.check(key, THREADS, f"linear.{direction}")
        assert verdict.status == "ok" and not verdict.failed
        assert verdict.gmae == fit.accuracy[("linear", direction)].gmae > 0
    lines, failed = gate.finish()
    assert not failed
    assert lines[0].startswith(f"accuracy {key}/{THREADS}t: 2 predictor(s) of fit ")
    assert "largest rise +0.00 pp" in lines[0]
    assert lines[-1] == ("perfmodel accuracy gate: pass, 2 predictor(s) within 1.00 pp of "
                         "their committed GMAE")


@pytest.mark.parametrize(("factor", "fails"), [(1.0, False), (1.25, True), (0.75, True)])
def test_a_planted_error_in_the_predictions_fails_the_gate(committed, factor, fails):
    root, key = committed
    gate = AccuracyGate(root, bias={"linear.forward": factor})
    forward = gate.check(key, THREADS, "linear.forward")
    backward = gate.check(key, THREADS, "linear.backward")
    assert forward.failed is fails and backward.status == "ok"
    lines, failed = gate.finish()
    assert failed is fails
    if fails:
        assert forward.line().startswith(f"FAIL accuracy {key}/{THREADS}t/linear.forward: "
                                         f"held-out GMAE ")
        assert f"`perfmodel refit --device {key} --threads {THREADS} --same-runs`" in forward.line()
        assert lines[-1].startswith("FAIL perfmodel accuracy gate: 1 of 2 predictor(s) failed")


def test_a_predictor_that_can_no_longer_be_scored_fails(committed, monkeypatch):
    import perfmodel.fit.fitting as fitting

    root, key = committed
    monkeypatch.setattr(fitting, "MIN_CONFIGS", 50)
    verdict = AccuracyGate(root).check(key, THREADS, "linear.forward")
    assert verdict.status == "unscored" and verdict.failed
    assert "need at least 50" in verdict.line()


def test_the_gate_is_a_pytest_item_per_predictor_and_a_planted_bias_fails_it(pytester,
                                                                          committed):
    root, key = committed
    pytester.makepyfile(test_replay=SUITE)
    out = run_plugin(pytester, root, "-m", "replay")
    assert out.ret == 0, out.stdout.str()
    out.assert_outcomes(passed=2, skipped=1)  # skipped: no replay case here
    ids = [item_id(key, THREADS, f"linear.{d}") for d in ("backward", "forward")]
    out.stdout.fnmatch_lines(["*perfmodel accuracy gate: pass, 2 predictor(s)*"])
    out = run_plugin(pytester, root, "-m", "replay", "--perfmodel-plant-bias", "linear=1.3")
    assert out.ret == 1
    out.assert_outcomes(failed=2, skipped=1)
    out.stdout.fnmatch_lines([f"FAIL accuracy {ids[0]}: held-out GMAE *",
                              "FAIL perfmodel accuracy gate: 2 of 2 predictor(s) failed*"])
    assert "During handling" not in out.stdout.str()  # one clean line per failed item


# -- CI: the repository's own committed fits ---------------------------------------------------

RESULTS = paths.default_root(REPO)
COMMITTED, NOT_GATED = gated_fits(RESULTS)


def test_the_main_devices_fits_are_gated():
    """The newest fits of this project's CPU and GPU devices have their runs committed."""
    assert {f.device_key for f in COMMITTED} >= {"cpu-intel-xeon-f6m167-2c",
                                                 "cuda-h100-sxm-80gb", "cuda-h200-141gb"}


@pytest.mark.parametrize("fit", COMMITTED, ids=[f.label for f in COMMITTED])
def test_committed_fits_score_within_their_committed_gmae(fit):
    gate = AccuracyGate(RESULTS)
    verdicts = [gate.check(fit.device_key, fit.threads, target) for target in sorted(fit.entries)]
    bad = [v.line() for v in verdicts if v.failed]
    assert not bad, "\n".join(bad)
    assert len(verdicts) == len(fit.entries) > 0


def test_planted_bias_parsing_is_shared_with_the_replay_gate():
    """A bias on an op applies to its warm direction too."""
    gate = AccuracyGate(Path("."), bias={"embedding_bag_sum": 1.1, "linear.backward": 0.9})
    assert gate._factor("embedding_bag_sum.backward_warm") == 1.1
    assert gate._factor("linear.backward") == 0.9
    assert gate._factor("linear.forward") == 1.0


def test_refit_same_runs_trains_on_the_newest_fits_runs_only(committed, capsys):
    """A run added after the fit is left out; a pruned training run is one clear error."""
    from perfmodel.cli.main import main
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.store.results import ResultStore

    root, key = committed
    store = ResultStore(root, key)
    writer = store.open_run({"threads": THREADS, "device_key": key},
                            run_id="20261207T010000Z-2-beef")
    for record in _records()[:4]:
        writer.append(record)
    writer.close()
    args = ["refit", "--results", str(root), "--device", key, "--threads", str(THREADS)]
    assert main([*args, "--same-runs"]) == 0
    fit, _ = load_latest_fit(store, threads=THREADS)
    assert fit.data_runs == (RUN,)
    assert main(args) == 0  # without it: every run of that thread count
    fit, _ = load_latest_fit(store, threads=THREADS)
    assert fit.data_runs == (RUN, "20261207T010000Z-2-beef")
    next(p for p in paths.run_files(store.dir) if paths.run_id_of(p) == RUN).unlink()
    capsys.readouterr()
    assert main([*args, "--same-runs"]) != 0
    err = capsys.readouterr().err
    assert "1 of the 2 runs fit " in err and f"(first: {RUN})" in err


# -- a fresh sweep's threshold: the previous fit's GMAE plus fresh_gmae_slack ------------------

FRESH_SUITE = """
import pytest
from pytest_perfmodel.suite import test_accuracy  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("linear")
"""


def _add_run(root, key: str, run_id: str) -> None:
    from perfmodel.store.results import ResultStore

    writer = ResultStore(root, key).open_run({"threads": THREADS, "device_key": key},
                                             run_id=run_id)
    for record in _records():
        writer.append(record)
    writer.close()


def test_a_fresh_sweep_may_not_score_worse_than_the_previous_fit_plus_the_slack(pytester,
                                                                               committed):
    """The same data measured again passes (its GMAE equals the previous fit's); against a
    previous fit that scored 3 points better, with a 1-point slack, the item fails naming
    that fit, though the op's own threshold (15%) would pass it."""
    import json

    root, key = committed
    pytester.makepyfile(test_fresh=FRESH_SUITE)
    pytester.makefile(".toml", pyproject="[tool.perfmodel]\nfresh_gmae_slack = 0.01\n")
    _add_run(root, key, "20261207T010000Z-2-beef")
    out = run_plugin(pytester, root, "-m", "accuracy", "--perfmodel-profile", "quick")
    assert out.ret == 0, out.stdout.str()
    out.assert_outcomes(passed=2)

    newest = paths.fit_dirs(paths.device_dir(root, key))[-1]
    index = json.loads(paths.fit_index(newest).read_text())
    entry = next(e for e in index["entries"] if e["direction"] == "forward")
    gmae = entry["accuracy"]["gmae"]
    assert 0.04 < gmae < 0.14  # so the planted previous score is what fails it
    entry["accuracy"]["gmae"] = gmae - 0.03
    paths.fit_index(newest).write_text(json.dumps(index))
    _add_run(root, key, "20261207T020000Z-3-cafe")
    out = run_plugin(pytester, root, "-m", "accuracy", "--perfmodel-profile", "quick")
    assert out.ret == 1
    out.assert_outcomes(passed=1, failed=1)
    out.stdout.fnmatch_lines([f"*linear.forward: held-out GMAE {gmae:.1%} > threshold "
                              f"{gmae - 0.02:.1%} (*; the previous fit {newest.name} scored "
                              f"{gmae - 0.03:.1%} + slack 1 pp)"])


def test_fresh_threshold_rule():
    from perfmodel.settings import Settings

    s = Settings(default_gmae_threshold=0.3, fresh_gmae_slack=0.15)
    assert s.fresh_threshold("linear", "forward", "quick", None, 20) == 0.3
    assert s.fresh_threshold("linear", "forward", "quick", (0.05, 20), 20) == pytest.approx(0.2)
    assert s.fresh_threshold("linear", "forward", "quick", (0.2, 20), 20) == 0.3
    assert s.fresh_threshold("linear", "forward", "quick", (0.05, 19), 20) == 0.3  # other grid
    assert s.fresh_threshold("linear", "forward", "smoke", (0.0, 20), 20) == s.smoke_gmae_threshold


def test_with_no_fit_to_re_score_the_item_skips_saying_why(pytester, planted_results):
    root, _ = planted_results
    pytester.makepyfile(test_replay=SUITE)
    out = run_plugin(pytester, root, "-m", "replay", "-k", "accuracy", "-rs")
    assert out.ret == 0
    out.stdout.fnmatch_lines(["SKIPPED*no committed fit under * has all its training runs "
                              "committed: no predictor to re-score"])


def test_the_previous_fit_is_the_newest_trained_on_other_runs(committed):
    """A fit of the same runs (another xdist worker's, or a --same-runs refit) is
    not the previous fit: the one before the new data is."""
    from perfmodel.fit.fitting import recorded_accuracy, refit
    from perfmodel.store.results import ResultStore

    root, key = committed
    folder = paths.device_dir(root, key)
    first = paths.fit_dirs(folder)[-1].name
    _add_run(root, key, "20261207T010000Z-2-beef")
    store = ResultStore(root, key)
    second, _, _ = refit(store, key, THREADS)
    refit(store, key, THREADS, same_runs=True)  # the same runs again, a newer fit
    name, entries = recorded_accuracy(folder, THREADS, second.data_runs)
    assert name == first and set(entries) == {"linear.forward", "linear.backward"}
    assert recorded_accuracy(folder, THREADS + 1, ()) == (None, {})


def test_the_accuracy_gate_runs_only_when_m_names_replay(pytester, committed):
    """A main job's `pytest suites/` keeps the replay cases (seconds) but not the
    re-fits of every committed fit (minutes)."""
    root, _ = committed
    pytester.makepyfile(test_replay=SUITE)
    out = run_plugin(pytester, root)
    out.assert_outcomes(skipped=1, deselected=2)  # skipped: no replay case here
    out = run_plugin(pytester, root, "-m", "replay")
    out.assert_outcomes(passed=2, skipped=1)
