"""The held-out model zoo: each model's iteration measured against predicted, not gated.

Deselected unless ``-m`` names ``zoo``::

    pytest suites/test_zoo.py -m zoo --perfmodel-profile quick

The summary gives each half's geomean |error| (docs/zoo.md: the tuning half may
teach the overhead table; the scoring half never does, and is only looked at to
report a model change after it is made).
"""

import pytest

from perfmodel.workloads import ZOO_WORKLOADS

pytestmark = [pytest.mark.e2e, pytest.mark.zoo, pytest.mark.perfmodel_workloads(*ZOO_WORKLOADS)]


def test_zoo(workload, perfmodel_session):
    perfmodel_session.run_zoo(workload)
