"""Elementwise family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops(
    "relu", "gelu", "sigmoid", "tanh", "silu", "softmax", "add", "mul", "sum", "mean", "amax",
    "var", "std", "norm", "cumsum", "mse_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cross_entropy")
