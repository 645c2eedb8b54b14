"""Op definitions: every generated config is valid, work is positive and monotone,
and trace shapes map back to the same config."""

import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import OPS, PROFILES, OpDef, cases_for, get_op


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_configs_are_valid_and_distinct(name, profile):
    op = get_op(name)
    configs = op.configs(profile)
    assert configs, f"{name} has no {profile} configs"
    keys = [tuple(c[p] for p in op.params) for c in configs]
    assert len(set(keys)) == len(keys)
    for c in configs:
        assert set(c) == set(op.params) and all(isinstance(v, int) and v >= 0 for v in c.values())
        assert all(c[p] >= 1 for p in (op.monotone_params or op.params))  # sizes
        for direction in op.directions:
            assert op.flops(c, direction) >= 0  # pure data movement has no FLOPs
            for dtype in op.dtypes:
                assert op.bytes_moved(c, dtype, direction) > 0


def test_profiles_grow_and_are_deterministic():
    sizes = [len(cases_for(OPS, p)) for p in PROFILES]
    assert sizes == sorted(sizes) and sizes[0] < sizes[1] < sizes[2]
    assert cases_for(OPS, "quick") == cases_for(OPS, "quick")


def test_unknown_names_are_clear():
    with pytest.raises(ValueError, match="unknown op 'conv9d'"):
        get_op("conv9d")
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        cases_for(["addmm"], "huge")


dims = st.integers(1, 4096)


@settings(max_examples=200)
@given(name=st.sampled_from(sorted(OPS)), data=st.data())
def test_work_is_monotone_in_every_dimension(name, data):
    op = get_op(name)
    params = {p: data.draw(dims, label=p) for p in op.params}
    grown = dict(params)
    grown[data.draw(st.sampled_from(op.monotone_params or op.params))] *= 2
    for direction in op.directions:
        flops = op.flops(params, direction)
        assert op.flops(grown, direction) > flops or op.flops(grown, direction) == flops == 0
        for dtype in op.dtypes:
            assert op.bytes_moved(grown, dtype, direction) > op.bytes_moved(params, dtype, direction)


def _shapes(name, p):
    if name == "addmm":
        return [[p["N"]], [p["M"], p["K"]], [p["K"], p["N"]]]
    if name == "linear":
        return [[p["B"], p["IN"]], [p["OUT"], p["IN"]], [p["OUT"]]]
    return [[p["BATCH"], p["M"], p["K"]], [p["BATCH"], p["K"], p["N"]]]


@settings(max_examples=200)
@given(name=st.sampled_from(["addmm", "linear", "bmm"]), data=st.data())
def test_gemm_trace_shapes_map_back_to_the_config(name, data):
    op = get_op(name)
    params = {p: data.draw(dims, label=p) for p in op.params if p != "GRAD_INPUT"}
    params.update({"GRAD_INPUT": 1} if "GRAD_INPUT" in op.params else {})  # a forward node
    assert op.params_from_shapes(_shapes(name, params)) == params
    assert op.params_from_shapes([[3]]) is None


def _gemm_output_shapes(name, direction, p):
    """What a GEMM runner returns: the product (forward) or autograd's gradients
    (backward: linear's grad_input only when GRAD_INPUT, then grad_weight and
    grad_bias; bmm's grads of both operands)."""
    if name == "addmm":
        return [(p["M"], p["N"])]
    if name == "linear" and direction == "forward":
        return [(p["B"], p["OUT"])]
    if name == "linear":
        return [(p["B"], p["IN"])] * p["GRAD_INPUT"] + [(p["OUT"], p["IN"]), (p["OUT"],)]
    if direction == "forward":
        return [(p["BATCH"], p["M"], p["N"])]
    return [(p["BATCH"], p["M"], p["K"]), (p["BATCH"], p["K"], p["N"])]


def test_gemm_runners_execute_on_cpu():
    import torch

    cases = cases_for(["addmm", "linear", "bmm"], "smoke")[::7]
    assert {(c.op, c.direction) for c in cases} == {
        ("addmm", "forward"), ("linear", "forward"), ("linear", "backward"),
        ("bmm", "forward"), ("bmm", "backward")}
    for case in cases:
        params = {p: min(v, 32) for p, v in case.params.items()}
        out = get_op(case.op).make_runner(params, case.dtype, case.direction, "cpu")()
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        assert [tuple(t.shape) for t in outs] == _gemm_output_shapes(
            case.op, case.direction, params), case
        assert all(t.dtype == getattr(torch, case.dtype) and torch.isfinite(t).all()
                   for t in outs), case



@pytest.mark.parametrize("name", ["addmm", "linear", "bmm"])
def test_gemm_quick_configs_mix_aligned_and_ragged_dims(name):
    """Layer widths are multiples of 8 and an odd dim runs a slower path: the
    sweep draws both kinds."""
    op = get_op(name)
    configs = op.configs("quick")
    aligned = [c for c in configs if all(c[p] % 8 == 0 for p in op.ranges)]
    assert 0.25 * len(configs) <= len(aligned) <= 0.75 * len(configs)
    assert any(any(c[p] % 2 for p in op.ranges) for c in configs)


@pytest.mark.parametrize("profile, missing", [("quick", {(1024, 1024, 1024)}), ("gpu", set())])
@pytest.mark.parametrize("name", ["addmm", "linear"])
def test_gemm_configs_include_the_power_of_two_grid(name, profile, missing):
    """Networks use power-of-two widths: the quick sweep holds every 64/256/1024 grid
    point under its FLOP cap (all but 1024³), each once; the gpu sweep every
    256/1024/4096 point (the workloads' calls it adds come after its own configs: see
    tests/test_workload_calls.py)."""
    from perfmodel.ops.gemm import _MAX_FLOPS, _QUICK_GRID

    op = get_op(name)
    configs = op.configs(profile, workloads=False)
    dims = [tuple(c[p] for p in op.ranges) for c in configs]
    assert len(set(dims)) == len(dims)
    grid = {d for d in dims if set(d) <= set(_QUICK_GRID[profile])}
    assert len(grid) == len(_QUICK_GRID[profile]) ** 3 - len(missing) and not grid & missing
    assert all(op.flops(c, "forward") <= _MAX_FLOPS[profile] for c in configs)


def test_bmm_quick_configs_are_the_random_draw_only():
    assert len(get_op("bmm").configs("quick")) == 40


#: The largest op calls of the full-size workloads as an H200 traced them
#: (2026-11-26): on the ``quick`` grid its fit extrapolated up to 863x.
_GPU_WORKLOAD_CALLS = [
    ("linear", "backward", {"B": 8192, "IN": 768, "OUT": 50257, "GRAD_INPUT": 1}),  # GPT-2 head
    ("cross_entropy", "backward", {"BATCH": 8192, "CLASSES": 50257}),  # GPT-2 loss
    ("sdpa", "backward", {"B": 32, "H": 12, "S": 512, "DH": 64, "CAUSAL": 0, "DROPOUT": 0}),
    ("conv2d", "backward", {"N": 64, "C": 128, "H": 56, "W": 56, "K": 128, "R": 3, "STRIDE": 2,
                            "PAD": 1, "DIL": 1, "GROUPS": 1, "GRAD_INPUT": 1}),  # ResNet
    ("batch_norm", "backward", {"N": 64, "C": 256, "HW": 3136}),
    ("add", "forward", {"ROWS": 917504, "COLS": 56}),
    ("gelu", "backward", {"ROWS": 16384, "COLS": 3072}),
    ("sgd_foreach", "forward", {"NTENSORS": 18, "NUMEL": 28446183}),  # DLRM's tables
]


@pytest.mark.parametrize("name, direction, call", _GPU_WORKLOAD_CALLS,
                         ids=[f"{n}.{d}" for n, d, _ in _GPU_WORKLOAD_CALLS])
def test_the_gpu_profile_reaches_the_full_size_workloads(name, direction, call):
    from perfmodel.simulate.predict import BEYOND_FIT_FACTOR

    op = get_op(name)

    def beyond(profile):
        sizes = [op.size(c.params, c.dtype, direction) for c in op.cases(profile)
                 if c.direction == direction and c.dtype == "float32"]
        need = op.size(call, "float32", direction)
        return max(need[0] / max(f for f, _ in sizes), need[1] / max(b for _, b in sizes))

    assert beyond("gpu") <= BEYOND_FIT_FACTOR < beyond("quick")


def test_the_gpu_profile_measures_model_like_attention_without_the_workloads_calls():
    """Apart from the workloads' own calls, the ``gpu`` sdpa configs hold full-size,
    model-like shapes (power-of-two sequences, head dims 64 and 128, no dropout),
    both causal and not, under the profile's FLOP cap."""
    from perfmodel.ops.attention import _GPU_GRID, _MAX_FLOPS

    op = get_op("sdpa")
    configs = op.generate_configs("gpu")
    assert all(op.flops(c, "forward") <= _MAX_FLOPS["gpu"] for c in configs)
    model_like = [c for c in configs if c["S"] in _GPU_GRID["S"] and c["DH"] in _GPU_GRID["DH"]
                  and not c["DROPOUT"] and op.flops(c, "forward") >= 1e10]
    assert {c["CAUSAL"] for c in model_like} == {0, 1}
    assert {c["DH"] for c in model_like} == set(_GPU_GRID["DH"])
    assert len(configs) == len({tuple(sorted(c.items())) for c in configs})


# -- registering ops (perfmodel.register_op) --------------------------------------------

class _Scaled(OpDef):
    """A test op: ``x * 2`` over ``N`` float32 elements, named ``aten::mul_scaled``
    in traces."""

    name, family, params = "scaled_test_op", "test", ("N",)
    trace_names = ("aten::mul_scaled",)

    def generate_configs(self, profile):
        return [{"N": 1 << k} for k in range(4, 8)]

    def make_runner(self, params, dtype, direction, device):
        import torch

        x = torch.randn(params["N"], device=device)
        return lambda: x * 2

    def flops(self, params, direction):
        return float(params["N"])

    def bytes_moved(self, params, dtype, direction):
        return 8.0 * params["N"]

    def params_from_shapes(self, input_shapes):
        return {"N": input_shapes[0][0]} if len(input_shapes[0]) == 1 else None


@pytest.fixture
def registered():
    """Names to unregister after the test (the registry is process-wide)."""
    names = []
    yield names
    for name in names:
        if name in OPS:
            OPS.unregister(name)


def test_builtin_ops_pass_the_registration_checks():
    from perfmodel.ops import check_opdef, external_ops

    for op in OPS.values():
        check_opdef(op)
    assert OPS.source("linear") == "built in" and "linear" not in external_ops()


def test_a_registered_op_is_seen_by_every_lookup(registered):
    from perfmodel.ops import external_ops, register_op
    from perfmodel.trace.graph import match_node
    from perfmodel.trace.parse import TraceNode

    op = _Scaled()
    before = OPS.version
    assert register_op(op) is op
    registered.append(op.name)
    assert get_op(op.name) is op and OPS[op.name] is op and op.name in OPS
    assert OPS.version != before and external_ops() == (op.name,)
    assert [c.id for c in cases_for([op.name], "smoke")] == [
        f"scaled_test_op-forward-float32-N{n}" for n in (16, 32, 64, 128)]
    node = TraceNode(1, "aten::mul_scaled", 0, {"shapes": [[64]], "types": ["Tensor(float)"]},
                     {})
    assert match_node(node) == (op, {"N": 64}, "float32")
    OPS.unregister(op.name)
    assert match_node(node) is None and op.name not in OPS  # the trace index follows


def test_register_op_refuses_a_taken_name_unless_replacing(registered):
    from perfmodel.ops import register_op

    first, second = _Scaled(), _Scaled()
    register_op(first)
    registered.append(first.name)
    register_op(first)  # the same definition again changes nothing
    with pytest.raises(ValueError, match="op 'scaled_test_op' is already registered "
                                         r"\(registered by a call\).*replace=True"):
        register_op(second)
    assert register_op(second, replace=True) is second and get_op(first.name) is second
    with pytest.raises(ValueError, match=r"op 'relu' is already registered \(built in\)"):
        register_op(type("Relu2", (_Scaled,), {"name": "relu"})())


def test_register_op_works_as_a_class_decorator(registered):
    from perfmodel.ops import register_op

    @register_op
    class Decorated(_Scaled):
        name = "decorated_test_op"

    registered.append("decorated_test_op")
    assert isinstance(Decorated, type) and type(get_op("decorated_test_op")) is Decorated


@pytest.mark.parametrize("bad, message", [
    (42, r"register_op needs an OpDef instance \(or subclass\), got 42 \(int\)"),
    ("relu", r"got 'relu' \(str\)"),
    (type("NoName", (_Scaled,), {"name": ""})(), "has name ''"),
    (type("Dotted", (_Scaled,), {"name": "a.b"})(), "has name 'a.b'"),
    (type("BadDir", (_Scaled,), {"directions": ("sideways",)})(),
     r"op 'scaled_test_op' \(.*BadDir\): directions \('sideways',\) are not among"),
    (type("BadDtype", (_Scaled,), {"dtypes": ("int3",)})(), r"dtypes \('int3',\)"),
    (type("StrTrace", (_Scaled,), {"trace_names": "aten::mul"})(),
     "trace_names 'aten::mul' is not a tuple of strings"),
    (type("NoRunner", (OpDef,), {"name": "no_runner", "family": "test"})(),
     "op 'no_runner' .*make_runner is not defined; generate_configs is not defined"),
    (type("NeedsArgs", (_Scaled,), {"__init__": lambda self, width: None}),
     "cannot be made without arguments"),
    (type("Unhashable", (_Scaled,), {"__eq__": lambda self, other: True, "__hash__": None})(),
     "it is not hashable"),
])
def test_register_op_rejects_what_is_not_an_op_definition(bad, message):
    from perfmodel.ops import register_op

    with pytest.raises(ValueError, match=message):
        register_op(bad)
    assert "scaled_test_op" not in OPS and "no_runner" not in OPS


def test_every_builtin_op_is_benchmarked_by_exactly_one_suite():
    """The main job's suites list their ops by name: an op definition that no
    suite names is never measured, so never fitted."""
    import importlib.util
    from pathlib import Path

    from perfmodel.ops import OPS
    from perfmodel.registry import BUILTIN

    named: list[str] = []
    for path in sorted((Path(__file__).resolve().parents[1] / "suites").glob("test_*.py")):
        if path.stem == "test_registered_ops":  # users' ops, registered at run time
            continue
        spec = importlib.util.spec_from_file_location(f"_suite_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        marks = getattr(module, "pytestmark", [])
        for mark in marks if isinstance(marks, list) else [marks]:
            if mark.name == "perfmodel_ops":
                named.extend(mark.args)
    builtin = {name for name in OPS if OPS.source(name) == BUILTIN}
    assert sorted(n for n in set(named) if named.count(n) > 1) == []
    assert builtin - set(named) == set()
