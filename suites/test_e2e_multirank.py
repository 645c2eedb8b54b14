"""Multi-rank end-to-end workloads: DDP and model-parallel DLRM on 2 and 4 ranks
(mpiexec, gloo), measured against predicted, gated like the single-rank ones.

    pytest suites/test_e2e_multirank.py --perfmodel-profile quick
"""

import pytest

from perfmodel.workloads import MULTIRANK_WORKLOADS

CASES = [(name, size) for name, cfg in MULTIRANK_WORKLOADS.items() for size in cfg.world_sizes]


@pytest.mark.e2e
@pytest.mark.parametrize("multirank", CASES, ids=[f"{name}@{size}" for name, size in CASES])
def test_e2e_multirank(multirank, perfmodel_session):
    perfmodel_session.run_e2e_multirank(*multirank)
