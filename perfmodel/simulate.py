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
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


def simulate(tasks: list[SimTask], keep_timeline: bool = True) -> SimResult:
    """Simulate ``tasks`` in order; see the module docstring."""
    cpu = 0.0
    host_busy = 0.0
    stream_free: dict[int, float] = {}
    ready: dict[int, float] = {}  # tensor id -> device time its producer kernel ends
    breakdown: dict[str, float] = {}
    regions: dict[str, float] = {}
    intervals: list[tuple[float, float]] = []
    timeline: list[tuple[str, str, float, float]] = []
    for task in tasks:
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
        else:
            n = len(task.kernels)
            end = 0.0
            for i, (stream, dur) in enumerate(task.kernels):
                launch = start + task.host_s * (i + 1) / (n + 1)
                begin = max(launch, stream_free.get(stream, 0.0), deps)
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
        if task.sync and stream_free:
            cpu = max(cpu, max(stream_free.values()))
    total = max([cpu, *stream_free.values()])
    active = _union_length(intervals)
    return SimResult(total, breakdown, regions, host_busy, active,
                     total - active if intervals else 0.0, timeline)


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
