"""Run one microbenchmark case and turn its measurements into store records."""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

from perfmodel.device.spec import DeviceSpec
from perfmodel.ops import OpCase, get_op
from perfmodel.measure.timer import Measurement, Timer

#: Independent measurements taken of a replicated case; two give the noise floor.
REPLICATES = 2
#: Share of a profile's cases of each (op, direction) measured :data:`REPLICATES`
#: times; the others are measured once. The noise floor (the GMAE between a case's
#: two replicates) needs pairs, not every case: a quarter of the quick profile's
#: cases, and at least :data:`MIN_REPLICATED` of each (op, direction), still give
#: every op its floor, and measuring the rest once cuts the sweep's time by about
#: a third. Which cases are replicated is fixed (:func:`replicates_for`), the same
#: in every run.
REPLICATED_SHARE = {"smoke": 1.0, "quick": 0.25, "gpu": 1.0, "full": 1.0}
#: Fewest cases of an (op, direction) measured twice, where it has that many.
MIN_REPLICATED = 6

#: Longest estimated time of one call a profile will run (s). Longer cases are
#: skipped with a reason: bf16 GEMMs on a CPU without native bf16 support run
#: tens of times slower than fp32, and a sweep should not wait on them.
MAX_CALL_S = {"smoke": 0.02, "quick": 0.1, "gpu": 0.05, "full": 2.0}

#: Sampling time budget per case and replicate (s), flushes of a cold-cache op
#: included: a sweep of all op families must fit its profile's wall-time target
#: (the quick main job, fit and E2E included, aims at 12 min; gpu on a GPU < 6 min).
#: A case that stops on its budget is one whose samples spread: there, two
#: replicates differ by more than each one's confidence interval says (the
#: median gap between them is about 1.5 times its half-width), so a longer budget
#: buys little. Halving quick's from 0.3 s moved the held-out GMAE of a fit by
#: under a point (docs/journal/2026-11-28-main-job-time.md).
BUDGET_S = {"smoke": 0.1, "quick": 0.15, "gpu": 0.3, "full": 1.0}
#: The same for a collective (s). On ranks sharing a CPU a small collective's
#: samples spread widely (the scheduler decides when each peer runs), so its
#: median never reaches the CI target and the budget sets its precision: a
#: longer budget narrows the gap between two replicates (measured: see
#: docs/journal/2026-11-25-collectives.md).
COLLECTIVE_BUDGET_S = {"smoke": 0.1, "quick": 1.0, "gpu": 1.0, "full": 2.0}


class CaseUnsupported(Exception):
    """The device cannot run this case (out of memory, dtype unsupported, ...)."""


@dataclass(frozen=True)
class TimerSettings:
    """Adaptive-sampling settings applied to every case (seconds, fractions)."""

    target_rel_ci: float = 0.02
    budget_s: float = 1.0
    warmup_s: float = 0.02
    min_samples: int = 5
    cold_cache: bool = False  # flush the L2 before each sample of every op; CUDA only


def replicates_for(case: OpCase, profile: str) -> int:
    """How many times ``profile`` measures ``case``: :data:`REPLICATES` for the
    cases :func:`replicated_ids` picks (and for a case that is not one of the
    profile's), else 1."""
    if REPLICATED_SHARE.get(profile, 1.0) >= 1.0:
        return REPLICATES
    try:
        picked, listed = replicated_ids(case.op, case.direction, profile)
    except (KeyError, ValueError):  # an op or profile this process does not know
        return REPLICATES
    return REPLICATES if case.id in picked or case.id not in listed else 1


@functools.lru_cache(maxsize=None)
def replicated_ids(op: str, direction: str, profile: str) -> tuple[frozenset, frozenset]:
    """(the ids of the cases of ``op`` in ``direction`` that ``profile`` measures
    twice, the ids of all its cases there): the :data:`REPLICATED_SHARE` of them
    (at least :data:`MIN_REPLICATED`) first in the order of a hash of their ids."""
    ids = sorted({c.id for c in get_op(op).cases(profile) if c.direction == direction},
                 key=lambda i: hashlib.sha256(i.encode()).digest())
    share = REPLICATED_SHARE.get(profile, 1.0)
    count = min(len(ids), max(MIN_REPLICATED, math.ceil(share * len(ids))))
    return frozenset(ids[:count]), frozenset(ids)


def estimated_call_s(case: OpCase, spec: DeviceSpec) -> float:
    """Roofline estimate of one call of ``case`` at the device's peak rates (s)."""
    op = get_op(case.op)
    peak = spec.peak_flops.get(case.dtype, spec.peak_flops["float32"])
    return max(op.flops(case.params, case.direction) / peak,
               op.bytes_moved(case.params, case.dtype, case.direction) / spec.mem_bandwidth_Bps)


@dataclass(frozen=True)
class CaseTiming:
    """One replicate of a case: its measurement and, for a cold-cache op on a CPU
    whose caches allow it, its warm one (:meth:`~perfmodel.ops.base.OpDef.cpu_warm_flush_bytes`),
    timed right after it."""

    measurement: Measurement
    warm: Measurement | None = None


def benchmark_case(case: OpCase, spec: DeviceSpec, device: str, settings: TimerSettings,
                   max_call_s: float | None = None,
                   replicates: int = REPLICATES) -> list[CaseTiming]:
    """Measure ``case`` ``replicates`` times on ``device`` (``"cpu"``, ``"cuda:0"``).

    Raises :class:`CaseUnsupported` when the device cannot run it, or when its
    estimated call time exceeds ``max_call_s``.
    """
    op = get_op(case.op)
    if max_call_s is not None and (estimate := estimated_call_s(case, spec)) > max_call_s:
        raise CaseUnsupported(f"{case.id}: estimated {estimate * 1e3:.0f} ms per call on "
                              f"{spec.key} exceeds this profile's {max_call_s * 1e3:.0f} ms limit")
    try:
        return _measure(op, case, spec, device, settings, replicates)
    except Exception as exc:  # classified below; anything else propagates
        reason = unsupported_reason(exc)
        if reason is None:
            raise
    # Raised outside the handler and unchained: the failed case's tensors, held by
    # the frames of the original traceback, are freed here, before the next case
    # runs. Kept alive (by whoever keeps the skip's exception), one GPU OOM would
    # make the cases after it run out of memory too.
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    raise CaseUnsupported(f"{case.id}: {reason}")


def _measure(op, case: OpCase, spec: DeviceSpec, device: str, settings: TimerSettings,
             replicates: int) -> list[CaseTiming]:
    runner = op.make_runner(case.params, case.dtype, case.direction, device)
    on_cpu = spec.kind == "cpu"

    def timer(flush_cpu_bytes: int, state: str = "cold", warmup_s: float = settings.warmup_s,
              min_warmup: int = 2) -> Timer:
        return Timer(runner, device=device, target_rel_ci=settings.target_rel_ci,
                     budget_s=settings.budget_s, warmup_s=warmup_s, min_warmup=min_warmup,
                     min_samples=settings.min_samples,
                     flush_l2_bytes=spec.l2_bytes if settings.cold_cache and not on_cpu else 0,
                     flush_cpu_bytes=flush_cpu_bytes, flush_cpu_state=state)

    cold = timer(op.cpu_flush_bytes(spec.llc_bytes) if on_cpu else 0)
    warm_bytes = op.cpu_warm_flush_bytes(spec.l2_bytes, spec.llc_bytes, spec.compute_units) \
        if on_cpu and cold.flush_cpu_bytes else 0
    # timed right after the cold timing, which warmed the runner up: one call of
    # warm-up, as every warm sample times one call anyway
    warm = timer(warm_bytes, "warm", warmup_s=0.0, min_warmup=1) if warm_bytes else None
    return [CaseTiming(cold.measure(), warm.measure() if warm is not None else None)
            for _ in range(replicates)]


def unsupported_reason(exc: BaseException) -> str | None:
    """A skip reason when ``exc`` means the device cannot run a case, else None."""
    text = str(exc)
    if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text.lower():
        return f"out of memory ({text.splitlines()[0] if text else type(exc).__name__})"
    if isinstance(exc, (RuntimeError, NotImplementedError)) and (
            "not implemented for" in text or "Unsupported dtype" in text
            or "does not support" in text or "unsupported on this device" in text):
        return f"unsupported on this device ({text.splitlines()[0]})"
    if isinstance(exc, ImportError) or "FBGEMM missing" in text:
        return f"library missing ({text.splitlines()[0] if text else type(exc).__name__})"
    return None


def measurement_record(case: OpCase, measurement: Measurement, replicate: int, env: dict,
                       warm: Measurement | None = None) -> dict:
    """The store record of one measurement of ``case``, in the compact form of
    :meth:`~perfmodel.measure.timer.Measurement.to_stored`; with ``warm``, the
    case's warm timing under ``"warm"`` in the same form."""
    stored = measurement.to_stored()
    record = {"kind": "measurement", "op": case.op, "direction": case.direction,
              "dtype": case.dtype, "config": case.params, "replicate": replicate,
              "measurement": stored, "env": env}
    if warm is not None:
        record["warm"] = warm.to_stored()
    return record
