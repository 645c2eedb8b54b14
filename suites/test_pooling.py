"""Pooling family (max_pool2d, avg_pool2d, max_pool1d, avg_pool1d, adaptive_avg_pool2d,
upsample_nearest2d, upsample_bilinear2d): microbenchmarks and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d",
                                       "adaptive_avg_pool2d", "upsample_nearest2d",
                                       "upsample_bilinear2d")
