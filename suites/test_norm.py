"""Norm family (batch_norm, layer_norm, group_norm, instance_norm, dropout):
microbenchmarks and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("batch_norm", "layer_norm", "group_norm", "instance_norm",
                                       "dropout")
