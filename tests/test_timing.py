"""Unit tests for perfmodel.measure.timer; all timing behaviour runs on a fake clock."""

import itertools
import json
import math
import subprocess
import sys
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.measure import timer as timing
from perfmodel.measure.timer import (
    WIDE_SPREAD_REL_IQR,
    Measurement,
    Timer,
    block_size,
    median_ci,
)


class FakeClock:
    """A nanosecond clock that only moves when told to."""

    def __init__(self):
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)


def planted_op(clock: FakeClock, durations_s):
    """A callable whose calls take the planted durations (cycled), on `clock`."""
    durations = itertools.cycle(durations_s)
    calls = []

    def fn():
        calls.append(clock.now_ns)
        clock.advance(next(durations))

    fn.calls = calls
    return fn


# ---------------------------------------------------------------- median_ci


def reference_ci_ranks(n: int, confidence: float):
    """0-based order-statistic ranks from exact binomial sums (None: use min/max)."""
    best = None
    for l in range(1, n // 2 + 1):
        tail = sum(math.comb(n, k) for k in range(l)) / 2**n  # P(B <= l - 1)
        if 1 - 2 * tail >= confidence:
            best = l
        else:
            break
    return None if best is None else (best - 1, n - best)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), confidence=st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_median_ci_matches_exact_binomial_order_statistics(n, confidence):
    samples = [float(i) for i in range(n)]  # value == 0-based rank
    lo, hi = median_ci(samples, confidence)
    ranks = reference_ci_ranks(n, confidence)
    assert (lo, hi) == ((0.0, float(n - 1)) if ranks is None else tuple(map(float, ranks)))


def test_median_ci_falls_back_to_min_max_for_few_samples():
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_ci([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)  # n=5: coverage 93.75% < 95%
    assert median_ci([7.0]) == (7.0, 7.0)


def test_median_ci_known_value_and_order_independence():
    samples = list(range(1, 21))  # n=20 at 95%: 6th and 15th order statistics
    assert median_ci(samples) == (6.0, 15.0)
    assert median_ci(list(reversed(samples))) == (6.0, 15.0)


def test_median_ci_is_quick_and_centred_for_many_samples():
    n = 10_000
    lo, hi = median_ci([float(i) for i in range(n)])
    half_width_ranks = (hi - lo) / 2
    assert lo < n / 2 < hi
    assert half_width_ranks == pytest.approx(1.96 * math.sqrt(n) / 2, rel=0.05)


@pytest.mark.parametrize("samples, confidence", [([], 0.95), ([1.0], 1.0), ([1.0], 0.0)])
def test_median_ci_rejects_bad_input(samples, confidence):
    with pytest.raises(ValueError):
        median_ci(samples, confidence)


# ---------------------------------------------------------------- Measurement


def make_measurement(**overrides) -> Measurement:
    samples = (1.0e-3, 1.1e-3, 0.9e-3, 1.0e-3, 1.2e-3)
    m = Measurement.from_samples(
        samples, number=4, warmup_n=3, stop_reason="ci", timer="perf_counter", cache="hot", threads=2
    )
    d = m.to_dict()
    d.update(overrides)
    return Measurement.from_dict(d)


def test_from_samples_statistics():
    m = Measurement.from_samples(
        [4.0, 1.0, 3.0, 100.0, 2.0], number=1, warmup_n=2, stop_reason="budget", timer="perf_counter",
        cache="hot", threads=None,
    )
    assert (m.median_s, m.mean_s, m.min_s, m.iqr_s, m.n) == (3.0, 22.0, 1.0, 2.0, 5)
    assert (m.ci_low_s, m.ci_high_s) == (1.0, 100.0)
    assert m.samples_s == (4.0, 1.0, 3.0, 100.0, 2.0)  # sampling order kept


def test_measurement_json_roundtrip():
    m = make_measurement()
    again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m
    assert isinstance(again.samples_s, tuple)


@pytest.mark.parametrize(
    "field, value",
    [
        ("n", "5"),
        ("n", True),
        ("number", 0),
        ("median_s", float("nan")),
        ("iqr_s", -1.0),
        ("stop_reason", "timeout"),
        ("timer", "wall"),
        ("cache", "tepid"),
        ("threads", 0),
        ("samples_s", [1.0, 2.0]),  # n is 5
        ("samples_s", "1,2,3"),
    ],
)
def test_measurement_from_dict_names_bad_field(field, value):
    with pytest.raises(ValueError, match=rf"Measurement\.{field}\b"):
        make_measurement(**{field: value})


def test_measurement_from_dict_names_missing_and_unknown_fields():
    d = make_measurement().to_dict()
    del d["warmup_n"]
    with pytest.raises(ValueError, match="warmup_n"):
        Measurement.from_dict(d)
    d = make_measurement().to_dict()
    d["colour"] = "red"
    with pytest.raises(ValueError, match="colour"):
        Measurement.from_dict(d)


def test_rel_ci_halfwidth_and_wide_spread_threshold():
    m = make_measurement(median_s=2.0, ci_low_s=1.8, ci_high_s=2.4, iqr_s=2.0 * WIDE_SPREAD_REL_IQR)
    assert m.rel_ci_halfwidth == pytest.approx(0.15)
    assert not m.wide_spread  # exactly at the threshold is not "wide"
    assert make_measurement(median_s=2.0, iqr_s=2.0 * WIDE_SPREAD_REL_IQR * 1.01).wide_spread


# ---------------------------------------------------------------- Timer on the CPU path


def test_short_op_is_timed_in_blocks_and_samples_are_per_call():
    clock = FakeClock()
    fn = planted_op(clock, [5e-6])
    m = Timer(fn, min_block_s=2e-5, warmup_s=0.0, min_warmup=3, clock_ns=clock).measure()
    assert m.number == 4
    assert m.warmup_n == 3
    assert m.samples_s == (5e-6,) * 5
    assert len(fn.calls) == 3 + 4 * 5
    assert (m.stop_reason, m.n, m.timer, m.cache) == ("ci", 5, "perf_counter", "hot")


def test_threads_recorded_on_cpu_path():
    import torch

    clock = FakeClock()
    m = Timer(planted_op(clock, [1e-3]), clock_ns=clock).measure()
    assert m.threads == torch.get_num_threads()


@pytest.mark.parametrize(
    "estimate_s, min_block_s, expected",
    [(1e-3, 2e-5, 1), (2e-5, 2e-5, 1), (1.9e-5, 2e-5, 2), (5e-6, 2e-5, 4), (3e-6, 2e-5, 7), (0.0, 2e-5, 20_000),
     (1e-9, 0.0, 1)],
)
def test_block_size(estimate_s, min_block_s, expected):
    assert block_size(estimate_s, min_block_s) == expected


def test_warm_up_runs_until_warmup_s_and_skips_first_call_in_estimate():
    clock = FakeClock()
    # The first call pays a one-off cost; later calls take 1 ms.
    durations = iter([0.5] + [1e-3] * 1000)
    fn = lambda: clock.advance(next(durations))  # noqa: E731
    m = Timer(fn, warmup_s=0.51, min_warmup=2, min_block_s=2e-3, clock_ns=clock).measure()
    assert m.warmup_n == 11  # 0.5 s + 10 x 1 ms >= 0.51 s
    assert m.number == 2  # sized from the 1 ms steady state, not the 0.5 s first call


def test_min_warmup_applies_when_warmup_s_is_zero():
    clock = FakeClock()
    m = Timer(planted_op(clock, [1e-3]), warmup_s=0.0, min_warmup=4, clock_ns=clock).measure()
    assert m.warmup_n == 4


def test_adaptive_sampling_continues_until_ci_is_tight():
    clock = FakeClock()
    # Five levels, 10% apart: the CI only tightens once its ranks sit inside the middle level.
    fn = planted_op(clock, [0.9e-3, 0.95e-3, 1.0e-3, 1.05e-3, 1.1e-3])
    m = Timer(fn, target_rel_ci=0.02, budget_s=100.0, clock_ns=clock).measure()
    assert m.stop_reason == "ci"
    assert 5 < m.n < 400
    assert m.ci_low_s == m.ci_high_s == pytest.approx(1.0e-3)
    assert m.rel_ci_halfwidth <= 0.02


def test_budget_stops_sampling_and_excludes_warm_up():
    clock = FakeClock()
    fn = planted_op(clock, [i * 1e-3 for i in range(1, 11)])  # too spread for a 2% CI
    budget_s = 0.1
    m = Timer(fn, budget_s=budget_s, warmup_s=0.5, clock_ns=clock).measure()
    assert m.stop_reason == "budget"
    # The clock moves only inside fn, so sampling time is the sum of the samples.
    assert sum(m.samples_s[:-1]) <= budget_s < sum(m.samples_s)
    assert m.warmup_n >= 5  # 0.5 s of warm-up did not count against the 0.1 s budget


def test_budget_can_end_before_min_samples():
    clock = FakeClock()
    m = Timer(planted_op(clock, [1.0]), budget_s=0.5, min_samples=5, warmup_s=0.0, clock_ns=clock).measure()
    assert (m.stop_reason, m.n) == ("budget", 1)


def test_max_samples_caps_sampling():
    clock = FakeClock()
    fn = planted_op(clock, [i * 1e-3 for i in range(1, 11)])
    m = Timer(fn, budget_s=1e9, max_samples=37, clock_ns=clock).measure()
    assert (m.stop_reason, m.n, len(m.samples_s)) == ("max_samples", 37, 37)


def test_ci_wins_over_max_samples_when_both_hold():
    clock = FakeClock()
    m = Timer(planted_op(clock, [1e-3]), min_samples=5, max_samples=5, clock_ns=clock).measure()
    assert (m.stop_reason, m.n) == ("ci", 5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"device": "auto"},
        {"device": "tpu"},
        {"flush_l2_bytes": 1024},  # CPU has no L2 flush
        {"device": "cuda", "flush_cpu_bytes": 1024},  # a host buffer cannot evict a GPU's L2
        {"flush_cpu_bytes": -1},
        {"min_samples": 10, "max_samples": 5},
        {"min_warmup": 0},
        {"target_rel_ci": 0.0},
        {"budget_s": -1.0},
    ],
)
def test_timer_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        Timer(lambda: None, **kwargs)


def test_real_clock_smoke():
    m = Timer(lambda: None, budget_s=0.02, warmup_s=0.001).measure()
    assert m.n >= 1 and m.number >= 1
    assert all(math.isfinite(s) and s >= 0 for s in m.samples_s)
    assert m.stop_reason in timing.STOP_REASONS


# ---------------------------------------------------------------- Timer on the CUDA path (faked)


def fake_torch(clock: FakeClock, flush_cost_s: float = 0.0):
    """A stand-in for the parts of torch the CUDA path uses; events read `clock`."""
    log = SimpleNamespace(buffers=[], zeroed=0, synchronized=[], devices=[])

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t_ns = None

        def record(self):
            self.t_ns = clock.now_ns

        def elapsed_time(self, end):
            return (end.t_ns - self.t_ns) / 1e6  # milliseconds, like torch

    class Buffer:
        def __init__(self, nbytes, dtype, device="cpu"):
            log.buffers.append((nbytes, dtype, device))

        def zero_(self):
            log.zeroed += 1
            clock.advance(flush_cost_s)

        def fill_(self, value):
            self.zero_()

        def __getitem__(self, index):
            return 0

    def device(index):
        log.devices.append(index)
        return nullcontext()

    cuda = SimpleNamespace(
        is_available=lambda: True,
        device=device,
        Event=Event,
        synchronize=lambda index=None: log.synchronized.append(index),
    )
    torch = SimpleNamespace(cuda=cuda, uint8="uint8", empty=Buffer, get_num_threads=lambda: 99)
    return torch, log


def test_cuda_path_hot_uses_events_and_blocks(monkeypatch):
    clock = FakeClock()
    torch, log = fake_torch(clock)
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    m = Timer(planted_op(clock, [1e-5]), device="cuda:1", clock_ns=clock).measure()
    assert (m.timer, m.cache, m.threads) == ("cuda_event", "hot", None)
    assert m.number == 2
    assert m.median_s == pytest.approx(1e-5)  # ms from the events converted to s, per call
    assert log.buffers == [] and log.zeroed == 0
    assert log.devices == [1] and set(log.synchronized) == {1}


def test_cuda_path_cold_flushes_outside_the_events(monkeypatch):
    clock = FakeClock()
    torch, log = fake_torch(clock, flush_cost_s=1e-3)
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    m = Timer(planted_op(clock, [1e-5]), device="cuda", flush_l2_bytes=50 * 2**20, clock_ns=clock).measure()
    assert m.cache == "cold"
    assert m.number == 1  # a block would run all but its first call hot
    assert log.buffers == [(100 * 2**20, "uint8", "cuda:0")]  # allocated once, 2 x L2
    assert log.zeroed == m.n  # once per sample, none during warm-up
    assert m.samples_s == pytest.approx([1e-5] * m.n)  # the 1 ms flush is not timed


def _with_device_sleep(torch, clock, log):
    """Give the fake torch a ``cuda._sleep`` that waits 1 ns per cycle on `clock`."""
    log.sleeps = []

    def sleep(cycles):
        log.sleeps.append(cycles)
        clock.advance(cycles * 1e-9)

    torch.cuda._sleep = sleep


def test_cuda_path_hot_queues_each_block_behind_a_device_hold(monkeypatch):
    clock = FakeClock()
    torch, log = fake_torch(clock)
    _with_device_sleep(torch, clock, log)
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    monkeypatch.setattr(timing, "_hold_cycles_per_s", {})
    m = Timer(planted_op(clock, [1e-3]), device="cuda", clock_ns=clock).measure()
    assert (m.timer, m.cache, m.number) == ("cuda_event_queued", "hot", 1)
    assert m.samples_s == pytest.approx([1e-3] * m.n)  # the holds run before the start event
    assert m.host_s == pytest.approx(1e-3)  # the host issued each call in the op's 1 ms
    stored = m.to_stored()
    assert stored["host_s"] == pytest.approx(1e-3)
    assert timing.Measurement.from_dict(stored).host_s == pytest.approx(1e-3)
    calibration, holds = log.sleeps[:2], log.sleeps[2:]
    assert calibration == [timing._HOLD_CALIBRATION_CYCLES] * 2  # timed: 1e9 cycles per s
    assert len(holds) == m.warmup_n + m.n  # one before every block
    # the first block waits the minimum, each later one twice the host's 1 ms to issue
    assert holds[0] == round(1e9 * timing.HOLD_FACTOR * timing.MIN_HOLD_S)
    assert set(holds[1:]) == {round(1e9 * timing.HOLD_FACTOR * 1e-3)}
    Timer(planted_op(clock, [1e-3]), device="cuda", clock_ns=clock).measure()
    assert log.sleeps.count(timing._HOLD_CALIBRATION_CYCLES) == 2  # calibrated once per device


def test_cuda_path_cold_needs_no_hold(monkeypatch):
    clock = FakeClock()
    torch, log = fake_torch(clock, flush_cost_s=1e-3)
    _with_device_sleep(torch, clock, log)
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    m = Timer(planted_op(clock, [1e-5]), device="cuda", flush_l2_bytes=2**20, clock_ns=clock).measure()
    assert (m.timer, m.cache) == ("cuda_event", "cold") and log.sleeps == []


def test_host_issue_time_is_the_median_of_the_sampled_blocks_per_call(monkeypatch):
    """Warm-up blocks do not count; a block of `number` calls counts per call."""
    clock = FakeClock()
    torch, _ = fake_torch(clock)
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    m = Timer(planted_op(clock, [2e-5] * 3 + [1e-5] * 10_000), device="cuda", warmup_s=0,
              min_warmup=3, min_block_s=1e-4, clock_ns=clock).measure()
    assert m.number > 1 and m.host_s == pytest.approx(1e-5)  # not the slower warm-up calls


def test_a_cpu_timing_has_no_host_time_and_stores_as_before():
    m = Timer(lambda: None, budget_s=0.01, warmup_s=0).measure()
    assert m.host_s is None
    stored = m.to_stored()
    assert "host_s" not in stored
    assert timing.Measurement.from_dict(stored).host_s is None  # as records stored before it
    with pytest.raises(ValueError, match="host_s"):
        timing.Measurement.from_dict({**m.to_dict(), "host_s": -1.0})


def test_cuda_path_without_cuda_raises(monkeypatch):
    torch, _ = fake_torch(FakeClock())
    torch.cuda.is_available = lambda: False
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    with pytest.raises(RuntimeError, match="is_available"):
        Timer(lambda: None, device="cuda").measure()


def test_import_is_cheap():
    code = "import sys, perfmodel.measure.timer, perfmodel.device.probe; print('torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_cpu_path_cold_evicts_the_cache_outside_the_timed_call(monkeypatch):
    clock = FakeClock()
    torch, log = fake_torch(clock, flush_cost_s=1e-3)
    monkeypatch.setattr(timing, "_torch", lambda: torch)
    m = Timer(planted_op(clock, [1e-5]), flush_cpu_bytes=64 * 2**20, clock_ns=clock).measure()
    assert (m.timer, m.cache, m.number) == ("perf_counter", "cold", 1)
    assert log.buffers == [(64 * 2**20, "uint8", "cpu")]  # allocated once
    assert log.zeroed == m.n  # written once per sample, none during warm-up
    assert m.samples_s == pytest.approx([1e-5] * m.n)  # the 1 ms write is not timed


def test_stored_form_names_bad_samples_pct():
    stored = make_measurement().to_stored()
    assert Measurement.from_dict(stored).n == 5
    for bad in ([1.5] * 5, "100,100", [-1] * 5, [True] * 5):
        with pytest.raises(ValueError, match=r"Measurement\.samples_pct"):
            Measurement.from_dict({**stored, "samples_pct": bad})
    with pytest.raises(ValueError, match=r"Measurement\.samples_s has 2 values but n is 5"):
        Measurement.from_dict({**stored, "samples_pct": [100, 100]})
    with pytest.raises(ValueError, match="both samples_s and samples_pct"):
        Measurement.from_dict({**stored, "samples_s": [1.0] * 5})
