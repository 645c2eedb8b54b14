"""RNN family (lstm, gru: whole layer stacks): microbenchmarks and predictor accuracy."""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = pytest.mark.perfmodel_ops("lstm", "gru")
