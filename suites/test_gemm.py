"""GEMM family: microbenchmarks of every profile config, and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("addmm", "linear", "mm", "bmm", "baddbmm")
