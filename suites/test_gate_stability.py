"""Gate stability: false alarms on unchanged code, and planted biases caught.

Each round traces and measures every workload of the stored baseline once and
scores five variants against that same measurement: no bias, ``linear`` x1.1 and
x1.05, host overheads x1.1 and x1.05 (see :mod:`perfmodel.gate.stability`). It takes
about as long as one ``pytest suites/test_e2e.py`` run per round, so it is
deselected unless asked for::

    pytest suites/test_gate_stability.py -m stability --perfmodel-profile quick \\
        --perfmodel-rounds 20
"""

import pytest


@pytest.mark.stability
def test_gate_stability(perfmodel_session, request):
    perfmodel_session.run_stability(request.config.getoption("perfmodel_rounds"))
