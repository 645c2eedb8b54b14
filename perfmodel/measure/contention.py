"""Ranks that share one host: how much slower an op runs beside the others.

Ranks on one host share the memory bus and the last-level cache, so an op that
streams memory runs slower while the other ranks compute than it did alone in
its microbenchmark: a pure stream (``sgd_foreach``) slows the most, a
compute-bound op (a linear layer's backward) hardly at all, an embedding bag's
backward in between (figures:
docs/journal/2026-11-27-figures-from-docstrings.md).

Ranks that outnumber the cores also time-share them, and that costs more than
the ratio of threads to cores, most for a stream and least for a GEMM whose
operands fit the L2 cache: each switch of the core evicts the other's cache
lines, and the ranks that hold the cores at a time stream together.

The model: an op predicted to take t seconds alone takes
t x (c + (k - c) x s) beside the others, where

- k (:attr:`Contention.slowdown`, >= 1) is how much slower a pure stream runs
  with every rank streaming at once: every rank runs the same triad calls
  (:func:`perfmodel.device.probe.triad_kernel`) at once, and k is the time until the
  last rank is done over the time alone (:func:`measure_contention`, measured
  by the ranks of each run; the last rank for the reason given for c below).
  Until 2026-11-26 k was rank 0's bandwidth alone over the ranks' mean
  bandwidth in a phase of fixed length, which reads lower than the last
  rank's where the ranks time-share the cores;
- c (:attr:`Contention.compute_slowdown`, >= 1) is the same for compute:
  every rank runs the same GEMM calls (:func:`gemm_kernel`) at once, and c is
  the time until the last rank is done over the time alone
  (:func:`slowest_rank_slowdown`), with the GEMM's own small memory share taken
  out (:func:`compute_slowdown`). About 1 when every rank has cores of its
  own; it also prices the ranks' host overheads. The last rank, as a
  collective waits for it: ranks that time-share the cores do not get equal
  shares over tens of ms, so the mean rank is done early: at four one-thread
  ranks on 2 cores the mean rank's slowdown reads below the x2 that sharing
  the cores alone costs, while the last rank's, like that of a data-parallel
  step with no collective (the slowest rank's), reads above it; the mean rate
  over a phase of fixed length, as k was measured until then, reads low as
  well;
- s (:func:`memory_share`, 0 to 1) is the share of t the op needs to move its
  bytes at the rank's bandwidth alone: ``op.bytes_moved / (bandwidth x t)``.

And one cost per wake-up (:attr:`Contention.wake_lag_s`, measured only when the
ranks' threads outnumber the cores): when a collective that ranks sleep in
completes, they all wake at once, the cores go to some of them, and the others
wait for a core until a running rank blocks or its time slice ends. The last
rank then reaches the next collective that much later than its share of the
cores accounts for. :func:`measure_wake_lag` times rounds of (w seconds-alone
of GEMM calls, then a blocking gloo ``all_to_all``) on every rank at once for
w = 0 and the two lengths of :data:`WAKE_WORK_S`; a round takes
``T(w) = T(0) + c' x w + lag`` (:func:`wake_lag_from_rounds`). The lag grows
with the work before the wait (the ranks that hold the cores give them up
when they block, after their own segment) and is whole after a few ms of it
(the shorter of :data:`WAKE_WORK_S`; the probe behind it:
docs/journal/2026-11-26-wake-up-lag.md). The simulator delays a rank's host by
that lag each time it wakes from a collective, scaled down after less work
(:func:`perfmodel.simulate.walk.simulate`). When each rank has a core of its
own, no rank waits for one, and what the rounds leave over shows no trend in
w; that is not modelled.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

from perfmodel.ops import get_op

#: Calls of a kernel rank 0 times alone, at least, after :data:`WARMUP_CALLS`;
#: and that phase's least duration (s), which the segments side by side share.
CALLS = 8
WARMUP_CALLS = 2
PHASE_S = 0.15
#: Segments of each kernel side by side per round, each of about
#: ``PHASE_S / SEGMENTS`` alone (at least 2 calls); the round's slowdown is their median (the
#: last of four ranks is an outlier-prone figure: in the mean over the
#: segments, one segment where a rank was held up moves the round).
SEGMENTS = 4
#: Rounds of the phases (alone, side by side); each slowdown is the median
#: over rounds. With one round k spread widely between runs: a phase that a
#: neighbour's burst hits moves one round, not the result.
ROUNDS = 3
#: The compute kernel's shape (:func:`gemm_kernel`): M x K activations times a
#: K x N weight (4 MiB in float32: beyond a core's L2 cache, within the LLC).
GEMM_SHAPE = {"M": 128, "K": 1024, "N": 1024}
#: The wake-up lag's work (:func:`measure_wake_lag`): a GEMM of about 0.2 ms
#: alone (operands in a core's L2 cache), so a segment holds a whole number of
#: calls; and the two segment lengths of work (s alone): the shorter one is the
#: least work after which the lag is whole (the simulator's ramp).
WAKE_GEMM_SHAPE = {"M": 128, "K": 256, "N": 256}
WAKE_WORK_S = (0.004, 0.032)
#: Seconds of rounds (at the ranks' pace side by side) per segment length.
WAKE_PHASE_S = 0.3


@dataclass(frozen=True)
class Contention:
    """How a rank's ops slow down beside the others (see the module docstring).

    ``slowdown`` (k, >= 1) of a pure stream; ``bandwidth_Bps``: one rank's triad
    bandwidth alone (B/s); ``together_Bps``: the slowest rank's triad bandwidth
    with ``ranks_together`` ranks streaming at once (B/s; the ranks' mean in
    records written before 2026-11-26 afternoon); ``compute_slowdown`` (c,
    >= 1) of compute (1 in records written before it was measured)."""

    slowdown: float
    bandwidth_Bps: float
    together_Bps: float
    ranks_together: int
    compute_slowdown: float = 1.0
    wake_lag_s: float = 0.0

    def __post_init__(self):
        if not self.slowdown >= 1.0 or not self.compute_slowdown >= 1.0 \
                or not self.bandwidth_Bps > 0 or not self.together_Bps > 0 \
                or self.ranks_together < 1 or not 0.0 <= self.wake_lag_s < 1.0:
            raise ValueError(f"bad contention figures: {self}")

    def seconds(self, op: str, params: dict[str, int], dtype: str, direction: str,
                alone_s: float) -> float:
        """Seconds of ``op`` beside the other ranks, predicted ``alone_s`` alone."""
        return self.factor(memory_share(op_bytes_moved(op, params, dtype, direction), alone_s,
                                        self.bandwidth_Bps)) * alone_s

    def factor(self, share: float) -> float:
        """How much slower an op runs beside the others when moving its bytes
        takes ``share`` (0 to 1) of its time alone: c + (k - c) x share."""
        return self.compute_slowdown + (self.slowdown - self.compute_slowdown) * share

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


def compute_slowdown(gemm_slowdown: float, gemm_share: float, stream_slowdown: float) -> float:
    """c of :class:`Contention`, at least 1: the GEMM's slowdown beside the
    others (``gemm_slowdown``) with its memory part taken out, that is c in
    ``gemm_slowdown = c + (stream_slowdown - c) x gemm_share`` (``gemm_share``:
    the GEMM's :func:`memory_share` alone, below 1)."""
    if not 0.0 <= gemm_share < 1.0:
        raise ValueError(f"the compute kernel's memory share must be in [0, 1), got "
                         f"{gemm_share!r}")
    return max(1.0, (gemm_slowdown - stream_slowdown * gemm_share) / (1.0 - gemm_share))


def byte_rate(kernel: Callable[[], object], moved_bytes: int, calls: int = CALLS,
             warmup: int = WARMUP_CALLS, min_s: float = PHASE_S,
             clock: Callable[[], float] = time.perf_counter) -> float:
    """Bandwidth (B/s) of back-to-back calls of ``kernel``, each moving
    ``moved_bytes`` (B), after ``warmup`` untimed calls: at least ``calls``
    calls and ``min_s`` seconds of them, their bytes over their total time.

    Not the median call: on time-shared cores a call can run whole within one
    time slice, and the time the rank spends descheduled falls between calls,
    so the median call shows little of the slowdown that the calls together
    show. And not a fixed number of calls: ranks start a few ms apart, and
    with ``min_s`` of calls they still overlap for most of their phase, where
    a few calls of tens of ms in all left c too low in some runs."""
    for _ in range(warmup):
        kernel()
    start = clock()
    done = 0
    while done < calls or clock() - start < min_s:
        kernel()
        done += 1
    return moved_bytes * done / (clock() - start)


def run_seconds(kernel: Callable[[], object], calls: int,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds that ``calls`` back-to-back calls of ``kernel`` take."""
    start = clock()
    for _ in range(calls):
        kernel()
    return clock() - start


def slowest_rank_slowdown(seconds: list[float], alone_s: float) -> float:
    """How much slower the same work ran on the slowest rank (>= 1): the
    ranks' ``seconds`` for it side by side, ``alone_s`` (s) for it alone."""
    if not alone_s > 0.0 or not seconds:
        raise ValueError(f"need the work's time alone (> 0 s) and the ranks' times, got "
                         f"{alone_s!r} and {seconds!r}")
    return max(1.0, max(seconds) / alone_s)


def gemm_kernel(shape: dict[str, int] = GEMM_SHAPE) -> tuple[Callable[[], object], int]:
    """A float32 ``addmm`` of ``shape`` (M, K, N) at this process's torch
    threads, and the bytes it moves (B, the op's ``bytes_moved``)."""
    import torch

    m, k, n = shape["M"], shape["K"], shape["N"]
    bias, x, w = torch.randn(n), torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    return ((lambda: torch.addmm(bias, x, w, out=out)),
            int(op_bytes_moved("addmm", shape, "float32", "forward")))


def wake_lag_from_rounds(round_s: dict[float, float]) -> float:
    """The wake-up lag (s, >= 0) from round times: ``round_s`` maps the work per
    round (s alone; 0 and two lengths) to the slowest rank's time per round (s).
    With ``T(w) = T(0) + c' x w + lag`` for w > 0, c' is the slope between the two
    lengths and the lag what the shorter one's round leaves over."""
    if 0.0 not in round_s or len(round_s) != 3 or min(round_s) < 0.0 \
            or not all(t > 0.0 for t in round_s.values()):
        raise ValueError(f"need positive round times at no work and two lengths of work, "
                         f"got {round_s!r}")
    short, long = sorted(w for w in round_s if w > 0.0)
    slope = (round_s[long] - round_s[short]) / (long - short)
    return max(0.0, round_s[short] - round_s[0.0] - slope * short)


def measure_wake_lag(world, sync: Callable[[], object],
                     kernel: Callable[[], object] | None = None,
                     clock: Callable[[], float] = time.perf_counter) -> float | None:
    """The wake-up lag (s) of :class:`Contention` on the ranks of ``world``
    (every rank calls this together; see the module docstring): rank 0 times
    ``kernel`` (default: a GEMM of :data:`WAKE_GEMM_SHAPE`) alone; then, for no
    work and each length of :data:`WAKE_WORK_S`, every rank runs rounds of
    that much work and ``sync()`` (a blocking collective), and the slowest
    rank's time per round enters :func:`wake_lag_from_rounds`. The median over
    :data:`ROUNDS` at rank 0, None elsewhere. Each round's three work lengths
    run for about :data:`WAKE_PHASE_S` each, so a few seconds in all."""
    if kernel is None:
        kernel = gemm_kernel(WAKE_GEMM_SHAPE)[0]

    def call_s() -> float:  # one "byte" per call: byte_rate counts calls per second
        return 1.0 / byte_rate(kernel, 1, min_s=0.0, clock=clock)

    lags = []
    for _ in range(ROUNDS):
        per_call = world.comm.bcast(world.on_rank0_alone(call_s, "the wake-up lag's GEMM alone"),
                                    root=0)
        round_s = {}
        for work in (0.0, *WAKE_WORK_S):
            calls = round(work / per_call)
            rounds = max(4, round(WAKE_PHASE_S / (world.size * work + 2e-3)))
            sync()
            start = clock()
            for _ in range(rounds):
                run_seconds(kernel, calls, clock)
                sync()
            took = world.comm.gather((clock() - start) / rounds, root=0)
            if world.rank == 0:
                round_s[calls * per_call] = max(took)
        if world.rank == 0:
            lags.append(wake_lag_from_rounds(round_s))
    return statistics.median(lags) if world.rank == 0 else None


def measure_contention(world, llc_bytes: int,
                       sync: Callable[[], object] | None = None) -> Contention | None:
    """Measure :class:`Contention` on the ranks of ``world`` (a
    :class:`~perfmodel.world.World`; every rank calls this together, at
    its own torch threads). Each of :data:`ROUNDS` rounds times the triad
    (:func:`perfmodel.device.probe.triad_kernel`) and then the GEMM
    (:func:`gemm_kernel`) on rank 0 alone while the others wait, and
    :data:`SEGMENTS` segments of the same calls on every rank at once
    (:func:`side_by_side`): k and c are the medians over segments of
    :func:`slowest_rank_slowdown` (c with the GEMM's memory part taken out).
    Returns the figures at rank 0 (k and c the medians over rounds; the
    bandwidths those of the round of median k), None elsewhere. About 3 seconds.
    With ``sync`` (a blocking collective on every rank; pass it when the ranks'
    threads outnumber the cores), also the wake-up lag (:func:`measure_wake_lag`,
    a few seconds more); without it the lag is 0."""
    from perfmodel.device.probe import triad_kernel

    triad, triad_bytes = triad_kernel(llc_bytes)
    gemm, gemm_bytes = gemm_kernel()
    rounds, computes = [], []
    for _ in range(ROUNDS):
        alone_Bps, k = side_by_side(world, triad, triad_bytes, "the triad")
        gemm_alone, gemm_slowdown = side_by_side(world, gemm, gemm_bytes, "the GEMM")
        if world.rank == 0:
            rounds.append(Contention(k, alone_Bps, alone_Bps / k, world.size))
            computes.append(compute_slowdown(gemm_slowdown, min(0.99, gemm_alone / alone_Bps),
                                             k))
    lag = None if sync is None else measure_wake_lag(world, sync)
    if world.rank != 0:
        return None
    median = sorted(rounds, key=lambda c: c.slowdown)[len(rounds) // 2]
    return replace(median, compute_slowdown=statistics.median(computes), wake_lag_s=lag or 0.0)


def side_by_side(world, kernel: Callable[[], object], moved_bytes: int, what: str,
                 clock: Callable[[], float] = time.perf_counter
                 ) -> tuple[float | None, float | None]:
    """``kernel``'s bandwidth on rank 0 alone (B/s, :func:`byte_rate`, the others
    waiting), and how much slower the same calls run on the slowest rank with
    every rank running them at once: the median over :data:`SEGMENTS` segments
    of about ``PHASE_S / SEGMENTS`` (alone) each, every one started at a
    sleeping barrier (:func:`slowest_rank_slowdown`). Both at rank 0 (None
    elsewhere). The slowest rank, as a collective waits for it: ranks that
    time-share the cores do not get equal shares over tens of ms."""
    alone_Bps = world.on_rank0_alone(lambda: byte_rate(kernel, moved_bytes, clock=clock),
                                     f"{what} alone")
    call_s = None if alone_Bps is None else moved_bytes / alone_Bps
    calls = world.comm.bcast(None if call_s is None else
                             max(2, round(PHASE_S / SEGMENTS / call_s)), root=0)
    segments = []
    for _ in range(SEGMENTS):
        world.barrier(f"{what} side by side")
        took = run_seconds(kernel, calls, clock)  # every rank at once, from the barrier above
        world.barrier(f"{what} side by side, done")  # none spins in the gather
        segments.append(world.comm.gather(took, root=0))
    if world.rank != 0:
        return None, None
    return alone_Bps, statistics.median(slowest_rank_slowdown(times, calls * call_s)
                                        for times in segments)
