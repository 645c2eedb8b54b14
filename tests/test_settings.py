"""[tool.perfmodel] settings: defaults, per-op thresholds, clear errors."""

import pytest

from perfmodel.settings import DEFAULT_GMAE_THRESHOLD, SettingsError, load_settings


def write(tmp_path, text):
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    return path


def test_defaults_without_file(tmp_path):
    s = load_settings(tmp_path / "pyproject.toml")
    assert s.gmae_threshold("addmm", "forward") == DEFAULT_GMAE_THRESHOLD


def test_per_op_threshold(tmp_path):
    s = load_settings(write(tmp_path, '[tool.perfmodel]\ne2e_tolerance = 0.02\n'
                                      '[tool.perfmodel.gmae_thresholds]\n"linear.backward" = 0.08\n'))
    assert s.gmae_threshold("linear", "backward") == 0.08
    assert s.gmae_threshold("linear", "forward") == DEFAULT_GMAE_THRESHOLD
    assert s.e2e_tolerance == 0.02
    assert s.gmae_threshold("linear", "backward", "smoke") == s.smoke_gmae_threshold


@pytest.mark.parametrize("text, expected", [
    ('[tool.perfmodel.gmae_thresholds]\n"nosuchop.forward" = 0.1\n', "nosuchop.forward"),
    ('[tool.perfmodel.gmae_thresholds]\n"addmm.backward" = 0.1\n', "addmm.backward"),
    ('[tool.perfmodel]\ndefault_gmae_threshold = "high"\n', "default_gmae_threshold"),
    ('[tool.perfmodel]\ne2e_tolerance = -1\n', "e2e_tolerance"),
    ('[tool.perfmodel]\nthresholds = 1\n', "unknown key"),
    ('[tool.perfmodel\n', "not valid TOML"),
])
def test_bad_settings_name_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    assert str(path) in str(info.value) and expected in str(info.value)
