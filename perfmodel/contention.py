"""Ranks that share one host's memory: how much slower an op runs beside the others.

Ranks on one host each compute on their own cores, but they share the memory
bus and the last-level cache, so an op that streams memory runs slower while
the other ranks compute than it did alone in its microbenchmark. Two
single-thread processes on cpu-amd-epyc-f25m1-2c, each repeating one op and
starting every call together, took x1.40-1.57 the time alone for
``sgd_foreach`` (a pure stream), x1.18-1.42 for an embedding bag's backward and
x1.04-1.06 for a linear layer's backward (compute bound); in the traces of
``dlrm_mp@2`` the embedding, optimizer and GEMM ops took x1.15 their
predictions.

The model: an op predicted to take t seconds alone takes
t x (1 + (k - 1) x s) beside the others, where

- k (:attr:`Contention.slowdown`, >= 1) is how much slower a pure stream runs
  beside the others: a rank's triad bandwidth alone over its share of the
  bandwidth when every rank that has a core of its own streams at once
  (:func:`measure_contention`, measured by the ranks of each run);
- s (:func:`memory_share`, 0 to 1) is the share of t the op needs to move its
  bytes at the rank's bandwidth alone: ``op.bytes_moved / (bandwidth x t)``.

Ranks that outnumber the cores time-share them; that is
:func:`perfmodel.multirank.oversubscription`'s factor, not this one (only the
ranks that hold a core at a time stream together).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

from perfmodel.ops import get_op

#: Triad calls each rank times per phase, after :data:`WARMUP_CALLS`.
CALLS = 8
WARMUP_CALLS = 2
#: Rounds of the two phases (alone, side by side); the slowdown is the median
#: over rounds. With one round it ranged 1.03-1.52 over 27 runs on
#: cpu-amd-epyc-f25m1-2c (median 1.31): a phase that a neighbour's burst hits
#: moves one round, not the result.
ROUNDS = 3


@dataclass(frozen=True)
class Contention:
    """How a rank's ops slow down beside the others (see the module docstring).

    ``slowdown`` (k, >= 1) of a pure stream; ``bandwidth_Bps``: one rank's triad
    bandwidth alone (B/s); ``together_Bps``: a rank's triad bandwidth with
    ``ranks_together`` ranks streaming at once (B/s)."""

    slowdown: float
    bandwidth_Bps: float
    together_Bps: float
    ranks_together: int

    def __post_init__(self):
        if not self.slowdown >= 1.0 or not self.bandwidth_Bps > 0 or not self.together_Bps > 0 \
                or self.ranks_together < 1:
            raise ValueError(f"bad contention figures: {self}")

    def seconds(self, op: str, params: dict[str, int], dtype: str, direction: str,
                alone_s: float) -> float:
        """Seconds of ``op`` beside the other ranks, predicted ``alone_s`` alone."""
        moved = op_bytes_moved(op, params, dtype, direction)
        return alone_s * (1.0 + (self.slowdown - 1.0) * memory_share(moved, alone_s,
                                                                      self.bandwidth_Bps))

    def to_dict(self) -> dict:
        return asdict(self)


def op_bytes_moved(op: str, params: dict[str, int], dtype: str, direction: str) -> float:
    """``op``'s :meth:`~perfmodel.ops.base.OpDef.bytes_moved` (B), 0 where it
    has none."""
    return get_op(op).size(params, dtype, direction)[1]


def memory_share(bytes_moved: float, seconds: float, bandwidth_Bps: float) -> float:
    """Share (0 to 1) of ``seconds`` that moving ``bytes_moved`` (B) takes at
    ``bandwidth_Bps`` (B/s)."""
    if seconds <= 0.0 or bytes_moved <= 0.0:
        return 0.0
    return min(1.0, bytes_moved / (bandwidth_Bps * seconds))


def slowdown_from_rates(alone_Bps: float, together_Bps: list[float]) -> float:
    """k of :class:`Contention`: ``alone_Bps`` over the mean of the ranks'
    ``together_Bps`` (B/s), at least 1 (a faster together phase is noise)."""
    return max(1.0, alone_Bps / statistics.fmean(together_Bps))


def ranks_together(world_size: int, threads_per_rank: int, cores: int) -> int:
    """How many of ``world_size`` ranks of ``threads_per_rank`` threads each hold
    cores of their own at once on ``cores`` cores (>= 1)."""
    return max(1, min(world_size, cores // max(1, threads_per_rank)))


def triad_rate(kernel: Callable[[], object], moved_bytes: int, calls: int = CALLS,
               warmup: int = WARMUP_CALLS, clock: Callable[[], float] = time.perf_counter
               ) -> float:
    """Median bandwidth (B/s) of ``calls`` calls of ``kernel``, each moving
    ``moved_bytes`` (B), after ``warmup`` untimed calls."""
    for _ in range(warmup):
        kernel()
    times = []
    for _ in range(calls):
        start = clock()
        kernel()
        times.append(clock() - start)
    return moved_bytes / statistics.median(times)


def measure_contention(world, threads_per_rank: int, cores: int,
                       llc_bytes: int) -> Contention | None:
    """Measure :class:`Contention` on the ranks of ``world`` (a
    :class:`~perfmodel.distributed.World`; every rank calls this together):
    rank 0 runs the triad (:func:`perfmodel.device.triad_kernel`) alone while
    the others wait, then the first :func:`ranks_together` ranks run it at once,
    :data:`ROUNDS` times. Returns the figures at rank 0 (the round of median
    slowdown), None elsewhere. About 2 seconds."""
    from perfmodel.device import triad_kernel

    together = ranks_together(world.size, threads_per_rank, cores)
    kernel, moved = triad_kernel(llc_bytes) if world.rank < together else (None, 0)
    rounds = []
    for _ in range(ROUNDS):
        alone = world.on_rank0_alone(lambda: triad_rate(kernel, moved), "the contention triad")
        rate = triad_rate(kernel, moved) if kernel is not None else None
        rates = world.comm.gather(rate, root=0)
        if world.rank == 0:
            rates = [r for r in rates if r is not None]
            rounds.append(Contention(slowdown_from_rates(alone, rates), alone,
                                     statistics.fmean(rates), together))
    if world.rank != 0:
        return None
    return sorted(rounds, key=lambda c: c.slowdown)[len(rounds) // 2]
