"""Gate logic: verdicts and baseline files."""

import json

import pytest

from perfmodel.gate import Baseline, check_errors, load_baseline, save_baseline


def test_verdicts():
    baseline = Baseline("cpu-x", {"a": 0.04, "b": 0.04}, {})
    verdicts = {v.workload: v for v in check_errors({"a": 0.085, "b": 0.095, "c": 0.1},
                                                    baseline, tolerance=0.05)}
    assert verdicts["a"].status == "ok"
    assert verdicts["b"].status == "regressed"
    assert verdicts["c"].status == "new"
    line = verdicts["b"].line()
    assert line.startswith("FAIL b:") and "9.50%" in line and "4.00%" in line and "5.00%" in line


def test_baseline_roundtrip(tmp_path):
    path = tmp_path / "baseline.json"
    save_baseline(path, "cpu-x", {"mlp": 0.03}, {"torch": "2.13.0"})
    baseline = load_baseline(path)
    assert baseline.errors == {"mlp": 0.03} and baseline.device_key == "cpu-x"


def test_missing_baseline_is_none(tmp_path):
    assert load_baseline(tmp_path / "baseline.json") is None


@pytest.mark.parametrize("text", ["{", json.dumps({"schema": 7}),
                                  json.dumps({"schema": 1, "errors": {"a": "x"}})])
def test_bad_baseline_names_the_file(tmp_path, text):
    path = tmp_path / "baseline.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=str(path)):
        load_baseline(path)
