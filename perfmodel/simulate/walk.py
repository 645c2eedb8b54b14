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

Ranks that share one host's cores (gloo's threads taking the host's time, a
computing host slowing its collectives, the wake-up lag) are modelled behind one
:class:`~perfmodel.simulate.host.HostModel`, which :func:`simulate` consults
when given one (:meth:`~perfmodel.simulate.host.HostModel.walk`); without one
the walk is the single-rank walk above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from perfmodel.simulate.host import HostModel, HostWalk

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

    The walk's own output, not a prediction's result type: it holds the clocks'
    state that :func:`simulate_ranks` iterates on (when each collective could
    start, the host's waits) and knows nothing of the trace or the fit, so it
    has no coverage, unmodelled nodes or ranks. Callers get an
    :class:`~perfmodel.simulate.result.IterationPrediction`, which keeps the walk
    it came from as ``sim``.
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
             host: HostModel | None = None) -> SimResult:
    """Simulate ``tasks`` in order (see the module docstring); ``host``: the cores
    and collectives shared with other ranks (:mod:`~perfmodel.simulate.host`)."""
    shared = None if host is None else host.walk()
    comm_ready: dict[int, float] = {}  # tensor id -> end of the collective that wrote it
    collective_ready: list[float] = []
    waits: list[tuple[float, float]] = []
    cpu = host_busy = 0.0
    stream_free: dict[int, float] = {}
    ready: dict[int, float] = {}  # tensor id -> device time its producer kernel ends
    breakdown: dict[str, float] = {}
    regions: dict[str, float] = {}
    intervals: list[tuple[float, float]] = []
    timeline: list[tuple[str, str, float, float]] = []
    for task in tasks:
        if comm_ready and not task.kernels:
            until = max([cpu, *(comm_ready.get(t, 0.0) for t in task.inputs)])
            cpu = _wait(waits, cpu, until, shared, host_busy)
        start = cpu
        cpu += task.host_s
        host_busy += task.host_s
        if keep_timeline and task.host_s > 0:
            timeline.append(("cpu", task.name, start, cpu))
        deps = max((ready.get(t, 0.0) for t in task.inputs), default=0.0)
        if not task.kernels:
            _account(breakdown, regions, task, task.host_s)
            for t in task.outputs:  # a host-only op (a view, say) passes readiness on
                ready[t] = deps
                comm_ready.pop(t, None)  # the host has waited, or the id was reused
        else:
            n = len(task.kernels)
            for i, (stream, dur) in enumerate(task.kernels):
                launch = cpu if task.collective else start + task.host_s * (i + 1) / (n + 1)
                begin = max(launch, stream_free.get(stream, 0.0), deps)
                if task.collective:
                    collective_ready.append(begin)
                    if shared is not None:  # started with the other ranks, on shared cores
                        begin, dur, host_s = shared.collective(len(collective_ready) - 1, task,
                                                               begin, dur)
                        cpu += host_s
                end = begin + dur
                stream_free[stream] = end
                intervals.append((begin, end))
                _account(breakdown, regions, task, dur)
                if keep_timeline:
                    timeline.append((f"stream {stream}", task.name, begin, end))
            for t in task.outputs:
                ready[t] = end
                if task.collective:
                    comm_ready[t] = end
        if task.sync and stream_free:
            cpu = _wait(waits, cpu, max(cpu, max(stream_free.values())), shared, host_busy)
    total = max([cpu, *stream_free.values()])
    active = _union_length(intervals)
    return SimResult(total, breakdown, regions, host_busy, active,
                     total - active if intervals else 0.0, timeline, collective_ready,
                     waits, cpu)


def _wait(waits: list[tuple[float, float]], now: float, until: float,
          shared: HostWalk | None, busy_s: float) -> float:
    """Record a host wait from ``now`` to ``until`` (when later, and later still
    where the ``shared`` host wakes it late; ``busy_s``: its host seconds so
    far); returns the host clock."""
    if shared is not None:
        until = shared.wake(now, until, busy_s)
    if until > now:
        waits.append((now, until))
    return max(now, until)


def _account(breakdown: dict[str, float], regions: dict[str, float], task: SimTask,
             seconds: float) -> None:
    """Add ``seconds`` of ``task`` to its category and its region."""
    _add(breakdown, task.category, seconds)
    if task.region:
        _add(regions, task.region, seconds)


@dataclass
class MultiRankResult:
    """The simulated ranks of one iteration: ``total_s`` is the slowest rank's
    (s); ``collective_start_s`` when each collective started on every rank (s)."""

    total_s: float
    ranks: list[SimResult]
    collective_start_s: list[float]


def simulate_ranks(ranks: Sequence[list[SimTask]], keep_timeline: bool = True,
                   host: HostModel | None = None) -> MultiRankResult:
    """Simulate one task list per rank with the collectives synchronised (see
    the module docstring), on a host shared as ``host`` says (None: nothing
    but the collectives' loaded times, see :mod:`perfmodel.simulate.host`);
    ValueError when the ranks issue different numbers of collectives.

    Each rank is simulated on its own with a lower bound on every collective's
    start, and the bounds are raised to the latest rank's start until they stop
    changing. Starts only grow, and the n-th collective is settled once the
    first n-1 are, so at most one round per collective (plus one) is needed.
    With loaded times the durations are iterated with the starts, up to
    :data:`MAX_ROUNDS_PER_COLLECTIVE` rounds per collective (a bound, not the
    usual count: the multi-rank workloads settle in a few rounds in all).
    """
    counts = [sum(1 for t in tasks if t.collective) for tasks in ranks]
    if len(set(counts)) > 1:
        raise ValueError(f"ranks issue different numbers of collectives: {counts}")
    host = host or HostModel()
    n = counts[0] if counts else 0
    colls = [[t for t in tasks if t.collective] for tasks in ranks]
    loaded = any(t.loaded_s is not None for c in colls for t in c)
    starts: list[float] = [0.0] * n
    durations: list[float] = []
    for _ in range(MAX_ROUNDS_PER_COLLECTIVE * n + 1):
        results = [simulate(tasks, False, host.synced(starts, durations)) for tasks in ranks]
        latest = [max(r.collective_ready_s[k] for r in results) for k in range(n)]
        settled = latest == starts
        starts = latest
        if loaded:
            now = host.loaded_durations(colls, results, starts)
            settled = settled and len(now) == len(durations) and all(
                abs(a - b) <= _SETTLED_S for a, b in zip(now, durations))
            durations = now
        if settled:
            break
    results = [simulate(tasks, keep_timeline, host.synced(starts, durations)) for tasks in ranks]
    return MultiRankResult(max((r.total_s for r in results), default=0.0), results, starts)


#: Rounds of :func:`simulate_ranks` allowed per collective: one settles its start
#: (starts only grow), more its duration under load (which moves the host's waits).
MAX_ROUNDS_PER_COLLECTIVE = 3
#: Change in a collective's duration below which it is settled (s).
_SETTLED_S = 1e-9


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
