"""Convolution family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("conv2d", "conv1d", "conv_transpose2d", "conv_transpose1d")
