"""Optimizer family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops(
    "sgd_foreach", "sgd_fused", "sgd_single", "sgd_plain_single", "adam_foreach", "adam_fused",
    "adam_single", "adamw_foreach", "adamw_fused", "adamw_single")
