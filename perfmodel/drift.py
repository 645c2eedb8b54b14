"""How far the host's speed moves over minutes: the floor under accuracy figures.

Two back-to-back replicates of a microbenchmark agree to 1-3% (the accuracy
table's ``noise`` column), but on a shared VM the speed of the whole host moves
over seconds and minutes, and a sweep, a fit and an E2E measurement taken
minutes apart see different hosts. :func:`probe` times two reference ops, a
512x512x512 fp32 ``addmm`` (compute) and a 4M-element fp32 ``add`` (memory),
built from their op definitions, every ``interval_s`` for ``seconds``: each
sample is the median of ``calls`` calls. :func:`summarise` gives per op the
min, median and max sample, max/min, and the GMAE of the samples against their
median: the error a perfect predictor, fitted at one moment, shows at another.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

from perfmodel.metrics import gmae

#: Reference ops: (op name, config) of a compute-bound and a memory-bound call.
REFERENCE = {"addmm": ("addmm", {"M": 512, "N": 512, "K": 512}),
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
        medians = {}
        for name, fn in runners.items():
            times = []
            for _ in range(calls):
                t0 = clock()
                fn()
                times.append(clock() - t0)
            medians[name] = statistics.median(times)
        out.append(DriftSample(clock() - start, medians))
        progress(out[-1])
        if interval_s:
            sleep(interval_s)
    return out


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
