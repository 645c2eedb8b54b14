"""The GEMM forms beyond nn.Linear (``mm``, ``baddbmm``; matmul and einsum through
them and ``bmm``) and the RNN layers (``lstm``, ``gru``): runners that execute on
CPU, trace shapes and nodes that map back to the config, and a real training
step whose every GEMM and RNN node is an op task forward and backward."""

import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import get_op
from perfmodel.trace.parse import TraceNode

NEW = ("mm", "baddbmm", "lstm", "gru")
dims = st.integers(1, 4096)


def _outputs(result):
    import torch

    return [result] if isinstance(result, torch.Tensor) else list(result)


@pytest.mark.parametrize("name", NEW)
def test_smoke_is_the_fewest_float32_configs_a_fit_scores(name):
    from perfmodel.fit.fitting import MIN_CONFIGS

    op = get_op(name)
    cases = op.cases("smoke")
    assert len(op.configs("smoke")) == MIN_CONFIGS and {c.dtype for c in cases} == {"float32"}
    assert 8 <= len(op.configs("quick")) <= 32


def test_gemm_runners_execute_on_cpu_with_the_config_shapes():
    p = {"M": 5, "N": 3, "K": 7}
    out = get_op("mm").make_runner({**p, "GRAD_A": 1}, "float32", "forward", "cpu")()
    assert tuple(out.shape) == (5, 3)
    grads = _outputs(get_op("mm").make_runner({**p, "GRAD_A": 1}, "bfloat16", "backward",
                                              "cpu")())
    assert [tuple(g.shape) for g in grads] == [(5, 7), (7, 3)]
    grads = _outputs(get_op("mm").make_runner({**p, "GRAD_A": 0}, "float32", "backward",
                                              "cpu")())
    assert [tuple(g.shape) for g in grads] == [(7, 3)]  # grad_B alone
    out = get_op("baddbmm").make_runner({"BATCH": 2, **p}, "float32", "forward", "cpu")()
    assert tuple(out.shape) == (2, 5, 3)
    assert get_op("baddbmm").backward_via({"BATCH": 2, **p}) == ("bmm", {"BATCH": 2, **p})


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rnn_runners_execute_every_smoke_config_on_cpu(name):
    import torch

    op = get_op(name)
    for case in op.cases("smoke"):
        p = case.params
        result = op.make_runner(p, case.dtype, case.direction, "cpu")()
        if case.direction == "forward":
            out, _ = result
            assert tuple(out.shape) == (p["BATCH"], p["SEQ"], p["HIDDEN"])
        else:  # the input's gradient, then 4 tensors per layer (weights, biases)
            grads = _outputs(result)
            assert len(grads) == 1 + 4 * p["LAYERS"]
            assert tuple(grads[0].shape) == (p["BATCH"], p["SEQ"], p["INPUT"])
            assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rnn_work_follows_gates_layers_and_direction(name):
    op = get_op(name)
    p = {"BATCH": 4, "SEQ": 10, "INPUT": 32, "HIDDEN": 64, "LAYERS": 1}
    gemm = 2.0 * op.gates * (32 + 64) * 64 * 4 * 10
    assert gemm < op.flops(p, "forward") < 1.1 * gemm
    assert op.flops(p, "backward") == 2 * op.flops(p, "forward")
    deeper = dict(p, LAYERS=2)  # layer 2 reads HIDDEN, not INPUT
    assert op.flops(deeper, "forward") - op.flops(p, "forward") == pytest.approx(
        op.flops(dict(p, INPUT=64), "forward"))
    assert op.bytes_moved(p, "float32", "backward") > op.bytes_moved(p, "float32", "forward")
    assert get_op("lstm").flops(p, "forward") > get_op("gru").flops(p, "forward")


@settings(max_examples=100)
@given(m=dims, n=dims, k=dims, batch=st.integers(1, 512), data=st.data())
def test_gemm_trace_shapes_map_back_to_the_config(m, n, k, batch, data):
    mm, baddbmm = get_op("mm"), get_op("baddbmm")
    assert mm.params_from_shapes([[m, k], [k, n]]) == {"M": m, "N": n, "K": k, "GRAD_A": 1}
    assert mm.params_from_shapes([[m, k], [k + 1, n]]) is None
    assert mm.params_from_shapes([[batch, m, k], [k, n]]) is None  # matmul's fold is an mm
    c = data.draw(st.sampled_from([[batch, m, n], [m, n], [n], [1, m, n], [batch, 1, n], []]))
    expected = {"BATCH": batch, "M": m, "N": n, "K": k}
    assert baddbmm.params_from_shapes([c, [batch, m, k], [batch, k, n], [], []]) == expected
    assert baddbmm.params_from_shapes([[batch, m, n + 1], [batch, m, k], [batch, k, n]]) \
        is None or n + 1 == 1
    assert baddbmm.params_from_shapes([c, [batch, m, k], [batch, k + 1, n]]) is None


def _mm_backward(*gemm_inputs):
    """An ``MmBackward0`` evaluate_function node whose children are ``aten::mm``
    nodes with these input shapes."""
    root = TraceNode(1, "autograd::engine::evaluate_function: MmBackward0", 0, {}, {})
    fn = TraceNode(2, "MmBackward0", 1, {}, {}, seq_id=7)
    root.children.append(fn)
    for i, shapes in enumerate(gemm_inputs):
        fn.children.append(TraceNode(3 + i, "aten::mm", 2, {"shapes": shapes}, {}))
    return root


def test_mm_backward_config_counts_the_gemms_autograd_ran():
    mm = get_op("mm")
    p = {"M": 8, "N": 24, "K": 16, "GRAD_A": 1}
    both = _mm_backward([[16, 8], [8, 24]], [[8, 24], [24, 16]])
    assert mm.backward_params(p, both) == p
    grad_b = _mm_backward([[16, 8], [8, 24]])  # A needs no gradient
    assert mm.backward_params(p, grad_b) == dict(p, GRAD_A=0)
    grad_a = _mm_backward([[8, 24], [24, 16]])  # B needs none: the M×N·N×K product
    q = mm.backward_params(p, grad_a)
    assert q == {"M": 24, "N": 16, "K": 8, "GRAD_A": 0}
    assert mm.flops(q, "backward") == mm.flops(p, "forward")


_RNN_FLAGS = ["Bool", "Int", "Double", "Bool", "Bool", "Bool"]


def _rnn_node(name, x, hidden, layers, gates, batch_first=True, bidirectional=False,
              biases=True, inp=None):
    """An ``aten::lstm`` / ``aten::gru`` node over input shape ``x``."""
    rows = gates * hidden

    def layer(width):
        return [[rows, width], [rows, hidden]] + ([[rows], [rows]] if biases else [])

    weights = layer(inp or x[-1]) + [w for _ in range(layers - 1) for w in layer(hidden)]
    types = ["Tensor(float)", "GenericList[Tensor(float)]", "GenericList[Tensor(float)]"]
    shapes = [list(x), [[layers, 1, hidden]], weights, [], [], [], [], [], []]
    values = ["<x>", "<hx>", "<w>", biases, layers, 0.0, True, bidirectional, batch_first]
    return TraceNode(1, name, 0, {"shapes": shapes, "types": types + _RNN_FLAGS,
                                  "values": values}, {})


@settings(max_examples=60)
@given(name=st.sampled_from(["lstm", "gru"]), b=st.integers(1, 256), s=st.integers(1, 512),
       i=st.integers(1, 1024), h=st.integers(1, 1024), layers=st.integers(1, 6),
       batch_first=st.booleans(), biases=st.booleans())
def test_rnn_nodes_map_back_to_the_config(name, b, s, i, h, layers, batch_first, biases):
    op = get_op(name)
    x = [b, s, i] if batch_first else [s, b, i]
    node = _rnn_node(op.trace_names[0], x, h, layers, op.gates, batch_first, biases=biases)
    assert op.params_from_node(node) == {"BATCH": b, "SEQ": s, "INPUT": i, "HIDDEN": h,
                                         "LAYERS": layers}
    assert op.params_from_node(_rnn_node(op.trace_names[0], x, h, layers, op.gates,
                                         batch_first, bidirectional=True)) is None
    other = get_op("gru" if name == "lstm" else "lstm")  # the other cell's gate count
    assert other.params_from_node(node) is None or other.gates * h == op.gates * h
    assert op.params_from_node(_rnn_node(op.trace_names[0], x, h, layers, op.gates,
                                         inp=i + 1)) is None
    packed = TraceNode(1, op.trace_names[0], 0, {"shapes": [[b * s, i], [s]], "types": [],
                                                 "values": []}, {})
    assert op.params_from_node(packed) is None and op.params_from_shapes([x]) is None


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The task graph of a tiny training step calling every GEMM form and both RNNs."""
    import torch
    from torch import nn

    from perfmodel.e2e.single import capture_graph

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 24) * 0.1)
            self.stack = nn.Parameter(torch.randn(3, 8, 16) * 0.1)
            self.bias = nn.Parameter(torch.randn(4, 8, 8) * 0.1)
            self.lstm = nn.LSTM(24, 12, num_layers=2, batch_first=True)
            self.gru = nn.GRU(12, 10, batch_first=True)

        def forward(self, x, x2):
            y = torch.mm(x2, self.w)  # aten::mm
            z = x @ self.w  # 3-D @ 2-D: aten::matmul -> aten::mm
            q, k = x.view(2, 2, 8, 16), (x * 2).view(2, 2, 8, 16)
            att = q @ k.transpose(-2, -1)  # 4-D @ 4-D: aten::matmul -> aten::bmm
            e = torch.einsum("bhqd,bhkd->bhqk", q, k)  # aten::einsum -> aten::bmm
            b3 = torch.matmul(x, x.transpose(1, 2))  # 3-D @ 3-D: aten::bmm
            bb = torch.baddbmm(self.bias, x, x.transpose(1, 2))
            sel = x2 @ self.stack[1].t()  # a selected weight slice: aten::mm
            r, _ = self.lstm(z)
            g, _ = self.gru(r[:, :2])  # two steps: a CPU's GRU traces ~30 nodes a step
            return (y.sum() + att.sum() + e.sum() + b3.sum() + bb.sum() + sel.sum()
                    + g.sum())

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(4, 8, 16, requires_grad=True)
    x2 = torch.randn(8, 16)  # needs no gradient: its mm's backward runs one GEMM

    def step():
        opt.zero_grad()
        net(x, x2).backward()
        opt.step()

    return capture_graph(step, tmp_path_factory.mktemp("gemm_rnn"), "gemm_rnn", "cpu")


def test_a_real_training_step_prices_every_gemm_form_forward_and_backward(traced):
    tasks = {}
    for t in traced.op_tasks():
        tasks.setdefault((t.op, t.direction), []).append(t.params)
    mm = [{"M": 8, "N": 24, "K": 16, "GRAD_A": 1}, {"M": 32, "N": 24, "K": 16, "GRAD_A": 1},
          {"M": 8, "N": 8, "K": 16, "GRAD_A": 1}]
    assert tasks[("mm", "forward")] == mm
    # x2 needs no gradient: its two mms' backwards run grad_B alone
    assert sorted(map(sorted, (p.items() for p in tasks[("mm", "backward")]))) == sorted(
        map(sorted, (p.items() for p in [dict(mm[0], GRAD_A=0), mm[1], dict(mm[2], GRAD_A=0)])))
    attention = {"BATCH": 4, "M": 8, "N": 8, "K": 16}
    assert tasks[("bmm", "forward")] == [attention] * 3
    assert tasks[("baddbmm", "forward")] == [attention]
    # baddbmm's backward is bmm's
    assert tasks[("bmm", "backward")] == [attention] * 4
    assert tasks[("lstm", "forward")] == tasks[("lstm", "backward")] == [
        {"BATCH": 4, "SEQ": 8, "INPUT": 24, "HIDDEN": 12, "LAYERS": 2}]
    assert tasks[("gru", "forward")] == tasks[("gru", "backward")] == [
        {"BATCH": 4, "SEQ": 2, "INPUT": 12, "HIDDEN": 10, "LAYERS": 1}]
    # a GRU's per-step ops are not priced apart from it
    assert ("linear", "forward") not in tasks and ("addmm", "forward") not in tasks


def test_a_real_training_step_leaves_no_gemm_or_rnn_node_unmodelled(traced):
    unmodelled = [name for name, _, _ in traced.unmodelled()]
    for word in ("matmul", "einsum", "aten::mm", "bmm", "Mm", "Bmm", "Baddbmm", "lstm",
                 "gru", "Rnn", "Gru", "Lstm", "Sigmoid", "Tanh"):
        assert not [name for name in unmodelled if word in name], (word, unmodelled)
    covered = [t.name for t in traced.tasks if t.kind == "covered"]
    assert any("MkldnnRnnLayerBackward0" in name for name in covered)
    # the weight slice's scatter back into the whole weight's gradient is no GEMM's
    assert "autograd::engine::evaluate_function: SelectBackward0" in unmodelled
