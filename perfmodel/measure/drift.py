"""How far the host's speed moves over minutes: the floor under accuracy figures.

Two back-to-back replicates of a microbenchmark agree closely (the accuracy
table's ``noise`` column says how closely), but on a shared VM the speed of the whole host moves
over seconds and minutes, and a sweep, a fit and an E2E measurement taken
minutes apart see different hosts. :func:`probe` times two reference ops, a
512x512x512 fp32 ``addmm`` (compute) and a 16M-element fp32 ``copy`` (memory:
2 x 64 MiB into a preallocated tensor, beyond the last-level cache of the CPUs
this project runs on), built from their op definitions, every ``interval_s``
for ``seconds``: each sample is the median of ``calls`` calls. :func:`summarise`
gives per op the min, median and max sample, max/min, and the GMAE of the
samples against their median: the error a perfect predictor, fitted at one
moment, shows at another.

The same reference ops put a figure on that move where a prediction needs it.
A microbench session stores the host's speed (:class:`HostSpeed`, timed alone:
once a minute, or once before a sweep sharded over ranks) in its measurement
records, a fit keeps the median over its training records, and a multi-rank
E2E run, which prices its ranks with a fit measured earlier, times the
reference ops again and moves each op's fitted time by the ratio
(:class:`HostDrift`).

Two reference ops do not stand for every op, so where two sweeps at another
thread count timed the same configs of an op, one beside the fit's
measurements and one now, that op moves by its own factor instead
(:func:`op_drift_factors`, :class:`OpDrift`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

from perfmodel.fit.metrics import gmae

#: Reference ops: (op name, config) of a compute-bound and a memory-bound call.
#: The memory reference was a 4M-element ``add`` (3 x 16 MiB) until 2026-11-26:
#: on a CPU whose last-level cache holds much of those 48 MiB, its time depended
#: on how much of it the cache's last contents served, and a multi-rank
#: iteration's measured time over its prediction at the fit's speed followed
#: the ``addmm``'s drift and hardly the ``add``'s (see
#: docs/journal/2026-11-26-memory-reference.md). The ``copy`` of 2 x 64 MiB
#: streams from memory.
REFERENCE = {"addmm": ("addmm", {"M": 512, "N": 512, "K": 512}),
             "copy": ("copy", {"ELEMS": 1 << 24})}
#: The reference set before 2026-11-26, readable in stored records and fits but
#: not comparable with :data:`REFERENCE` (:meth:`HostSpeed.comparable`).
LEGACY_REFERENCE = {"addmm": ("addmm", {"M": 512, "N": 512, "K": 512}),
                    "add": ("add", {"ROWS": 2048, "COLS": 2048})}


@dataclass(frozen=True)
class DriftSample:
    """Median seconds per call of each reference op, ``t_s`` seconds into the probe."""

    t_s: float
    seconds: dict[str, float]


@dataclass(frozen=True)
class DriftSummary:
    """One reference op over a probe (seconds; ``gmae`` a fraction)."""

    op: str
    n: int
    min_s: float
    median_s: float
    max_s: float
    ratio: float  # max / min
    gmae: float  # of the samples against their median


def reference_runners(device: str = "cpu") -> dict[str, Callable[[], object]]:
    """The :data:`REFERENCE` ops' fp32 forward callables on ``device``."""
    from perfmodel.ops import get_op

    return {name: get_op(op).make_runner(params, "float32", "forward", device)
            for name, (op, params) in REFERENCE.items()}


def probe(seconds: float, interval_s: float = 0.5, calls: int = 20,
          runners: dict[str, Callable[[], object]] | None = None,
          clock: Callable[[], float] = time.perf_counter,
          sleep: Callable[[float], object] = time.sleep,
          progress: Callable[[DriftSample], object] = lambda sample: None) -> list[DriftSample]:
    """Sample the reference ops (``runners``, default :func:`reference_runners`)
    until ``seconds`` have passed, pausing ``interval_s`` between samples; at
    least two samples. ``progress`` sees each sample as it is taken."""
    if not seconds > 0 or interval_s < 0 or calls < 1:
        raise ValueError(f"need seconds > 0, interval >= 0 and calls >= 1, got {seconds}, "
                         f"{interval_s} and {calls}")
    runners = runners if runners is not None else reference_runners()
    for fn in runners.values():  # warm up: first calls pay one-off costs
        fn()
    start = clock()
    out: list[DriftSample] = []
    while len(out) < 2 or clock() - start < seconds:
        medians = _medians(runners, calls, clock)
        out.append(DriftSample(clock() - start, medians))
        progress(out[-1])
        if interval_s:
            sleep(interval_s)
    return out


def _medians(runners: dict[str, Callable[[], object]], calls: int,
             clock: Callable[[], float]) -> dict[str, float]:
    """Median seconds of ``calls`` timed calls of each runner."""
    medians = {}
    for name, fn in runners.items():
        times = []
        for _ in range(calls):
            t0 = clock()
            fn()
            times.append(clock() - t0)
        medians[name] = statistics.median(times)
    return medians


def summarise(samples: list[DriftSample]) -> list[DriftSummary]:
    """Per reference op: see :class:`DriftSummary`. ValueError for no samples."""
    if not samples:
        raise ValueError("no drift samples to summarise")
    out = []
    for op in samples[0].seconds:
        values = [s.seconds[op] for s in samples]
        median = statistics.median(values)
        out.append(DriftSummary(op, len(values), min(values), median, max(values),
                                max(values) / min(values), gmae(values, [median] * len(values))))
    return out


def drift_record(samples: list[DriftSample], device_key: str, env: dict,
                 interval_s: float, calls: int) -> dict:
    """The JSON record of a probe (``results/<device-key>/drift/<run-id>.json``)."""
    return {"kind": "drift", "device_key": device_key, "interval_s": interval_s,
            "calls": calls, "reference": {k: {"op": op, "config": cfg}
                                          for k, (op, cfg) in REFERENCE.items()},
            "summary": [asdict(s) for s in summarise(samples)],
            "samples": [asdict(s) for s in samples], "env": env}


# -- the host's speed beside a fit ------------------------------------------------

#: Timed calls of each reference op per round of a :func:`measure_host_speed`
#: sample, and rounds per sample (the sample is the median round per op), so
#: that one round a neighbour's burst hits does not set the sample.
SPEED_CALLS = 10
SPEED_ROUNDS = 3
#: A microbench session re-measures the host's speed when its last sample is
#: older than this (s), so that a sample costs a small share of each minute.
SPEED_INTERVAL_S = 60.0


@dataclass(frozen=True)
class HostSpeed:
    """The host's speed at one moment: median seconds per call of each
    :data:`REFERENCE` op (``addmm``: compute, ``copy``: memory), at the torch
    thread count of the process that measured it. One read from a record of an
    earlier version may hold the :data:`LEGACY_REFERENCE` set instead.

    A microbench session stores its latest sample in every measurement record
    (``host_speed``) and a fit keeps the median over the records it was trained
    on (:attr:`perfmodel.fit.fitting.FitReport.host_speed`), so that an E2E run can
    tell how much faster or slower the host is than when the fit's timings were
    taken (:class:`HostDrift`)."""

    seconds: dict[str, float]

    def to_dict(self) -> dict[str, float]:
        return dict(self.seconds)

    @property
    def comparable(self) -> bool:
        """Whether this speed was taken with the current :data:`REFERENCE` ops
        (False for the :data:`LEGACY_REFERENCE` set)."""
        return set(self.seconds) == set(REFERENCE)

    @classmethod
    def from_dict(cls, data: object, where: str) -> "HostSpeed":
        """Read :meth:`to_dict`'s form (the current reference ops or the legacy
        set); ValueError naming ``where`` otherwise."""
        if not isinstance(data, dict) or set(data) not in (set(REFERENCE),
                                                           set(LEGACY_REFERENCE)) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e3
                for v in data.values()):
            raise ValueError(f"{where}: host_speed must map {sorted(REFERENCE)} to seconds "
                             f"> 0, got {data!r}")
        return cls({k: float(v) for k, v in data.items()})

    @classmethod
    def median_of(cls, speeds: list["HostSpeed"]) -> "HostSpeed | None":
        """Per reference op, the median over ``speeds`` taken with the current
        :data:`REFERENCE` ops where any is, else over all of them (each of the
        :data:`LEGACY_REFERENCE` set; None for none)."""
        if not speeds:
            return None
        chosen = [s for s in speeds if s.comparable] or speeds
        return cls({op: statistics.median(s.seconds[op] for s in chosen)
                    for op in chosen[0].seconds})


def measure_host_speed(runners: dict[str, Callable[[], object]] | None = None,
                       calls: int = SPEED_CALLS, rounds: int = SPEED_ROUNDS,
                       clock: Callable[[], float] = time.perf_counter) -> HostSpeed:
    """One :class:`HostSpeed` sample: a warm-up call, then ``rounds`` rounds of
    ``calls`` timed calls of each reference op (``runners``, default
    :func:`reference_runners`); per op, the median round of the per-round
    medians: ``1 + rounds x calls`` calls of each op in all."""
    runners = runners if runners is not None else reference_runners()
    for fn in runners.values():
        fn()
    return HostSpeed.median_of([HostSpeed(_medians(runners, calls, clock))
                                for _ in range(rounds)])


#: The share by which the host's speed around the E2E measurements may differ
#: from the fit's before the session notes it (0.10 = 10%).
E2E_SPEED_NOTE = 0.10


def e2e_speed_ratio(seen: list[HostSpeed], fit: HostSpeed) -> dict[str, float] | None:
    """Per reference op, the median over ``seen`` (samples taken around E2E
    measurements) over ``fit``'s seconds: below 1, the host ran faster than
    when the fit's timings were taken. None when none of ``seen``, or ``fit``,
    was taken with the current :data:`REFERENCE` ops."""
    import statistics

    comparable = [s for s in seen if s.comparable]
    if not comparable or not fit.comparable:
        return None
    return {op: statistics.median(s.seconds[op] for s in comparable) / fit.seconds[op]
            for op in REFERENCE}


@dataclass(frozen=True)
class HostDrift:
    """How much slower than at its fit's measurements an op runs now.

    ``compute`` and ``memory`` are the reference ``addmm``'s and ``copy``'s
    seconds now over their seconds in the fit's :class:`HostSpeed` (> 1: the
    host is slower now). An op predicted at t seconds takes
    t x ((1 - s) x compute + s x memory), where s is the share of t its bytes
    take at ``bandwidth_Bps`` (B/s; :func:`perfmodel.measure.contention.memory_share`)."""

    compute: float
    memory: float
    bandwidth_Bps: float

    def __post_init__(self):
        if not (self.compute > 0 and self.memory > 0 and self.bandwidth_Bps > 0):
            raise ValueError(f"bad host drift figures: {self}")

    @classmethod
    def between(cls, now: HostSpeed, fit: HostSpeed,
                bandwidth_Bps: float) -> "HostDrift | None":
        """The drift from the fit's speed ``fit`` to ``now``; None when either
        was taken with other reference ops than :data:`REFERENCE` (a fit whose
        records predate them: refit to track the host's speed)."""
        if not (now.comparable and fit.comparable):
            return None
        return cls(now.seconds["addmm"] / fit.seconds["addmm"],
                   now.seconds["copy"] / fit.seconds["copy"], bandwidth_Bps)

    def seconds(self, op: str, params: dict[str, int], dtype: str, direction: str,
                fit_s: float) -> float:
        """Seconds of ``op`` now, predicted ``fit_s`` by the fit."""
        from perfmodel.measure.contention import memory_share, op_bytes_moved

        share = memory_share(op_bytes_moved(op, params, dtype, direction), fit_s,
                             self.bandwidth_Bps)
        return fit_s * ((1.0 - share) * self.compute + share * self.memory)

    def to_dict(self) -> dict:
        return asdict(self)


# -- each op's own drift, from two sweeps at another thread count ---------------------

#: Fewest configs two sweeps must both have timed for an op to get its own drift
#: factor (:func:`op_drift_factors`); an op with fewer keeps the reference ops'.
MIN_SHARED_CONFIGS = 3


def _config_seconds(records: Iterable[dict]) -> dict[tuple, float]:
    """Per (op, direction, dtype, config, cache) of the measurement ``records``:
    the median of their ``median_s`` (over replicates, and over runs where the
    caller merged several)."""
    times: dict[tuple, list[float]] = {}
    for r in records:
        if r.get("kind") != "measurement":
            continue
        m = r["measurement"]
        key = (r["op"], r["direction"], r["dtype"],
               tuple(sorted((str(k), v) for k, v in r["config"].items())), m.get("cache"))
        times.setdefault(key, []).append(float(m["median_s"]))
    return {k: statistics.median(v) for k, v in times.items()}


def op_drift_factors(now: Iterable[dict], then: Iterable[dict],
                     min_shared: int = MIN_SHARED_CONFIGS) -> dict[str, float]:
    """How much slower each op runs in the measurement records ``now`` than in
    ``then``: per ``"op.direction"``, the median over the configs both timed
    (same dtype, params and cache state) of the seconds now over the seconds
    then. Ops that share fewer than ``min_shared`` configs are left out."""
    a, b = _config_seconds(now), _config_seconds(then)
    ratios: dict[str, list[float]] = {}
    for key in a.keys() & b.keys():
        if a[key] > 0 and b[key] > 0:
            ratios.setdefault(f"{key[0]}.{key[1]}", []).append(a[key] / b[key])
    return {op: statistics.median(v) for op, v in sorted(ratios.items()) if len(v) >= min_shared}


@dataclass(frozen=True)
class OpDrift:
    """How much slower than at its fit each op runs now, op by op.

    ``factors`` maps ``"op.direction"`` to the op's own drift
    (:func:`op_drift_factors`: the same configs timed by two sweeps at another
    thread count, one taken beside the fit's measurements and one now); an op
    without a factor moves by ``fallback`` (the reference ops'
    :class:`HostDrift`; None: not at all). Two reference ops cannot stand for
    every op: between two sessions hours apart a GEMM, a stream and an
    embedding bag each move by their own amount."""

    factors: dict[str, float]
    fallback: HostDrift | None = None

    def __post_init__(self):
        if not all(isinstance(v, (int, float)) and v > 0 for v in self.factors.values()):
            raise ValueError(f"op drift factors must be > 0, got {self.factors}")

    def seconds(self, op: str, params: dict[str, int], dtype: str, direction: str,
                fit_s: float) -> float:
        """Seconds of ``op`` now, predicted ``fit_s`` by the fit."""
        factor = self.factors.get(f"{op}.{direction}")
        if factor is not None:
            return fit_s * factor
        return fit_s if self.fallback is None else self.fallback.seconds(
            op, params, dtype, direction, fit_s)

    def to_dict(self) -> dict:
        return {"factors": dict(self.factors),
                "fallback": None if self.fallback is None else self.fallback.to_dict()}
