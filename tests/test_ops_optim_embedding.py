"""The per-parameter optimizer loop (``*_single``) and plain ``nn.Embedding``
(``embedding``): configs, work, runners, trace shapes, and both recognised in a
real trace of a tiny language model."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import PROFILES, get_op
from perfmodel.ops import embedding as emb
from perfmodel.ops import optim

SINGLE = ("sgd_single", "sgd_plain_single", "adam_single", "adamw_single")


# -- the per-parameter loop ---------------------------------------------------------------

def test_every_optimizer_has_a_single_variant():
    names = {op.name for op in optim.OPS}
    assert set(SINGLE) <= names
    assert "sgd_plain_foreach" not in names and "sgd_plain_fused" not in names
    assert {get_op(n).trace_names for n in ("sgd_single", "sgd_plain_single", "sgd_foreach")} \
        == {("Optimizer.step#SGD.step",)}
    assert all(get_op(n).cold_on_cpu for n in SINGLE)


@pytest.mark.parametrize("name", SINGLE)
def test_single_configs_cover_many_small_tensors(name):
    """The loop's per-tensor term rules at small NUMEL: quick and gpu configs
    span 1..512 tensors there, and reach the element cap's neighbourhood too."""
    op = get_op(name)
    assert len(op.configs("smoke")) == 4  # the fewest a fit scores
    assert {c.dtype for c in op.cases("smoke")} == {"float32"}
    for profile in ("quick", "gpu"):
        configs = op.configs(profile, workloads=False)
        small = [c["NTENSORS"] for c in configs if c["NUMEL"] <= optim._SMALL_NUMEL]
        assert len(small) >= len(configs) // 2
        assert min(small) <= 2 and max(small) >= 214
        assert all(c["NTENSORS"] * c["NUMEL"] <= optim._SINGLE_MAX_ELEMS[profile]
                   for c in configs)
        most = max(c["NTENSORS"] * c["NUMEL"] for c in configs)
        assert most >= optim._SINGLE_MAX_ELEMS[profile] // 8
    full = op.configs("full")
    assert {c["NTENSORS"] for c in full} == set(optim._SINGLE_GRID["NTENSORS"])


def test_plain_sgd_moves_less_than_sgd_with_momentum():
    cfg = {"NTENSORS": 3, "NUMEL": 10}
    plain, momentum = get_op("sgd_plain_single"), get_op("sgd_single")
    assert plain.bytes_moved(cfg, "float32", "forward") == 3 * 4 * 30
    assert momentum.bytes_moved(cfg, "float32", "forward") == 5 * 4 * 30
    assert plain.flops(cfg, "forward") < momentum.flops(cfg, "forward")
    assert get_op("adam_single").bytes_moved(cfg, "bfloat16", "forward") == \
        get_op("adam_foreach").bytes_moved(cfg, "bfloat16", "forward")


@pytest.mark.parametrize("name", SINGLE)
def test_single_runner_steps_a_per_parameter_loop(name, monkeypatch):
    """The runner's optimizer runs ``_single_tensor_<optimizer>`` (neither
    foreach nor fused), one step already taken, every state allocated."""
    import importlib

    import torch

    op = get_op(name)
    kind = "sgd" if name.startswith("sgd") else "adam"  # AdamW runs Adam's functions
    module = importlib.import_module(f"torch.optim.{kind}")
    single = getattr(module, f"_single_tensor_{kind}")
    calls = []
    monkeypatch.setattr(module, single.__name__,
                        lambda *a, **k: calls.append(1) or single(*a, **k))
    for case in op.cases("smoke"):
        runner = op.make_runner(case.params, "float32", "forward", "cpu")
        optimizer = runner.__self__
        assert optimizer.defaults["foreach"] is False and not optimizer.defaults.get("fused")
        params = optimizer.param_groups[0]["params"]
        before = [p.detach().clone() for p in params]
        assert runner() is None
        assert [tuple(p.shape) for p in params] == \
            [(case.params["NUMEL"],)] * case.params["NTENSORS"]
        assert all(not torch.equal(a, b) for a, b in zip(before, params))
        # plain SGD keeps no state; the others a state per parameter
        assert len(optimizer.state) == (0 if name == "sgd_plain_single" else len(params))
        if kind == "sgd":
            assert optimizer.defaults["momentum"] == (0.9 if name == "sgd_single" else 0)
    assert len(calls) == 2 * len(op.cases("smoke"))  # make_runner's step and the timed one


def test_single_runner_runs_bfloat16():
    import torch

    runner = get_op("adamw_single").make_runner({"NTENSORS": 3, "NUMEL": 5}, "bfloat16",
                                                 "forward", "cpu")
    runner()
    assert all(p.dtype == torch.bfloat16 for p in runner.__self__.param_groups[0]["params"])


# -- plain embedding ----------------------------------------------------------------------

def test_embedding_configs_are_sized_per_profile():
    op = get_op("embedding")
    assert len(op.configs("smoke")) == 4 and {c.dtype for c in op.cases("smoke")} == {"float32"}
    assert 8 <= len(op.configs("quick")) <= 16 and len(op.configs("full")) >= 60
    for profile in PROFILES:
        for c in op.configs(profile):
            assert c["ROWS"] * c["DIM"] <= emb._LOOKUP_MAX_TABLE[profile]
            assert c["INDICES"] * c["DIM"] <= emb._LOOKUP_MAX_GATHER[profile]
    gpu = op.configs("gpu", workloads=False)
    assert max(c["ROWS"] * c["DIM"] for c in gpu) >= 50257 * 768  # GPT-2's token table
    assert max(c["INDICES"] for c in gpu) >= 8 * 1024  # GPT-2's batch of tokens


def test_embedding_backward_writes_the_whole_table():
    op = get_op("embedding")
    small, big = {"ROWS": 100, "DIM": 16, "INDICES": 32}, {"ROWS": 100_000, "DIM": 16,
                                                         "INDICES": 32}
    assert op.bytes_moved(small, "float32", "forward") == op.bytes_moved(big, "float32",
                                                                         "forward")
    assert op.bytes_moved(big, "float32", "backward") >= 4 * 100_000 * 16
    assert op.bytes_moved(big, "float32", "backward") - op.bytes_moved(
        small, "float32", "backward") >= 4 * (100_000 - 100) * 16
    assert op.bytes_moved(small, "bfloat16", "forward") == 2 * 2 * 32 * 16 + 8 * 32
    assert not op.accepts({"ROWS": 0, "DIM": 16, "INDICES": 32})
    assert op.accepts(small)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_embedding_runners_execute_on_cpu(direction):
    import torch

    op = get_op("embedding")
    for case in [c for c in op.cases("smoke") if c.direction == direction]:
        p = case.params
        runner = op.make_runner(p, case.dtype, direction, "cpu")
        outs = [runner() for _ in range(emb.INDEX_BATCHES + 1)]
        if direction == "backward":
            outs = [o for (o,) in outs]
            shape = (p["ROWS"], p["DIM"])
        else:
            shape = (p["INDICES"], p["DIM"])
        assert all(tuple(o.shape) == shape and torch.isfinite(o).all() for o in outs)
        # a fresh batch of indices each call, the first again after INDEX_BATCHES
        assert torch.equal(outs[0], outs[emb.INDEX_BATCHES])
        if p["INDICES"] > 1:
            assert not torch.equal(outs[0], outs[1])


def test_embedding_indices_are_deterministic_and_in_range():
    cfg = {"ROWS": 37, "DIM": 8, "INDICES": 500}
    a, b = emb.lookup_indices(cfg, 1), emb.lookup_indices(cfg, 1)
    assert np.array_equal(a, b) and a.dtype == np.int64 and len(a) == 500
    assert 0 <= a.min() and a.max() < 37
    assert not np.array_equal(a, emb.lookup_indices(cfg, 2))


@settings(max_examples=100)
@given(rows=st.integers(1, 1 << 20), dim=st.integers(1, 8192),
       index_shape=st.lists(st.integers(1, 64), min_size=0, max_size=3))
def test_embedding_trace_shapes_round_trip(rows, dim, index_shape):
    op = get_op("embedding")
    config = {"ROWS": rows, "DIM": dim, "INDICES": math.prod(index_shape)}
    assert op.params_from_shapes([[rows, dim], index_shape, [], [], []]) == config
    assert op.params_from_shapes([[rows * dim], index_shape]) is None
    assert op.params_from_shapes([[rows, dim]]) is None


def test_a_sparse_embedding_is_not_claimed():
    from perfmodel.trace.parse import TraceNode

    def node(sparse):
        return TraceNode(1, "aten::embedding", 0, {
            "shapes": [[10, 4], [3], [], [], []],
            "types": ["Tensor(float)", "Tensor(long int)", "Int", "Bool", "Bool"],
            "values": [[1, 1, 0, 40, 4, "cpu"], [2, 2, 0, 3, 8, "cpu"], -1, False, sparse]}, {})

    op = get_op("embedding")
    assert op.params_from_node(node(False)) == {"ROWS": 10, "DIM": 4, "INDICES": 3}
    assert op.params_from_node(node(True)) is None


# -- both in a real trace -----------------------------------------------------------------

@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The task graph of a tiny language model (nn.Embedding -> nn.Linear ->
    cross_entropy) stepped by five optimizers, each over its own copy: Adam
    and SGD at their defaults (the per-parameter loop on CPU), SGD with
    momentum, foreach Adam and fused Adam."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from perfmodel.e2e.single import capture_graph

    torch.manual_seed(0)
    vocab, dim = 50, 12

    def lm():
        return nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, vocab))

    models = [lm() for _ in range(5)]
    optimizers = [torch.optim.Adam(models[0].parameters()),
                  torch.optim.SGD(models[1].parameters(), lr=0.1),
                  torch.optim.SGD(models[2].parameters(), lr=0.1, momentum=0.9),
                  torch.optim.Adam(models[3].parameters(), foreach=True),
                  torch.optim.Adam(models[4].parameters(), fused=True)]
    tokens = torch.randint(0, vocab, (2, 6))
    target = torch.randint(0, vocab, (2, 6))

    def step():
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad()
            F.cross_entropy(model(tokens).reshape(-1, vocab), target.reshape(-1)).backward()
            optimizer.step()

    return capture_graph(step, tmp_path_factory.mktemp("lm"), "lm", "cpu")


def test_the_embedding_and_its_dense_backward_are_op_tasks(traced):
    tasks = [(t.op, t.direction, t.params) for t in traced.op_tasks() if t.op == "embedding"]
    config = {"ROWS": 50, "DIM": 12, "INDICES": 12}
    assert tasks == [("embedding", d, config) for _ in range(5)
                     for d in ("forward", "backward")]
    unmodelled = {name for name, _, _ in traced.unmodelled()}
    assert not any("Embedding" in name or "embedding" in name for name in unmodelled)


def test_each_optimizer_step_is_read_as_the_variant_it_ran(traced):
    steps = [(t.op, t.params) for t in traced.op_tasks() if t.name.startswith("Optimizer.step")]
    # an embedding table, a weight and a bias: 600 + 600 + 50 elements
    config = {"NTENSORS": 3, "NUMEL": 417}
    assert steps == [(name, config) for name in (
        "adam_single", "sgd_plain_single", "sgd_single", "adam_foreach", "adam_fused")]
    unmodelled = {name for name, _, _ in traced.unmodelled()}
    loop_ops = {"aten::lerp_", "aten::addcmul_", "aten::addcdiv_", "aten::sqrt", "aten::add_",
                "aten::mul_", "aten::_fused_adam_"}
    assert not unmodelled & loop_ops
    assert not any(name.startswith("Optimizer.step") for name in unmodelled)
