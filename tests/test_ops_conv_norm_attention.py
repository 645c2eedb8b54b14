"""Conv, norm and attention op definitions: valid configs in every profile,
positive and monotone work, runners that execute on CPU, and trace shapes
that map back to the config."""

import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import PROFILES, get_op
from perfmodel.ops.conv import out_size, pow2_alignment

CONV = ("conv2d", "conv1d")
NORM = ("batch_norm", "layer_norm", "dropout")
NAMES = CONV + NORM + ("sdpa",)
SPATIAL = {"conv2d": ("H", "W"), "conv1d": ("L",)}


def _check_valid(name, c):
    """Constraints the op itself would reject at run time."""
    if name in CONV:
        assert c["C"] % c["GROUPS"] == 0 and c["K"] % c["GROUPS"] == 0, c
        for s in SPATIAL[name]:
            assert c[s] + 2 * c["PAD"] - c["DIL"] * (c["R"] - 1) - 1 >= 0, c
    if name == "batch_norm":
        assert c["N"] * c["HW"] > 1, c
    if name == "sdpa":
        assert c["CAUSAL"] in (0, 1), c


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", NAMES)
def test_every_config_of_every_profile_is_valid(name, profile):
    op = get_op(name)
    configs = op.configs(profile)
    assert len(configs) >= 4  # the fit needs at least four configs
    assert configs == op.configs(profile)  # deterministic
    for c in configs:
        assert set(c) == set(op.params)
        _check_valid(name, c)
        for direction in op.directions:
            assert op.flops(c, direction) > 0
            for dtype in op.dtypes:
                assert op.bytes_moved(c, dtype, direction) > 0


def test_conv_profiles_cover_dense_grouped_and_depthwise():
    for name in CONV:
        configs = get_op(name).configs("quick")
        groups = [(c["GROUPS"], c["C"], c["K"]) for c in configs]
        assert any(g == 1 for g, _, _ in groups)
        assert any(1 < g and g == c == k for g, c, k in groups)
        assert any(1 < g and (g < c or g < k) for g, c, k in groups)


def test_conv_profiles_add_first_layer_stems_and_keep_their_other_configs():
    """Stems (few input channels, no input gradient, their own kernels and
    strides) come from their own seed: the other configs are the ones an
    earlier sweep measured, and smoke has none."""
    import perfmodel.ops.conv as conv

    for name in CONV:
        op = get_op(name)
        rank = len(SPATIAL[name])
        quick = op.generate_configs("quick")
        stems = [c for c in quick if c["C"] <= 4 and c["GRAD_INPUT"] == 0 and c["GROUPS"] == 1]
        assert len(stems) == conv._STEM_CONFIGS["quick"]
        assert {(c["R"], c["STRIDE"]) for c in stems} >= set(conv._STEM_WINDOWS[rank][:6])
        assert {c["C"] for c in stems} >= ({1, 3} if rank == 2 else {1})
        assert all(c["PAD"] == (c["R"] // 2 if c["R"] % 2 else 0) for c in stems)
        saved = conv._STEM_CONFIGS
        try:
            conv._STEM_CONFIGS = {**saved, "quick": 0}
            without = op.generate_configs("quick")
        finally:
            conv._STEM_CONFIGS = saved
        assert [c for c in quick if c not in stems] == without
        assert len(op.generate_configs("smoke")) == 4


def test_conv_profiles_mix_simd_aligned_and_ragged_channel_counts():
    """CPU conv kernels take a slower path for channel counts that are not a
    multiple of the SIMD width, so the sweep has both, dense and depthwise
    (conv1d, a third of the configs, has both but not of every kind)."""
    for name in CONV:
        configs = [c for c in get_op(name).configs("quick") if c["GROUPS"] in (1, c["C"])]
        aligned = [c for c in configs if c["C"] % 16 == 0 and c["K"] % 16 == 0]
        ragged = [c for c in configs if c["C"] % 2 and c["K"] % 2]
        assert aligned and ragged
        if name == "conv2d":
            for kind in (aligned, ragged):
                assert any(c["GROUPS"] == 1 for c in kind) and any(c["GROUPS"] > 1 for c in kind)


@given(st.integers(1, 1 << 20))
def test_pow2_alignment_is_the_largest_power_of_two_dividing_up_to_32(channels):
    a = pow2_alignment(channels)
    assert a in (1, 2, 4, 8, 16, 32) and channels % a == 0
    assert a == 32 or channels % (2 * a)


def test_conv_features_tell_aligned_from_ragged_channels():
    op = get_op("conv2d")
    base = dict(N=8, H=32, W=32, R=1, STRIDE=1, PAD=0, DIL=1, GROUPS=1, GRAD_INPUT=1)
    names = op.extra_feature_names
    aligned = dict(zip(names, op.extra_features(dict(base, C=64, K=32), "float32", "forward")))
    ragged = dict(zip(names, op.extra_features(dict(base, C=63, K=33), "float32", "forward")))
    assert (aligned["input_channel_alignment"], aligned["output_channel_alignment"]) == (32, 32)
    assert (ragged["input_channel_alignment"], ragged["output_channel_alignment"]) == (1, 1)


def test_sdpa_profiles_have_causal_and_full_configs():
    for profile in PROFILES:
        assert {c["CAUSAL"] for c in get_op("sdpa").configs(profile)} == {0, 1}


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(NAMES), data=st.data())
def test_small_smoke_configs_build_and_run_on_cpu(name, data):
    op = get_op(name)
    config = data.draw(st.sampled_from(op.configs("smoke")))
    direction = data.draw(st.sampled_from(op.directions))
    dtype = data.draw(st.sampled_from(op.dtypes))
    result = op.make_runner(config, dtype, direction, "cpu")()
    if direction == "backward":  # one gradient per differentiable input, none missing
        assert all(g is not None for g in result)


def test_runner_output_shapes_match_the_config():
    conv = get_op("conv2d")
    p = {"N": 2, "C": 4, "H": 9, "W": 7, "K": 6, "R": 3, "STRIDE": 2, "PAD": 1, "DIL": 1,
         "GROUPS": 2, "GRAD_INPUT": 1}
    out = conv.make_runner(p, "float32", "forward", "cpu")()
    assert tuple(out.shape) == (2, 6, out_size(9, 3, 2, 1, 1), out_size(7, 3, 2, 1, 1))
    dw = dict(p, C=6, GROUPS=6)
    grads = conv.make_runner(dw, "float32", "backward", "cpu")()
    assert [tuple(g.shape) for g in grads] == [(2, 6, 9, 7), (6, 1, 3, 3), (6,)]
    grads = conv.make_runner(dict(dw, GRAD_INPUT=0), "float32", "backward", "cpu")()
    assert [tuple(g.shape) for g in grads] == [(6, 1, 3, 3), (6,)]  # no input gradient
    assert conv.flops(dict(dw, GRAD_INPUT=0), "backward") < conv.flops(dw, "backward")
    for dropout in (0, 1):
        q = get_op("sdpa").make_runner({"B": 2, "H": 3, "S": 5, "DH": 8, "CAUSAL": 1,
                                        "DROPOUT": dropout}, "bfloat16", "forward", "cpu")()
        assert tuple(q.shape) == (2, 3, 5, 8)


def test_invalid_batch_norm_config_is_refused():
    with pytest.raises(ValueError, match="N\\*HW > 1"):
        get_op("batch_norm").make_runner({"N": 1, "C": 3, "HW": 1}, "float32", "forward", "cpu")


dims = st.integers(1, 4096)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_sdpa_work(data):
    op = get_op("sdpa")
    p = {k: data.draw(dims, label=k) for k in ("B", "H", "S", "DH")}
    full, causal = dict(p, CAUSAL=0, DROPOUT=0), dict(p, CAUSAL=1, DROPOUT=0)
    assert op.flops(full, "forward") == 2 * op.flops(causal, "forward")
    assert op.flops(full, "backward") == 2.5 * op.flops(full, "forward")
    assert op.bytes_moved(full, "float32", "forward") == op.bytes_moved(causal, "float32", "forward")
    # dropout runs the unfused path: the S×S scores are written and read again
    dropped = dict(full, DROPOUT=1)
    assert op.flops(dropped, "forward") == op.flops(full, "forward")
    extra = op.bytes_moved(dropped, "float32", "forward") - op.bytes_moved(full, "float32",
                                                                            "forward")
    assert extra == 4 * 2 * 4 * p["B"] * p["H"] * p["S"] ** 2


def test_sdpa_configs_cross_causal_with_dropout_and_old_records_had_none():
    op = get_op("sdpa")
    for profile in ("smoke", "quick"):
        kinds = {(c["CAUSAL"], c["DROPOUT"]) for c in op.configs(profile)}
        assert kinds == {(0, 0), (1, 0), (0, 1), (1, 1)}, profile
    assert op.complete_config({"B": 1, "H": 1, "S": 8, "DH": 8, "CAUSAL": 0})["DROPOUT"] == 0


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(CONV), bias=st.booleans(), data=st.data())
def test_conv_trace_shapes_map_back_to_the_shape_params(name, bias, data):
    op = get_op(name)
    g = data.draw(st.integers(1, 64), label="GROUPS")
    p = {"N": data.draw(dims, label="N"), "C": g * data.draw(st.integers(1, 64), label="C/G"),
         "K": g * data.draw(st.integers(1, 64), label="K/G"), "R": data.draw(st.integers(1, 11)),
         "GROUPS": g, "GRAD_INPUT": 1,  # a forward node: its input's gradient is assumed
         "BIAS": int(bias)}  # a bias of K, or none (an empty shape)
    p.update({s: data.draw(dims, label=s) for s in SPATIAL[name]})
    x = [p["N"], p["C"], *(p[s] for s in SPATIAL[name])]
    w = [p["K"], p["C"] // g, *(p["R"] for _ in SPATIAL[name])]
    shapes = [x, w, [p["K"]] if bias else [], [], [], []]  # scalar args have empty shapes
    assert op.params_from_shapes(shapes) == p
    # the result plus the scalar args is a full config
    assert set(p) | {"STRIDE", "PAD", "DIL"} == set(op.params)


def test_a_conv_without_bias_runs_and_counts_no_bias_work():
    """``BIAS=0``: the runner passes no bias (its backward returns no bias
    gradient), and FLOPs and bytes drop the bias terms; a record from before
    ``BIAS`` existed had one."""
    op = get_op("conv2d")
    p = dict(N=2, C=4, H=8, W=8, K=6, R=3, STRIDE=1, PAD=1, DIL=1, GROUPS=1, GRAD_INPUT=1)
    with_bias, without = dict(p, BIAS=1), dict(p, BIAS=0)
    assert len(op.make_runner(with_bias, "float32", "backward", "cpu")()) == 3
    assert len(op.make_runner(without, "float32", "backward", "cpu")()) == 2
    out = 2 * 6 * 8 * 8
    for direction in ("forward", "backward"):
        assert op.flops(with_bias, direction) - op.flops(without, direction) == out
        assert op.bytes_moved(with_bias, "float32", direction) - \
            op.bytes_moved(without, "float32", direction) == 4 * 6
    assert op.complete_config(p)["BIAS"] == 1
    gpu = op.configs("gpu", workloads=False)
    assert {c["BIAS"] for c in gpu} == {0, 1}
    # quick's drawn configs keep the bias they always had; its stems draw both
    assert {c["BIAS"] for c in op.configs("quick") if c["C"] > 4 or c["GRAD_INPUT"]} == {1}


def test_conv_trace_shapes_that_are_not_this_op_give_none():
    conv2d, conv1d = get_op("conv2d"), get_op("conv1d")
    assert conv2d.params_from_shapes([[2, 4, 8]]) is None
    assert conv2d.params_from_shapes([[2, 4, 8], [4, 4, 3]]) is None  # a conv1d
    assert conv1d.params_from_shapes([[2, 4, 8, 8], [4, 4, 3, 3]]) is None  # a conv2d
    assert conv2d.params_from_shapes([[2, 4, 8, 8], [4, 4, 3, 5]]) is None  # not square
    assert conv2d.params_from_shapes([[2, 6, 8, 8], [4, 4, 3, 3]]) is None  # 6 % 4
    assert conv2d.params_from_shapes([[2, 4, 8, 8], [5, 2, 3, 3]]) is None  # K=5 % GROUPS=2
    assert conv2d.params_from_shapes([[2, 4, 8, 8], [4, 4, 3, 3], [5]]) is None  # bias != K


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_norm_trace_shapes_map_back_to_the_config(data):
    bn, ln, drop = get_op("batch_norm"), get_op("layer_norm"), get_op("dropout")
    n, c, h, w = (data.draw(st.integers(1, 512)) for _ in range(4))
    assert bn.params_from_shapes([[n, c, h, w], [c], [c], [c], [c]]) == {"N": n, "C": c,
                                                                          "HW": h * w}
    assert bn.params_from_shapes([[n, c]]) == {"N": n, "C": c, "HW": 1}
    assert ln.params_from_shapes([[n, c, h], [], [h], [h]]) == {"ROWS": n * c, "COLS": h}
    assert ln.params_from_shapes([[n, c, h], [], [c, h], []]) == {"ROWS": n, "COLS": c * h}
    assert drop.params_from_shapes([[n, c, h], [], []]) == {"ELEMS": n * c * h, "P": 50}


def test_norm_trace_shapes_that_are_not_this_op_give_none():
    assert get_op("batch_norm").params_from_shapes([[8]]) is None
    assert get_op("batch_norm").params_from_shapes([[8, 3, 4], [5]]) is None
    assert get_op("layer_norm").params_from_shapes([[8, 16], [], [], []]) is None  # ambiguous
    assert get_op("layer_norm").params_from_shapes([[8, 16], [], [8], []]) is None
    assert get_op("dropout").params_from_shapes([[]]) is None


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_sdpa_trace_shapes_map_back_to_the_shape_params(data):
    op = get_op("sdpa")
    p = {k: data.draw(dims, label=k) for k in ("B", "H", "S", "DH")}
    q = [p["B"], p["H"], p["S"], p["DH"]]
    assert op.params_from_shapes([q, q, q, [], [], []]) == p
    assert op.params_from_shapes([q, q, q, [p["S"], p["S"]]]) is None  # explicit mask
    assert op.params_from_shapes([q, q[:2] + [p["S"] + 1, p["DH"]], q]) is None  # cross-attn
    assert op.params_from_shapes([q[:3]] * 3) is None


def test_sdpa_maps_grouped_query_attention_to_the_query_heads():
    op = get_op("sdpa")
    q, kv = [2, 8, 128, 64], [2, 2, 128, 64]
    assert op.params_from_shapes([q, kv, kv, [], [], [], [], []]) == \
        {"B": 2, "H": 8, "S": 128, "DH": 64}
    assert op.params_from_shapes([q, [2, 3, 128, 64], [2, 3, 128, 64]]) is None  # 8 % 3
    assert op.params_from_shapes([q, kv, [2, 2, 128, 32]]) is None  # k and v differ
    assert op.params_from_shapes([q, [2, 2, 64, 64], [2, 2, 64, 64]]) is None  # cross-attention
