"""`perfmodel report` without --device: this machine's device when it has results,
else one line naming the devices that do; nothing is measured to find out."""

from __future__ import annotations

import pytest

from perfmodel.cli import main as cli
from perfmodel.device.probe import cpu_device_key


def device_with_runs(root, key):
    (root / key / "runs").mkdir(parents=True)


def test_picks_this_machines_key_among_several(tmp_path):
    for key in ("cpu-other-8c", "cuda-h100-sxm-80gb", cpu_device_key()):
        device_with_runs(tmp_path, key)
    assert cli.pick_report_device(tmp_path, [cpu_device_key()]) == cpu_device_key()
    # a GPU machine's GPU comes first, then its CPU
    assert cli.pick_report_device(tmp_path, ["cuda-h100-sxm-80gb", cpu_device_key()]) == \
        "cuda-h100-sxm-80gb"
    assert cli.pick_report_device(tmp_path, ["cuda-h200-141gb", cpu_device_key()]) == \
        cpu_device_key()


def test_a_folder_without_results_does_not_count(tmp_path):
    device_with_runs(tmp_path, "cpu-other-8c")
    (tmp_path / "cpu-mine-2c").mkdir()
    (tmp_path / "cpu-mine-2c" / "device.json").write_text("{}")  # spec only, no results
    with pytest.raises(ValueError) as info:
        cli.pick_report_device(tmp_path, ["cpu-mine-2c"])
    assert str(info.value) == (f"no results for this machine (cpu-mine-2c) under {tmp_path}; "
                               f"devices with results: cpu-other-8c; pick one with --device")


def test_command_names_the_keys_that_have_results(tmp_path, capsys, monkeypatch):
    """Even with one device stored, another machine's results are not reported
    without --device: the line names them."""
    monkeypatch.setattr(cli, "this_machine_keys", lambda: ["cpu-mine-2c"])
    device_with_runs(tmp_path, "cpu-b-4c")
    device_with_runs(tmp_path, "cpu-a-2c")
    assert cli.main(["report", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"perfmodel report: error: no results for this machine (cpu-mine-2c) under "
                   f"{tmp_path}; devices with results: cpu-a-2c, cpu-b-4c; pick one with "
                   f"--device"]


def test_command_reports_this_machines_results(tmp_path, capsys, monkeypatch):
    """With this machine's key stored, the report goes on with that key (here it
    stops at the empty folder, naming it: the key was picked)."""
    monkeypatch.setattr(cli, "this_machine_keys", lambda: ["cpu-mine-2c"])
    device_with_runs(tmp_path, "cpu-mine-2c")
    device_with_runs(tmp_path, "cpu-other-2c")
    assert cli.main(["report", "--results", str(tmp_path)]) == 2
    assert f"nothing stored under {tmp_path / 'cpu-mine-2c'}" in capsys.readouterr().err


def test_missing_results_root_is_named(tmp_path, capsys):
    assert cli.main(["report", "--results", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"perfmodel report: error: no results folder at {tmp_path / 'nope'}"


def test_finding_this_machines_keys_measures_nothing(monkeypatch):
    """The CPU key comes from the processor's name and core count; no spec is measured."""
    import perfmodel.device.probe as probe

    def refuse(*args, **kwargs):
        raise AssertionError("measured the CPU to find its key")

    monkeypatch.setattr(probe, "measure_cpu_spec", refuse)
    monkeypatch.setattr(probe, "detect_device", refuse)
    keys = cli.this_machine_keys()
    assert keys[-1] == cpu_device_key() and len(set(keys)) == len(keys)
