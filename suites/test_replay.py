"""The replay gate: every committed replay case, predicted again with today's code.

One item per (device, workload) case under the results root
(``results/<key>/replay/<workload>.json.gz``), GPU devices included: replay
needs neither torch.cuda nor the device. Each item fails when its replayed
error moves beyond ``replay_tolerance`` ([tool.perfmodel]) from the device's
replay baseline (``results/<key>/replay-baseline.json``); see docs/gate.md::

    pytest -m replay suites/test_replay.py
    pytest -m replay suites/test_replay.py --perfmodel-save-replay-baseline
"""

import pytest

pytestmark = pytest.mark.replay


def test_replay(replay_case, perfmodel_session):
    perfmodel_session.run_replay(*replay_case)
