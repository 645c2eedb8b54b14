"""Embedding op definitions: configs, analytic work, reuse features, runners, trace shapes."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from perfmodel.ops import PROFILES, get_op
from perfmodel.ops import embedding as emb

NAMES = ("embedding_bag_sum", "embedding_bag_mean", "tbe_sgd", "tbe_rowwise_adagrad")


def _draw_config(data, profile):
    configs = emb.embedding_configs(profile)
    return configs[data.draw(st.integers(0, len(configs) - 1), label="config")]


@settings(max_examples=60)
@given(name=st.sampled_from(NAMES), profile=st.sampled_from(PROFILES), data=st.data())
def test_every_profile_config_is_valid(name, profile, data):
    op = get_op(name)
    cfg = _draw_config(data, profile)
    assert set(cfg) == set(op.params) and all(isinstance(v, int) and v >= 1 for v in cfg.values())
    assert cfg["E"] * cfg["T"] * cfg["D"] * 4 <= emb.MAX_WEIGHT_BYTES[profile] <= 1 << 30
    for direction in op.directions:
        assert op.flops(cfg, direction) > 0
        assert op.bytes_moved(cfg, "float32", direction) > 0


def test_profiles_are_sized_as_promised():
    assert len(emb.embedding_configs("smoke")) == 4
    assert len(emb.embedding_configs("quick")) == 80
    assert len(emb.embedding_configs("full")) >= 2000
    assert emb.embedding_configs("quick") == emb.embedding_configs("quick")


sizes = st.integers(1, 4096)


@settings(max_examples=150)
@given(name=st.sampled_from(NAMES), data=st.data())
def test_work_is_monotone_in_size_params(name, data):
    op = get_op(name)
    assert "ZIPF" not in op.monotone_params
    params = {p: data.draw(sizes, label=p) for p in op.params}
    grown = dict(params)
    grown[data.draw(st.sampled_from(op.monotone_params))] *= 2
    for direction in op.directions:
        assert op.flops(grown, direction) > op.flops(params, direction) > 0
        assert op.bytes_moved(grown, "float32", direction) > \
            op.bytes_moved(params, "float32", direction) > 0


def test_backward_with_adagrad_moves_more_than_sgd():
    cfg = {"B": 256, "E": 10_000, "T": 4, "L": 16, "D": 64, "ZIPF": 105}
    sgd, adagrad = get_op("tbe_sgd"), get_op("tbe_rowwise_adagrad")
    assert adagrad.bytes_moved(cfg, "float32", "backward") > sgd.bytes_moved(cfg, "float32",
                                                                             "backward")
    assert sgd.bytes_moved(cfg, "float32", "forward") == \
        adagrad.bytes_moved(cfg, "float32", "forward")


def test_skew_touches_fewer_rows():
    uniform = emb.expected_unique_rows(100_000, 1, 50_000)
    skewed = emb.expected_unique_rows(100_000, 105, 50_000)
    assert skewed < 0.5 * uniform
    assert emb.expected_unique_rows(1, 105, 10) == 1.0
    assert emb.expected_unique_rows(50, 1, 0) == 0.0


@pytest.mark.parametrize("code", [1, 105])
def test_expected_unique_rows_matches_generated_indices(code):
    cfg = {"B": 64, "E": 20_000, "T": 1, "L": 32, "D": 4, "ZIPF": code}
    measured = len(np.unique(emb.table_indices(cfg, 0)))
    assert measured == pytest.approx(emb.expected_unique_rows(20_000, code, 64 * 32), rel=0.05)


@settings(max_examples=40)
@given(b=st.integers(1, 64), e=st.integers(1, 5000), t=st.integers(1, 6), l=st.integers(1, 32),
       code=st.sampled_from([0, 1, 50, 105, 150]))
def test_indices_are_deterministic_and_in_range(b, e, t, l, code):
    cfg = {"B": b, "E": e, "T": t, "L": l, "D": 4, "ZIPF": code}
    idx = emb.all_indices(cfg)
    assert idx.shape == (b * t * l,) and idx.dtype == np.int64
    assert idx.min() >= 0 and idx.max() < e
    assert np.array_equal(idx, emb.all_indices(dict(cfg)))


@settings(max_examples=40)
@given(b=st.integers(1, 128), e=st.integers(1, 100_000), t=st.integers(1, 8),
       l=st.integers(1, 64), code=st.sampled_from([1, 80, 105, 200]))
def test_reuse_histogram_sums_to_one(b, e, t, l, code):
    op = get_op("tbe_sgd")
    cfg = {"B": b, "E": e, "T": t, "L": l, "D": 8, "ZIPF": code}
    hist = op.extra_features(cfg, "float32", "forward")
    assert len(hist) == len(op.extra_feature_names) == emb.REUSE_BINS
    assert min(hist) >= 0 and sum(hist) == pytest.approx(1.0)


def _mean_bin(hist):
    return sum(k * h for k, h in enumerate(hist))


def test_reuse_histogram_shifts_to_high_reuse_under_zipf():
    base = {"B": 256, "E": 100_000, "T": 2, "L": 16, "D": 8}
    uniform = emb.reuse_histogram({**base, "ZIPF": 1})
    mild = emb.reuse_histogram({**base, "ZIPF": 80})
    skewed = emb.reuse_histogram({**base, "ZIPF": 120})
    assert uniform[0] > 0.9
    assert _mean_bin(uniform) < _mean_bin(mild) < _mean_bin(skewed)
    assert skewed[-1] > uniform[-1]


@pytest.mark.parametrize("name", NAMES)
def test_smoke_runners_execute_on_cpu(name):
    pytest.importorskip("torch")
    if name.startswith("tbe"):
        pytest.importorskip("fbgemm_gpu.split_table_batched_embeddings_ops_training")
    import torch

    op = get_op(name)
    assert op.directions == ("forward", "backward")
    for cfg in emb.embedding_configs("smoke")[:2]:
        small = {**cfg, "B": min(cfg["B"], 8), "E": min(cfg["E"], 64)}
        b, e, t, _, d, _ = (small[p] for p in emb.PARAMS)
        for direction in op.directions:
            runner = op.make_runner(small, "float32", direction, "cpu")
            for _ in range(2):  # the second call runs on the next batch of indices
                out = runner()
                if direction == "backward" and name.startswith("tbe"):
                    assert out is None  # FBGEMM applies the update inside backward
                    continue
                if direction == "backward":  # the gradient of the (T·E)×D weight
                    (out,) = out
                    shape = (t * e, d)
                else:  # embedding_bag: one bag per (table, sample); TBE: a row per sample
                    shape = (b, t * d) if name.startswith("tbe") else (t * b, d)
                assert tuple(out.shape) == shape and out.dtype == torch.float32
                assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["embedding_bag_sum", "tbe_sgd"])
def test_a_benchmark_looks_up_a_new_batch_of_indices_each_call(name):
    """Consecutive calls pool other rows (the index batches cycle), so the
    outputs differ; after INDEX_BATCHES calls the first batch comes back."""
    torch = pytest.importorskip("torch")
    if name.startswith("tbe"):
        pytest.importorskip("fbgemm_gpu.split_table_batched_embeddings_ops_training")
    cfg = {"B": 16, "E": 1000, "T": 2, "L": 4, "D": 8, "ZIPF": 1}
    batches = [emb.all_indices(cfg, k) for k in range(emb.INDEX_BATCHES)]
    assert np.array_equal(batches[0], emb.all_indices(cfg))
    assert all(not np.array_equal(batches[i], batches[j])
               for i in range(len(batches)) for j in range(i))
    runner = get_op(name).make_runner(cfg, "float32", "forward", "cpu")
    outs = [runner().detach().clone() for _ in range(emb.INDEX_BATCHES + 1)]
    assert not torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0], outs[emb.INDEX_BATCHES])


def test_embedding_bag_forward_matches_a_manual_lookup():
    torch = pytest.importorskip("torch")
    cfg = {"B": 3, "E": 5, "T": 2, "L": 4, "D": 4, "ZIPF": 1}
    out = get_op("embedding_bag_sum").make_runner(cfg, "float32", "forward", "cpu")()
    assert tuple(out.shape) == (cfg["T"] * cfg["B"], cfg["D"])
    assert torch.isfinite(out).all()


def test_tbe_reports_fbgemm_missing(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("fbgemm_gpu"):
            raise ImportError("No module named 'fbgemm_gpu'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    cfg = emb.embedding_configs("smoke")[0]
    with pytest.raises(RuntimeError, match="FBGEMM missing"):
        get_op("tbe_sgd").make_runner(cfg, "float32", "forward", "cpu")


@settings(max_examples=100)
@given(name=st.sampled_from(["embedding_bag_sum", "embedding_bag_mean"]),
       b=sizes, e=sizes, l=sizes, d=sizes)
def test_embedding_bag_trace_shapes_round_trip(name, b, e, l, d):
    op = get_op(name)
    cfg = {"B": b, "E": e, "T": 1, "L": l, "D": d, "ZIPF": 1}
    assert op.params_from_shapes([[e, d], [b * l], [b]]) == cfg
    if b > 1:
        assert op.params_from_shapes([[e, d], [b * l + 1], [b]]) is None  # ragged bags
    assert op.params_from_shapes([[3]]) is None


def test_tbe_shapes_are_not_mapped():
    assert get_op("tbe_sgd").params_from_shapes([[100], [2], [3]]) is None
