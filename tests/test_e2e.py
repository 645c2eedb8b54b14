"""E2E measurement method and error, with a fake clock (no wall-clock asserts)."""

import json
import math

import pytest

from perfmodel.e2e.result import IterationTiming, MeasuredIteration
from perfmodel.e2e.single import measure_iteration
from perfmodel.simulate.result import IterationPrediction
from tests.helpers import ConstantFit, tiny_mlp_step


class FakeClock:
    """Each step advances time by the next planted duration (seconds)."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)

    def step(self):
        self.now += next(self.durations)

    def __call__(self):
        return self.now


def test_repeat_times_number_method():
    warmup, repeat, number = 2, 3, 2
    clock = FakeClock([9.0] * warmup + [1.0, 1.0, 2.0, 2.0, 3.0, 5.0])
    timing = measure_iteration(clock.step, items=10, warmup=warmup, repeat=repeat,
                               number=number, clock=clock)
    # per-iteration block means: 1, 2, 4 -> median 2, sd 1.527...
    assert timing.median_s == 2.0 and timing.repeat == 3 and timing.number == 2
    assert timing.sd_s == pytest.approx(1.5275, rel=1e-3)
    assert timing.items_per_s == 5.0


def test_bad_repeat_is_rejected():
    with pytest.raises(ValueError, match="repeat >= 2"):
        measure_iteration(lambda: None, items=1, repeat=1)


def test_error_is_relative_to_measured():
    result = MeasuredIteration("w", IterationTiming(0.2, 0.0, 5, 1, 1.0), IterationPrediction(0.15))
    assert result.error == pytest.approx(0.25)
    assert result.signed_error == pytest.approx(-0.25)  # under-predicted
    record = result.record({"device_key": "k"})
    assert record["kind"] == "e2e" and record["error"] == pytest.approx(0.25)
    assert result.model_predicted_s == 0.15 and "host_drift" not in record


def test_the_model_prediction_leaves_out_the_hosts_drift():
    """The gate's drift check compares the prediction at the fit's host speed."""
    drift = {"compute": 1.1, "memory": 1.2, "bandwidth_Bps": 2e10}
    result = MeasuredIteration("w@2", IterationTiming(0.2, 0.0, 5, 1, 1.0),
                               IterationPrediction(0.18), host_drift=drift,
                               predicted_fit_speed_s=0.16)
    assert result.signed_error == pytest.approx(-0.1) and result.model_predicted_s == 0.16
    record = result.record({})
    assert record["host_drift"] == drift and record["predicted_fit_speed_s"] == 0.16


def test_hf_gpt2_is_traced_mapped_and_predicted():
    """A model nobody here wrote: GPT-2 from `transformers`, built from a tiny config."""
    pytest.importorskip("transformers")
    from perfmodel.e2e.single import predict_step
    from perfmodel.trace.overheads import table_from_samples
    from perfmodel.workloads import build_workload

    step = build_workload("hf_gpt2", "cpu", size="tiny")
    table = table_from_samples([], 30e9)
    result = predict_step(step.step, step.items, "hf_gpt2", ConstantFit(1e-5), table, "cpu",
                          30e9, measure=False)
    ops = {t.op for t in result.graph.op_tasks()}
    assert {"addmm", "layer_norm", "sdpa", "linear"} <= ops
    assert result.breakdown_s["gemm"] > 0 and result.breakdown_s["attention"] > 0
    assert result.predicted_s > 0 and math.isnan(result.measured.median_s)
    assert result.unmodelled  # reported by name, not dropped


def test_planted_bias_parses_and_names_bad_parts():
    from perfmodel.simulate.predict import parse_bias

    assert parse_bias("linear=1.1, overhead=0.95") == {"linear": 1.1, "overhead": 0.95}
    assert parse_bias("linear.backward=1.05") == {"linear.backward": 1.05}
    assert parse_bias("") == {}
    for bad in ("linear", "nosuchop=1.1", "linear.sideways=1.1", "linear=-1", "linear=x"):
        with pytest.raises(ValueError, match="bad bias"):
            parse_bias(bad)


def test_planted_bias_scales_one_op_and_the_overheads():
    from perfmodel.trace.graph import Graph, Task
    from perfmodel.trace.overheads import OverheadTable
    from perfmodel.simulate.predict import predict_graph

    graph = Graph([Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                        dtype="float32", params={"B": 1, "IN": 1, "OUT": 1}),
                   Task("op", "aten::relu", "elementwise", op="relu", direction="forward",
                        dtype="float32", params={"ROWS": 1, "COLS": 1}),
                   Task("overhead", "T1.iteration.op", "host overhead")], 1.0)
    table = OverheadTable({"T1": 2e-5}, {}, 0.0, 1e10, ())
    plain = predict_graph(graph, ConstantFit(1e-5), table)
    biased = predict_graph(graph, ConstantFit(1e-5), table,
                           bias={"linear": 1.1, "overhead": 2.0})
    assert plain.predicted_s == pytest.approx(4e-5)
    assert biased.breakdown_s["gemm"] == pytest.approx(1.1e-5)
    assert biased.breakdown_s["elementwise"] == pytest.approx(1e-5)
    assert biased.breakdown_s["host overhead"] == pytest.approx(4e-5)


def test_measure_again_keeps_the_first_median():
    from perfmodel.e2e.single import measure_again

    calls = []
    first = MeasuredIteration("w", IterationTiming(0.2, 0.01, 5, 2, 40.0),
                              IterationPrediction(0.15))
    again = measure_again(first, lambda: calls.append(1), 8, "cpu", profile="smoke")
    assert len(calls) == 2 + 5 * 2  # warmup, then repeat x number
    assert again.first_measured_s == 0.2 and again.measured.repeat == 5
    assert again.predicted_s == 0.15 and again.workload == "w"
    record = again.record({})
    assert record["first_measured_s"] == 0.2 and record["measured_s"] == again.measured.median_s


def test_an_unreadable_samples_file_is_kept_beside_the_new_one(tmp_path):
    """Tracing a workload whose earlier overhead samples cannot be read keeps
    that file (``.unreadable``), warns naming it, and starts afresh."""
    from perfmodel.e2e.single import overheads_dir, trace_workload
    from perfmodel.trace.overheads import load_samples

    path = overheads_dir(tmp_path) / "mlp.json"
    path.parent.mkdir(parents=True)
    path.write_text("{cut", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"mlp\.json: overhead samples are not readable JSON"):
        trace_workload("mlp", tiny_mlp_step(inputs=8, hidden=16, batch=4), tmp_path, "cpu", 1e10)
    assert path.with_name("mlp.json.unreadable").read_text(encoding="utf-8") == "{cut"
    assert load_samples(path).workload == "mlp"


# -- the result types ------------------------------------------------------------------

#: Run files committed on 2026-11-25 and 26 (their header and E2E records, compacted, under
#: tests/data/runs/, so that pruning results/ leaves them): an early one (25 keys per E2E
#: record) and a later one (29).
COMMITTED_RUNS = ["20261125T154445Z-13784-ed52.jsonl.gz", "20261126T144143Z-20105-23e3.jsonl.gz"]


@pytest.mark.parametrize("name", COMMITTED_RUNS)
def test_a_committed_run_file_loads_as_measured_iterations(name):
    """Old E2E records become MeasuredIteration objects with the same figures,
    and write back as the same record."""
    from perfmodel.store.results import read_run_file
    from tests.helpers import REPO

    key = "cpu-amd-epyc-f25m1-2c"
    records, problems = read_run_file(REPO / "tests" / "data" / "runs" / name, key)
    e2e = [r for r in records if r["kind"] == "e2e"]
    assert not problems and len(e2e) == 14 and any("@" in r["workload"] for r in e2e)
    for r in e2e:
        result = MeasuredIteration.from_record(r)
        assert isinstance(result.prediction, IterationPrediction)
        assert result.workload == r["workload"] and result.measured.median_s == r["measured_s"]
        assert (result.measured.sd_s, result.measured.repeat, result.measured.number) == (
            r["measured_sd_s"], r["repeat"], r["number"])
        assert result.predicted_s == r["predicted_s"] and result.error == r["error"]
        assert result.signed_error == r["signed_error"] and result.error_own == r["error_own"]
        assert result.breakdown_s == r["breakdown_s"] and result.n_tasks == r["n_tasks"]
        again = result.record(r["env"])
        added = {"run_id", "profile"}  # the loader's, from the run header
        assert {k: v for k, v in r.items() if k not in added} == {
            k: v for k, v in again.items() if k in r}
        assert set(again) - set(r) <= {"beyond_fit"}  # null where the record predates it
        seen = {"before": {"addmm": 0.003, "copy": 0.007}, "after": {"addmm": 0.004,
                                                                      "copy": 0.008}}
        result.host_speed_seen = seen
        assert MeasuredIteration.from_record(result.record(r["env"])).host_speed_seen == seen


def test_old_names_are_the_new_types():
    from perfmodel.e2e import forecast, ranks, single
    from perfmodel.simulate import predict

    assert single.E2EResult is MeasuredIteration and predict.Prediction is IterationPrediction
    assert ranks.RanksPrediction is IterationPrediction
    assert forecast.Forecast is IterationPrediction
    old = single.E2EResult("w", IterationTiming(0.2, 0.0, 5, 1, 1.0), 0.15)  # bare seconds
    assert old.prediction == IterationPrediction(0.15) and old.predicted_s == 0.15
    assert old.prediction.total_s == 0.15


def test_plain_data_keeps_the_prediction_and_its_ranks():
    from perfmodel.simulate.result import Coverage

    rank = IterationPrediction(0.1, {"gemm": 0.08}, coverage=Coverage(0.8, 0.15, 0.05, 0.09))
    world = IterationPrediction(0.12, {"gemm": 0.09, "communication": 0.02}, {"fwd": 0.05},
                                Coverage(0.7, 0.2, 0.1, 0.2), [("aten::add", 2, 0.01)],
                                {"relu.forward": 1}, 40, 0.11, {"linear.forward": (3, 9.0)},
                                ranks=[rank, IterationPrediction(0.12)],
                                collective_start_s=[0.05])
    result = MeasuredIteration("w@2", IterationTiming(0.1, 0.01, 5, 2, 40.0), world,
                               predicted_own_s=0.11, fit_data="f1")
    plain = json.loads(json.dumps(result.to_plain()))
    back = MeasuredIteration.from_plain(plain)
    assert back == result and back.prediction.world_size == 2
    # a multi-rank run's result names its ranks' predictions by their seconds
    ranks_json = {**plain, "predicted_rank_s": [0.1, 0.12]}
    del ranks_json["ranks"]
    assert [r.predicted_s for r in MeasuredIteration.from_plain(ranks_json).prediction.ranks] == [
        0.1, 0.12]


def test_coverage_is_the_traced_time_priced_each_way():
    """linear priced by its op definition, relu without a predictor unmodelled, the gap
    by the overhead table: shares of the traced seconds."""
    from perfmodel.simulate.predict import predict_graph
    from perfmodel.trace.graph import Graph, Task
    from perfmodel.trace.overheads import OverheadTable

    graph = Graph([Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                        dtype="float32", params={"B": 1, "IN": 1, "OUT": 1}, measured_s=6e-5),
                   Task("op", "aten::relu", "elementwise", op="relu", direction="forward",
                        dtype="float32", params={"ROWS": 1, "COLS": 1}, measured_s=1e-5),
                   Task("overhead", "T1.iteration.op", "host overhead", measured_s=3e-5)], 1e-4)
    table = OverheadTable({"T1": 2e-5}, {}, 0.0, 1e10, ())
    pred = predict_graph(graph, ConstantFit(1e-5, missing=("relu",)), table)
    assert pred.no_predictor == {"relu.forward": 1}
    cover = pred.coverage
    assert (cover.by_op, cover.by_overheads, cover.unmodelled) == pytest.approx((0.6, 0.3, 0.1))
    assert cover.traced_s == pytest.approx(1e-4) and pred.traced_s == 1e-4
    assert "  coverage: 60.0% by op definitions, 0.0% by the generic model, 30.0% by the overhead " \
        "table (0.0% of it host-only nodes), 10.0% unmodelled" in pred.lines("g")
    untimed = Graph([Task("overhead", "T1.iteration.op", "host overhead")], None)
    assert predict_graph(untimed, ConstantFit(1e-5), table).coverage is None
