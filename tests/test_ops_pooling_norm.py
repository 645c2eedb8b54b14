"""Pooling, upsampling, transposed-conv, group-norm and instance-norm op
definitions: valid configs, runners that execute on CPU, trace shapes and
arguments that map back to the config, and recognition in a real trace."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import PROFILES, cases_for, get_op
from perfmodel.ops.conv import out_size, transposed_out_size
from perfmodel.trace.parse import TraceNode

POOL = ("max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d", "adaptive_avg_pool2d")
UPSAMPLE = ("upsample_nearest2d", "upsample_bilinear2d")
TRANSPOSED = ("conv_transpose2d", "conv_transpose1d")
NORM = ("group_norm", "instance_norm")
NAMES = POOL + UPSAMPLE + TRANSPOSED + NORM
SPATIAL = {"conv_transpose2d": ("H", "W"), "conv_transpose1d": ("L",)}


def _node(name, shapes, values, types=None, out_shapes=None):
    """A trace node as the parser makes it; ``types`` default to what the ET
    records for these values (int lists, floats, bools, tensors)."""
    def kind(v):
        if isinstance(v, bool):
            return "Bool"
        if isinstance(v, int):
            return "Int"
        if isinstance(v, float):
            return "Double"
        if isinstance(v, list) and v and isinstance(v[0], float):
            return "GenericList[Double,Double]"
        if isinstance(v, list):
            return "GenericList[" + ",".join("Int" for _ in v) + "]"
        return "None"

    types = types or ["Tensor(float)"] + [kind(v) for v in values[1:]]
    outputs = {"shapes": out_shapes} if out_shapes is not None else {}
    return TraceNode(1, name, 0, {"shapes": shapes, "types": types, "values": values}, outputs)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", NAMES)
def test_every_config_is_valid_and_sized_for_its_profile(name, profile):
    op = get_op(name)
    configs = op.configs(profile)
    assert configs == op.configs(profile)  # deterministic
    drawn = op.configs(profile, workloads=False)  # the gpu profile adds the workloads' calls
    assert len(drawn) == {"smoke": 4, "quick": 16, "gpu": 16}.get(profile, len(drawn))
    assert all(c in configs for c in drawn)
    assert len(configs) >= 4  # a fit needs four configs to score an op
    for c in configs:
        assert op.accepts(c), c
    dtypes = {c.dtype for c in op.cases(profile)}
    assert dtypes == ({"float32"} if profile == "smoke" else {"float32", "bfloat16"})


def test_window_and_group_kinds_are_drawn():
    quick = {name: get_op(name).configs("quick") for name in NAMES}
    assert {(c["R"], c["STRIDE"], c["PAD"]) for c in quick["max_pool2d"]} >= {(3, 2, 1), (2, 2, 0)}
    assert {c["OUT"] for c in quick["adaptive_avg_pool2d"]} >= {1, 7}
    assert {(c["R"], c["STRIDE"], c["PAD"]) for c in quick["max_pool1d"]} >= {(4, 4, 0), (2, 2, 0)}
    globals_ = [c for c in quick["avg_pool1d"] if c["R"] == c["STRIDE"] == c["L"]]
    assert len(globals_) >= 4 and len(globals_) < len(quick["avg_pool1d"])
    for name in UPSAMPLE:  # scale factor 2, and other output sizes
        ratios = {(c["OH"] / c["H"], c["OW"] / c["W"]) for c in quick[name]}
        assert (2, 2) in ratios and len(ratios) > 2
    for name in TRANSPOSED:
        assert {c["GROUPS"] > 1 for c in quick[name]} == {False, True}
        assert {c["BIAS"] for c in quick[name]} == {0, 1}
        assert {c["STRIDE"] for c in quick[name]} >= {1, 2}
    groups = {(c["GROUPS"] == 1, c["GROUPS"] == c["C"]) for c in quick["group_norm"]}
    assert {(True, False), (False, False)} <= groups


def test_global_average_pooling_is_a_feature_of_its_own():
    """``OUT`` = 1 runs as a ``mean``, another kernel: a feature says which."""
    op = get_op("adaptive_avg_pool2d")
    p = {"N": 2, "C": 8, "H": 7, "W": 7}
    assert op.extra_features({**p, "OUT": 1}, "float32", "forward") == [1.0]
    assert op.extra_features({**p, "OUT": 2}, "float32", "forward") == [0.0]
    assert len(op.extra_feature_names) == 1


def _shape(t):
    return tuple(t.shape)


@pytest.mark.parametrize("name", NAMES)
def test_smoke_runners_execute_on_cpu_forward_and_backward(name):
    import torch

    op = get_op(name)
    for case in cases_for([name], "smoke"):
        p = case.params
        result = op.make_runner(p, case.dtype, case.direction, "cpu")()
        if case.direction == "forward":
            assert torch.isfinite(result).all(), case
            continue
        assert all(g is not None and torch.isfinite(g).all() for g in result), case
        if name in POOL + UPSAMPLE:  # the input's gradient
            spatial = (p["L"],) if "L" in p else (p["H"], p["W"])
            assert [_shape(g) for g in result] == [(p["N"], p["C"], *spatial)]
        elif name in NORM:
            assert [_shape(g) for g in result] == [(p["N"], p["C"], p["HW"]), (p["C"],),
                                                    (p["C"],)]


def test_runner_output_shapes_match_the_config():
    base = {"N": 2, "C": 3, "H": 9, "W": 7}
    for name, extra, (oh, ow) in [
            ("max_pool2d", {"R": 3, "STRIDE": 2, "PAD": 1}, (5, 4)),
            ("avg_pool2d", {"R": 2, "STRIDE": 2, "PAD": 0}, (4, 3)),
            ("adaptive_avg_pool2d", {"OUT": 3}, (3, 3)),
            ("adaptive_avg_pool2d", {"OUT": 1}, (1, 1)),
            ("upsample_nearest2d", {"OH": 18, "OW": 14}, (18, 14)),
            ("upsample_bilinear2d", {"OH": 5, "OW": 11}, (5, 11))]:
        out = get_op(name).make_runner({**base, **extra}, "float32", "forward", "cpu")()
        assert _shape(out) == (2, 3, oh, ow), name
    assert (oh, ow) == (5, 11) and out_size(9, 3, 2, 1, 1) == 5
    signal = {"N": 2, "C": 3, "L": 50}
    for name, window, length in [("max_pool1d", (4, 4, 0), 12), ("max_pool1d", (3, 2, 1), 25),
                                 ("avg_pool1d", (50, 50, 0), 1), ("avg_pool1d", (3, 1, 1), 50)]:
        op = get_op(name)
        p = {**signal, **dict(zip(("R", "STRIDE", "PAD"), window))}
        assert _shape(op.make_runner(p, "float32", "forward", "cpu")()) == (2, 3, length), name
        assert op._sizes(p) == (300.0, 6.0 * length)
    ct = get_op("conv_transpose2d")
    p = {"N": 2, "C": 4, "H": 5, "W": 6, "K": 6, "R": 3, "STRIDE": 2, "PAD": 1, "OUTPAD": 1,
         "DIL": 1, "GROUPS": 2, "GRAD_INPUT": 1, "BIAS": 1}
    assert _shape(ct.make_runner(p, "float32", "forward", "cpu")()) == (2, 6, 10, 12)
    assert transposed_out_size(5, 3, 2, 1, 1, 1) == 10
    grads = ct.make_runner(p, "float32", "backward", "cpu")()
    assert [_shape(g) for g in grads] == [(2, 4, 5, 6), (4, 3, 3, 3), (6,)]
    grads = ct.make_runner(dict(p, GRAD_INPUT=0, BIAS=0), "float32", "backward", "cpu")()
    assert [_shape(g) for g in grads] == [(4, 3, 3, 3)]  # the weight's alone
    assert ct.flops(dict(p, GRAD_INPUT=0), "backward") < ct.flops(p, "backward")
    with pytest.raises(ValueError, match="cannot run"):
        ct.make_runner(dict(p, OUTPAD=2), "float32", "forward", "cpu")  # OUTPAD >= STRIDE
    with pytest.raises(ValueError, match="C % GROUPS"):
        get_op("group_norm").make_runner({"N": 2, "C": 6, "HW": 4, "GROUPS": 4}, "float32",
                                         "forward", "cpu")


def test_transposed_conv_work_is_the_conv_it_is_the_backward_data_of():
    """A stride-1 transposed conv has the multiply-accumulates of the conv from
    its output back to its input, and the same weight."""
    conv, ct = get_op("conv2d"), get_op("conv_transpose2d")
    t = {"N": 4, "C": 16, "H": 10, "W": 10, "K": 8, "R": 3, "STRIDE": 1, "PAD": 0, "OUTPAD": 0,
         "DIL": 1, "GROUPS": 1, "GRAD_INPUT": 1, "BIAS": 0}
    c = {"N": 4, "C": 8, "H": 12, "W": 12, "K": 16, "R": 3, "STRIDE": 1, "PAD": 0, "DIL": 1,
         "GROUPS": 1, "GRAD_INPUT": 1, "BIAS": 0}
    inp, weight, out, macs = ct._sizes(t)
    assert (inp, weight, out, macs) == (conv._sizes(c)[2], conv._sizes(c)[1], conv._sizes(c)[0],
                                        conv._sizes(c)[3])


dims = st.integers(1, 512)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_pool_and_upsample_trace_shapes_and_arguments_map_back(data):
    p = {k: data.draw(dims, label=k) for k in ("N", "C", "H", "W")}
    x = [p["N"], p["C"], p["H"], p["W"]]
    r = data.draw(st.integers(1, 7), label="R")
    pad = data.draw(st.integers(0, r // 2), label="PAD")
    stride = data.draw(st.integers(1, 4), label="STRIDE")
    if min(p["H"], p["W"]) + 2 * pad >= r:
        mp = get_op("max_pool2d")
        assert mp.params_from_shapes([x, [], [], [], [], []]) == p
        node = _node("aten::max_pool2d", [x, [], [], [], [], []],
                     [None, [r, r], [stride, stride], [pad, pad], [1, 1], False])
        assert mp.params_from_node(node) == {**p, "R": r, "STRIDE": stride, "PAD": pad}
        node = _node("aten::avg_pool2d", [x, [], [], [], [], [], []],
                     [None, [r, r], [], [pad, pad], False, True, None])
        assert get_op("avg_pool2d").params_from_node(node) == {**p, "R": r, "STRIDE": r,
                                                               "PAD": pad}
    out = data.draw(st.integers(1, 9), label="OUT")
    node = _node("aten::adaptive_avg_pool2d", [x, [[], []]], [None, [out, out]])
    assert get_op("adaptive_avg_pool2d").params_from_node(node) == {**p, "OUT": out}
    oh, ow = data.draw(dims, label="OH"), data.draw(dims, label="OW")
    for name in UPSAMPLE:
        op = get_op(name)
        with_shape = _node(f"aten::{name}", [x, [], []], [None, None, None],
                           out_shapes=[[p["N"], p["C"], oh, ow]])
        with_size = _node(f"aten::{name}", [x, [[], []], [], []], [None, [oh, ow], False, None])
        assert op.params_from_node(with_shape) == op.params_from_node(with_size) == \
            {**p, "OH": oh, "OW": ow}
    scale = data.draw(st.sampled_from([0.5, 1.5, 2.0, 4.0]), label="scale")
    vec = _node("aten::upsample_nearest2d", [x, [], [[], []]], [None, None, [scale, scale]])
    assert get_op("upsample_nearest2d").params_from_node(vec) == {
        **p, "OH": math.floor(p["H"] * scale), "OW": math.floor(p["W"] * scale)} or \
        min(math.floor(p["H"] * scale), math.floor(p["W"] * scale)) < 1


def test_pool_nodes_that_are_not_this_op_give_none():
    mp, ap = get_op("max_pool2d"), get_op("adaptive_avg_pool2d")
    x = [2, 3, 8, 8]
    assert mp.params_from_shapes([[2, 3, 8]]) is None  # unbatched
    dilated = _node("aten::max_pool2d", [x], [None, [2, 2], [2, 2], [0, 0], [2, 2], False])
    assert mp.params_from_node(dilated) is None
    oblong = _node("aten::max_pool2d", [x], [None, [2, 3], [2, 2], [0, 0], [1, 1], False])
    assert mp.params_from_node(oblong) is None
    too_much_pad = _node("aten::max_pool2d", [x], [None, [2, 2], [], [2, 2], [1, 1], False])
    assert mp.params_from_node(too_much_pad) is None
    assert ap.params_from_node(_node("aten::adaptive_avg_pool2d", [x], [None, [2, 3]])) is None


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(TRANSPOSED), bias=st.booleans(), data=st.data())
def test_transposed_conv_trace_shapes_and_arguments_map_back(name, bias, data):
    op, conv = get_op(name), get_op(name.replace("_transpose", ""))
    g = data.draw(st.integers(1, 16), label="GROUPS")
    stride = data.draw(st.integers(1, 4), label="STRIDE")
    p = {"N": data.draw(dims, label="N"), "C": g * data.draw(st.integers(1, 32), label="C/G"),
         "K": g * data.draw(st.integers(1, 32), label="K/G"), "R": data.draw(st.integers(1, 9)),
         "STRIDE": stride, "PAD": data.draw(st.integers(0, 3), label="PAD"),
         "OUTPAD": data.draw(st.integers(0, stride - 1), label="OUTPAD"), "DIL": 1,
         "GROUPS": g, "GRAD_INPUT": 1, "BIAS": int(bias)}
    spatial = SPATIAL[name]
    p.update({s: data.draw(st.integers(1, 512), label=s) for s in spatial})
    x = [p["N"], p["C"], *(p[s] for s in spatial)]
    w = [p["C"], p["K"] // g, *(p["R"] for _ in spatial)]
    b = [p["K"]] if bias else []
    d = len(spatial)

    def lists(v):
        return [v] * d

    shapes = [x, w, b] + [[]] * 6
    public = _node(f"aten::{name}", shapes,
                   [None, None, None, lists(stride), lists(p["PAD"]), lists(p["OUTPAD"]), g,
                    lists(1)], types=["Tensor(float)"] * 3 + ["GenericList[Int]"] * 3 +
                   ["Int", "GenericList[Int]"])
    generic = _node("aten::convolution", shapes,
                    [None, None, None, lists(stride), lists(p["PAD"]), lists(1), True,
                     lists(p["OUTPAD"]), g])
    expected = p if op.valid(p) else None
    assert op.params_from_node(public) == op.params_from_node(generic) == expected
    assert conv.params_from_node(generic) is None  # a conv refuses a transposed node
    shape_params = {k: v for k, v in p.items() if k not in ("STRIDE", "PAD", "OUTPAD", "DIL")}
    assert op.params_from_shapes([x, w, b], groups=g) == shape_params
    if bias:  # the bias tells the groups
        assert op.params_from_shapes([x, w, b]) == shape_params
    plain = _node("aten::convolution", shapes,
                  [None, None, None, lists(stride), lists(p["PAD"]), lists(1), False,
                   lists(0), g])
    assert op.params_from_node(plain) is None  # and a transposed conv a plain one


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_norm_trace_shapes_and_arguments_map_back(data):
    gn, inorm = get_op("group_norm"), get_op("instance_norm")
    g = data.draw(st.integers(1, 64), label="GROUPS")
    n, c, h, w = (data.draw(dims, label="N"), g * data.draw(st.integers(1, 16), label="C/G"),
                  data.draw(dims, label="H"), data.draw(dims, label="W"))
    x = [n, c, h, w]
    expected = {"N": n, "C": c, "HW": h * w, "GROUPS": g}
    public = _node("aten::group_norm", [x, [], [c], [c], [], []], [None, g, None, None, 1e-5,
                                                                  True])
    native = _node("aten::native_group_norm", [x, [c], [c], [], [], [], [], []],
                   [None, None, None, n, c, h * w, g, 1e-5])
    valid = gn.valid(expected)
    assert gn.params_from_node(public) == gn.params_from_node(native) == \
        (expected if valid else None)
    assert gn.params_from_shapes([x]) == {"N": n, "C": c, "HW": h * w}
    node = _node("aten::instance_norm", [x, [c], [c], [], [], [], [], [], []],
                 [None, None, None, None, None, True, 0.1, 1e-5, True])
    assert inorm.params_from_node(node) == ({"N": n, "C": c, "HW": h * w} if h * w > 1 else None)
    eval_mode = _node("aten::instance_norm", [x, [c], [c], [c], [c], [], [], [], []],
                      [None, None, None, None, None, False, 0.1, 1e-5, True])
    assert inorm.params_from_node(eval_mode) is None
    assert inorm.params_from_shapes([[n, c]]) is None
    assert inorm.params_from_shapes([x, [c + 1]]) is None


def test_a_real_training_step_maps_every_new_op_forward_and_backward(tmp_path):
    """A tiny model using every op, traced: each is an op task forward and
    backward with its config, the transposed convs are not priced as convs,
    the instance norm not as a batch norm, global pooling not as a mean, and
    none of their nodes is left unmodelled."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from perfmodel.e2e.single import capture_graph

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn = nn.GroupNorm(2, 4)
            self.inorm = nn.InstanceNorm2d(4, affine=True)
            self.up2d = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
            self.up1d = nn.ConvTranspose1d(2, 2, 4, stride=2, padding=1, bias=False)

        def forward(self, x):
            x = self.inorm(self.gn(x))
            x = F.avg_pool2d(F.max_pool2d(x, 3, 2, 1), 2)
            x = F.interpolate(F.interpolate(x, scale_factor=2.0), size=(5, 5), mode="bilinear")
            x = self.up2d(x)
            y = F.adaptive_avg_pool2d(x, 1).sum() + F.adaptive_avg_pool2d(x, 2).sum()
            z = self.up1d(x.flatten(2))
            return y + z.sum() + F.avg_pool1d(F.max_pool1d(z, 4), 50).sum()

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(2, 4, 8, 8)

    def step():
        opt.zero_grad()
        net(x).backward()
        opt.step()

    graph = capture_graph(step, tmp_path, "new_ops", "cpu")
    tasks = {}
    for t in graph.op_tasks():
        tasks.setdefault((t.op, t.direction), []).append(t.params)
    base = {"N": 2, "C": 4}
    expected = {
        "group_norm": {"N": 2, "C": 4, "HW": 64, "GROUPS": 2},
        "instance_norm": {"N": 2, "C": 4, "HW": 64},
        "max_pool2d": {**base, "H": 8, "W": 8, "R": 3, "STRIDE": 2, "PAD": 1},
        "avg_pool2d": {**base, "H": 4, "W": 4, "R": 2, "STRIDE": 2, "PAD": 0},
        "upsample_nearest2d": {**base, "H": 2, "W": 2, "OH": 4, "OW": 4},
        "upsample_bilinear2d": {**base, "H": 4, "W": 4, "OH": 5, "OW": 5},
        "conv_transpose2d": {"N": 2, "C": 4, "H": 5, "W": 5, "K": 2, "R": 3, "STRIDE": 2,
                             "PAD": 1, "OUTPAD": 1, "DIL": 1, "GROUPS": 1, "GRAD_INPUT": 1,
                             "BIAS": 1},
        "conv_transpose1d": {"N": 2, "C": 2, "L": 100, "K": 2, "R": 4, "STRIDE": 2, "PAD": 1,
                             "OUTPAD": 0, "DIL": 1, "GROUPS": 1, "GRAD_INPUT": 1, "BIAS": 0},
        "max_pool1d": {"N": 2, "C": 2, "L": 200, "R": 4, "STRIDE": 4, "PAD": 0},
        "avg_pool1d": {"N": 2, "C": 2, "L": 50, "R": 50, "STRIDE": 50, "PAD": 0},
    }
    for name, params in expected.items():
        for direction in ("forward", "backward"):
            assert tasks.get((name, direction)) == [params], (name, direction, tasks)
    pools = {"N": 2, "C": 2, "H": 10, "W": 10}
    for direction in ("forward", "backward"):
        got = sorted(tasks[("adaptive_avg_pool2d", direction)], key=lambda p: p["OUT"])
        assert got == [{**pools, "OUT": 1}, {**pools, "OUT": 2}]
    for other in ("conv2d", "conv1d", "batch_norm", "mean", "copy"):
        assert (other, "forward") not in tasks and (other, "backward") not in tasks, other
    unmodelled = {name: n for name, n, _ in graph.unmodelled()}
    for word in ("pool", "upsample", "Upsample", "Pool", "norm", "Norm", "conv", "Convolution",
                 "Repeat", "Mean"):
        assert not [name for name in unmodelled if word in name], unmodelled
    # the instance norm's views are covered by its backward; the flatten's is not an op
    assert unmodelled.get("autograd::engine::evaluate_function: ViewBackward0") == 1
