"""Cold-cache ops timed cold and warm: their samples, their features, and how a
prediction chooses between the two by the bytes a step moves against the LLC."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.fit.fitting import (FitReport, features, fit_predictors, load_fit, save_fit,
                                   samples_from_records)
from perfmodel.fit.transfer import transfer_fit
from perfmodel.ops import get_op
from perfmodel.ops.base import base_direction, warm_direction
from perfmodel.simulate.predict import llc_share, op_predictions, step_bytes
from perfmodel.store.results import ResultStore
from perfmodel.trace.graph import Task
from tests.helpers import ConstantFit, cpu_spec

OP = "sgd_foreach"
PARAMS = {"NTENSORS": 2, "NUMEL": 15594}  # a quick config: priced as measured


def op_task(params=PARAMS):
    return Task("op", "Optimizer.step#SGD.step", "optim", op=OP, direction="forward",
                dtype="float32", params=dict(params))


def filler(nbytes: float) -> Task:
    """A node the step spends ``nbytes`` of memory traffic in."""
    return Task("unmodelled", "aten::copy_", "unmodelled", bytes=nbytes)


class WarmFit(ConstantFit):
    """Cold calls take 3 ms and warm ones 1 ms, on a CPU with ``llc_bytes``."""

    def __init__(self, llc_bytes, cold=3e-3, warm=1e-3):
        super().__init__({"forward": cold, warm_direction("forward"): warm})
        self.llc_bytes = llc_bytes


def test_the_warm_direction_names_and_features():
    op = get_op(OP)
    assert warm_direction("backward") == "backward_warm"
    assert base_direction("backward_warm") == "backward" == base_direction("backward")
    assert "forward_warm" in op.predicted and "forward_warm" not in op.directions
    assert get_op("addmm").predicted == get_op("addmm").directions  # timed hot: no warm
    for kind in ("roofline", "shape", "efficiency"):
        assert features(kind, op, "forward_warm", "float32", PARAMS) == \
            features(kind, op, "forward", "float32", PARAMS)


def record(config, median_s, warm_s=None, replicate=0):
    r = {"kind": "measurement", "op": OP, "direction": "forward", "dtype": "float32",
         "config": config, "replicate": replicate, "run_id": "20261207T000000Z-1-aaaa",
         "env": {"threads": 2}, "measurement": {"median_s": median_s, "cache": "cold"}}
    if warm_s is not None:
        r["warm"] = {"median_s": warm_s, "cache": "warm"}
    return r


def test_a_records_warm_timing_is_a_sample_of_the_warm_direction():
    grouped = samples_from_records([record(PARAMS, 3e-3, 1e-3), record(PARAMS, 2e-3)])
    assert [s.seconds for s in grouped[(OP, "forward")]] == [3e-3, 2e-3]
    assert [s.seconds for s in grouped[(OP, "forward_warm")]] == [1e-3]
    bad = record(PARAMS, 3e-3)
    bad["warm"] = {"median_s": "fast"}  # not seconds: no warm sample, no crash
    assert (OP, "forward_warm") not in samples_from_records([bad])


def test_cold_and_warm_are_fitted_apart_and_the_fit_keeps_its_llc(tmp_path):
    op, spec = get_op(OP), cpu_spec()
    records = []
    for i, config in enumerate(op.configs("quick")):
        cold = 1e-5 + op.bytes_moved(config, "float32", "forward") / 1e10
        records += [record(config, cold, cold / 3, 0), record(config, cold * 1.01, cold / 2.9, 1)]
    fit = fit_predictors(records, spec)
    assert {(OP, "forward"), (OP, "forward_warm")} <= set(fit.predictors)
    cold, warm = (fit.predictor(OP, d).predict("float32", [PARAMS])[0]
                  for d in ("forward", "forward_warm"))
    assert warm == pytest.approx(cold / 3, rel=0.15)
    assert fit.llc_bytes == spec.llc_bytes
    folder = save_fit(fit, ResultStore(tmp_path, spec.key), "20261207T000000Z-1-bbbb")
    assert load_fit(folder).llc_bytes == spec.llc_bytes
    target = cpu_spec(key="cpu-other-2c", llc_bytes=96 << 20)
    assert transfer_fit(fit, spec, target).llc_bytes == 96 << 20


def test_a_bad_llc_in_a_fit_index_is_one_clear_error(tmp_path):
    folder = save_fit(FitReport(llc_bytes=1 << 20), ResultStore(tmp_path, "cpu-x-2c"), "r1")
    index = folder / "index.json"
    data = json.loads(index.read_text())
    data["llc_bytes"] = "big"
    index.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"index.json: 'llc_bytes' must be null or an int"):
        load_fit(folder)


def test_a_step_that_fits_the_llc_is_priced_warm_and_a_larger_one_in_between():
    llc = 64 << 20
    small = [op_task(), filler(8 << 20)]
    (warm, _), _ = op_predictions(small, WarmFit(llc))
    assert warm == pytest.approx(1e-3)
    big = [op_task(), filler(1.5 * llc)]
    share = llc_share(llc, step_bytes(big))
    assert 0.45 < share < 0.5
    (mixed, _), _ = op_predictions(big, WarmFit(llc))
    assert mixed == pytest.approx(share * 1e-3 + (1 - share) * 3e-3)
    # twice the cache or more between two uses: cold, as a cold timing flushes
    assert op_predictions([op_task(), filler(2 * llc)], WarmFit(llc))[0][0] == pytest.approx(3e-3)
    # all ranks on one host share its cache: their bytes together decide
    (shared, _), _ = op_predictions(small, WarmFit(llc), moved_bytes=1.75 * llc)
    assert shared == pytest.approx(1e-3 / 4 + 3e-3 * 3 / 4)


def test_without_a_warm_predictor_or_a_known_llc_the_op_is_priced_cold():
    tasks = [op_task(), filler(1 << 20)]
    assert op_predictions(tasks, WarmFit(None))[0][0] == pytest.approx(3e-3)
    cold_only = ConstantFit({"forward": 3e-3})
    cold_only.llc_bytes = 64 << 20
    assert op_predictions(tasks, cold_only)[0][0] == pytest.approx(3e-3)
    assert op_predictions(tasks, ConstantFit({"forward": 3e-3}))[0][0] == pytest.approx(3e-3)


@settings(max_examples=60, deadline=None)
@given(llc=st.integers(1, 1 << 34), moved=st.floats(0, 1e12, allow_nan=False))
def test_the_llc_share_is_a_fraction_that_falls_as_the_step_moves_more(llc, moved):
    share = llc_share(llc, moved)
    assert 0 <= share <= 1
    assert llc_share(llc, moved * 2 + 1) <= share
    if moved <= llc:
        assert share == 1.0
    if moved >= 2 * llc:
        assert share == 0.0
    assert llc_share(None, moved) == 0.0


@settings(max_examples=40, deadline=None)
@given(llc=st.integers(1 << 20, 1 << 32), filler_bytes=st.floats(0, 1e11),
       cold=st.floats(1e-5, 1.0), ratio=st.floats(0.05, 1.0))
def test_the_price_lies_between_warm_and_cold(llc, filler_bytes, cold, ratio):
    warm = cold * ratio
    (value, _), _ = op_predictions([op_task(), filler(filler_bytes)], WarmFit(llc, cold, warm))
    assert warm * (1 - 1e-9) <= value <= cold * (1 + 1e-9)


def test_a_cpu_replay_asks_the_fit_for_the_warm_predictors_too():
    from types import SimpleNamespace

    from perfmodel.gate.replay import needed_keys
    from perfmodel.trace.graph import Graph

    graph = Graph([op_task(), Task("op", "aten::addmm", "gemm", op="addmm", direction="forward",
                                   dtype="float32", params={"M": 8, "N": 8, "K": 8})], 1e-3)
    cpu = SimpleNamespace(graphs=[graph], on_device=False)
    assert needed_keys([cpu]) == {(OP, "forward"), (OP, "forward_warm"), ("addmm", "forward")}
    gpu = SimpleNamespace(graphs=[graph], on_device=True)
    assert needed_keys([gpu]) == {(OP, "forward"), ("addmm", "forward")}


def test_the_summary_names_a_warm_direction_shortly():
    from pytest_perfmodel.summary import _short_direction, _short_op

    assert _short_direction("backward_warm") == "bwd.warm"
    assert _short_direction("forward") == "fwd"
    assert _short_op("tbe_sgd.forward_warm") == "tbe_sgd.fwd.warm"


def test_the_replay_attribution_says_how_warm_the_cold_cache_ops_were_priced():
    from perfmodel.replay.rerun import Replayed, _attribution_lines
    from perfmodel.simulate.predict import warm_share
    from perfmodel.trace.graph import Graph

    llc = 64 << 20
    graph = Graph([op_task(), filler(1.5 * llc)], 1e-3)
    share, moved = warm_share([graph], WarmFit(llc))
    assert share == pytest.approx(llc_share(llc, moved)) and 0 < share < 0.5
    assert warm_share([graph], WarmFit(None)) is None
    assert warm_share([graph], ConstantFit({"forward": 3e-3})) is None  # no warm predictor
    out = Replayed("w", "cpu-x-2c", 1e-3, 1e-3, 1e-3, "fit", tasks_delta_s=0.0,
                   untimed_delta_s=0.0, trace_delta_s=0.0, schedule_delta_s=0.0,
                   warm_share=(0.25, 256 * 2**20))
    assert "  cold-cache ops priced 25% warm, 75% cold (the step moves 256.0 MiB)" \
        in _attribution_lines(out)


def test_a_traced_dropout_maps_to_its_drop_probability():
    """``P`` is read from a real capture: 0.1 in a model's ``nn.Dropout`` gives
    ``P`` 10 to its forward and its backward task."""
    import math as _math

    import torch

    from perfmodel.e2e.single import predict_step
    from perfmodel.trace.overheads import table_from_samples

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1),
                                torch.nn.Linear(64, 1))
    x = torch.randn(32, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    result = predict_step(step, 32, "dropout_model", ConstantFit(1e-5),
                          table_from_samples([], 30e9), "cpu", 30e9, measure=False)
    drops = [t for t in result.graph.op_tasks() if t.op == "dropout"]
    assert {t.direction for t in drops} == {"forward", "backward"}
    assert all(t.params == {"ELEMS": 32 * 64, "P": 10} for t in drops)
    assert _math.isnan(result.measured.median_s)


def test_dropout_reads_p_from_its_arguments_and_defaults_without_them():
    from types import SimpleNamespace

    op = get_op("dropout")

    def node(name, values):
        return SimpleNamespace(name=name, input_shapes=[[8, 16], [], []], input_values=values)

    assert op.params_from_node(node("aten::dropout", [None, 0.2, True])) == {"ELEMS": 128, "P": 20}
    assert op.params_from_node(node("aten::native_dropout_backward", [None, None, 1 / 0.7])) \
        == {"ELEMS": 128, "P": 30}
    assert op.params_from_node(node("aten::dropout", [])) == {"ELEMS": 128, "P": 50}
    assert op.params_from_node(node("aten::dropout", [None, 0.0, True])) is None
    assert op.complete_config({"ELEMS": 128}) == {"ELEMS": 128, "P": 50}  # older records
