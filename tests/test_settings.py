"""[tool.perfmodel] settings: defaults, per-op thresholds, the gate policy, clear errors."""

import pytest

from perfmodel.gate.baseline import GatePolicy
from perfmodel.settings import (DEFAULT_BASELINE_RUNS, DEFAULT_GMAE_THRESHOLD,
                                DEFAULT_REPLAY_TOLERANCE, SettingsError, load_settings)
from perfmodel.workloads import WORKLOADS

WORKLOAD = min(WORKLOADS)


def write(tmp_path, text):
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    return path


def test_defaults_without_file(tmp_path):
    s = load_settings(tmp_path / "pyproject.toml")
    assert s.gmae_threshold("addmm", "forward") == DEFAULT_GMAE_THRESHOLD
    assert s.gate_policy() == GatePolicy(k=3.0, min_margin=0.01, ceilings={})
    assert s.baseline_runs == DEFAULT_BASELINE_RUNS == 5
    assert s.replay_tolerance == DEFAULT_REPLAY_TOLERANCE == 0.005
    assert s.replay_fail_on_improvement is True


def test_replay_settings(tmp_path):
    s = load_settings(write(tmp_path, '[tool.perfmodel]\nreplay_tolerance = 0.01\n'
                                      'replay_fail_on_improvement = false\n'))
    assert s.replay_tolerance == 0.01 and s.replay_fail_on_improvement is False
    assert load_settings(write(tmp_path, '[tool.perfmodel]\nreplay_tolerance = 0\n')
                         ).replay_tolerance == 0.0


def test_the_repository_sets_the_replay_tolerance():
    from tests.helpers import REPO

    assert load_settings(REPO / "pyproject.toml").replay_tolerance == 0.005


def test_per_op_threshold(tmp_path):
    s = load_settings(write(tmp_path, '[tool.perfmodel.gmae_thresholds]\n'
                                      '"linear.backward" = 0.08\n'))
    assert s.gmae_threshold("linear", "backward") == 0.08
    assert s.gmae_threshold("linear", "forward") == DEFAULT_GMAE_THRESHOLD
    assert s.gmae_threshold("linear", "backward", "smoke") == s.smoke_gmae_threshold


def test_a_collective_has_a_threshold_for_its_host_cpu_time(tmp_path):
    s = load_settings(write(tmp_path, '[tool.perfmodel.gmae_thresholds]\n'
                                      '"all_reduce.host_cpu" = 0.3\n'))
    assert s.gmae_threshold("all_reduce", "host_cpu") == 0.3


def test_gate_settings_become_the_policy(tmp_path):
    s = load_settings(write(tmp_path, '[tool.perfmodel]\ne2e_spread_k = 2\n'
                                      'e2e_min_margin = 0.02\nbaseline_runs = 8\n'
                                      f'[tool.perfmodel.e2e_ceilings]\n"{WORKLOAD}" = 0.4\n'))
    assert s.baseline_runs == 8
    policy = s.gate_policy()
    assert policy == GatePolicy(k=2.0, min_margin=0.02, ceilings={WORKLOAD: 0.4})
    assert isinstance(policy.k, float)
    assert policy.spread_confidence == 0.95  # the default: n runs' spread at its upper bound
    off = load_settings(write(tmp_path, '[tool.perfmodel]\ne2e_spread_confidence = 0\n'))
    assert off.gate_policy().bound(5) == 1.0


def test_zero_min_margin_is_allowed(tmp_path):
    s = load_settings(write(tmp_path, '[tool.perfmodel]\ne2e_min_margin = 0\n'))
    assert s.gate_policy().min_margin == 0.0


@pytest.mark.parametrize("text, expected", [
    ('[tool.perfmodel.gmae_thresholds]\n"nosuchop.forward" = 0.1\n', "nosuchop.forward"),
    ('[tool.perfmodel.gmae_thresholds]\n"addmm.backward" = 0.1\n', "addmm.backward"),
    ('[tool.perfmodel.gmae_thresholds]\n"addmm.host_cpu" = 0.1\n', "addmm.host_cpu"),
    ('[tool.perfmodel]\ndefault_gmae_threshold = "high"\n', "default_gmae_threshold = 'high'"),
    ('[tool.perfmodel]\ne2e_tolerance = 0.35\n', "e2e_tolerance = 0.35 is no longer supported"),
    ('[tool.perfmodel]\ne2e_spread_k = 0\n', "e2e_spread_k = 0 "),
    ('[tool.perfmodel]\ne2e_spread_k = -3.0\n', "e2e_spread_k = -3.0"),
    ('[tool.perfmodel]\ne2e_spread_k = nan\n', "e2e_spread_k = nan"),
    ('[tool.perfmodel]\ne2e_spread_k = "3"\n', "e2e_spread_k = '3'"),
    ('[tool.perfmodel]\ne2e_spread_confidence = 1\n', "e2e_spread_confidence = 1 "),
    ('[tool.perfmodel]\ne2e_spread_confidence = -0.1\n', "e2e_spread_confidence = -0.1"),
    ('[tool.perfmodel]\ne2e_spread_confidence = "95%"\n', "e2e_spread_confidence = '95%'"),
    ('[tool.perfmodel]\ne2e_min_margin = -0.01\n', "e2e_min_margin = -0.01"),
    ('[tool.perfmodel]\ne2e_min_margin = inf\n', "e2e_min_margin = inf"),
    ('[tool.perfmodel]\nbaseline_runs = 1\n', "baseline_runs = 1 "),
    ('[tool.perfmodel]\nbaseline_runs = 5.0\n', "baseline_runs = 5.0"),
    ('[tool.perfmodel]\nbaseline_runs = true\n', "baseline_runs = True"),
    ('[tool.perfmodel]\ne2e_ceilings = 0.3\n', "e2e_ceilings = 0.3"),
    ('[tool.perfmodel.e2e_ceilings]\nnosuchworkload = 0.3\n', "'nosuchworkload' is not a known"),
    (f'[tool.perfmodel.e2e_ceilings]\n"{WORKLOAD}" = 0\n', f"e2e_ceilings.{WORKLOAD} = 0 "),
    (f'[tool.perfmodel.e2e_ceilings]\n"{WORKLOAD}" = "40%"\n',
     f"e2e_ceilings.{WORKLOAD} = '40%'"),
    ('[tool.perfmodel]\nreplay_tolerance = -0.001\n', "replay_tolerance = -0.001"),
    ('[tool.perfmodel]\nreplay_tolerance = 1.5\n', "replay_tolerance = 1.5"),
    ('[tool.perfmodel]\nreplay_tolerance = nan\n', "replay_tolerance = nan"),
    ('[tool.perfmodel]\nreplay_tolerance = "0.5%"\n', "replay_tolerance = '0.5%'"),
    ('[tool.perfmodel]\nreplay_fail_on_improvement = 1\n', "replay_fail_on_improvement = 1 "),
    ('[tool.perfmodel]\nthresholds = 1\n', "unknown key"),
    ('[tool.perfmodel\n', "not valid TOML"),
])
def test_bad_settings_name_file_key_and_value(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message
