"""The zoo through the plugin: deselected unless -m names it, shown per half, never gated."""

import pytest

from tests.helpers import run_plugin

pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")

#: Two planted zoo results (one per half) and one ordinary item.
ZOO_SUITE = """
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
@pytest.mark.zoo
@pytest.mark.parametrize("half, predicted_s", [("tuning", 0.105), ("scoring", 0.080)])
def test_planted_zoo(perfmodel_session, half, predicted_s):
    perfmodel_session.zoo.append(
        (half, MeasuredIteration("zoo_" + half, IterationTiming(0.1, 0.001, 15, 3, 2560.0),
                                 predicted_s)))

def test_other():
    pass
"""


def test_the_zoo_is_deselected_unless_named(pytester, tmp_path):
    pytester.makepyfile(ZOO_SUITE)
    out = run_plugin(pytester, tmp_path / "results")
    out.assert_outcomes(passed=1, deselected=2)
    assert "zoo tuning half" not in out.stdout.str()


def test_the_zoo_summary_gives_each_half_and_no_gate_verdict(pytester, tmp_path):
    pytester.makepyfile(ZOO_SUITE)
    out = run_plugin(pytester, tmp_path / "results", "-m", "zoo")
    out.assert_outcomes(passed=2, deselected=1)
    text = out.stdout.str()
    assert "zoo tuning half: geomean |error| 5.0%, worst 5.0% over 1 model(s)" in text
    assert "zoo scoring half: geomean |error| 20.0%, worst 20.0% over 1 model(s)" in text
    assert "FAIL" not in text and out.ret == 0
