"""Walk a task list with a host clock and one clock per device stream.

Each :class:`SimTask` occupies the host for ``host_s`` and launches its
``kernels`` (stream, seconds) evenly spread over that host time. A kernel
starts at the latest of: its launch, the moment its stream is free, and the
moment every tensor it reads is ready (tensor dependencies across streams).
A ``sync`` task makes the host wait until every stream is idle. On a CPU
device tasks have no kernels, so the walk reduces to the host running them in
order: the same code path serves both.

The result is the iteration time (the later of the host and the last stream),
a breakdown by category, device-active and idle time, and the timeline.

Several ranks (:func:`simulate_ranks`): a ``collective`` task runs its kernel
on the rank's communication stream (:data:`COMM_STREAM`); the n-th collective
of every rank is the same collective, and it starts on all ranks when the last
of them can start it (issued, stream free, inputs ready), so it also ends at
the same time everywhere. A host-only task that reads a tensor a collective
wrote waits for that collective (gloo's ``work.wait()``: on a CPU a rank's
host blocks; a task with kernels waits through its input readiness anyway).
The predicted iteration is the slowest rank's.

Collectives that need the host's cores. On a GPU a collective runs on the
device (NCCL kernels) and overlaps host work for free. On a CPU, gloo's worker
threads copy and reduce the buffers on the same cores the ranks compute on,
but only for part of a collective's wall time: the rest is waiting for the
peers. A collective task's ``cpu_s`` is that CPU part (None: its whole time).
When the ranks' compute threads already fill the cores, every second of it is
a second the rank's host does not compute: ``comm_host_share`` (0 to 1) of it
is added to the host clock when the collective is issued (0: free overlap);
see :func:`perfmodel.e2e.ranks.comm_host_share` for how it is chosen. The host
waits for the rest of the collective only where it reads its output.

And the reverse: a computing host slows its collectives. Gloo's worker thread
must win its core back from the rank's compute thread at every step of the
algorithm, so a collective that runs while its rank computes takes its
``loaded_s`` (measured so; None: no slowdown) rather than its idle time. A
collective progresses at 1 / ``loaded_s`` of its work per second while its
rank's host is busy and at 1 / (its idle time) while the host waits (for it or
for anything else) or is done (:func:`progress_end`); it ends when the slowest
rank's share of the work is done. :func:`simulate_ranks` finds these durations
together with the synchronised starts.

Ranks that outnumber the cores also lose time each time they wake from a
collective: the cores go to some of the woken ranks, and the others wait for one
(see :mod:`perfmodel.measure.contention`). A host that waits for a collective (for its
output or at a sync) runs again ``wake_lag_s`` after it ends, or a share of that
when the host computed for less than ``wake_ramp_s`` since it last woke (the
ranks that took the cores give them up sooner when they block sooner).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

#: Stream id of a rank's communication stream (collectives).
COMM_STREAM = -1


@dataclass
class SimTask:
    """One task to simulate. Times in seconds."""

    name: str
    category: str
    host_s: float
    kernels: list[tuple[int, float]] = field(default_factory=list)
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    sync: bool = False
    region: str | None = None
    collective: bool = False  # kernels on COMM_STREAM, issued at the end of host_s
    #: A collective's host CPU seconds (its backend's threads); None: its whole time.
    cpu_s: float | None = None
    #: A collective's seconds while its rank's host computes throughout; None:
    #: the same as its kernel's (idle) seconds.
    loaded_s: float | None = None


@dataclass
class SimResult:
    """Predicted iteration time and its breakdown (seconds).

    ``breakdown_s`` sums host time per category for host-only tasks and
    device time per category for kernels; ``timeline`` holds
    ``(lane, name, start_s, end_s)`` with lane ``"cpu"`` or ``"stream <n>"``.
    """

    total_s: float
    breakdown_s: dict[str, float]
    regions_s: dict[str, float]
    host_busy_s: float
    device_active_s: float
    device_idle_s: float
    timeline: list[tuple[str, str, float, float]]
    #: Per collective, in order: when this rank alone could start it (s).
    collective_ready_s: list[float] = field(default_factory=list)
    #: When the host waited (for a collective's output or a sync), in order:
    #: (start, end) in s; after its last task it is idle too.
    host_waits_s: list[tuple[float, float]] = field(default_factory=list)
    #: When the host finished its last task (s).
    host_end_s: float = 0.0


def simulate(tasks: list[SimTask], keep_timeline: bool = True,
             collective_start_s: Sequence[float] = (), comm_host_share: float = 0.0,
             collective_s: Sequence[float] = (), wake_lag_s: float = 0.0,
             wake_ramp_s: float = 0.0) -> SimResult:
    """Simulate ``tasks`` in order; see the module docstring. The n-th
    collective starts no earlier than ``collective_start_s[n]`` when given (s)
    and lasts ``collective_s[n]`` when given (s; otherwise its kernel's time);
    ``comm_host_share`` of each collective's CPU time is charged to the host;
    a host that waited for a collective runs again up to ``wake_lag_s`` (s)
    after it ends, the whole lag after ``wake_ramp_s`` (s) of host work since it
    last woke (see the module docstring)."""
    if not 0.0 <= comm_host_share <= 1.0:
        raise ValueError(f"comm_host_share must be in [0, 1], got {comm_host_share!r}")
    if not (wake_lag_s >= 0.0 and wake_ramp_s >= 0.0):
        raise ValueError(f"the wake-up lag and its ramp must be >= 0 s, got {wake_lag_s!r} "
                         f"and {wake_ramp_s!r}")
    comm_ready: dict[int, float] = {}  # tensor id -> end of the collective that wrote it
    collective_ready: list[float] = []
    waits: list[tuple[float, float]] = []
    cpu = 0.0
    host_busy = 0.0
    stream_free: dict[int, float] = {}
    ready: dict[int, float] = {}  # tensor id -> device time its producer kernel ends
    breakdown: dict[str, float] = {}
    regions: dict[str, float] = {}
    intervals: list[tuple[float, float]] = []
    timeline: list[tuple[str, str, float, float]] = []
    woke_busy = 0.0  # host_busy when the host last woke from a collective

    def wake(until: float) -> float:  # when a host that waits until `until` runs again
        nonlocal woke_busy
        if until > cpu:
            if wake_lag_s > 0.0:
                ramp = 1.0 if wake_ramp_s <= 0.0 else min(1.0, (host_busy - woke_busy)
                                                          / wake_ramp_s)
                until += wake_lag_s * ramp
            woke_busy = host_busy
        return until

    for task in tasks:
        if comm_ready and not task.kernels:
            cpu = _wait(waits, cpu, wake(max([cpu, *(comm_ready.get(t, 0.0)
                                                    for t in task.inputs)])))
        start = cpu
        cpu += task.host_s
        host_busy += task.host_s
        if keep_timeline and task.host_s > 0:
            timeline.append(("cpu", task.name, start, cpu))
        deps = max((ready.get(t, 0.0) for t in task.inputs), default=0.0)
        if not task.kernels:
            _add(breakdown, task.category, task.host_s)
            if task.region:
                _add(regions, task.region, task.host_s)
            for t in task.outputs:  # a host-only op (a view, say) passes readiness on
                ready[t] = deps
                comm_ready.pop(t, None)  # the host has waited, or the id was reused
        else:
            n = len(task.kernels)
            end = 0.0
            for i, (stream, dur) in enumerate(task.kernels):
                launch = cpu if task.collective else start + task.host_s * (i + 1) / (n + 1)
                begin = max(launch, stream_free.get(stream, 0.0), deps)
                if task.collective:
                    n_coll = len(collective_ready)
                    collective_ready.append(begin)
                    if n_coll < len(collective_start_s):
                        begin = max(begin, collective_start_s[n_coll])
                    # gloo's threads take the cores for the collective's CPU time
                    cpu += comm_host_share * (dur if task.cpu_s is None else task.cpu_s / n)
                    if n_coll < len(collective_s):
                        dur = collective_s[n_coll]
                end = begin + dur
                stream_free[stream] = end
                intervals.append((begin, end))
                _add(breakdown, task.category, dur)
                if task.region:
                    _add(regions, task.region, dur)
                if keep_timeline:
                    timeline.append((f"stream {stream}", task.name, begin, end))
            for t in task.outputs:
                ready[t] = end
                if task.collective:
                    comm_ready[t] = end
        if task.sync and stream_free:
            cpu = _wait(waits, cpu, wake(max(cpu, max(stream_free.values()))))
    total = max([cpu, *stream_free.values()])
    active = _union_length(intervals)
    return SimResult(total, breakdown, regions, host_busy, active,
                     total - active if intervals else 0.0, timeline, collective_ready,
                     waits, cpu)


def _wait(waits: list[tuple[float, float]], now: float, until: float) -> float:
    """Record a host wait from ``now`` to ``until`` (when later); returns the host clock."""
    if until > now:
        waits.append((now, until))
    return max(now, until)


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


@dataclass
class MultiRankResult:
    """The simulated ranks of one iteration: ``total_s`` is the slowest rank's
    (s); ``collective_start_s`` when each collective started on every rank (s)."""

    total_s: float
    ranks: list[SimResult]
    collective_start_s: list[float]


def simulate_ranks(ranks: Sequence[list[SimTask]], keep_timeline: bool = True,
                   comm_host_share: float = 0.0, wake_lag_s: float = 0.0,
                   wake_ramp_s: float = 0.0) -> MultiRankResult:
    """Simulate one task list per rank with the collectives synchronised (see
    the module docstring; ``comm_host_share``, ``wake_lag_s`` and
    ``wake_ramp_s`` as for :func:`simulate`);
    ValueError when the ranks issue different numbers of collectives.

    Each rank is simulated on its own with a lower bound on every collective's
    start, and the bounds are raised to the latest rank's start until they stop
    changing. Starts only grow, and the n-th collective is settled once the
    first n-1 are, so at most one round per collective (plus one) is needed.
    With loaded times the durations are iterated with the starts, up to
    :data:`MAX_ROUNDS_PER_COLLECTIVE` rounds per collective (the multi-rank
    workloads here settle in 4 or 5 rounds in all).
    """
    counts = [sum(1 for t in tasks if t.collective) for tasks in ranks]
    if len(set(counts)) > 1:
        raise ValueError(f"ranks issue different numbers of collectives: {counts}")
    n = counts[0] if counts else 0
    colls = [[t for t in tasks if t.collective] for tasks in ranks]
    loaded = any(t.loaded_s is not None for c in colls for t in c)
    starts: list[float] = [0.0] * n
    durations: list[float] = []
    for _ in range(MAX_ROUNDS_PER_COLLECTIVE * n + 1):
        results = [simulate(tasks, False, starts, comm_host_share, durations, wake_lag_s,
                            wake_ramp_s) for tasks in ranks]
        latest = [max(r.collective_ready_s[k] for r in results) for k in range(n)]
        settled = latest == starts
        starts = latest
        if loaded:
            now = _loaded_durations(colls, results, starts)
            settled = settled and len(now) == len(durations) and all(
                abs(a - b) <= _SETTLED_S for a, b in zip(now, durations))
            durations = now
        if settled:
            break
    results = [simulate(tasks, keep_timeline, starts, comm_host_share, durations, wake_lag_s,
                        wake_ramp_s) for tasks in ranks]
    return MultiRankResult(max((r.total_s for r in results), default=0.0), results, starts)


#: Rounds of :func:`simulate_ranks` allowed per collective: one settles its start
#: (starts only grow), more its duration under load (which moves the host's waits).
MAX_ROUNDS_PER_COLLECTIVE = 3
#: Change in a collective's duration below which it is settled (s).
_SETTLED_S = 1e-9


def _loaded_durations(colls: list[list[SimTask]], results: list[SimResult],
                      starts: list[float]) -> list[float]:
    """Each collective's duration given every rank's host busy and waiting times
    of the last round: until the slowest rank's share of it is done."""
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


def _add(table: dict[str, float], key: str, value: float) -> None:
    table[key] = table.get(key, 0.0) + value


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def critical_path(tasks: list[SimTask]) -> float:
    """Longest chain of dependent work (s): host tasks depend on every earlier
    host task (one thread); kernels depend on their stream's previous kernel
    and on the producers of their input tensors. A lower bound of
    :func:`simulate`'s total."""
    host = 0.0
    stream_end: dict[int, float] = {}
    ready: dict[int, float] = {}
    longest = 0.0
    for task in tasks:
        host += task.host_s
        deps = max((ready.get(t, 0.0) for t in task.inputs), default=0.0)
        end = deps
        for stream, dur in task.kernels:
            end = max(stream_end.get(stream, 0.0), deps) + dur
            stream_end[stream] = end
        for t in task.outputs:
            ready[t] = end
        longest = max(longest, host, end)
    return longest
