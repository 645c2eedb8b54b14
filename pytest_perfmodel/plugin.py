"""pytest plugin: options, markers, parametrisation, ordering, summary and the gate.

Registered through the ``pytest11`` entry point. It imports neither torch nor
scikit-learn; those load on the first item that needs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.ops import PROFILES, cases_for, get_op
from perfmodel.session import Options
from pytest_perfmodel.keys import SESSION_KEY
from pytest_perfmodel.options import check_options
from pytest_perfmodel.session import PerfmodelSession, as_pytest_outcome

#: Multi-rank runs (--perfmodel-ranks, sharding, quiet non-zero ranks), the
#: pytest-xdist hooks that send each worker's results to the controller, what
#: pytest-benchmark shows of the microbench items, and a Ctrl-C that is never lost.
pytest_plugins = ["pytest_perfmodel.distributed", "pytest_perfmodel.workers",
                  "pytest_perfmodel.benchmark_interop", "pytest_perfmodel.interrupt"]

MARKERS = {
    "microbench": "microbenchmark of one op config; writes measurements to the results store",
    "accuracy": "held-out accuracy of one op's fitted predictor against its GMAE threshold",
    "e2e": "end-to-end iteration time of one workload: measured against predicted",
    "replay": "replay gate: one committed replay case (device/workload) predicted again with "
              "today's code against its replay baseline, or one committed fit's predictor "
              "re-scored against its committed GMAE (suites/test_replay.py; these run only "
              "when -m names replay)",
    "collective": "a collective across MPI ranks (mpiexec -n N or --perfmodel-ranks N)",
    "stability": "gate-stability experiment: repeated E2E rounds scored with planted biases "
                 "(--perfmodel-rounds); deselected unless -m stability",
    "zoo": "held-out model zoo: end-to-end time of one zoo model, measured against predicted, "
           "not gated (suites/test_zoo.py); deselected unless -m names zoo",
    "perfmodel_ops(*names)": "ops whose configs parametrise `op_case` / `op_target`",
    "perfmodel_workloads(*names)": "workloads that parametrise `workload`",
}
#: Run order of the stages: fitting needs the measurements, E2E needs the fit.
STAGES = ("microbench", "accuracy", "e2e")
#: Rounds the microbenchmark items of each op are dealt into (see :func:`interleave_sweep`).
SWEEP_ROUNDS = 8


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfmodel", "performance model benchmarks")
    group.addoption("--perfmodel-device", default=None, metavar="DEVICE",
                    help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    group.addoption("--perfmodel-profile", default="smoke", choices=PROFILES,
                    help="shape-space profile of the microbenchmarks (default: smoke)")
    group.addoption("--perfmodel-results", default=None, metavar="DIR",
                    help="results root; data goes to DIR/<device-key>/ (default: <rootdir>/results)")
    group.addoption("--perfmodel-threads", type=int, default=None, metavar="N",
                    help="CPU threads torch is pinned to (default: the usable cores)")
    group.addoption("--perfmodel-budget", type=float, default=None, metavar="SECONDS",
                    help="sampling budget per config and replicate (default: 0.1 smoke, "
                         "0.3 quick and gpu, 1.0 full; collectives 0.1 smoke, 1.0 quick and "
                         "gpu, 2.0 full)")
    group.addoption("--perfmodel-target-ci", type=float, default=0.02, metavar="FRACTION",
                    help="stop sampling when the 95%% CI of the median is within ±FRACTION")
    group.addoption("--perfmodel-cold-cache", action="store_true",
                    help="flush the GPU L2 before every sample (CUDA only)")
    group.addoption("--perfmodel-plant-bias", default="", metavar="SPEC",
                    help="scale predictions to check the gate catches an error, e.g. "
                         "linear=1.1 or linear.backward=1.05,overhead=1.1")
    group.addoption("--perfmodel-save-baseline", action="store_true",
                    help="run each e2e workload baseline_runs times (pyproject, default 5) "
                         "and store the mean and spread of its error as "
                         "results/<device-key>/baseline-<profile>.json (runs in one session "
                         "understate the spread between sessions; `perfmodel baseline --last N` "
                         "builds it from N separate runs)")
    group.addoption("--perfmodel-save-replay-baseline", action="store_true",
                    help="-m replay: save each device's replay baseline "
                         "(results/<device-key>/replay-baseline.json) from this replay "
                         "instead of gating")
    group.addoption("--perfmodel-rounds", type=int, default=20, metavar="N",
                    help="rounds of the gate-stability experiment (-m stability; default 20)")
    group.addoption("--perfmodel-report", action="store_true",
                    help="at the end of the session, write the HTML report of the stored "
                         "results to results/<device-key>/report/index.html")
    group.addoption("--perfmodel-benchmark-table", action="store_true",
                    help="print pytest-benchmark's table of the microbench items (off by "
                         "default; --benchmark-json, --benchmark-save and compare work "
                         "without it)")


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    bias, settings = check_options(config)
    opt = config.option
    root = Path(opt.perfmodel_results) if opt.perfmodel_results else config.rootpath / "results"
    # None (an option left out) picks the profile's default budgets and the usable cores
    options = Options(opt.perfmodel_device, opt.perfmodel_profile, root.resolve(),
                      opt.perfmodel_threads, opt.perfmodel_save_baseline, opt.perfmodel_budget,
                      opt.perfmodel_target_ci, opt.perfmodel_cold_cache, bias,
                      save_replay_baseline=opt.perfmodel_save_replay_baseline)
    config.stash[SESSION_KEY] = PerfmodelSession(options, settings, config.rootpath)


def _marker_names(metafunc: pytest.Metafunc, marker: str) -> tuple[str, ...]:
    mark = metafunc.definition.get_closest_marker(marker)
    if mark is None or not mark.args:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: needs @pytest.mark.{marker}(...)")
    return tuple(mark.args)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    options = metafunc.config.stash[SESSION_KEY].options
    profile = options.profile
    try:
        if "replay_case" in metafunc.fixturenames:  # one item per committed case
            from perfmodel.gate.replay import replay_items

            cases = replay_items(options.results_root)
            metafunc.parametrize("replay_case", cases, ids=[f"{k}/{w}" for k, w in cases])
        if "accuracy_case" in metafunc.fixturenames:  # one per committed fit's predictor
            from perfmodel.gate.accuracy import accuracy_items, item_id

            targets = accuracy_items(options.results_root)
            if targets:
                metafunc.parametrize("accuracy_case", targets,
                                     ids=[item_id(*t) for t in targets])
            else:  # one skipped item that says why, rather than pytest's "empty parameter set"
                why = (f"no committed fit under {options.results_root} has all its training "
                       f"runs committed: no predictor to re-score")
                metafunc.parametrize("accuracy_case", [pytest.param(None, marks=pytest.mark.skip(
                    reason=why))], ids=["none"])
        if "op_case" in metafunc.fixturenames:
            cases = cases_for(_marker_names(metafunc, "perfmodel_ops"), profile)
            metafunc.parametrize("op_case", cases, ids=[c.id for c in cases])
        if "op_target" in metafunc.fixturenames:
            targets = [(name, d) for name in _marker_names(metafunc, "perfmodel_ops")
                       for d in get_op(name).predicted]
            metafunc.parametrize("op_target", targets, ids=[f"{o}.{d}" for o, d in targets])
        if "workload" in metafunc.fixturenames:
            from perfmodel.workloads import get_workload

            names = _marker_names(metafunc, "perfmodel_workloads")
            for name in names:
                get_workload(name)
            metafunc.parametrize("workload", names)
    except ValueError as exc:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {exc}") from None


@pytest.fixture
def perfmodel_session(request: pytest.FixtureRequest) -> PerfmodelSession:
    """The perfmodel state of this pytest session."""
    return request.config.stash[SESSION_KEY]


@pytest.fixture
def perfmodel_predict(request: pytest.FixtureRequest):
    """Predict and measure one training iteration of your own model::

        def test_my_model(perfmodel_predict):
            result = perfmodel_predict(model, batch, loss_fn, optimizer)
            assert result.error < 0.2

    ``loss_fn(model, batch)`` returns the loss; the call returns a
    :class:`perfmodel.e2e.result.MeasuredIteration` (``predicted_s``, ``measured``,
    ``breakdown_s``, ``error``). Uses the session's device and stored fit.
    """
    return request.config.stash[SESSION_KEY].predict_model


def _stage(item: pytest.Item) -> int:
    for index, name in enumerate(STAGES):
        if item.get_closest_marker(name) is not None:
            return index
    return -1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "zoo" not in (config.option.markexpr or ""):  # the zoo runs when -m names it
        dropped = [item for item in items if item.get_closest_marker("zoo") is not None]
        if dropped:
            items[:] = [item for item in items if item.get_closest_marker("zoo") is None]
            config.hook.pytest_deselected(items=dropped)
    if "replay" not in (config.option.markexpr or ""):
        # the accuracy gate re-fits every committed fit (minutes): it runs when -m names
        # replay (and in CI, tests/test_accuracy_gate.py), not within a main job's suites/
        dropped = [item for item in items if "accuracy_case" in getattr(item, "fixturenames", ())]
        if dropped:
            items[:] = [item for item in items if item not in dropped]
            config.hook.pytest_deselected(items=dropped)
    items.sort(key=_stage)  # stable: keeps the order within a stage
    items[:] = interleave_sweep(items)


def interleave_sweep(items: list, rounds: int = SWEEP_ROUNDS) -> list:
    """``items`` with their microbenchmark items dealt out over the sweep.

    On a shared VM the host slows down for a minute at a time (measured: the
    GEMM block of one quick sweep ran 1.76x slower than the previous sweep's,
    and the fit over-predicted every GEMM-bound workload by half). Run one op
    after another and such a stretch biases every config of the ops it meets.
    So the microbench items of each op are dealt into ``rounds`` rounds
    (round r takes every ``rounds``-th config from the r-th on), and each round
    visits every op in the order first seen: a slow stretch then lands on a few
    configs of every op, which the fits treat as noise. Collectives stay in one
    block at the start, in their own order: every rank runs them in step, and
    between them the ranks of a sharded sweep would wait on each other. The
    order is deterministic, so every rank and xdist worker collects the same
    list; items of the other stages keep their places."""
    # imported here: pytest_plugins (at the top of this module) registers the
    # module first, so that pytest can rewrite its asserts (an import at the top
    # made it warn)
    from pytest_perfmodel.distributed import is_collective

    bench = [i for i, item in enumerate(items) if item.get_closest_marker("microbench")]
    if not bench:
        return list(items)
    by_op: dict[str, list] = {}  # an item without op_case is grouped by its file
    collective = []
    for i in bench:
        item = items[i]
        case = getattr(getattr(item, "callspec", None), "params", {}).get("op_case")
        if is_collective(item):
            collective.append(item)
        else:
            by_op.setdefault(case.op if case is not None else str(item.path), []).append(item)
    dealt = collective + [item for r in range(rounds) for group in by_op.values()
                          for item in group[r::rounds]]
    out = list(items)
    for i, item in zip(bench, dealt):
        out[i] = item
    return out


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the session which workloads this run gates (after -k/-m deselection)."""
    pm = session.config.stash[SESSION_KEY]
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "workload" in callspec.params and \
                item.get_closest_marker("zoo") is None:
            pm.e2e_expected.add(callspec.params["workload"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """A fixture's call into the session that cannot run here skips the item;
    a failed check fails it (:func:`~pytest_perfmodel.session.as_pytest_outcome`)."""
    with as_pytest_outcome():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """The item's call into the session: as in :func:`pytest_runtest_setup`."""
    with as_pytest_outcome():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    """After the items: close the run file and gate once, in the process that
    reports. Under ``--collect-only`` nothing ran, so there is nothing to gate;
    a pytest-xdist worker hands its results to the controller instead
    (:mod:`pytest_perfmodel.workers`), which gates them all together."""
    result = yield
    config = session.config
    if config.option.collectonly:
        return result
    pm = config.stash[SESSION_KEY]
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        pm.close()
        return result
    if pm.finish().failed:
        session.testsfailed += 1
    if config.option.perfmodel_report:
        pm.write_report()
    return result


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's table: the verdict ends the session
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    pm = config.stash.get(SESSION_KEY, None)
    if pm is not None and pm.device_unavailable:
        terminalreporter.section("perfmodel")
        terminalreporter.write_line(f"WARN {pm.device_unavailable}; its items were skipped",
                                    yellow=True)
        return
    if pm is None or not (pm.accuracy or pm.e2e or pm.user_models or pm.zoo or pm.gate.lines or pm.problems
                          or pm.notes or pm.wide_spread):
        return
    from pytest_perfmodel.summary import summary_lines

    lines = summary_lines(pm, quiet=config.get_verbosity() < 0)
    if not lines:  # -q and nothing failed or warned
        return
    terminalreporter.section("perfmodel")
    for line in lines:
        terminalreporter.write_line(line, red=line.startswith("FAIL"),
                                    yellow=line.startswith(("WARNING", "WARN")))
