"""Time one callable adaptively and summarise the samples as a `Measurement`.

`Timer` warms the callable up, times it in blocks when a call is too short for the
clock, and keeps sampling until the 95% confidence interval of the median is tight
enough, a time budget runs out, or a sample cap is hit. CPU timing uses a
nanosecond clock; CUDA timing uses CUDA events. torch is imported only when needed.
"""

from __future__ import annotations

import bisect
import math
import numbers
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Callable

from perfmodel.plaindata import dataclass_from_dict

#: Confidence level of the median CI used for adaptive stopping.
CI_CONFIDENCE = 0.95
#: A measurement whose IQR exceeds this fraction of its median is flagged `wide_spread`.
WIDE_SPREAD_REL_IQR = 0.10

STOP_REASONS = ("ci", "budget", "max_samples")
#: ``cuda_event``: events around calls as the host issues them (records from before
#: the hold); ``cuda_event_queued``: events around calls queued behind a device hold
#: (see :class:`Timer`), so they time the device's work, not the launches.
TIMERS = ("perf_counter", "cuda_event", "cuda_event_queued")
CACHE_STATES = ("hot", "cold", "warm")

_NS_PER_S = 1e9
_MS_PER_S = 1e3

#: A hot CUDA block is queued behind a device-side wait at least this many times
#: as long as the host took to issue the previous block, and at least
#: :data:`MIN_HOLD_S` seconds.
HOLD_FACTOR = 2.0
MIN_HOLD_S = 1e-4
#: Cycles of ``torch.cuda._sleep`` timed once per device to convert seconds to cycles.
_HOLD_CALIBRATION_CYCLES = 1_000_000
_hold_cycles_per_s: dict[int, float] = {}


def _np():
    """Import numpy on demand, keeping `import perfmodel.measure.timer` cheap."""
    import numpy

    return numpy


def _torch():
    """Import torch on demand (tests replace this to fake the CUDA API)."""
    import torch

    return torch


# ---------------------------------------------------------------- statistics


@lru_cache(maxsize=4096)
def _median_ci_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the order statistics bounding the median, or None.

    The interval [x_(l), x_(n+1-l)] (1-based) covers the median with probability
    1 - 2 P(B <= l-1), B ~ Binomial(n, 1/2). We pick the largest such l whose
    coverage is still >= `confidence`; None when even (min, max) falls short.
    """
    alpha_half = (1.0 - confidence) / 2.0
    # Start the summation where the lower tail is negligible (< 1e-15), so the
    # cost is O(sqrt(n)) rather than O(n).
    k = max(0, int(n / 2 - 8.0 * math.sqrt(n) / 2))
    log_half_n = n * math.log(0.5)
    cdf = 0.0
    best = None  # largest l with P(B <= l-1) <= alpha_half
    while k <= n // 2:
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n
        cdf += math.exp(log_pmf)  # cdf = P(B <= k)
        if cdf > alpha_half:
            break
        best = k + 1  # l = k + 1 satisfies P(B <= l - 1) <= alpha_half
        k += 1
    if best is None:
        return None
    return best - 1, n - best


def median_ci(samples, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI (low, high) of the median, from order statistics.

    Uses the binomial distribution of the count of samples below the median, so the
    coverage is at least `confidence` for any continuous distribution. When there are
    too few samples for that coverage (n <= 5 at 95%), returns (min, max).
    Units are those of `samples`.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    np = _np()
    data = np.sort(np.asarray(samples, dtype=float).ravel())
    if data.size == 0:
        raise ValueError("median_ci needs at least one sample")
    return _ci_from_sorted(data, confidence)


def _ci_from_sorted(sorted_samples, confidence: float) -> tuple[float, float]:
    n = len(sorted_samples)
    ranks = _median_ci_ranks(n, confidence)
    if ranks is None:
        return float(sorted_samples[0]), float(sorted_samples[-1])
    lo, hi = ranks
    return float(sorted_samples[lo]), float(sorted_samples[hi])


# ---------------------------------------------------------------- Measurement


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


#: Significant digits a stored summary field (seconds) keeps: at most 0.05% of it.
STORED_DIGITS = 4

_SECONDS_FIELDS = ("median_s", "iqr_s", "mean_s", "min_s", "ci_low_s", "ci_high_s")


def _significant(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


def stored_samples_s(stored: dict[str, Any]) -> list[float]:
    """The per-call samples (s) of a stored measurement dict, in either form
    (:meth:`Measurement.to_stored`'s ``samples_pct``, or older ``samples_s``);
    unchecked: :meth:`Measurement.from_dict` validates."""
    if "samples_pct" in stored:
        return [stored["median_s"] * p / 100.0 for p in stored["samples_pct"]]
    return list(stored.get("samples_s", []))


@dataclass(frozen=True)
class Measurement:
    """Summary of the per-call times of one op; every `*_s` field is in seconds.

    `n` samples were taken, each timing `number` back-to-back calls and divided by
    `number`; `samples_s` holds those per-call values in sampling order.
    `host_s` (CUDA only, else None) is the median over the samples of the host
    seconds per call spent issuing them: what the op costs the host, unprofiled.
    An op that waits for the device inside it (a sync) also waits there for the
    timer's device hold, so its `host_s` says more about the hold than the op.
    """

    median_s: float
    iqr_s: float
    mean_s: float
    min_s: float
    ci_low_s: float
    ci_high_s: float
    n: int
    number: int
    warmup_n: int
    stop_reason: str
    timer: str
    cache: str
    threads: int | None
    samples_s: tuple[float, ...]
    host_s: float | None = None

    def __post_init__(self):
        for name in _SECONDS_FIELDS:
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"Measurement.{name} must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        for name, minimum in (("n", 1), ("number", 1), ("warmup_n", 0)):
            value = getattr(self, name)
            if not _is_int(value) or value < minimum:
                raise ValueError(f"Measurement.{name} must be an int >= {minimum}, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name, allowed in (("stop_reason", STOP_REASONS), ("timer", TIMERS), ("cache", CACHE_STATES)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"Measurement.{name} must be one of {allowed}, got {value!r}")
        if self.threads is not None and (not _is_int(self.threads) or self.threads < 1):
            raise ValueError(f"Measurement.threads must be None or an int >= 1, got {self.threads!r}")
        samples = self.samples_s
        if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__"):
            raise ValueError(f"Measurement.samples_s must be a sequence of numbers, got {type(samples).__name__}")
        if not all(_is_real(s) and math.isfinite(s) and s >= 0 for s in samples):
            raise ValueError("Measurement.samples_s must hold finite numbers >= 0")
        if len(samples) not in (0, self.n):
            raise ValueError(f"Measurement.samples_s has {len(samples)} values but n is {self.n} (keep all or none)")
        object.__setattr__(self, "samples_s", tuple(float(s) for s in samples))
        if self.host_s is not None:
            if not _is_real(self.host_s) or not math.isfinite(self.host_s) or self.host_s < 0:
                raise ValueError(f"Measurement.host_s must be None or a finite number >= 0, "
                                 f"got {self.host_s!r}")
            object.__setattr__(self, "host_s", float(self.host_s))

    @property
    def rel_ci_halfwidth(self) -> float:
        """Half the CI width divided by the median (dimensionless)."""
        width = self.ci_high_s - self.ci_low_s
        if self.median_s == 0:
            return 0.0 if width == 0 else math.inf
        return width / 2.0 / self.median_s

    @property
    def wide_spread(self) -> bool:
        """True when IQR / median exceeds `WIDE_SPREAD_REL_IQR`."""
        if self.median_s == 0:
            return self.iqr_s > 0
        return self.iqr_s / self.median_s > WIDE_SPREAD_REL_IQR

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (samples as a list)."""
        d = asdict(self)
        d["samples_s"] = list(self.samples_s)
        return d

    def to_stored(self) -> dict[str, Any]:
        """The compact dict a run file stores (:func:`from_dict` reads it back).

        The summary fields keep :data:`STORED_DIGITS` significant digits and the
        samples become ``samples_pct``: each one as an integer percentage of the
        stored median. That bounds a stored sample's error by half a percent of
        the median, below the spread of any timed case (the timer aims at a 2%
        confidence interval of the median), and keeps a compacted quick run near
        1 MB: the samples' further digits are noise that gzip cannot squeeze.
        Every summary field is computed from the full samples before rounding.
        """
        d = self.to_dict()
        for name in _SECONDS_FIELDS:
            d[name] = _significant(d[name], STORED_DIGITS)
        samples = d.pop("samples_s")
        median = d["median_s"]
        d["samples_pct"] = [round(100.0 * s / median) if median > 0 else 0 for s in samples]
        if d["host_s"] is None:
            del d["host_s"]  # a host timing: the record stays as it was before the field
        else:
            d["host_s"] = _significant(d["host_s"], STORED_DIGITS)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Measurement":
        """Rebuild from `to_dict` or `to_stored` output (``samples_pct`` become
        seconds: percent of ``median_s``); ValueError names a missing, unknown or
        bad field."""
        if isinstance(d, dict) and "samples_pct" in d:
            pct = d["samples_pct"]
            if "samples_s" in d:
                raise ValueError("Measurement has both samples_s and samples_pct (keep one)")
            if not isinstance(pct, (list, tuple)) or not all(_is_int(p) and p >= 0 for p in pct):
                raise ValueError(f"Measurement.samples_pct must be a list of ints >= 0, got {pct!r:.80}")
            median = d.get("median_s")
            if not _is_real(median) or not math.isfinite(median) or median < 0:
                raise ValueError(f"Measurement.median_s must be a finite number >= 0, got {median!r}")
            d = {**{k: v for k, v in d.items() if k != "samples_pct"},
                 "samples_s": stored_samples_s(d)}
        if isinstance(d, dict) and not isinstance(d.get("samples_s", []), (list, tuple)):
            raise ValueError(f"Measurement.samples_s must be a list, got {type(d['samples_s']).__name__}")
        if isinstance(d, dict) and "host_s" not in d:  # stored before the field existed, or a CPU's
            d = {**d, "host_s": None}
        return dataclass_from_dict(cls, d)

    @classmethod
    def from_samples(
        cls,
        samples_s,
        *,
        number: int,
        warmup_n: int,
        stop_reason: str,
        timer: str,
        cache: str,
        threads: int | None,
        host_s: float | None = None,
    ) -> "Measurement":
        """Summarise per-call samples (seconds) with numpy."""
        np = _np()
        data = np.asarray(samples_s, dtype=float)
        if data.size == 0:
            raise ValueError("a Measurement needs at least one sample")
        q25, q50, q75 = np.percentile(data, [25, 50, 75])
        lo, hi = median_ci(data, CI_CONFIDENCE)
        return cls(
            median_s=float(q50),
            iqr_s=float(q75 - q25),
            mean_s=float(data.mean()),
            min_s=float(data.min()),
            ci_low_s=lo,
            ci_high_s=hi,
            n=int(data.size),
            number=number,
            warmup_n=warmup_n,
            stop_reason=stop_reason,
            timer=timer,
            cache=cache,
            threads=threads,
            samples_s=tuple(float(s) for s in data),
            host_s=host_s,
        )


# ---------------------------------------------------------------- sampling loops


def _median_of_sorted(values) -> float:
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2.0


def warm_up(
    time_block: Callable[[int], float],
    *,
    warmup_s: float,
    min_warmup: int,
    clock_ns: Callable[[], int],
) -> tuple[int, float]:
    """Call `time_block(1)` at least `min_warmup` times and until `warmup_s` seconds pass.

    Returns (calls made, estimated seconds per call). The estimate is the median of
    the warm-up calls after the first one, which often pays one-off costs.
    """
    durations: list[float] = []
    start = clock_ns()
    while True:
        durations.append(time_block(1))
        elapsed_s = (clock_ns() - start) / _NS_PER_S
        if len(durations) >= min_warmup and elapsed_s >= warmup_s:
            break
    steady = sorted(durations[1:] if len(durations) > 1 else durations)
    return len(durations), _median_of_sorted(steady)


def block_size(estimate_s: float, min_block_s: float) -> int:
    """Calls per sample so that one sample lasts at least `min_block_s` seconds."""
    if min_block_s <= 0 or estimate_s >= min_block_s:
        return 1
    # Floor the estimate at 1 ns: a coarse clock may read 0 for a very short call.
    ratio = min_block_s / max(estimate_s, 1e-9)
    return max(1, math.ceil(round(ratio, 6)))


def ci_is_tight(sorted_samples, target_rel_ci: float, confidence: float = CI_CONFIDENCE) -> bool:
    """True when the median's CI lies within ±`target_rel_ci` of the median."""
    median = _median_of_sorted(sorted_samples)
    lo, hi = _ci_from_sorted(sorted_samples, confidence)
    if median <= 0:
        return lo == hi == median
    tolerance = target_rel_ci * median
    return median - lo <= tolerance and hi - median <= tolerance


def sample_adaptively(
    time_block: Callable[[int], float],
    number: int,
    *,
    target_rel_ci: float,
    budget_s: float,
    min_samples: int,
    max_samples: int,
    clock_ns: Callable[[], int],
    before_sample: Callable[[], None] | None = None,
) -> tuple[list[float], str]:
    """Take per-call samples (seconds) until a stopping rule fires.

    Each sample is `time_block(number) / number`; `before_sample` (e.g. an L2 flush)
    runs before each one, outside the timed block. Stops with "ci" once n >= min_samples
    and the median's CI is within ±target_rel_ci, "max_samples" at n == max_samples,
    or "budget" once more than `budget_s` seconds have passed on `clock_ns` since
    sampling began. Returns (samples, stop_reason).
    """
    samples: list[float] = []
    ordered: list[float] = []
    budget_ns = budget_s * _NS_PER_S
    next_check = min_samples
    start = clock_ns()
    while True:
        if before_sample is not None:
            before_sample()
        value = time_block(number) / number
        samples.append(value)
        bisect.insort(ordered, value)
        n = len(samples)
        out_of_samples = n >= max_samples
        out_of_time = clock_ns() - start > budget_ns
        # Check the CI every sample at first, then every ~3% more samples (and before
        # any other stop), so the check stays cheap when thousands of samples are taken.
        if n >= min_samples and (n >= next_check or out_of_samples or out_of_time):
            next_check = n + max(1, n // 32)
            if ci_is_tight(ordered, target_rel_ci):
                return samples, "ci"
        if out_of_samples:
            return samples, "max_samples"
        if out_of_time:
            return samples, "budget"


# ---------------------------------------------------------------- Timer


def _parse_timer_device(device: str) -> int | None:
    """Return None for "cpu", the CUDA index for "cuda"/"cuda:N"; ValueError otherwise."""
    from perfmodel.device.spec import parse_device

    kind, index = parse_device(device)
    if kind == "auto":
        raise ValueError("Timer needs a concrete device: 'cpu', 'cuda' or 'cuda:N', not 'auto'")
    return index if kind == "cuda" else None


class Timer:
    """Adaptive timer for one callable `fn()` on "cpu", "cuda" or "cuda:N".

    Durations are in seconds. `clock_ns` (nanoseconds) times CPU blocks and, on both
    paths, the warm-up duration and the sampling budget. With `flush_l2_bytes > 0`
    (CUDA only) a buffer of twice that size is zeroed before each sample, outside the
    timed region, each sample times a single call, and the result is marked "cold".
    `flush_cpu_bytes > 0` (CPU only) does the same with a host buffer of that size,
    evicting the last-level cache; with `flush_cpu_state="warm"` the buffer is meant
    to evict only the cores' private caches, and the result is marked "warm".

    On CUDA a hot block is queued behind a device-side wait (``torch.cuda._sleep``)
    at least :data:`HOLD_FACTOR` times as long as the host took to issue the previous
    block: the host issues the start event, the calls and the end event while the
    device waits, so the events time the calls back to back on the device. Without
    it a block of short kernels times how fast the host launches them. Such
    measurements say ``timer="cuda_event_queued"``.
    """

    def __init__(
        self,
        fn: Callable[[], Any],
        *,
        target_rel_ci: float = 0.02,
        budget_s: float = 1.0,
        min_samples: int = 5,
        max_samples: int = 10_000,
        warmup_s: float = 0.05,
        min_warmup: int = 2,
        min_block_s: float = 2e-5,
        device: str = "cpu",
        flush_l2_bytes: int = 0,
        flush_cpu_bytes: int = 0,
        flush_cpu_state: str = "cold",
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ):
        if not callable(fn):
            raise TypeError("fn must be callable")
        if not target_rel_ci > 0:
            raise ValueError(f"target_rel_ci must be > 0, got {target_rel_ci!r}")
        if not budget_s >= 0:
            raise ValueError(f"budget_s must be >= 0, got {budget_s!r}")
        if not (_is_int(min_samples) and min_samples >= 1):
            raise ValueError(f"min_samples must be an int >= 1, got {min_samples!r}")
        if not (_is_int(max_samples) and max_samples >= min_samples):
            raise ValueError(f"max_samples must be an int >= min_samples ({min_samples}), got {max_samples!r}")
        if not warmup_s >= 0:
            raise ValueError(f"warmup_s must be >= 0, got {warmup_s!r}")
        if not (_is_int(min_warmup) and min_warmup >= 1):
            raise ValueError(f"min_warmup must be an int >= 1 (the warm-up sizes blocks), got {min_warmup!r}")
        if not min_block_s >= 0:
            raise ValueError(f"min_block_s must be >= 0, got {min_block_s!r}")
        if not (_is_int(flush_l2_bytes) and flush_l2_bytes >= 0):
            raise ValueError(f"flush_l2_bytes must be an int >= 0, got {flush_l2_bytes!r}")
        if not (_is_int(flush_cpu_bytes) and flush_cpu_bytes >= 0):
            raise ValueError(f"flush_cpu_bytes must be an int >= 0, got {flush_cpu_bytes!r}")
        if flush_cpu_state not in ("cold", "warm"):
            raise ValueError(f"flush_cpu_state must be 'cold' or 'warm', got {flush_cpu_state!r}")
        self.cuda_index = _parse_timer_device(device)
        if self.cuda_index is None and flush_l2_bytes:
            raise ValueError("flush_l2_bytes applies to CUDA devices only")
        if self.cuda_index is not None and flush_cpu_bytes:
            raise ValueError("flush_cpu_bytes applies to CPU devices only")
        self.fn = fn
        self.target_rel_ci = target_rel_ci
        self.budget_s = budget_s
        self.min_samples = min_samples
        self.max_samples = max_samples
        self.warmup_s = warmup_s
        self.min_warmup = min_warmup
        self.min_block_s = min_block_s
        self.device = device
        self.flush_l2_bytes = flush_l2_bytes
        self.flush_cpu_bytes = flush_cpu_bytes
        self.flush_cpu_state = flush_cpu_state
        self.clock_ns = clock_ns

    def measure(self) -> Measurement:
        """Warm up, size blocks, sample adaptively and summarise (seconds per call)."""
        if self.cuda_index is None:
            return self._measure_cpu()
        return self._measure_cuda()

    def _run(self, time_block, *, before_sample, force_single: bool, timer: str, cache: str, threads,
             issued: list[float] | None = None):
        """Warm up, size blocks, sample and summarise. ``issued`` (CUDA): a list
        ``time_block`` appends the host seconds per call of each block it issues
        to; the median over the sampled blocks becomes the result's ``host_s``."""
        warmup_n, estimate_s = warm_up(
            time_block, warmup_s=self.warmup_s, min_warmup=self.min_warmup, clock_ns=self.clock_ns
        )
        number = 1 if force_single else block_size(estimate_s, self.min_block_s)
        samples, stop_reason = sample_adaptively(
            time_block,
            number,
            target_rel_ci=self.target_rel_ci,
            budget_s=self.budget_s,
            min_samples=self.min_samples,
            max_samples=self.max_samples,
            clock_ns=self.clock_ns,
            before_sample=before_sample,
        )
        host_s = None
        if issued:
            host = sorted(issued[-len(samples):])  # one block per sample, the last ones
            host_s = _median_of_sorted(host)
        return Measurement.from_samples(
            samples,
            number=number,
            warmup_n=warmup_n,
            stop_reason=stop_reason,
            timer=timer,
            cache=cache,
            threads=threads,
            host_s=host_s,
        )

    def _measure_cpu(self) -> Measurement:
        fn, clock_ns = self.fn, self.clock_ns

        def time_block(number: int) -> float:
            start = clock_ns()
            for _ in range(number):
                fn()
            return (clock_ns() - start) / _NS_PER_S

        torch = _torch()
        flush = None
        if self.flush_cpu_bytes:
            flush_buffer = cpu_flush_buffer(self.flush_cpu_bytes)

            def flush() -> None:
                flush_buffer.fill_(int(flush_buffer[0]) ^ 1)  # written, not just read

        cold = bool(self.flush_cpu_bytes)
        return self._run(
            time_block, before_sample=flush, force_single=cold, timer="perf_counter",
            cache=self.flush_cpu_state if cold else "hot", threads=torch.get_num_threads()
        )

    def _measure_cuda(self) -> Measurement:
        torch = _torch()
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {self.device!r} requested but torch.cuda.is_available() is False")
        fn, index, clock_ns = self.fn, self.cuda_index, self.clock_ns
        cold = bool(self.flush_l2_bytes)
        with torch.cuda.device(index):
            start_event = torch.cuda.Event(enable_timing=True)
            end_event = torch.cuda.Event(enable_timing=True)
            # the cold path's flush kernel already keeps the device busy while the
            # host issues its one call
            hold = None if cold else _device_hold(torch, index)
            issue_s = [MIN_HOLD_S]  # host seconds the last block took to issue
            issued: list[float] = []  # host seconds per call of each block

            def time_block(number: int) -> float:
                if hold is not None:
                    hold(HOLD_FACTOR * issue_s[0])
                start = clock_ns()
                start_event.record()
                for _ in range(number):
                    fn()
                end_event.record()
                issue_s[0] = (clock_ns() - start) / _NS_PER_S
                issued.append(issue_s[0] / number)
                torch.cuda.synchronize(index)
                return start_event.elapsed_time(end_event) / _MS_PER_S

            flush = None
            if cold:
                flush_buffer = torch.empty(2 * self.flush_l2_bytes, dtype=torch.uint8, device=f"cuda:{index}")
                flush = flush_buffer.zero_

            torch.cuda.synchronize(index)
            return self._run(
                time_block,
                before_sample=flush,
                force_single=cold,
                timer="cuda_event" if hold is None else "cuda_event_queued",
                cache="cold" if cold else "hot",
                threads=None,
                issued=issued,
            )


#: Host flush buffers by size (:func:`cpu_flush_buffer`): at most this many are kept.
MAX_FLUSH_BUFFERS = 2
_flush_buffers: dict[tuple[int, int], Any] = {}


def cpu_flush_buffer(nbytes: int):
    """A host buffer of ``nbytes`` bytes for evicting caches, reused by every timer
    that asks for that size: allocating and first touching twice a large
    last-level cache costs about three refills of it, once per measurement
    otherwise. Keeps the :data:`MAX_FLUSH_BUFFERS` sizes asked for last."""
    torch = _torch()
    key = (id(torch), nbytes)
    buffer = _flush_buffers.pop(key, None)
    if buffer is None:
        buffer = torch.empty(nbytes, dtype=torch.uint8)
    _flush_buffers[key] = buffer  # newest last
    while len(_flush_buffers) > MAX_FLUSH_BUFFERS:
        del _flush_buffers[next(iter(_flush_buffers))]
    return buffer


def _device_hold(torch, index: int) -> Callable[[float], None] | None:
    """A function that makes device ``index`` wait for at least the given seconds
    (at least :data:`MIN_HOLD_S`) before the work queued after it; None where torch
    has no ``torch.cuda._sleep``. Its cycles per second are timed once per device."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return None
    if index not in _hold_cycles_per_s:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep(_HOLD_CALIBRATION_CYCLES)  # first call: the kernel's one-off load
        start.record()
        sleep(_HOLD_CALIBRATION_CYCLES)
        end.record()
        torch.cuda.synchronize(index)
        elapsed_s = start.elapsed_time(end) / _MS_PER_S
        _hold_cycles_per_s[index] = _HOLD_CALIBRATION_CYCLES / max(elapsed_s, 1e-9)
    cycles_per_s = _hold_cycles_per_s[index]

    def hold(seconds: float) -> None:
        sleep(int(cycles_per_s * max(seconds, MIN_HOLD_S)))

    return hold
