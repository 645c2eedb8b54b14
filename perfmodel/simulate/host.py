"""Ranks that share one host's cores: what the single-rank walk asks of them.

:func:`perfmodel.simulate.walk.simulate` walks one rank's tasks as if the host
were its own. A :class:`HostModel` holds everything that changes when ranks
share the host's cores, and the walk consults it through one hook,
:meth:`HostModel.walk`: one :class:`HostWalk` per walk, asked when the rank
issues a collective and when its host runs again after a wait.

Collectives that need the host's cores. On a GPU a collective runs on the
device (NCCL kernels) and overlaps host work for free. On a CPU, gloo's worker
threads copy and reduce the buffers on the same cores the ranks compute on,
but only for part of a collective's wall time: the rest is waiting for the
peers. A collective task's ``cpu_s`` is that CPU part (None: its whole time).
When the ranks' compute threads already fill the cores, every second of it is
a second the rank's host does not compute: ``comm_host_share`` (0 to 1) of it
is added to the host clock when the collective is issued (0: free overlap;
:func:`comm_host_share` chooses it). The host waits for the rest of the
collective only where it reads its output.

And the reverse: a computing host slows its collectives. Gloo's worker thread
must win its core back from the rank's compute thread at every step of the
algorithm, so a collective that runs while its rank computes takes its
``loaded_s`` (measured so; None: no slowdown) rather than its idle time. A
collective progresses at 1 / ``loaded_s`` of its work per second while its
rank's host is busy and at 1 / (its idle time) while the host waits (for it or
for anything else) or is done (:func:`progress_end`); it ends when the slowest
rank's share of the work is done (:meth:`HostModel.loaded_durations`).
:func:`perfmodel.simulate.walk.simulate_ranks` finds these durations together
with the synchronised starts, and hands both to each rank's walk
(:meth:`HostModel.synced`).

Ranks that outnumber the cores also lose time each time they wake from a
collective: the cores go to some of the woken ranks, and the others wait for
one (see :mod:`perfmodel.measure.contention`). A host that waits for a
collective (for its output or at a sync) runs again ``wake_lag_s`` after it
ends, or a share of that when the host computed for less than ``wake_ramp_s``
since it last woke (the ranks that took the cores give them up sooner when they
block sooner).

Before the walk, the same model prices the rank's work (:meth:`HostModel.op_seconds`,
:meth:`HostModel.slow_host_work`): an op's fitted time is moved by the host's
``drift`` since the fit, then slowed by the ``contention`` beside the other
ranks (without one, by ``cpu_share``); other host work and a collective's CPU
time run ``cpu_share`` times slower (the contention's compute slowdown where
measured, else :func:`oversubscription`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from perfmodel.measure.contention import WAKE_WORK_S, Contention
from perfmodel.measure.drift import HostDrift, OpDrift

if TYPE_CHECKING:
    from perfmodel.trace.graph import Task


@dataclass(frozen=True)
class HostModel:
    """How ranks that share one host's cores slow each other (see the module
    docstring); the defaults change nothing.

    ``cpu_share`` (>= 1): how much slower host work runs beside the other ranks;
    ``comm_host_share`` (0 to 1): the share of a collective's CPU time charged
    to its rank's host; ``wake_lag_s`` (s, >= 0): how much later a host that
    waited for a collective runs again, whole after ``wake_ramp_s`` (s, >= 0) of
    host work since it last woke; ``contention`` and ``drift`` price ops (None:
    ``cpu_share`` alone, and the host as fast as at the fit). Set by
    :func:`perfmodel.simulate.walk.simulate_ranks` for each walk: the n-th
    collective starts no earlier than ``collective_start_s[n]`` and lasts
    ``collective_s[n]`` when given (s; otherwise its kernel's time)."""

    cpu_share: float = 1.0
    comm_host_share: float = 0.0
    wake_lag_s: float = 0.0
    wake_ramp_s: float = 0.0
    contention: Contention | None = None
    drift: HostDrift | OpDrift | None = None
    collective_start_s: tuple[float, ...] = ()
    collective_s: tuple[float, ...] = ()

    def __post_init__(self):
        if not 0.0 <= self.comm_host_share <= 1.0:
            raise ValueError(f"comm_host_share must be in [0, 1], got {self.comm_host_share!r}")
        if not (self.wake_lag_s >= 0.0 and self.wake_ramp_s >= 0.0):
            raise ValueError(f"the wake-up lag and its ramp must be >= 0 s, got "
                             f"{self.wake_lag_s!r} and {self.wake_ramp_s!r}")

    @classmethod
    def of_ranks(cls, world_size: int, threads_per_rank: int, cores: int,
                 contention: Contention | None = None,
                 drift: HostDrift | OpDrift | None = None) -> "HostModel":
        """``world_size`` ranks of ``threads_per_rank`` threads on ``cores``
        cores: ``cpu_share`` is the ``contention``'s compute slowdown (None:
        :func:`oversubscription`), the wake-up lag the contention's, whole after
        the shorter of :data:`~perfmodel.measure.contention.WAKE_WORK_S` alone
        (times ``cpu_share``)."""
        share = (oversubscription(world_size, threads_per_rank, cores) if contention is None
                 else contention.compute_slowdown)
        return cls(share, comm_host_share(world_size, threads_per_rank, cores),
                   0.0 if contention is None else contention.wake_lag_s,
                   WAKE_WORK_S[0] * share, contention, drift)

    # -- before the walk: pricing a rank's work ----------------------------------------------

    def op_seconds(self, task: Task, fit_s: float) -> float:
        """Seconds of an op's host ``task`` on this host, predicted ``fit_s`` by
        the fit: moved by the drift, then slowed beside the other ranks."""
        now_s = fit_s if self.drift is None else self.drift.seconds(
            task.op, task.params, task.dtype, task.direction, fit_s)
        return now_s * self.cpu_share if self.contention is None else self.contention.seconds(
            task.op, task.params, task.dtype, task.direction, now_s)

    def slow_host_work(self, task) -> None:
        """Slow a :class:`~perfmodel.simulate.walk.SimTask` that is not an op
        (priced by :meth:`op_seconds`): its host time and, for a collective, its
        CPU time run ``cpu_share`` times slower."""
        task.host_s *= self.cpu_share
        if task.cpu_s is not None:
            task.cpu_s *= self.cpu_share

    # -- the walk's hook ---------------------------------------------------------------------

    def walk(self) -> "HostWalk":
        """What one walk of a rank's tasks consults (one per walk: it keeps
        when the host last woke)."""
        return HostWalk(self)

    def synced(self, collective_start_s: Sequence[float],
               collective_s: Sequence[float]) -> "HostModel":
        """This model with the collectives' starts and durations settled with
        the other ranks (s)."""
        return replace(self, collective_start_s=tuple(collective_start_s),
                       collective_s=tuple(collective_s))

    def loaded_durations(self, colls: list[list], results: list, starts: list[float]
                         ) -> list[float]:
        """Each collective's duration (s) given every rank's collective tasks
        (``colls``, in order) and its host's busy and waiting times in
        ``results`` (:class:`~perfmodel.simulate.walk.SimResult`): until the
        slowest rank's share of it is done, from ``starts``."""
        out = []
        for k, start in enumerate(starts):
            ends = []
            for tasks, r in zip(colls, results):
                task = tasks[k]
                idle = sum(d for _, d in task.kernels)
                loaded = idle if task.loaded_s is None else task.loaded_s
                ends.append(progress_end(start, idle, loaded, r.host_waits_s, r.host_end_s))
            out.append(max(ends) - start)
        return out


class HostWalk:
    """One walk's view of a :class:`HostModel` (:meth:`HostModel.walk`)."""

    def __init__(self, model: HostModel):
        self.model = model
        self.woke_busy_s = 0.0  # the host's busy seconds when it last woke from a wait

    def collective(self, k: int, task, ready_s: float, idle_s: float
                   ) -> tuple[float, float, float]:
        """The ``k``-th collective kernel (of ``task``), which this rank alone
        could start at ``ready_s`` and which takes ``idle_s`` alone: its start
        and its seconds (s), and the host seconds its issue costs."""
        m = self.model
        start = max(ready_s, m.collective_start_s[k]) if k < len(m.collective_start_s) \
            else ready_s
        host_s = m.comm_host_share * (idle_s if task.cpu_s is None
                                      else task.cpu_s / len(task.kernels))
        return start, m.collective_s[k] if k < len(m.collective_s) else idle_s, host_s

    def wake(self, now_s: float, until_s: float, busy_s: float) -> float:
        """When a host that waits at ``now_s`` for something done at ``until_s``
        runs again (s); ``busy_s``: its host seconds so far."""
        if until_s > now_s:
            m = self.model
            if m.wake_lag_s > 0.0:
                ramp = 1.0 if m.wake_ramp_s <= 0.0 else min(1.0, (busy_s - self.woke_busy_s)
                                                            / m.wake_ramp_s)
                until_s += m.wake_lag_s * ramp
            self.woke_busy_s = busy_s
        return until_s


def progress_end(start_s: float, idle_s: float, loaded_s: float,
                 waits_s: Sequence[tuple[float, float]], host_end_s: float) -> float:
    """When a collective started at ``start_s`` ends (s): it does 1 / ``loaded_s``
    of its work per second while the host is busy, 1 / ``idle_s`` while it waits
    (``waits_s``: sorted, disjoint (start, end) intervals) or after
    ``host_end_s``. ``loaded_s`` below ``idle_s`` counts as ``idle_s``."""
    loaded_s = max(loaded_s, idle_s)
    if idle_s <= 0.0:
        return start_s
    left, t = 1.0, start_s  # share of the work left; the time reached
    for idle_from, idle_to in [*waits_s, (host_end_s, math.inf)]:
        if idle_to <= t:
            continue
        for until, seconds in ((idle_from, loaded_s), (idle_to, idle_s)):
            if until <= t:
                continue
            if (until - t) >= left * seconds:
                return t + left * seconds
            left -= (until - t) / seconds
            t = until
    return t  # not reached: the last interval never ends


def oversubscription(world_size: int, threads_per_rank: int, cores: int) -> float:
    """How much slower host work runs when every rank computes at once (>= 1):
    ``world_size x threads_per_rank`` busy threads on ``cores`` cores. The fit
    already runs at ``threads_per_rank`` threads; this is only the time-sharing
    of cores between ranks (4 one-thread ranks on 2 cores: 2)."""
    return max(1.0, world_size * threads_per_rank / cores)


def comm_host_share(world_size: int, threads_per_rank: int, cores: int) -> float:
    """Fraction (0 to 1) of a CPU collective's time charged to its rank's host:
    the share of the ranks' gloo worker threads (one per rank) that find no
    core left free by the ``world_size x threads_per_rank`` compute threads on
    ``cores`` cores. 1 at 2 one-thread ranks on 2 cores; 0 when every rank's
    worker has an idle core of its own.

    And 0 when the compute threads outnumber the cores (4 one-thread ranks on
    2): the workers then wait behind the compute threads for a core at every
    step, so a collective barely moves while its ranks compute (its ``loaded``
    time is many times its idle one) and takes next to no core time from them.
    It runs at its ``loaded`` pace while they compute and at its idle pace once
    they wait (:func:`progress_end`). Charged at issue as well, it over-predicted
    the 4-rank workloads."""
    busy = world_size * threads_per_rank
    if busy > cores:
        return 0.0
    return min(1.0, max(0.0, (busy + world_size - cores) / world_size))
