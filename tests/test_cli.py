"""The `perfmodel` command line: output, exit codes, one-line errors."""

import json

from perfmodel.cli import main


def test_devices_prints_the_cached_spec(planted_results, capsys):
    results, key = planted_results
    assert main(["devices", "--device", "cpu", "--results", str(results), "--threads", "1"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["key"] == key and spec["name"] == "planted test CPU"


def test_bad_device_is_one_line_and_exit_2(capsys):
    assert main(["devices", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("perfmodel devices: error: unknown device 'tpu': "
                           "expected cpu, cuda or cuda:N")
