"""Embedding family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("embedding_bag_sum", "embedding_bag_mean", "tbe_sgd",
                                       "tbe_rowwise_adagrad", "embedding")
