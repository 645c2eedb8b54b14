"""Run one microbenchmark case and turn its measurements into store records."""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.device.spec import DeviceSpec
from perfmodel.ops import OpCase, get_op
from perfmodel.measure.timer import Measurement, Timer

#: Independent measurements taken of every case; two give the noise floor.
REPLICATES = 2

#: Longest estimated time of one call a profile will run (s). Longer cases are
#: skipped with a reason: bf16 GEMMs on a CPU without native bf16 support run
#: tens of times slower than fp32, and a sweep should not wait on them.
MAX_CALL_S = {"smoke": 0.02, "quick": 0.1, "gpu": 0.05, "full": 2.0}

#: Sampling time budget per case and replicate (s): a sweep of all op families
#: must fit its profile's wall-time target (smoke < 2 min, quick < 15 min, gpu on a GPU < 6 min).
BUDGET_S = {"smoke": 0.1, "quick": 0.3, "gpu": 0.3, "full": 1.0}
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


def estimated_call_s(case: OpCase, spec: DeviceSpec) -> float:
    """Roofline estimate of one call of ``case`` at the device's peak rates (s)."""
    op = get_op(case.op)
    peak = spec.peak_flops.get(case.dtype, spec.peak_flops["float32"])
    return max(op.flops(case.params, case.direction) / peak,
               op.bytes_moved(case.params, case.dtype, case.direction) / spec.mem_bandwidth_Bps)


def benchmark_case(case: OpCase, spec: DeviceSpec, device: str, settings: TimerSettings,
                   max_call_s: float | None = None,
                   replicates: int = REPLICATES) -> list[Measurement]:
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
             replicates: int) -> list[Measurement]:
    runner = op.make_runner(case.params, case.dtype, case.direction, device)
    timer = Timer(runner, device=device, target_rel_ci=settings.target_rel_ci,
                  budget_s=settings.budget_s, warmup_s=settings.warmup_s,
                  min_samples=settings.min_samples,
                  flush_l2_bytes=spec.l2_bytes if settings.cold_cache and spec.kind == "cuda" else 0,
                  flush_cpu_bytes=op.cpu_flush_bytes(spec.llc_bytes) if spec.kind == "cpu" else 0)
    return [timer.measure() for _ in range(replicates)]


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


def measurement_record(case: OpCase, measurement: Measurement, replicate: int, env: dict) -> dict:
    """The store record of one measurement of ``case``."""
    return {"kind": "measurement", "op": case.op, "direction": case.direction,
            "dtype": case.dtype, "config": case.params, "replicate": replicate,
            "measurement": measurement.to_dict(), "env": env}
