"""Host-side overheads measured from traces, and the per-device overhead table.

Taxonomy (after the seed work's T1-T5), keys of :attr:`OverheadTable.gaps`:

- ``T1.<parent>.<next>``: the gap between two sibling ops under a parent of
  category ``<parent>`` (``iteration``, ``autograd``, ``optimizer``, ``op``)
  when the next one is of category ``<next>``: Python and module-call
  overhead in the forward, autograd-engine scheduling in the backward;
- ``T2.<parent>``: from the start of an opened parent to its first child;
- ``T3.<parent>``: from its last child's end to its own end;
- ``T4``: one kernel launch (the runtime call), CUDA traces only;
- ``T5``: the gap between consecutive launches of one op, CUDA traces only;
- ``T2.launch`` / ``T3.launch``: op start to first launch, last launch to op
  end, CUDA traces only (from each op task's ``launch_gaps``, less the
  profiler's cost of one op).

Unmodelled nodes are priced per name by a line ``a + b·bytes`` (seconds,
bytes of the distinct tensors the node reads and writes), fitted by least
squares over every traced node of that name when their sizes span at least
a factor of two, otherwise ``b = 1 / bandwidth`` and ``a`` the median of
``duration - bytes·b``; both are floored at 0. A name never traced gets the
median ``a`` of all names and ``1 / bandwidth``.

One table per device, built in memory when a prediction needs it
(:func:`perfmodel.e2e.single.shared_table`), pools the samples of several workloads
(``OverheadSamples``, one file per workload under
``results/<device-key>/overheads/``), so that no workload's
prediction is tuned to itself. A workload's file holds the gaps of its latest
trace and the unmodelled-node samples of its last :data:`LEAF_TRACES` traces
(:func:`with_earlier_leaves`). :func:`table_from_samples` also builds the
per-workload table used to report the "own overheads" error.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from perfmodel.trace.graph import Graph
from perfmodel.plaindata import is_seconds, write_json_atomic

OVERHEADS_SCHEMA = 1
#: Samples kept per key and workload (evenly thinned beyond that).
MAX_SAMPLES = 400
#: Traces of one workload whose unmodelled-node samples its file keeps (see
#: :func:`with_earlier_leaves`).
LEAF_TRACES = 5


@dataclass
class OverheadSamples:
    """Measured overhead samples (seconds) of one workload's trace."""

    workload: str
    gaps: dict[str, list[float]] = field(default_factory=dict)
    leaf: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (s, bytes)


@dataclass(frozen=True)
class OverheadTable:
    """Median overheads (seconds) by key; per unmodelled node name its line
    ``(a s, b s/B)``; ``bandwidth_B_per_s`` prices the bytes of names never
    seen; ``workloads`` are the traces it pools."""

    gaps: dict[str, float]
    leaf: dict[str, tuple[float, float]]
    leaf_default_s: float
    bandwidth_B_per_s: float
    workloads: tuple[str, ...]

    def gap(self, key: str) -> float:
        """The median of ``key``, falling back to its family (``T1.<parent>``
        over every next category, then ``T1``) and to 0 when never measured."""
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            value = self.gaps.get(".".join(parts[:n]))
            if value is not None:
                return value
        return 0.0

    def leaf_cost(self, name: str, nbytes: float) -> float:
        """Predicted seconds of an unmodelled node ``name`` touching ``nbytes``."""
        a, b = self.leaf.get(name, (self.leaf_default_s, 1.0 / self.bandwidth_B_per_s))
        return a + b * nbytes


def samples_from_graph(workload: str, graph: Graph, bandwidth_B_per_s: float) -> OverheadSamples:
    """The overhead samples of a timed graph (tasks without timings are skipped).

    The profiler's own cost is taken out: one ``profiler_overhead_s`` per gap
    (the hooks of the op before and after it) and one per recorded node of an
    unmodelled task, and ``profiler_launch_overhead_s`` (CUDA) from each
    kernel launch; so is the time the host waited for the device in it
    (``Task.waited_s``: the simulator adds the waits where the device's work
    makes them). Samples are floored at 0.
    """
    out = OverheadSamples(workload)
    delta = graph.profiler_overhead_s
    for task in graph.tasks:
        if task.measured_s is None:
            continue
        if task.kind == "overhead":
            _add(out.gaps, task.name, _gap_s(task, delta))
        elif task.kind == "op" and task.launch_gaps is not None:
            for key, gap in zip(("T2.launch", "T3.launch"), task.launch_gaps):
                _add(out.gaps, key, max(0.0, gap - delta))
        if task.kind == "unmodelled":
            out.leaf.setdefault(task.name, []).append(
                (max(0.0, task.measured_s - task.waited_s - delta * task.n_nodes), task.bytes))
        for i, kernel in enumerate(task.kernels):
            _add(out.gaps, "T4", max(0.0, kernel.launch_dur_s - graph.profiler_launch_overhead_s))
            if i:
                prev = task.kernels[i - 1]
                _add(out.gaps, "T5", max(0.0, kernel.launch_ts_s - prev.launch_ts_s
                                         - prev.launch_dur_s))
    return out


def traced_gaps_s(graph: Graph) -> float:
    """The host-overhead seconds ``graph``'s trace shows, counted robustly: per
    taxonomy key, the number of its gaps times their median (the profiler's cost
    per gap taken out, floored at 0, as :func:`samples_from_graph` does). One
    iteration's sum of raw gaps is dominated by a few hiccups; this is what the
    overhead table, which prices every gap at its key's median, is checked
    against (see :mod:`perfmodel.gate.baseline`)."""
    by_key: dict[str, list[float]] = {}
    for task in graph.tasks:
        if task.kind == "overhead" and task.measured_s is not None:
            _add(by_key, task.name, _gap_s(task, graph.profiler_overhead_s))
    return sum(len(v) * statistics.median(v) for v in by_key.values())


def _gap_s(task, profiler_overhead_s: float) -> float:
    """A timed overhead task's gap (s) without the profiler's cost and the host's
    waits for the device, floored at 0."""
    return max(0.0, task.measured_s - task.waited_s - profiler_overhead_s)


def with_earlier_leaves(new: OverheadSamples, earlier: OverheadSamples | None,
                        traces: int = LEAF_TRACES) -> OverheadSamples:
    """``new`` with the unmodelled-node samples of ``earlier`` (the same workload's
    previous samples) put before its own, keeping per name the newest ``traces``
    times as many as ``new`` has (at most :data:`MAX_SAMPLES`); names ``new`` lacks
    are dropped, and the gaps stay ``new``'s alone.

    A node seen twice per iteration would otherwise be priced from two samples, and
    one slow sample moves its price by a multiple from one table to the next (see
    docs/journal/2026-11-22-gate-on-cpu-amd-epyc-2c.md). The gaps keep moving with the run, since
    the gate's host-overhead check compares them with the same run's traces."""
    if earlier is None or earlier.workload != new.workload:
        return new
    leaf = {}
    for name, pairs in new.leaf.items():
        keep = min(MAX_SAMPLES, traces * len(pairs))
        leaf[name] = (earlier.leaf.get(name, []) + pairs)[-keep:]
    return OverheadSamples(new.workload, dict(new.gaps), leaf)


def _add(table: dict[str, list[float]], key: str, value: float) -> None:
    table.setdefault(key, []).append(float(value))


def table_from_samples(samples: Iterable[OverheadSamples],
                       bandwidth_B_per_s: float) -> OverheadTable:
    """Pool ``samples`` into one table of medians. Each ``T<k>.<a>.<b>`` key
    also feeds its prefixes (``T<k>.<a>``, ``T<k>``) as fallbacks."""
    samples = list(samples)
    pooled: dict[str, list[float]] = {}
    leaf: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        for key, values in s.gaps.items():
            parts = key.split(".")
            for n in range(1, len(parts) + 1):
                pooled.setdefault(".".join(parts[:n]), []).extend(values)
        for name, pairs in s.leaf.items():
            leaf.setdefault(name, []).extend(pairs)
    lines = {name: fit_leaf_line(pairs, bandwidth_B_per_s) for name, pairs in sorted(leaf.items())}
    return OverheadTable(
        gaps={k: statistics.median(v) for k, v in sorted(pooled.items())},
        leaf=lines,
        leaf_default_s=statistics.median([a for a, _ in lines.values()]) if lines else 0.0,
        bandwidth_B_per_s=bandwidth_B_per_s,
        workloads=tuple(sorted(s.workload for s in samples)))


def fit_leaf_line(pairs: list[tuple[float, float]], bandwidth_B_per_s: float) -> tuple[float, float]:
    """``(a s, b s/B)`` of ``seconds = a + b·bytes`` over ``pairs`` of
    (seconds, bytes); see the module docstring."""
    seconds = np.array([p[0] for p in pairs], dtype=float)
    nbytes = np.array([p[1] for p in pairs], dtype=float)
    if len(pairs) >= 3 and nbytes.min() > 0 and nbytes.max() >= 2 * nbytes.min():
        b, a = np.polyfit(nbytes, seconds, 1)
        if b >= 0 and a >= 0:
            return float(a), float(b)
        if b >= 0:  # a line through the origin
            return 0.0, float(np.dot(nbytes, seconds) / np.dot(nbytes, nbytes))
    b = 1.0 / bandwidth_B_per_s
    return max(0.0, float(np.median(seconds - b * nbytes))), b


# -- files ------------------------------------------------------------------------------

def _thin(values: list[float]) -> list[float]:
    if len(values) <= MAX_SAMPLES:
        return values
    step = len(values) / MAX_SAMPLES
    return [values[int(i * step)] for i in range(MAX_SAMPLES)]


def save_samples(path: Path, samples: OverheadSamples) -> None:
    """Write one workload's samples (seconds) as JSON."""
    write_json_atomic(path, {
        "schema": OVERHEADS_SCHEMA, "workload": samples.workload,
        "gaps": {k: _thin(v) for k, v in sorted(samples.gaps.items())},
        "leaf": {k: [list(p) for p in _thin(v)] for k, v in sorted(samples.leaf.items())}})


def load_samples(path: Path) -> OverheadSamples:
    """One workload's samples; ValueError naming the file when malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: overhead samples are not readable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != OVERHEADS_SCHEMA \
            or not isinstance(data.get("workload"), str):
        raise ValueError(f"{path}: not perfmodel overhead samples of schema {OVERHEADS_SCHEMA}")
    out = OverheadSamples(data["workload"])
    gaps, leaf = data.get("gaps"), data.get("leaf")
    if not isinstance(gaps, dict) or not isinstance(leaf, dict):
        raise ValueError(f"{path}: 'gaps' and 'leaf' must be objects")
    for key, values in gaps.items():
        if not isinstance(values, list) or not all(is_seconds(v) for v in values):
            raise ValueError(f"{path}: gaps[{key!r}] must be a list of non-negative seconds")
        out.gaps[key] = [float(v) for v in values]
    for name, pairs in leaf.items():
        if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(is_seconds(v) for v in p)
                for p in pairs):
            raise ValueError(f"{path}: leaf[{name!r}] must be a list of [seconds, bytes] pairs "
                             f"of non-negative numbers")
        out.leaf[name] = [(float(p[0]), float(p[1])) for p in pairs]
    return out


def load_all_samples(directory: Path) -> tuple[list[OverheadSamples], list[str]]:
    """Every ``*.json`` under ``directory``, and a problem line per bad file."""
    samples, problems = [], []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            samples.append(load_samples(path))
        except ValueError as exc:
            problems.append(str(exc))
    return samples, problems

