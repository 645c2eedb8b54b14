"""The standard microbenchmark and accuracy items, for suites to import.

A suite module then only declares its ops::

    import pytest
    from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

    pytestmark = pytest.mark.perfmodel_ops("conv2d", "conv1d")
"""

import pytest


@pytest.mark.microbench
def test_microbench(op_case, perfmodel_session, request):
    """Measure one config of one op, store the measurements, and report them
    to pytest-benchmark when it is active."""
    perfmodel_session.benchmark(op_case, request)


@pytest.mark.accuracy
def test_accuracy(op_target, perfmodel_session):
    """Held-out accuracy of one (op, direction) predictor against its threshold."""
    perfmodel_session.check_accuracy(*op_target)
