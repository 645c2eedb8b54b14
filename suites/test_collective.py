"""Collective family: all_reduce, all_gather, reduce_scatter, all_to_all (even and
uneven) and broadcast across MPI ranks, and the communication predictor's accuracy.

    mpiexec -n 2 pytest suites/test_collective.py -m "microbench and collective"
    pytest suites/test_collective.py --perfmodel-ranks 4 --perfmodel-profile quick

Items written for another world size are skipped with that reason.
"""

import pytest

from pytest_perfmodel.suite import test_accuracy, test_microbench  # noqa: F401

pytestmark = [pytest.mark.collective, pytest.mark.perfmodel_ops(
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven", "broadcast")]
