"""End-to-end workloads: measured against predicted iteration time, gated on error.

Every registered single-rank workload runs: the built-in ones and those of
``perfmodel.workloads`` entry points or ``perfmodel.register_workload`` calls.
"""

import pytest

from perfmodel.workloads import WORKLOADS

pytestmark = [pytest.mark.e2e, pytest.mark.perfmodel_workloads(*WORKLOADS)]


def test_e2e(workload, perfmodel_session):
    perfmodel_session.run_e2e(workload)


@pytest.mark.e2e
def test_prediction_speed(perfmodel_session):
    """Predicting a 10,000-task graph (the transformer's, repeated) takes under a second."""
    perfmodel_session.time_prediction("transformer_encoder", tasks=10_000, limit_s=1.0)
