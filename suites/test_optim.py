"""Optimizer family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

pytestmark = pytest.mark.perfmodel_ops(
    "sgd_foreach", "sgd_fused", "adam_foreach", "adam_fused", "adamw_foreach", "adamw_fused")


@pytest.mark.microbench
def test_microbench(op_case, perfmodel_session):
    perfmodel_session.benchmark(op_case)


@pytest.mark.accuracy
def test_accuracy(op_target, perfmodel_session):
    perfmodel_session.check_accuracy(*op_target)
