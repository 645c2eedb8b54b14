"""Running one case: replicates, skip reasons, records."""

import json
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.measure.bench import (CaseUnsupported, TimerSettings, benchmark_case, estimated_call_s,
                             measurement_record, unsupported_reason)
from perfmodel.measure.timer import Measurement
from perfmodel.ops import OpCase, get_op
from tests.helpers import SPEC, cpu_spec

TINY = OpCase("addmm", "forward", "float32", (("M", 8), ("N", 8), ("K", 8)))
HUGE = OpCase("addmm", "forward", "bfloat16", (("M", 4096), ("N", 4096), ("K", 4096)))


def test_two_independent_replicates_and_their_records():
    settings = TimerSettings(budget_s=0.01, warmup_s=0.001)
    timings = benchmark_case(TINY, SPEC, "cpu", settings, max_call_s=1.0)
    assert len(timings) == 2
    assert all(t.warm is None for t in timings)  # an op timed hot has no warm timing
    records = [measurement_record(TINY, t.measurement, i, {"device_key": SPEC.key})
               for i, t in enumerate(timings)]
    assert [r["replicate"] for r in records] == [0, 1]
    assert records[0]["config"] == {"M": 8, "N": 8, "K": 8}
    assert records[0]["measurement"]["median_s"] > 0
    assert "warm" not in records[0]


COLD = OpCase("sgd_foreach", "forward", "float32", (("NTENSORS", 2), ("NUMEL", 64)))


def test_a_cold_cache_op_is_timed_cold_and_warm_on_a_cpu():
    settings = TimerSettings(budget_s=0.01, warmup_s=0.001)
    spec = cpu_spec(l2_bytes=64 << 10, llc_bytes=2 << 20)  # small flushes: a fast test
    timings = benchmark_case(COLD, spec, "cpu", settings, replicates=1)
    (timing,) = timings
    assert timing.measurement.cache == "cold" and timing.warm.cache == "warm"
    record = measurement_record(COLD, timing.measurement, 0, {}, timing.warm)
    assert record["warm"]["cache"] == "warm" and record["warm"]["median_s"] > 0
    assert json.loads(json.dumps(record)) == record


def test_no_warm_timing_without_a_cache_level_between_l2_and_llc():
    op = get_op(COLD.op)
    assert op.cpu_warm_flush_bytes(1 << 20, 32 << 20, 2) == 4 << 20
    assert op.cpu_warm_flush_bytes(1 << 20, 8 << 20, 2) == 0  # would flush half of it
    assert op.cpu_warm_flush_bytes(0, 32 << 20, 2) == 0
    assert get_op("addmm").cpu_warm_flush_bytes(1 << 20, 32 << 20, 2) == 0
    settings = TimerSettings(budget_s=0.01, warmup_s=0.001)
    spec = cpu_spec(l2_bytes=1 << 20, llc_bytes=1 << 20)
    assert benchmark_case(COLD, spec, "cpu", settings, replicates=1)[0].warm is None


def test_case_too_slow_for_the_profile_is_skipped_with_the_estimate():
    # 2 * 4096^3 FLOP at the planted 2 GFLOP/s bf16 peak: about 69 s per call
    assert estimated_call_s(HUGE, SPEC) == pytest.approx(2 * 4096 ** 3 / 2e9, rel=0.01)
    with pytest.raises(CaseUnsupported, match=r"estimated 687\d\d ms per call on cpu-planted-2c .* 100 ms limit"):
        benchmark_case(HUGE, SPEC, "cpu", TimerSettings(), max_call_s=0.1)


class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError (matched by name, as torch's is)."""


@pytest.mark.parametrize("exc, expected", [
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "out of memory"),
    (RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\''), "unsupported on this device"),
    (RuntimeError("fused SGD unsupported on this device"), "unsupported on this device"),
    (ImportError("FBGEMM missing: no module named fbgemm_gpu"), "library missing"),
    (RuntimeError("shape mismatch"), None),
    (ValueError("not implemented for"), None),
])
def test_unsupported_reason(exc, expected):
    reason = unsupported_reason(exc)
    assert (reason is None) if expected is None else reason.startswith(expected)


def test_injected_oom_becomes_a_skip_reason(monkeypatch):
    from perfmodel.ops import gemm

    def explode(*args, **kwargs):
        raise OutOfMemoryError("out of memory")

    monkeypatch.setattr(gemm.Addmm, "make_runner", explode)
    with pytest.raises(CaseUnsupported, match="addmm-forward-float32-M8-N8-K8: out of memory"):
        benchmark_case(TINY, SPEC, "cpu", TimerSettings())


@given(st.lists(st.floats(min_value=1e-9, max_value=10.0, allow_nan=False), min_size=1, max_size=50))
@settings(max_examples=60, deadline=None)
def test_stored_samples_are_whole_percents_of_the_median_and_the_summary_keeps_four_digits(samples):
    m = Measurement.from_samples(samples, number=1, warmup_n=0, stop_reason="ci", timer="perf_counter",
                                 cache="hot", threads=1)
    stored = measurement_record(TINY, m, 0, {})["measurement"]
    assert "samples_s" not in stored and len(stored["samples_pct"]) == len(samples)
    for name in ("median_s", "iqr_s", "mean_s", "min_s", "ci_low_s", "ci_high_s"):
        full, kept = getattr(m, name), stored[name]
        assert kept == float(f"{kept:.4g}") and abs(kept - full) <= 5e-4 * full
    back = Measurement.from_dict(json.loads(json.dumps(stored)))
    assert (back.n, back.median_s, back.stop_reason) == (m.n, stored["median_s"], m.stop_reason)
    assert all(isinstance(p, int) for p in stored["samples_pct"])
    for kept, full in zip(back.samples_s, samples):
        assert abs(kept - full) <= 0.005 * stored["median_s"] * (1 + 1e-9)  # half a percent of the median
    assert back.ci_low_s <= back.median_s <= back.ci_high_s
