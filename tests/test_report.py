"""The HTML report from stored results: sections, self-containment, CLI and plugin entry points."""

import base64
import json
import re

import pytest

from perfmodel.cli.main import main
from perfmodel.device.probe import cpu_device_key
from perfmodel.store.results import ResultStore
from perfmodel.settings import Settings
from tests.helpers import SPEC, planted_records, run_plugin, tiny_mlp

SECTIONS = ("Environment", "Per-op accuracy", "Predicted vs measured", "Error CDF",
            "End-to-end", "E2E breakdown", "Iteration timeline", "Collective bandwidth")
RUN = "20261122T000000Z-1-aaaa"

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")


def collective_record(op, world_size, nbytes, median_s, **extra):
    return {"kind": "measurement", "op": op, "direction": "forward", "dtype": "float32",
            "config": {"world_size": world_size, "bytes": nbytes}, "replicate": 0,
            "measurement": {"median_s": median_s}, "env": {}, **extra}


def e2e_record(workload, measured_s, predicted_s, **extra):
    return {"kind": "e2e", "workload": workload, "measured_s": measured_s,
            "measured_sd_s": measured_s / 50, "predicted_s": predicted_s,
            "error": abs(predicted_s - measured_s) / measured_s,
            "signed_error": (predicted_s - measured_s) / measured_s,
            "env": {"torch": "2.13.0", "python": "3.11.7", "commit": "abc123"}, **extra}


def plant_results(root, key, spec=SPEC, collectives=True, directions=("forward", "backward")):
    """A results folder of device ``key``: linear measurements (of ``directions``),
    a tiny roofline fit, two E2E records, a baseline and (optionally) collective
    records."""
    from dataclasses import replace

    from perfmodel.fit.fitting import FitReport, fit_op, samples_from_records, save_fit
    from perfmodel.gate.baseline import save_baseline

    store = ResultStore(root, key)
    store.dir.mkdir(parents=True, exist_ok=True)
    (store.dir / "device.json").write_text(json.dumps(replace(spec, key=key).to_dict()))
    env = {"torch": "2.13.0", "python": "3.11.7", "fbgemm": None, "commit": "abc123"}
    measurements = [r for r in planted_records("linear")
                    if r["dtype"] == "float32" and r["direction"] in directions]
    writer = store.open_run(env, "quick", RUN)
    for record in measurements:
        writer.append(record)
    if collectives:
        for nbytes in (1 << 10, 1 << 20):
            writer.append(collective_record("all_reduce", 2, nbytes, 1e-4, busbw_Bps=5e9))
            writer.append(collective_record("all_gather", 4, nbytes, 1e-3))
    writer.append(e2e_record("mlp_small", 0.100, 0.110, breakdown_s={
        "gemm": 0.08, "elementwise": 0.01, "host overhead": 0.02},
        traced_breakdown_s={"gemm": 0.09, "elementwise": 0.02, "host overhead": 0.01},
        traced_s=0.12))
    writer.append(e2e_record("dlrm_tbe", 0.020, 0.019, breakdown_s={"embedding": 0.015},
                             beyond_fit={"linear.forward": [3, 94.2], "relu.forward": [2, 6.0],
                                         "add.forward": [1, 5.0]}))
    writer.close()
    report = FitReport(data_runs=(RUN,))
    for key_, samples in samples_from_records(measurements).items():
        report.predictors[key_], report.accuracy[key_] = fit_op(*key_, samples, spec,
                                                                kinds=("roofline",))
    save_fit(report, store, RUN, [RUN])
    save_baseline(store.baseline_path("quick"), key, {"mlp_small": [0.02, 0.03, 0.04]}, env)
    return store


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(store, html text, stderr progress lines) of a report built by the CLI."""
    from perfmodel.report import build_report

    root = tmp_path_factory.mktemp("report") / "results"
    store = plant_results(root, SPEC.key)
    trace_tiny_model(store, "dlrm_tbe")
    lines = []
    # the planted baseline's allowed error (6%) is for the spread as measured
    path = build_report(root, progress=lines.append,
                        settings=Settings(e2e_spread_confidence=0))
    return store, path, path.read_text(encoding="utf-8"), lines


def trace_tiny_model(store, workload):
    """Capture a tiny model's trace as ``workload``'s under ``traces/``; its graph."""
    from perfmodel.e2e.single import trace_workload

    model, _, x, _ = tiny_mlp()

    def step():
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    return trace_workload(workload, step, store.dir, "cpu", SPEC.mem_bandwidth_Bps)


def test_report_holds_every_section(report):
    store, path, text, _ = report
    assert path == store.dir / "report" / "index.html"
    for heading in SECTIONS:
        assert f"<h2>{heading}</h2>" in text


def test_report_fetches_nothing_from_outside(report):
    _, path, text, _ = report
    for bad in ("http://", "https://", "@import", "<script", "<link", "<iframe", "ftp:"):
        assert bad not in text.lower()
    assert all(u.startswith("data:") for u in re.findall(r"url\(\s*['\"]?([^'\")]*)", text))
    sources = re.findall(r'\ssrc="([^"]*)"', text)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert all(h.startswith("#") for h in re.findall(r'\shref="([^"]*)"', text))
    for source in sources:
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    assert {"accuracy-gemm.png", "error-cdf.png", "e2e-breakdown.png",
            "collectives.png"} <= set(pngs)
    assert len(sources) == len(pngs)


def test_report_tables_carry_the_stored_figures(report):
    _, _, text, lines = report
    assert "linear.forward" in text and "roofline" in text  # accuracy table
    assert "2.13.0" in text and "abc123" in text  # environment
    row = re.search(r"<tr[^>]*><td class=\"text\">mlp_small</td>.*?</tr>", text).group(0)
    assert "100.00" in row and "110.00" in row and "+10.0%" in row  # measured, predicted, error
    assert "+3.0% ± 1.0%" in row and "regressed" in row  # baseline; allowed 6%: fails
    row = re.search(r"<tr[^>]*><td class=\"text\">dlrm_tbe</td>.*?</tr>", text).group(0)
    assert ">new<" in row  # not in the baseline
    assert "linear.forward 3, ×94; relu.forward 2, ×6 (+1 ops)" in row  # beyond the fit
    assert "<td>n/a</td></tr>" in re.search(  # a record from before the field
        r"<tr[^>]*><td class=\"text\">mlp_small</td>.*?</tr>", text).group(0)
    assert "mlp_small: no trace stored" in text
    assert any("plotting accuracy" in line for line in lines)


def test_sections_say_when_there_is_nothing(tmp_path):
    from perfmodel.report import build_report

    root = tmp_path / "results"
    store = ResultStore(root, SPEC.key)
    writer = store.open_run({}, "quick", RUN)
    writer.append(e2e_record("mlp_small", 0.1, 0.1))
    writer.close()
    text = build_report(root).read_text(encoding="utf-8")
    assert "no fitted predictors stored" in text
    assert "no collective measurements stored" in text
    assert f"no device spec stored for {SPEC.key}" in text


def test_collective_bus_bandwidth_from_records():
    from perfmodel.report.data import collective_curves

    records = [collective_record("all_reduce", 4, 1 << 20, 1e-3),  # no bandwidth stored
               collective_record("all_reduce", 4, 1 << 20, 3e-3),  # median of the two
               collective_record("all_gather", 2, 1 << 10, 1e-5, busbw_Bps=7e8),
               collective_record("broadcast", 2, 1 << 10, 1e-5, algbw_Bps=2e8),
               *planted_records("linear")[:4]]
    curves = collective_curves(records)
    assert set(curves) == {("all_reduce", 4), ("all_gather", 2), ("broadcast", 2)}
    (size, busbw), = curves[("all_reduce", 4)]
    algbw = [(1 << 20) / 1e-3, (1 << 20) / 3e-3]
    assert size == 1 << 20 and busbw == pytest.approx(1.5 * sum(algbw) / 2)  # 2(n-1)/n
    assert curves[("all_gather", 2)] == [(1 << 10, 7e8)]
    assert curves[("broadcast", 2)] == [(1 << 10, 2e8)]


def test_timeline_and_breakdown_from_a_stored_trace(report):
    """dlrm_tbe has a stored trace: its timeline is drawn, and the measured bar of
    its breakdown comes from the trace (its record has no traced breakdown)."""
    from perfmodel.e2e.single import traced_breakdown
    from perfmodel.report.timeline import measured_timeline, stored_graph

    store, _, text, _ = report
    trace, graph = stored_graph(store.dir, "dlrm_tbe")
    parts = traced_breakdown(graph)
    assert parts["gemm"] > 0 and sum(parts.values()) == pytest.approx(graph.measured_s, rel=1e-6)
    spans = measured_timeline(trace, graph)
    assert {s.lane for s in spans} == {"cpu"}
    assert spans[-1].end_s == pytest.approx(graph.measured_s, rel=1e-6)
    assert 'alt="dlrm_tbe timeline"' in text and "mlp_small: no trace stored" in text
    assert "dlrm_tbe: no trace stored" not in text


# -- command line ------------------------------------------------------------------------

def test_cli_writes_the_report_with_progress(report, tmp_path, capsys):
    store, _, _, _ = report
    out = tmp_path / "elsewhere" / "r.html"
    assert main(["report", "--results", str(store.root), "--device", store.device_key,
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"wrote {out}"
    assert "perfmodel report: plotting accuracy…" in captured.err
    assert out.is_file() and (out.parent / "e2e-breakdown.png").is_file()


def test_cli_missing_results_is_one_line_and_exit_2(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["report", "--results", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == \
        f"perfmodel report: error: no results folder at {missing}"


def test_cli_empty_or_unknown_device_names_the_path(tmp_path, capsys):
    root = tmp_path / "results"
    (root / SPEC.key / "runs").mkdir(parents=True)
    assert main(["report", "--results", str(root), "--device", SPEC.key]) == 2
    assert f"nothing stored under {root / SPEC.key}" in capsys.readouterr().err
    assert main(["report", "--results", str(root), "--device", "tpu-9"]) == 2
    err = capsys.readouterr().err
    assert f"no results for device 'tpu-9' under {root} (found: {SPEC.key})" in err


def test_cli_bad_args_and_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["report", "--bogus"])
    assert info.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["report", "--help"])
    assert info.value.code == 0 and "--out OUT" in capsys.readouterr().out


# -- pytest plugin -----------------------------------------------------------------------

def test_plugin_option_writes_the_report(pytester, planted_results):
    results, key = planted_results
    plant_results(results, key, collectives=False, directions=("forward",))
    pytester.makepyfile("def test_nothing():\n    pass\n")
    out = run_plugin(pytester, results, "--perfmodel-report")
    assert out.ret == 0
    path = results / key / "report" / "index.html"
    out.stdout.fnmatch_lines([f"*report written to {path}*"])
    assert "<h2>Per-op accuracy</h2>" in path.read_text(encoding="utf-8")


def test_plugin_report_without_data_is_a_warning(pytester, tmp_path):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    root = tmp_path / "empty"
    (root / cpu_device_key() / "runs").mkdir(parents=True)
    out = run_plugin(pytester, root, "--perfmodel-report")
    assert out.ret == 0
    out.stdout.fnmatch_lines(["*WARN perfmodel report not written: nothing stored under*"])


def test_timelines_of_an_e2e_result(report):
    """The library call for a fresh :class:`MeasuredIteration`: measured and simulated spans."""
    from perfmodel.e2e.result import IterationTiming, MeasuredIteration
    from perfmodel.e2e.single import shared_table
    from perfmodel.fit.fitting import load_latest_fit
    from perfmodel.simulate.predict import predict_graph
    from perfmodel.report.plots import timeline_figure
    from perfmodel.report.timeline import e2e_timelines, stored_graph, stored_trace_files

    store, _, _, _ = report
    _, graph = stored_graph(store.dir, "dlrm_tbe")
    table, _ = shared_table(store.dir, SPEC.mem_bandwidth_Bps)
    prediction = predict_graph(graph, load_latest_fit(store)[0], table)
    result = MeasuredIteration("dlrm_tbe", IterationTiming(0.01, 0.001, 5, 2, 800.0),
                               prediction, graph=graph)
    measured, simulated = e2e_timelines(result, stored_trace_files(store.dir, "dlrm_tbe"))
    assert max(s.end_s for s in simulated) == pytest.approx(prediction.predicted_s)
    assert {s.category for s in simulated} >= {"gemm", "host overhead"}
    assert measured and timeline_figure("dlrm_tbe", measured, simulated).axes
