"""The host drift probe: sampling, summary and its command (no wall-clock asserts)."""

import json

import pytest

from perfmodel.drift import DriftSample, probe, summarise


class FakeClock:
    """A clock that moves 1 ms per reading, and a sleep that moves it too."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1e-3
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_probe_samples_every_runner_until_the_time_is_up():
    clock, calls = FakeClock(), []
    runners = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    seen = []
    samples = probe(1.0, interval_s=0.2, calls=3, runners=runners, clock=clock,
                    sleep=clock.sleep, progress=seen.append)
    assert len(samples) >= 2 and seen == samples
    assert all(set(s.seconds) == {"a", "b"} for s in samples)
    assert calls.count("a") == 1 + 3 * len(samples)  # one warm-up call, then 3 per sample
    assert samples[-2].t_s < 1.0 <= samples[-1].t_s + 0.2 + 1e-9


def test_summary_of_a_planted_series():
    samples = [DriftSample(float(i), {"op": s}) for i, s in enumerate((1.0, 2.0, 1.0, 1.0))]
    (row,) = summarise(samples)
    assert (row.n, row.min_s, row.median_s, row.max_s, row.ratio) == (4, 1.0, 1.0, 2.0, 2.0)
    assert row.gmae == pytest.approx((4e-4 ** 3 * (1 + 4e-4)) ** 0.25)
    with pytest.raises(ValueError, match="no drift samples"):
        summarise([])


def test_bad_probe_arguments_are_named():
    with pytest.raises(ValueError, match="seconds > 0"):
        probe(0, runners={})


def test_drift_command_prints_and_stores_the_probe(planted_results, capsys):
    from perfmodel.cli import main

    results, key = planted_results
    args = ["drift", "--seconds", "0.05", "--interval", "0", "--calls", "1",
            "--device", "cpu", "--results", str(results), "--threads", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "addmm" in out and "add " in out and "max/min" in out
    (path,) = (results / key / "drift").glob("*.json")
    record = json.loads(path.read_text())
    assert record["kind"] == "drift" and record["device_key"] == key
    assert len(record["samples"]) >= 2 and {r["op"] for r in record["summary"]} == {"addmm", "add"}
