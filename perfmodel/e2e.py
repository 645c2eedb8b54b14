"""End-to-end: measure a workload's training iteration and predict it.

Measurement follows the repeat × number method of the training benchmarks in
the seed work: warm up, then ``repeat`` timed blocks of ``number`` iterations
each; the per-iteration time of each block is one sample, and the median and
standard deviation are taken over the blocks.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from perfmodel.timing import Timer
from perfmodel.workloads import get_workload
from perfmodel.workloads.mlp import MLPConfig, build_mlp, non_gemm_runners

if TYPE_CHECKING:  # fitting pulls in scikit-learn; results and timing do not need it
    from perfmodel.bench import TimerSettings
    from perfmodel.fitting import FitReport


@dataclass(frozen=True)
class IterationTiming:
    """Measured iteration time: median and sd over ``repeat`` blocks (seconds)."""

    median_s: float
    sd_s: float
    repeat: int
    number: int
    items_per_s: float


@dataclass
class E2EResult:
    """Predicted against measured iteration time of one workload."""

    workload: str
    measured: IterationTiming
    predicted_s: float
    breakdown_s: dict[str, float] = field(default_factory=dict)

    @property
    def error(self) -> float:
        """|predicted - measured| / measured, a fraction."""
        return abs(self.predicted_s - self.measured.median_s) / self.measured.median_s

    def record(self, env: dict) -> dict:
        """The store record of this result."""
        return {"kind": "e2e", "workload": self.workload, "measured_s": self.measured.median_s,
                "measured_sd_s": self.measured.sd_s, "repeat": self.measured.repeat,
                "number": self.measured.number, "items_per_s": self.measured.items_per_s,
                "predicted_s": self.predicted_s, "error": self.error,
                "breakdown_s": self.breakdown_s, "env": env}


def measure_iteration(step: Callable[[], object], items: int, warmup: int = 10, repeat: int = 30,
                      number: int = 5, sync: Callable[[], object] = lambda: None,
                      clock: Callable[[], float] = time.perf_counter) -> IterationTiming:
    """Time ``step`` (one training iteration over ``items`` samples)."""
    if repeat < 2 or number < 1:
        raise ValueError(f"need repeat >= 2 and number >= 1, got {repeat} and {number}")
    for _ in range(warmup):
        step()
    sync()
    samples = []
    for _ in range(repeat):
        start = clock()
        for _ in range(number):
            step()
        sync()
        samples.append((clock() - start) / number)
    median = statistics.median(samples)
    return IterationTiming(median, statistics.stdev(samples), repeat, number, items / median)


def predict_mlp(cfg: MLPConfig, fit: FitReport, device: str,
                settings: TimerSettings) -> dict[str, float]:
    """Breakdown (seconds per bucket) of one MLP iteration: GEMMs from the fitted
    ``linear`` predictors, the other ops timed in isolation."""
    breakdown = {
        f"gemm.{direction}": float(fit.predictor("linear", direction)
                                   .predict(cfg.dtype, cfg.layers).sum())
        for direction in ("forward", "backward")
    }
    for bucket, runners in non_gemm_runners(cfg, device).items():
        breakdown[f"{bucket} (measured)"] = sum(
            Timer(r, device=device, target_rel_ci=settings.target_rel_ci,
                  budget_s=settings.budget_s, warmup_s=settings.warmup_s).measure().median_s
            for r in runners)
    return breakdown


def run_workload(name: str, fit: FitReport, device: str, settings: TimerSettings) -> E2EResult:
    """Measure and predict workload ``name`` on ``device``."""
    cfg = get_workload(name)
    step = build_mlp(cfg, device)
    measured = measure_iteration(step.step, items=cfg.batch, sync=_sync_for(device))
    breakdown = predict_mlp(cfg, fit, device, settings)
    return E2EResult(name, measured, sum(breakdown.values()), breakdown)


def _sync_for(device: str) -> Callable[[], object]:
    if device.startswith("cuda"):
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None
