"""The analytical embedding-lookup model reproduces the seed notebook's V100 numbers."""

import numpy as np
import pytest

from perfmodel.fit import embedding_model as em
from perfmodel.device.datasheet import DATASHEET
from perfmodel.fit.predictors import EmbeddingLookupRegressor, load_predictor, save_predictor


@pytest.fixture
def v100():
    return em.notebook_v100_spec()


def test_forward_matches_notebook(v100):
    seconds = em.predict_forward_s(4096, 500_000, 197, 32, 32, v100, rows_per_block=128,
                                   shmem=True)
    assert seconds * 1e6 == pytest.approx(4340.77, rel=1e-3)


def test_backward_sgd_matches_notebook(v100):
    seconds = em.predict_backward_sgd_s(2048, 200_000, 128, 128, 128, v100, shmem=False)
    assert seconds * 1e6 == pytest.approx(86291.71, rel=1e-3)


def test_backward_rowwise_adagrad_matches_notebook(v100):
    seconds = em.predict_backward_rowwise_adagrad_s(2048, 200_000, 128, 128, 128, v100)
    assert seconds * 1e6 == pytest.approx(64226.25, rel=1e-3)


def test_notebook_spec_keeps_v100_identity():
    spec = em.notebook_v100_spec()
    sheet = DATASHEET["cuda-v100-sxm2-32gb"]
    assert spec.key == sheet.key and spec.compute_units == 80
    assert spec.mem_bandwidth_Bps == 809e9 and spec.l2_bytes == 6 * 1024 * 1024 * 4


def test_hit_rate_edges():
    assert em.l2_hit_rate(100, 100, 5000) == 1.0
    assert em.l2_hit_rate(0, 100, 1) == 0.0
    assert em.l2_hit_rate(10, 100, 2) == pytest.approx(10 / 100 * 9 / 99)
    assert em.l2_hit_rate(3, 100, 10) == 0.0


def test_small_tables_hit_l2_and_run_faster(v100):
    small = em.predict_forward_s(4096, 100, 8, 32, 64, v100)
    big = em.predict_forward_s(4096, 1_000_000, 8, 32, 64, v100)
    assert small < big


def test_time_scales_with_bandwidth(v100):
    import dataclasses

    faster = dataclasses.replace(v100, mem_bandwidth_Bps=2 * v100.mem_bandwidth_Bps)
    args = (2048, 200_000, 128, 128, 128)
    assert em.predict_backward_rowwise_adagrad_s(*args, faster) == pytest.approx(
        em.predict_backward_rowwise_adagrad_s(*args, v100) / 2)


def test_regressor_calibrates_a_scale(v100):
    X = np.array([[1024, 10_000, 4, 16, 64], [4096, 100_000, 16, 32, 128],
                  [512, 1_000, 2, 8, 32]])
    model = EmbeddingLookupRegressor("backward_sgd", spec=v100)
    truth = np.array([em.predict_backward_sgd_s(*row, v100) for row in X]) * 1.7
    assert model.fit(X, truth) is model
    assert model.scale_ == pytest.approx(1.7)
    assert np.allclose(model.predict(X), truth)


def test_regressor_rejects_bad_input(v100):
    from sklearn.exceptions import NotFittedError

    model = EmbeddingLookupRegressor("forward", spec=v100)
    with pytest.raises(NotFittedError):
        model.predict([[1, 1, 1, 1, 4]])
    with pytest.raises(ValueError, match="5 columns"):
        model.fit([[1, 2, 3]], [1.0])
    with pytest.raises(ValueError, match="unknown kind"):
        EmbeddingLookupRegressor("sideways", spec=v100).fit([[1, 1, 1, 1, 4]], [1.0])


def test_regressor_persists_as_plain_data(v100, tmp_path):
    X = np.array([[1024, 10_000, 4, 16, 64], [4096, 100_000, 16, 32, 128]])
    model = EmbeddingLookupRegressor("forward", spec=v100).fit(X, [1e-3, 5e-3])
    save_predictor(model, tmp_path / "emb")
    loaded = load_predictor(tmp_path / "emb")
    assert loaded.spec == v100 and loaded.kind == "forward"
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
