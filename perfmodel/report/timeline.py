"""One iteration as lanes of spans: measured (from a stored trace) and simulated.

A span is ``(lane, name, start_s, end_s, category)``, times in seconds from
the start of the iteration. Lanes are ``"cpu"`` and ``"stream <n>"``, as in
:attr:`perfmodel.simulate.walk.SimResult.timeline`; categories are the op
families, ``host overhead`` and ``unmodelled`` (the keys of the E2E
breakdown), so both timelines share one colour legend.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from perfmodel.trace.graph import Graph, build_graph
from perfmodel.ops import OPS
from perfmodel.simulate.predict import predict_graph
from perfmodel.store import paths
from perfmodel.trace.parse import Trace, TraceFiles, load_trace


class Span(NamedTuple):
    lane: str
    name: str
    start_s: float
    end_s: float
    category: str


def stored_trace_files(results_dir: Path, workload: str) -> TraceFiles | None:
    """The trace files of ``workload`` under ``results_dir/traces``, or None when
    its execution trace or Kineto trace is missing."""
    files = TraceFiles(*paths.trace_files(paths.traces_dir(results_dir), workload))
    return files if files.et.is_file() and files.kineto.is_file() else None


def read_trace(files: TraceFiles) -> Trace:
    """Parse stored trace files (the calibration file is optional)."""
    return load_trace(files.et, files.kineto,
                      files.calibration if files.calibration.is_file() else None)


def task_category(kind: str, family: str) -> str:
    """Breakdown category of a graph task of ``kind`` and ``family``."""
    return {"overhead": "host overhead", "unmodelled": "unmodelled"}.get(kind, family)


def measured_timeline(trace: Trace, graph: Graph | None = None) -> list[Span]:
    """The traced iteration of ``graph`` (default: built from ``trace``'s last one).

    The cpu lane lays the graph's tasks end to end with their traced durations:
    overhead tasks are the gaps between ops, so on one host thread this is
    exactly the trace. Kernels sit on their stream at their traced times.
    """
    iteration = trace.last_iteration()
    graph = graph if graph is not None else build_graph(trace, iteration)
    spans: list[Span] = []
    clock = 0.0
    for task in graph.tasks:
        category = task_category(task.kind, task.family)
        seconds = task.measured_s or 0.0
        if seconds > 0:
            spans.append(Span("cpu", task.name, clock, clock + seconds, category))
        clock += seconds
        for k in task.kernels:
            start = k.ts_s - (iteration.ts_s or 0.0)
            spans.append(Span(f"stream {k.stream}", k.name, start, start + k.dur_s, category))
    return spans


def simulated_timeline(timeline: list[tuple[str, str, float, float]]) -> list[Span]:
    """:attr:`SimResult.timeline` entries as spans, categorised by task name."""
    return [Span(lane, name, start, end, name_category(name))
            for lane, name, start, end in timeline]


def name_category(name: str) -> str:
    """Category of a simulated task name: ``<op>.<direction>`` -> the op's family,
    an overhead key (``T1.…``, ``T2.…``, ``T3.…``) -> host overhead, else unmodelled."""
    op = OPS.get(name.rpartition(".")[0])
    if op is not None:
        return op.family
    return "host overhead" if name[:3] in ("T1.", "T2.", "T3.") else "unmodelled"


def stored_graph(results_dir: Path, workload: str) -> tuple[Trace, Graph] | None:
    """``workload``'s stored trace and the task graph of its last iteration;
    None when no trace is stored (:class:`~perfmodel.trace.parse.TraceError` when
    one does not parse)."""
    files = stored_trace_files(results_dir, workload)
    if files is None:
        return None
    trace = read_trace(files)
    return trace, build_graph(trace)


def simulate_stored(trace: Trace, graph: Graph, fit, table, on_device: bool
                    ) -> tuple[list[Span], list[Span]]:
    """(measured, simulated) spans of a stored trace and its ``graph``, simulated
    with ``fit`` and the overhead ``table``."""
    prediction = predict_graph(graph, fit, table, on_device)
    return measured_timeline(trace, graph), simulated_timeline(prediction.timeline)


def e2e_timelines(result, files: TraceFiles) -> tuple[list[Span], list[Span]]:
    """(measured, simulated) spans of a :class:`~perfmodel.e2e.result.MeasuredIteration`
    (its ``prediction`` kept its timeline) and the trace files it was built from;
    ValueError when it kept none (a result read back from plain data)."""
    if result.graph is None or not result.prediction.timeline:
        raise ValueError(f"{result.workload}: the E2E result holds no timeline to draw")
    trace = read_trace(files)
    return (measured_timeline(trace, result.graph),
            simulated_timeline(result.prediction.timeline))
