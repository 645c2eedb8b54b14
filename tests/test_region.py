"""perfmodel.trace.region: context manager and decorator, recorded only while tracing,
and grouped in the task graph and the E2E result."""

import pytest

import perfmodel
from perfmodel.trace.region import PREFIX, Region, recording
from tests.helpers import ConstantFit, tiny_mlp


def test_context_manager_and_decorators_keep_names_and_results():
    with perfmodel.region("data") as r:
        assert isinstance(r, Region) and r.name == "data"

    @perfmodel.region("loss")
    def loss(x):
        """doc"""
        return x + 1

    class Model:
        @perfmodel.region
        def step(self):
            return "stepped"

    assert loss(1) == 2 and loss.__name__ == "loss" and loss.__doc__ == "doc"
    assert Model().step() == "stepped" and Model.step.__name__ == "step"


@pytest.mark.parametrize("name", ["", None, 3])
def test_bad_names_are_rejected(name):
    with pytest.raises(ValueError, match="region name"):
        perfmodel.region(name)


def _recorded_names(fn):
    """Names of the user scopes the Kineto profiler saw while ``fn`` ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events() if e.name.startswith(PREFIX)}


def test_recorded_only_while_a_profiler_or_recording_scope_is_on():
    import torch

    @perfmodel.region
    def work():
        with perfmodel.region("inner"):
            return torch.ones(2) + 1

    with perfmodel.region("idle") as r:
        assert r._scopes == [None]  # nothing records: no record_function created
    with recording(), perfmodel.region("forced") as r:
        assert r._scopes[0] is not None
    assert r._scopes == []
    qualname = f"{PREFIX}{work.__qualname__}"
    assert _recorded_names(work) == {qualname, f"{PREFIX}inner"}


def test_one_region_object_can_be_nested_in_itself():
    """The same :class:`Region` entered twice (recursion, say): each exit
    closes its own scope (the profiler lists a same-named nested scope once)."""
    import torch

    again = Region("again")

    def work():
        with again:
            with again:
                torch.ones(2).add_(1)
            assert len(again._scopes) == 1
        assert again._scopes == []

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    assert f"{PREFIX}again" in {e.name for e in prof.events()}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The graph of a tiny training step whose parts are regions."""
    import torch

    from perfmodel.trace.graph import build_graph
    from perfmodel.trace.parse import capture_trace, load_trace

    model, opt, x, y = tiny_mlp()

    @perfmodel.region("loss")
    def loss(out):
        return torch.nn.functional.mse_loss(out, y)

    def step():
        opt.zero_grad(set_to_none=True)
        with perfmodel.region("forward"):
            out = model(x)
        loss(out).backward()
        with perfmodel.region("optimizer"):
            opt.step()

    files = capture_trace(step, tmp_path_factory.mktemp("region"), "mlp", iterations=2, warmup=1)
    return step, build_graph(load_trace(files.et, files.kineto, files.calibration))


def test_tasks_carry_their_region(traced):
    _, graph = traced
    ops = [t for t in graph.tasks if t.kind == "op"]
    by_op = {(t.op, t.direction): t.region for t in ops}
    assert by_op[("linear", "forward")] == "forward"
    assert by_op[("linear", "backward")] == "forward"  # backward takes its forward's region
    assert by_op[("mse_loss", "forward")] == "loss"
    assert {t.region for t in ops if t.family == "optim"} == {"optimizer"}
    assert {t.region for t in graph.tasks} <= {"forward", "loss", "optimizer", None}


def test_e2e_result_groups_predicted_time_by_region(traced):
    from perfmodel.e2e.single import predict_and_measure
    from perfmodel.trace.overheads import samples_from_graph, table_from_samples

    step, graph = traced
    bandwidth = 1e10
    table = table_from_samples([samples_from_graph("mlp", graph, bandwidth)], bandwidth)
    result = predict_and_measure("mlp", step, 8, graph, ConstantFit(1e-3), table, "cpu",
                                 bandwidth, measure=False)
    assert set(result.regions_s) == {"forward", "loss", "optimizer"}
    for name, seconds in result.regions_s.items():
        n_ops = sum(1 for t in graph.tasks if t.kind == "op" and t.region == name)
        assert seconds >= n_ops * 1e-3 > 0
    assert sum(result.regions_s.values()) <= result.predicted_s
    assert result.record({})["regions_s"] == result.regions_s
