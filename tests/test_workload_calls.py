"""The workloads' op calls in the ``gpu`` profile: the committed file, its loader,
and the configs hook (every other profile unchanged)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.ops import OPS, PROFILES, OpDef, cases_for, get_op
from perfmodel.ops.base import WORKLOAD_CALLS_PROFILE, with_workload_calls
from perfmodel.ops.workload_calls import (
    DATA_FILE,
    FORMAT,
    SCHEMA,
    WorkloadCallsError,
    check_data,
    dump_data,
    load_calls,
    params_by_op,
    read_data,
)


def _key(op, config):
    config = op.complete_config(config)
    return tuple(config[p] for p in op.params)


# -- the committed file -------------------------------------------------------------------

def test_the_committed_file_is_well_formed_sorted_and_names_known_ops():
    data = read_data(DATA_FILE)
    assert data["size"] == "full" and data["calls"]
    calls = load_calls()
    order = [(c.op, c.direction, c.dtype, tuple(v for _, v in c.params)) for c in calls]
    assert order == sorted(order)
    for call in calls:
        op = get_op(call.op)  # a renamed op needs the file regenerated
        assert call.direction in op.directions and call.dtype in op.dtypes, call
        assert op.accepts(op.complete_config(call.config)), call
        assert {name for name, _ in call.workloads} <= set(data["workloads"]), call


def test_the_gpu_profile_holds_every_call_of_the_file():
    gpu: dict[str, tuple[set, set]] = {}
    for call in load_calls():
        if call.op not in OPS:
            continue
        op = get_op(call.op)
        if call.op not in gpu:
            gpu[call.op] = ({_key(op, c) for c in op.configs("gpu")},
                            {(c.direction, c.dtype, _key(op, c.params))
                             for c in op.cases("gpu")})
        configs, cases = gpu[call.op]
        assert _key(op, call.config) in configs, call
        assert (call.direction, call.dtype, _key(op, call.config)) in cases, call


def test_the_gpu_profile_reaches_the_largest_calls():
    """A few of the calls the issue was about: GPT-2's head and loss, BERT's
    attention, ResNet's first conv (no input gradient, no bias), DLRM's tables' step."""
    expected = [
        ("linear", {"B": 8192, "IN": 768, "OUT": 50257, "GRAD_INPUT": 1}),
        ("cross_entropy", {"BATCH": 8192, "CLASSES": 50257}),
        ("sdpa", {"B": 32, "H": 12, "S": 512, "DH": 64, "CAUSAL": 0, "DROPOUT": 0}),
        ("conv2d", {"N": 64, "C": 3, "H": 224, "W": 224, "K": 64, "R": 7, "STRIDE": 2,
                    "PAD": 3, "DIL": 1, "GROUPS": 1, "GRAD_INPUT": 0, "BIAS": 0}),
        ("sgd_foreach", {"NTENSORS": 18, "NUMEL": 28446183}),
    ]
    for name, config in expected:
        op = get_op(name)
        assert config in op.configs("gpu"), name
        assert config not in op.configs("gpu", workloads=False), name


@pytest.mark.parametrize("profile", [p for p in PROFILES if p != WORKLOAD_CALLS_PROFILE])
def test_the_other_profiles_are_unchanged(profile):
    for name in sorted(OPS):
        op = get_op(name)
        assert op.configs(profile) == op.configs(profile, workloads=False), name


def test_the_gpu_profile_appends_new_distinct_configs_after_its_own():
    added = 0
    for name in sorted(OPS):
        op = get_op(name)
        own, configs = op.configs("gpu", workloads=False), op.configs("gpu")
        assert configs[:len(own)] == own, name
        keys = [_key(op, c) for c in configs]
        assert len(set(keys)) == len(keys), name
        assert all(list(c) == list(op.params) for c in configs[len(own):]), name
        added += len(configs) - len(own)
    assert added > 0
    ids = [c.id for c in cases_for(OPS, "gpu")]
    assert len(set(ids)) == len(ids)  # suites parametrize from OpCase.id
    assert cases_for(OPS, "gpu") == cases_for(OPS, "gpu")  # deterministic


# -- the configs hook ---------------------------------------------------------------------

class _Op(OpDef):
    """A test op whose configs are given: the hook only needs ``params``."""

    family, params, dtypes = "test", ("M", "FLAG"), ("float32",)
    param_defaults = {"FLAG": 1}  # noqa: RUF012  (as OpDef declares it)

    def __init__(self, name, own, calls=()):
        self.name, self._own, self._calls = name, own, calls

    def generate_configs(self, profile):
        return [dict(c) for c in self._own]

    def workload_configs(self):
        return [dict(c) for c in self._calls]

    def make_runner(self, params, dtype, direction, device):
        return lambda: None

    def flops(self, params, direction):
        return float(params["M"])

    def bytes_moved(self, params, dtype, direction):
        return 4.0 * params["M"]


configs_st = st.lists(st.fixed_dictionaries({"M": st.integers(1, 6), "FLAG": st.integers(0, 1)}),
                      max_size=8, unique_by=lambda c: (c["M"], c["FLAG"]))


@settings(max_examples=100, deadline=None)
@given(own=configs_st, calls=configs_st, profile=st.sampled_from(PROFILES))
def test_the_hook_adds_each_missing_call_once_after_the_own_configs(own, calls, profile):
    op = _Op("hook_test_op", own)
    assert with_workload_calls(op, profile, [dict(c) for c in own]) == own  # no calls
    op = _Op("hook_test_op", own, calls)
    out = with_workload_calls(op, profile, [dict(c) for c in own])
    if profile != WORKLOAD_CALLS_PROFILE:
        assert out == own
        return
    keys = [(c["M"], c["FLAG"]) for c in out]
    assert out[:len(own)] == own and len(set(keys)) == len(keys)
    assert set(keys) == {(c["M"], c["FLAG"]) for c in own + calls}
    added = [c for c in calls if c not in own]
    assert out[len(own):] == added  # in the file's order


def test_a_subclass_with_its_own_configs_gets_the_calls_too():
    class Own(_Op):
        def configs(self, profile):
            return [{"M": 1, "FLAG": 1}]

    op = Own("own_configs_test_op", (), [{"M": 1, "FLAG": 1}, {"M": 9, "FLAG": 0}])
    assert op.configs("quick") == [{"M": 1, "FLAG": 1}]
    assert op.configs("gpu") == [{"M": 1, "FLAG": 1}, {"M": 9, "FLAG": 0}]
    assert op.configs("gpu", workloads=False) == [{"M": 1, "FLAG": 1}]


def test_a_definition_with_other_params_gets_no_calls():
    """A user's op that replaces a built-in under its name but has other params
    (the file's calls do not fit it) gets none of the file's calls."""
    class Other(OpDef):
        name, family, params = "linear", "test", ("ROWS",)

        def generate_configs(self, profile):
            return [{"ROWS": 4}]

        def make_runner(self, params, dtype, direction, device):
            return lambda: None

    op = Other()
    assert op.workload_configs() == [] and op.configs("gpu") == [{"ROWS": 4}]


def test_accepts_respects_the_op_limits():
    linear, norm = get_op("linear"), get_op("batch_norm")
    assert linear.accepts({"B": 8, "IN": 4, "OUT": 2, "GRAD_INPUT": 0})
    assert not linear.accepts({"B": 8, "IN": 4, "OUT": 2})  # a param missing
    assert not linear.accepts({"B": 0, "IN": 4, "OUT": 2, "GRAD_INPUT": 1})  # a size of 0
    assert not linear.accepts({"B": 8, "IN": 4, "OUT": 2, "GRAD_INPUT": True})
    assert not linear.accepts({"B": 8, "IN": -4, "OUT": 2, "GRAD_INPUT": 1})
    assert norm.accepts({"N": 2, "C": 3, "HW": 1})
    assert not norm.accepts({"N": 1, "C": 3, "HW": 1})  # training needs N*HW > 1


# -- the loader ---------------------------------------------------------------------------

def _call(op="linear", direction="forward", dtype="float32", params=None, **workloads):
    workloads = workloads or {"mlp_small": 1}
    return {"op": op, "direction": direction, "dtype": dtype,
            "params": params or {"B": 8, "IN": 4, "OUT": 2, "GRAD_INPUT": 1},
            "count": sum(workloads.values()), "workloads": workloads}


def _data(calls):
    return {"format": FORMAT, "schema": SCHEMA, "generated_by": "test", "torch": "2",
            "size": "full", "workloads": {"mlp_small": {"config": {}}}, "skipped": {},
            "calls": calls}


def test_params_by_op_merges_directions_and_keeps_benchmarked_dtypes(tmp_path):
    small = {"B": 8, "IN": 4, "OUT": 2, "GRAD_INPUT": 1}
    path = tmp_path / "calls.json"
    path.write_text(dump_data(_data([
        _call(params=small), _call(direction="backward", params=small),
        _call(params={"B": 9, "IN": 4, "OUT": 2, "GRAD_INPUT": 0}),
        _call(dtype="float64", params={"B": 10, "IN": 4, "OUT": 2, "GRAD_INPUT": 1}),
        _call(op="relu", params={"ROWS": 3, "COLS": 8})])))
    assert params_by_op(path)["linear"] == [small, {"B": 9, "IN": 4, "OUT": 2, "GRAD_INPUT": 0},
                                            {"B": 10, "IN": 4, "OUT": 2, "GRAD_INPUT": 1}]
    kept = params_by_op(path, dtypes={"linear": ("float32", "bfloat16")})
    assert kept == {"linear": [small, {"B": 9, "IN": 4, "OUT": 2, "GRAD_INPUT": 0}]}


_BREAKS = {
    "not JSON": lambda text: text[:-3],
    "code, not JSON": lambda text: "__import__('os').system('false')",
    "not an object": lambda text: "[]",
    "format": lambda text: text.replace(FORMAT, "something-else"),
    "schema": lambda text: text.replace('"schema": 1', '"schema": 99'),
    "calls": lambda text: text.replace('"calls": [', '"calls": {"x": [').replace("\n  ]", "]}"),
    "a field missing": lambda text: text.replace('"dtype": "float32", ', ""),
    "a direction": lambda text: text.replace('"forward"', '"sideways"'),
    "a string param": lambda text: text.replace('"B": 8', '"B": "8"'),
    "a bool param": lambda text: text.replace('"B": 8', '"B": true'),
    "a negative param": lambda text: text.replace('"B": 8', '"B": -8'),
    "a float param": lambda text: text.replace('"B": 8', '"B": 8.5'),
    "a count": lambda text: text.replace('"count": 1', '"count": 2'),
    "the workloads": lambda text: text.replace('"workloads": {"mlp_small": 1}',
                                               '"workloads": {}'),
}


@pytest.mark.parametrize("how", sorted(_BREAKS))
def test_a_malformed_file_is_rejected_naming_it(tmp_path, how):
    path = tmp_path / "broken_calls.json"
    text = dump_data(_data([_call()]))
    json.loads(text)  # the unbroken text reads
    path.write_text(_BREAKS[how](text))
    with pytest.raises(WorkloadCallsError, match="broken_calls.json"):
        load_calls(path)


def test_a_repeated_call_and_a_missing_file_are_rejected_naming_the_file(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text(dump_data(_data([_call(), _call()])))
    with pytest.raises(WorkloadCallsError, match=r"twice\.json: calls\[1\]: repeats"):
        load_calls(path)
    with pytest.raises(WorkloadCallsError, match="absent.json"):
        load_calls(tmp_path / "absent.json")


names = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
calls_st = st.lists(
    st.builds(lambda op, direction, dtype, params, workloads: {
        "op": op, "direction": direction, "dtype": dtype, "params": params,
        "count": sum(workloads.values()), "workloads": workloads},
        names, st.sampled_from(["forward", "backward"]), st.sampled_from(["float32", "bfloat16"]),
        st.dictionaries(names, st.integers(0, 2**40), min_size=1, max_size=4),
        st.dictionaries(names, st.integers(1, 50), min_size=1, max_size=3)),
    max_size=12, unique_by=lambda c: (c["op"], c["direction"], c["dtype"],
                                      tuple(sorted(c["params"].items()))))


@settings(max_examples=60, deadline=None)
@given(calls=calls_st)
def test_the_file_text_reads_back_as_written(calls):
    data = _data(calls)
    check_data(data, "generated")
    assert json.loads(dump_data(data)) == data


@settings(max_examples=60, deadline=None)
@given(calls=calls_st.filter(bool), data=st.data())
def test_a_call_whose_count_disagrees_with_its_workloads_is_rejected(calls, data):
    i = data.draw(st.integers(0, len(calls) - 1))
    calls[i]["count"] += data.draw(st.sampled_from([-1, 1]))
    with pytest.raises(WorkloadCallsError, match=rf"where\.json: calls\[{i}\]"):
        check_data(_data(calls), "where.json")
