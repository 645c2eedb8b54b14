"""Elementwise, memory and optimizer ops: configs valid, work positive and monotone,
runners execute on a CPU, trace shapes map back to the config."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import PROFILES, cases_for, get_op
from perfmodel.ops import elementwise, memory, optim

NAMES = sorted(op.name for module in (elementwise, memory, optim) for op in module.OPS)


def test_the_families_define_the_requested_ops():
    assert set(NAMES) == {
        "relu", "gelu", "sigmoid", "tanh", "silu", "softmax", "add", "mul", "sum", "mean",
        "amax", "var", "std", "norm", "cumsum", "mse_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy",
        "cat", "transpose_contiguous", "dlrm_interaction", "index_select", "to_dtype", "copy",
        "sgd_foreach", "sgd_fused", "sgd_single", "sgd_plain_single", "adam_foreach",
        "adam_fused", "adam_single", "adamw_foreach", "adamw_fused", "adamw_single"}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", NAMES)
def test_every_config_is_valid(name, profile):
    op = get_op(name)
    configs = op.configs(profile)
    assert configs == op.configs(profile)
    assert len({tuple(c[p] for p in op.params) for c in configs}) == len(configs) >= 4
    for c in configs:
        assert list(c) == list(op.params)
        assert all(isinstance(v, int) and v >= 1 for v in c.values())


def test_smoke_is_float32_only_and_quick_covers_every_dtype():
    smoke, quick = cases_for(NAMES, "smoke"), cases_for(NAMES, "quick")
    assert {c.dtype for c in smoke} == {"float32"}
    assert {c.dtype for c in quick} == {"float32", "bfloat16"}


def test_index_select_rows_do_not_change_forward_work():
    op = get_op("index_select")
    small, big = {"ROWS": 10, "COLS": 8, "N": 4}, {"ROWS": 1000, "COLS": 8, "N": 4}
    assert op.bytes_moved(small, "float32", "forward") == op.bytes_moved(big, "float32", "forward")
    assert op.bytes_moved(small, "float32", "backward") < op.bytes_moved(big, "float32", "backward")


def test_adam_moves_seven_tensors_per_element():
    op = get_op("adam_fused")
    assert op.bytes_moved({"NTENSORS": 3, "NUMEL": 10}, "float32", "forward") == 7 * 4 * 30
    assert op.bytes_moved({"NTENSORS": 3, "NUMEL": 10}, "bfloat16", "forward") == 7 * 2 * 30


def _shapes(name, p):
    """Trace input shapes of a node of ``name`` with config ``p``."""
    if name == "cross_entropy":
        return [[p["BATCH"], p["CLASSES"]], [p["BATCH"]]]
    if name in ("add", "mul", "mse_loss", "binary_cross_entropy",
                "binary_cross_entropy_with_logits"):
        return [[p["ROWS"], p["COLS"]], [p["ROWS"], p["COLS"]]]
    if name == "cat":
        return [[[p["ROWS"], p["COLS"]]] * p["N"], []]
    if name == "dlrm_interaction":
        return [[p["BATCH"], p["F"], p["D"]]]
    if name == "index_select":
        return [[p["ROWS"], p["COLS"]], [], [p["N"]]]
    if name == "to_dtype":
        return [[p["ELEMS"]]]
    if name == "copy":
        return [[p["ELEMS"]], [p["ELEMS"]]]
    return [[p["ROWS"], p["COLS"]]]


MAPPED = [n for n in NAMES if get_op(n).family != "optim"]


@settings(max_examples=200)
@given(name=st.sampled_from(MAPPED), data=st.data())
def test_trace_shapes_map_back_to_the_config(name, data):
    op = get_op(name)
    params = {p: data.draw(st.integers(1, 64), label=p) for p in op.params}
    assert op.params_from_shapes(_shapes(name, params)) == params


def test_shapes_that_do_not_fit_are_rejected():
    assert get_op("add").params_from_shapes([[4, 8], [4, 9]]) is None
    assert get_op("cross_entropy").params_from_shapes([[4, 8], [5]]) is None
    assert get_op("cat").params_from_shapes([[[2, 3], [2, 4]], []]) is None
    assert get_op("relu").params_from_shapes([[]]) is None
    assert get_op("relu").params_from_shapes([[2, 3, 5]]) == {"ROWS": 6, "COLS": 5}
    assert get_op("adam_fused").params_from_shapes([[10], [10]]) is None


def _small(params):
    return {p: max(1, min(v, 24)) for p, v in params.items()}


def _forward_shape(name, p):
    """The shape of a forward runner's output for config ``p``."""
    if name in ("sum", "mean", "amax", "var", "std", "norm"):
        return (p["ROWS"],)
    if name in ("mse_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
                "cross_entropy"):
        return ()
    if name == "cat":
        return (p["ROWS"], p["N"] * p["COLS"])
    if name == "dlrm_interaction":
        return (p["BATCH"], p["F"] * (p["F"] - 1) // 2)
    if name == "index_select":
        return (p["N"], p["COLS"])
    if name in ("to_dtype", "copy"):
        return (p["ELEMS"],)
    return (p["ROWS"], p["COLS"])


def _check_output(name, direction, dtype, p, out):
    """Forward: one finite tensor of the documented shape (``to_dtype`` converts to
    the other dtype). Backward: finite gradients, shaped as the op's leading inputs."""
    import torch

    dtype = getattr(torch, dtype)
    if direction == "forward":
        assert isinstance(out, torch.Tensor) and tuple(out.shape) == _forward_shape(name, p)
        other = torch.float32 if dtype == torch.bfloat16 else torch.bfloat16
        assert out.dtype == (other if name == "to_dtype" else dtype)
        outs = [out]
    else:
        outs = list(out)
        inputs = [tuple(shape) for shape in _shapes(name, p)]
        assert outs and [tuple(t.shape) for t in outs] == inputs[:len(outs)]
        assert all(t.dtype == dtype for t in outs)
    assert all(torch.isfinite(t).all() for t in outs)


def _check_optimizer_step(dtype, p, runner):
    """An optimizer runner is the bound ``step`` of an optimizer already stepped
    once: it returns nothing, and every parameter has its state."""
    import torch

    assert runner() is None
    optimizer = runner.__self__
    params = optimizer.param_groups[0]["params"]
    assert [tuple(t.shape) for t in params] == [(p["NUMEL"],)] * p["NTENSORS"]
    assert all(t.dtype == getattr(torch, dtype) and torch.isfinite(t).all() for t in params)
    stateless = isinstance(optimizer, torch.optim.SGD) and not optimizer.defaults["momentum"]
    assert len(optimizer.state) == (0 if stateless else p["NTENSORS"])


@pytest.mark.parametrize("name", NAMES)
def test_runners_execute_on_cpu(name):
    op = get_op(name)
    cases = cases_for([name], "quick")[:2 * len(op.directions) * len(op.dtypes)]
    assert {(c.direction, c.dtype) for c in cases} == {
        (d, t) for d in op.directions for t in op.dtypes}
    for case in cases:
        params = _small(case.params)
        runner = op.make_runner(params, case.dtype, case.direction, "cpu")
        if op.family == "optim":
            _check_optimizer_step(case.dtype, params, runner)
        else:
            _check_output(name, case.direction, case.dtype, params, runner())


def test_runner_outputs_have_the_documented_shapes():
    import torch

    out = get_op("dlrm_interaction").make_runner({"BATCH": 3, "F": 5, "D": 4}, "float32",
                                                 "forward", "cpu")()
    assert out.shape == (3, 10)
    out = get_op("cat").make_runner({"N": 3, "ROWS": 2, "COLS": 4}, "float32", "forward", "cpu")()
    assert out.shape == (2, 12)
    out = get_op("to_dtype").make_runner({"ELEMS": 7}, "bfloat16", "forward", "cpu")()
    assert out.dtype == torch.float32
    out = get_op("transpose_contiguous").make_runner({"ROWS": 3, "COLS": 5}, "float32",
                                                     "forward", "cpu")()
    assert out.shape == (3, 5) and out.is_contiguous()
    grads = get_op("softmax").make_runner({"ROWS": 2, "COLS": 3}, "float32", "backward", "cpu")()
    assert grads[0].shape == (2, 3) and math.isfinite(grads[0].abs().sum().item())


def test_unavailable_optimizer_variant_says_unsupported(monkeypatch):
    import torch

    from perfmodel.measure.bench import unsupported_reason

    def refuse(*args, **kwargs):
        raise RuntimeError("`fused=True` requires all the params to be on a supported device")

    monkeypatch.setattr(torch.optim, "Adam", refuse)
    with pytest.raises(NotImplementedError, match="unsupported on this device") as info:
        get_op("adam_fused").make_runner({"NTENSORS": 1, "NUMEL": 4}, "float32", "forward", "cpu")
    assert unsupported_reason(info.value) is not None
