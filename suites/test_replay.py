"""The replay gates: every committed replay case, predicted again with today's
code, and every committed fit's predictors, re-scored with today's fitting code.

One item per (device, workload) case under the results root
(``results/<key>/replay/<workload>.json.gz``), GPU devices included: replay
needs neither torch.cuda nor the device. Each item fails when its replayed
error moves beyond ``replay_tolerance`` ([tool.perfmodel]) from the device's
replay baseline (``results/<key>/replay-baseline.json``). One item per
predictor of each device's newest committed fit (per thread count) whose
training runs are committed: its held-out GMAE, re-scored on those runs, fails
when it rises by more than ``accuracy_tolerance`` over the GMAE the fit
recorded. See docs/gate.md::

    pytest -m replay suites/test_replay.py
    pytest -m replay suites/test_replay.py --perfmodel-save-replay-baseline
"""

import pytest

pytestmark = pytest.mark.replay


def test_replay(replay_case, perfmodel_session):
    perfmodel_session.run_replay(*replay_case)


def test_replay_accuracy(accuracy_case, perfmodel_session):
    perfmodel_session.run_accuracy_replay(*accuracy_case)
