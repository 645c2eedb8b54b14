"""Timing collectives across the ranks of a :class:`~perfmodel.world.World`.

Timing (:func:`measure_collective`): before every sample the ranks meet at a
torch.distributed barrier; each rank times its own calls; a sample is the *maximum* over ranks
of the per-rank durations (the collective is done when its slowest rank is).
PARAM instead times a loop of iterations per rank after one barrier and reports
p50/p95 across ranks; per-sample maxima give the distribution a synchronous
training step sees. Rank 0 gathers the per-rank samples with ``comm.gather`` and
decides, for every rank, when to stop (same rules as :mod:`perfmodel.measure.timer`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Mapping

from perfmodel.world import OUTPUT_DRAIN_S, REPORT_GRACE_S, World, collective_label

#: Warm-up calls per replicate (the first pays one-off costs; the rest size blocks).
WARMUP_CALLS = 3
#: Shortest block of calls one sample times (s), as in :class:`perfmodel.measure.timer.Timer`.
MIN_BLOCK_S = 2e-5
#: Most samples per replicate.
MAX_SAMPLES = 2000
#: Calls timed under compute load per replicate, after one warm-up call: as many
#: as fit in :data:`LOADED_BUDGET_S` at the warm-up's pace, within these bounds
#: (see :func:`loaded_calls`). A short loaded call's time comes in steps of the
#: scheduler's slice (a few milliseconds), so one needs many (measured steps:
#: docs/journal/2026-11-27-figures-from-docstrings.md).
LOADED_CALLS = (9, 41)
#: A loaded call at least this long (s) spans dozens of scheduler slices, and
#: :data:`LOADED_CALLS_LONG` of them are enough; timing as many of these as of
#: short calls would make a large message's config take tens of seconds.
LONG_LOADED_S = 0.1
LOADED_CALLS_LONG = 3
#: Time the loaded calls of one replicate aim to take (s).
LOADED_BUDGET_S = 0.3
#: Shape of the compute unit a rank repeats while its collective runs under load:
#: (M, K, N) of a float32 matrix product, small enough (well under a millisecond
#: on one CPU thread) that the completion is seen within one product of when it
#: happens.
LOAD_UNIT_MKN = (64, 256, 256)


# -- measuring ----------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveResult:
    """One replicate of a collective, at rank 0: the measurement (its samples are
    per-sample maxima over ranks, seconds), each rank's own median (s) and each
    rank's process CPU seconds per call over the sampled blocks."""

    measurement: Any  # perfmodel.measure.timer.Measurement
    rank_median_s: tuple[float, ...]
    rank_cpu_s: tuple[float, ...] = ()
    #: Mean over calls of the slowest rank's time under compute load (s): a
    #: mean, since an iteration pays the long tail of slow calls too; None
    #: where it is not measured (see :func:`measures_loaded`).
    loaded_s: float | None = None


def measure_collective(case, world: World, settings, replicates: int = 2
                       ) -> list[CollectiveResult]:
    """Measure the collective ``case`` ``replicates`` times on every rank of
    ``world`` (all ranks must call this together). Returns the results on rank 0,
    an empty list elsewhere. ``settings`` is a :class:`perfmodel.measure.bench.TimerSettings`.
    """
    import torch
    import torch.distributed as dist

    from perfmodel.device.probe import usable_cpus
    from perfmodel.ops import get_op

    op = get_op(case.op)
    runner = op.make_runner(case.params, case.dtype, case.direction, world.device)
    sync = torch.cuda.synchronize if world.device.startswith("cuda") else (lambda: None)
    loaded = None
    if measures_loaded(world, torch.get_num_threads(), usable_cpus()):
        issue = op.make_issue(case.params, case.dtype, world.device)

        def loaded() -> list[float] | None:
            return _time_loaded(world, issue, case.op, case.params)

    def time_block(number: int) -> tuple[float, float]:
        """Wall and process CPU seconds of ``number`` calls."""
        sync()
        dist.barrier()  # the collectives' own transport: blocks without spinning
        sync()
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(number):
            runner()
        sync()
        return (time.perf_counter_ns() - start) / 1e9, (time.process_time_ns() - cpu) / 1e9

    try:
        results = [_replicate(world, time_block, settings, loaded) for _ in range(replicates)]
    except Exception as exc:  # a barrier timed out, a peer vanished, ...: end every rank
        world.abort(world.describe_failure(case.op, case.params, exc))
    return [r for r in results if r is not None]


def _replicate(world: World, time_block, settings, loaded=None) -> CollectiveResult | None:
    """One replicate: warm up, agree on a block size, sample, then (with
    ``loaded``) time the calls under compute load; the result at rank 0."""
    import torch

    from perfmodel.measure.timer import block_size

    warm = [time_block(1)[0] for _ in range(WARMUP_CALLS)]
    slowest = _max_over_ranks(world, [min(warm[1:])])
    number = world.comm.bcast(slowest and block_size(slowest[0], MIN_BLOCK_S), root=0)
    result = _sample(world, time_block, number, settings)
    loaded_times = loaded() if loaded is not None else None
    if result is None:
        return None
    samples, per_rank, cpu_per_rank, reason = result
    return CollectiveResult(_measurement(samples, number, reason, torch.get_num_threads()),
                            tuple(float(statistics.median(s)) for s in per_rank),
                            tuple(float(c) for c in cpu_per_rank),
                            statistics.fmean(loaded_times) if loaded_times else None)


def measures_loaded(world: World, threads: int, cores: int) -> bool:
    """Whether this world's collectives are also timed under compute load: on a
    CPU, where gloo's threads share the cores with the ranks' compute (NCCL's
    kernels run on the GPU beside it), when the ranks on this host, ``threads``
    torch threads each, fit on its ``cores`` cores. With more compute threads
    than cores the multi-rank prediction already stretches each rank's host work
    by the time-sharing and charges it the collectives' CPU time, and it does
    not use loaded times there (:func:`perfmodel.e2e.ranks.comm_pricer`)."""
    return (world.device or "").startswith("cpu") and world.local_size * threads <= cores


def _time_loaded(world: World, issue, op: str, params: Mapping[str, int]
                 ) -> list[float] | None:
    """Wall seconds from issue to completion of :func:`loaded_calls` calls (after
    one warm-up, which sets their number) while every rank's own thread keeps
    computing (repeated :data:`LOAD_UNIT_MKN` products, as a rank's backward
    does while DDP's all-reduce runs); per call the slowest rank's, at rank 0
    (None elsewhere).
    A call not complete within the world's timeout aborts the run like any.

    A helper thread waits for the work handle (gloo's reduce_scatter handle never
    reports ``is_completed()`` and has no future) and the computing thread
    stops when it has."""
    import threading

    import torch
    import torch.distributed as dist

    m, k, n = LOAD_UNIT_MKN
    a, b = torch.ones(m, k), torch.ones(k, n)
    times: list[float] = []
    calls = None
    while calls is None or len(times) < calls:
        dist.barrier()
        done = threading.Event()

        def wait_for(work) -> None:
            world.wait(work, op, params, phase="loaded")
            done.set()

        start = time.perf_counter()
        waiter = threading.Thread(target=wait_for, args=(issue(),), daemon=True)
        waiter.start()
        deadline = start + world.timeout_s + REPORT_GRACE_S + OUTPUT_DRAIN_S + 1.0
        while not done.is_set():
            torch.mm(a, b)
            if time.perf_counter() > deadline:  # the waiter is stuck past its own timeout
                world.abort(f"{collective_label(op, params)} under compute load: not "
                            f"complete within {world.timeout_s:g} s")
        elapsed = time.perf_counter() - start
        waiter.join()
        if calls is None:
            slowest = _max_over_ranks(world, [elapsed])
            calls = world.comm.bcast(slowest and loaded_calls(slowest[0]), root=0)
        else:
            times.append(elapsed)
    return _max_over_ranks(world, times)


def loaded_calls(warm_s: float) -> int:
    """How many calls to time under load after a warm-up call of ``warm_s`` (s):
    as many as fit in :data:`LOADED_BUDGET_S`, within :data:`LOADED_CALLS`, or
    :data:`LOADED_CALLS_LONG` for calls of :data:`LONG_LOADED_S` or more."""
    if warm_s >= LONG_LOADED_S:
        return LOADED_CALLS_LONG
    low, high = LOADED_CALLS
    return min(high, max(low, math.ceil(LOADED_BUDGET_S / max(warm_s, 1e-9))))


def _max_over_ranks(world: World, values: list[float]) -> list[float] | None:
    """Element-wise maxima of every rank's ``values``, at rank 0 (None elsewhere)."""
    gathered = world.comm.gather(values, root=0)
    return None if gathered is None else [max(v) for v in zip(*gathered)]


def _sample(world: World, time_block, number: int, settings):
    """Sample in chunks until rank 0 calls a stop; (maxima, per-rank samples,
    per-rank CPU seconds per call, stop reason) at rank 0, None elsewhere."""
    from perfmodel.measure.timer import ci_is_tight

    maxima: list[float] = []
    per_rank: list[list[float]] | None = None
    start = time.perf_counter()
    chunk, taken, cpu_s = settings.min_samples, 0, 0.0
    while True:
        blocks = [time_block(number) for _ in range(chunk)]
        local = [wall / number for wall, _ in blocks]
        cpu_s += sum(cpu for _, cpu in blocks)
        taken += chunk
        gathered = world.comm.gather(local, root=0)
        reason = None
        if world.rank == 0:
            per_rank = [p + g for p, g in zip(per_rank, gathered)] if per_rank else gathered
            maxima.extend(max(v) for v in zip(*gathered))
            if ci_is_tight(sorted(maxima), settings.target_rel_ci):
                reason = "ci"
            elif taken >= MAX_SAMPLES:
                reason = "max_samples"
            elif time.perf_counter() - start > settings.budget_s:
                reason = "budget"
        reason = world.comm.bcast(reason, root=0)
        if reason is not None:
            cpu_per_rank = world.comm.gather(cpu_s / (taken * number), root=0)
            return (maxima, per_rank, cpu_per_rank, reason) if world.rank == 0 else None
        chunk = max(1, min(MAX_SAMPLES - taken, math.ceil(taken / 8)))  # same on every rank


def _measurement(samples: list[float], number: int, reason: str, threads: int):
    from perfmodel.measure.timer import Measurement

    return Measurement.from_samples(samples, number=number, warmup_n=WARMUP_CALLS,
                                    stop_reason=reason, timer="perf_counter", cache="hot",
                                    threads=threads)


def collective_record(case, result: CollectiveResult, replicate: int, env: dict) -> dict:
    """The store record of one replicate: a ``measurement`` record plus
    ``latency_p95_s`` (s), ``algbw_Bps`` and ``busbw_Bps`` (B/s, from the median),
    ``rank_median_s`` (each rank's own median, s), ``rank_cpu_s`` (each rank's
    process CPU seconds per call: what :data:`perfmodel.ops.collective.HOST_CPU`
    predictors are fitted on) and, where measured, ``loaded_s`` (the time under
    compute load, s: what :data:`perfmodel.ops.collective.LOADED` predictors are
    fitted on)."""
    import numpy as np

    from perfmodel.measure.bench import measurement_record
    from perfmodel.ops import get_op

    op, m = get_op(case.op), result.measurement
    record = measurement_record(case, m, replicate, env)
    algbw = op.algo_bytes(case.params) / m.median_s
    record.update(latency_p95_s=float(np.percentile(m.samples_s, 95)), algbw_Bps=algbw,
                  busbw_Bps=algbw * op.bus_factor(case.params["world_size"]),
                  rank_median_s=list(result.rank_median_s),
                  rank_cpu_s=list(result.rank_cpu_s))
    if result.loaded_s is not None:
        record["loaded_s"] = result.loaded_s
    return record
