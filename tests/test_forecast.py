"""``perfmodel predict`` when it succeeds: a saved trace or a registered workload,
priced with the device's stored fit and overhead table exactly as
:func:`perfmodel.simulate.predict.predict_graph` prices the same graph."""

import math

import pytest

from perfmodel.cli.main import main
from perfmodel.e2e.forecast import forecast_trace, forecast_workload, trace_name
from perfmodel.e2e.result import MeasuredIteration
from perfmodel.simulate.result import IterationPrediction
from tests.helpers import THREADS, planted_spec, tiny_mlp_step


@pytest.fixture(scope="module")
def mlp_trace(tmp_path_factory):
    """The files of a real capture of a tiny MLP training step (``mlp.*.json``)."""
    from perfmodel.trace.parse import capture_trace

    return capture_trace(tiny_mlp_step(), tmp_path_factory.mktemp("trace"), "mlp",
                         iterations=2, warmup=1)


def _stored(root, key):
    """The fit and shared overhead table ``perfmodel predict`` reads for ``key``."""
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.store.results import ResultStore

    store = ResultStore(root, key)
    fit, problems = load_latest_fit(store, threads=THREADS)
    assert fit is not None, problems
    table, problems = shared_table(store.dir, planted_spec(root, key).mem_bandwidth_Bps)
    assert not problems
    return fit, table


def _expected(graph, root, key):
    from perfmodel.simulate.predict import predict_graph

    fit, table = _stored(root, key)
    return predict_graph(graph, fit, table, on_device=False)


def _cli(*argv, root):
    return main(["predict", *argv, "--results", str(root), "--device", "cpu",
                 "--threads", str(THREADS)])


def test_a_saved_trace_is_predicted_as_predict_graph_prices_it(planted_linear_fit, mlp_trace):
    from perfmodel.trace.graph import build_graph
    from perfmodel.trace.parse import load_trace

    root, key = planted_linear_fit
    files = mlp_trace
    forecast = forecast_trace(files.et, files.kineto, files.calibration, root, "cpu", THREADS)
    graph = build_graph(load_trace(files.et, files.kineto, files.calibration))
    expected = _expected(graph, root, key)
    # the stored fit priced the layers; the other ops have no predictor
    assert "linear.forward" not in expected.no_predictor
    assert "linear.backward" not in expected.no_predictor
    assert expected.no_predictor["relu.forward"] == 1
    assert isinstance(forecast, IterationPrediction)  # a trace cannot be measured
    assert (trace_name(files.et), forecast.device_key) == ("mlp", key)
    assert forecast.predicted_s == pytest.approx(expected.predicted_s, rel=1e-12)
    assert 0 < forecast.predicted_s < float("inf")
    assert forecast.breakdown_s == pytest.approx(expected.breakdown_s, rel=1e-12)
    assert forecast.regions_s == pytest.approx(expected.sim.regions_s, rel=1e-12)
    assert forecast.unmodelled == expected.unmodelled
    assert forecast.traced_s == graph.measured_s
    # the layers by their op definition, relu (no predictor here) unmodelled, the views
    # and autograd's bookkeeping as host-only nodes
    cover = forecast.coverage
    assert cover == expected.coverage and cover.traced_s > 0
    assert cover.by_op + cover.by_overheads + cover.by_host + cover.by_generic + \
        cover.unmodelled == pytest.approx(1.0)
    assert cover.by_op > 0 and cover.by_overheads > 0 and cover.unmodelled > 0


def test_predict_trace_prints_the_forecast_and_exits_0(planted_linear_fit, mlp_trace, capsys):
    root, key = planted_linear_fit
    files = mlp_trace
    forecast = forecast_trace(files.et, files.kineto, files.calibration, root, "cpu", THREADS)
    assert _cli("--trace", str(files.et), "--kineto", str(files.kineto),
                "--calibration", str(files.calibration), root=root) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == forecast.lines(trace_name(files.et))
    assert sum(line.startswith("  coverage: ") for line in out) == 1
    assert out[0] == f"mlp on {key}: predicted {forecast.predicted_s * 1e3:.2f} ms"


def test_an_et_file_alone_is_predicted_too(planted_linear_fit, mlp_trace, capsys):
    """Without the Kineto and calibration files there are no traced timings."""
    from perfmodel.trace.graph import build_graph
    from perfmodel.trace.parse import load_trace

    root, key = planted_linear_fit
    expected = _expected(build_graph(load_trace(mlp_trace.et, None, None)), root, key)
    assert _cli("--trace", str(mlp_trace.et), root=root) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"mlp on {key}: predicted {expected.total_s * 1e3:.2f} ms"


@pytest.fixture
def traced_graphs(monkeypatch):
    """The graphs ``forecast_workload`` builds from its (temporary) traces."""
    import perfmodel.e2e.single

    graphs = []
    capture = perfmodel.e2e.single.capture_graph

    def keep(*args, **kwargs):
        graphs.append(capture(*args, **kwargs))
        return graphs[-1]

    monkeypatch.setattr(perfmodel.e2e.single, "capture_graph", keep)
    return graphs


def test_a_workload_is_traced_and_predicted_as_predict_graph_prices_it(planted_linear_fit,
                                                                       traced_graphs):
    root, key = planted_linear_fit
    forecast = forecast_workload("mlp_small", root, "cpu", size="tiny", threads=THREADS)
    (graph,) = traced_graphs
    expected = _expected(graph, root, key)
    assert isinstance(forecast, MeasuredIteration) and math.isnan(forecast.measured.median_s)
    assert (forecast.workload, forecast.prediction.device_key) == ("mlp_small", key)
    linears = [t for t in graph.tasks if t.kind == "op" and t.op == "linear"]
    assert len(linears) == 4  # widths 8-16-1: two layers, forward and backward
    assert forecast.predicted_s == pytest.approx(expected.predicted_s, rel=1e-12)
    assert forecast.breakdown_s == pytest.approx(expected.breakdown_s, rel=1e-12)
    assert forecast.traced_s == graph.measured_s


def test_predict_workload_with_measure_prints_the_measured_iteration(planted_linear_fit,
                                                                     traced_graphs, capsys):
    root, key = planted_linear_fit
    assert _cli("mlp_small", "--size", "tiny", "--measure", root=root) == 0
    out = capsys.readouterr().out.splitlines()
    (graph,) = traced_graphs
    expected = _expected(graph, root, key)
    assert out[0] == f"mlp_small on {key}: predicted {expected.total_s * 1e3:.2f} ms"
    measured = [line for line in out if line.startswith("  measured ")]
    from perfmodel.e2e.single import MEASURE

    _, repeat, number = MEASURE["quick"]
    assert len(measured) == 1 and f"{repeat} x {number} iterations), error " in measured[0], out


def test_stored_files_passed_over_are_listed(planted_linear_fit, mlp_trace):
    """An unreadable samples file is left out of the table, and the forecast
    says so, naming it."""
    from perfmodel.store.results import ResultStore

    root, key = planted_linear_fit
    bad = ResultStore(root, key).dir / "overheads" / "broken.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("{cut", encoding="utf-8")
    files = mlp_trace
    forecast = forecast_trace(files.et, files.kineto, files.calibration, root, "cpu", THREADS)
    assert [line for line in forecast.lines("mlp") if "skipped" in line] == [
        f"  skipped: {bad}: overhead samples are not readable JSON "
        f"(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"]


# -- a stale fit is refused, never predicted from ------------------------------------------

def _make_stale(root, key):
    """Make the newest stored fit of ``key`` stale for today's code (as one saved
    before its index recorded the predictor kinds each op is chosen among);
    return the line it is refused with."""
    import json

    from perfmodel.store import paths

    folder = paths.fit_dirs(root / key)[-1]
    index = json.loads(paths.fit_index(folder).read_text())
    for entry in index["entries"]:
        del entry["candidate_kinds"]
    paths.fit_index(folder).write_text(json.dumps(index))
    return (f"stale fit {folder.as_posix()} ({THREADS} thread(s)): 2 of 2 predictors cannot "
            f"be used by today's code (first: linear.backward: chosen among other predictor "
            f"kinds (not recorded) than today's (")


def test_a_stale_fit_is_refused_by_forecast_and_the_cli(planted_linear_fit, mlp_trace, capsys):
    from perfmodel.fit.fitting import StaleFit

    root, key = planted_linear_fit
    start = _make_stale(root, key)
    command = f"; run `perfmodel refit --device {key} --threads {THREADS}`"
    files = mlp_trace
    with pytest.raises(StaleFit) as caught:
        forecast_trace(files.et, files.kineto, files.calibration, root, "cpu", THREADS)
    assert str(caught.value).startswith(start) and str(caught.value).endswith(command)
    with pytest.raises(StaleFit):  # before the workload is built or traced
        forecast_workload("mlp_small", root, "cpu", size="tiny", threads=THREADS)
    assert _cli("--trace", str(files.et), root=root) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == str(caught.value) + "\n"  # the one line, nothing else
    assert _cli("mlp_small", "--size", "tiny", root=root) == 2
    assert capsys.readouterr().err == str(caught.value) + "\n"


def test_a_stale_fit_is_refused_by_predict_model(planted_linear_fit):
    import torch

    from perfmodel.e2e.single import predict_model
    from perfmodel.fit.fitting import StaleFit

    root, key = planted_linear_fit
    start = _make_stale(root, key)
    model = torch.nn.Linear(8, 4)
    with pytest.raises(StaleFit, match=r"run `perfmodel refit --device .* --threads 1`$") as caught:
        predict_model(model, torch.randn(16, 8), lambda m, b: m(b).sum(),
                      torch.optim.SGD(model.parameters(), lr=0.1), results=root, device="cpu",
                      threads=THREADS, measure=False)
    assert str(caught.value).startswith(start)


def test_a_session_turns_a_stale_fit_it_cannot_refit_into_a_failed_check(planted_linear_fit):
    """With no runs to refit from, the e2e items and the session's predict_model
    fail with the StaleFit line; with runs, the session refits (current_fit)."""
    from perfmodel.session import CheckFailed, Options, Session
    from perfmodel.settings import Settings
    from tests.helpers import planted_spec

    root, key = planted_linear_fit
    start = _make_stale(root, key)
    session = Session(Options("cpu", "smoke", root, THREADS), Settings(), root)
    session._device = planted_spec(root, key)
    assert session.fit().stale  # nothing to refit from: the stale fit itself
    with pytest.raises(CheckFailed) as caught:
        session.run_e2e("mlp_small")
    assert str(caught.value).startswith(start)
    assert str(caught.value).endswith(f"run `perfmodel refit --device {key} --threads {THREADS}`")
    with pytest.raises(CheckFailed, match="^stale fit "):
        session.predict_model(None, None, None, None)


def test_a_single_rank_e2e_record_holds_the_hosts_speed_around_its_measurement(
        planted_linear_fit):
    """On a CPU the session samples the host's speed just before and just after a
    workload's E2E measurement and stores both in its record."""
    from perfmodel.session import Options, Session
    from perfmodel.settings import Settings
    from perfmodel.store.results import ResultStore
    from tests.helpers import planted_spec

    root, key = planted_linear_fit
    session = Session(Options("cpu", "smoke", root, THREADS), Settings(), root)
    session._device = planted_spec(root, key)
    session.run_e2e("mlp_small")
    session.run_zoo("zoo_two_tower")  # a zoo model's record holds them too
    session.close()
    (result,) = session.e2e
    assert set(result.host_speed_seen) == {"before", "after"}
    assert all(set(s) == {"addmm", "copy"} and all(v > 0 for v in s.values())
               for s in result.host_speed_seen.values())
    (record,) = ResultStore(root, key).load("e2e").records
    assert record["host_speed_seen"] == result.host_speed_seen
    (zoo,) = ResultStore(root, key).load("zoo").records
    assert set(zoo["host_speed_seen"]) == {"before", "after"}
