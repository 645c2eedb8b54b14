"""Elementwise family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

pytestmark = pytest.mark.perfmodel_ops(
    "relu", "gelu", "sigmoid", "tanh", "softmax", "add", "mul", "sum", "mean", "mse_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy")


@pytest.mark.microbench
def test_microbench(op_case, perfmodel_session):
    perfmodel_session.benchmark(op_case)


@pytest.mark.accuracy
def test_accuracy(op_target, perfmodel_session):
    perfmodel_session.check_accuracy(*op_target)
