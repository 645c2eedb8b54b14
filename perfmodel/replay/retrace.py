"""Rebuild replay cases from their raw traces with today's trace parser.

A replay case stores the task graph its capture built (:mod:`perfmodel.replay.case`).
When the trace parser is fixed (say, kernels it failed to tie to their ops), the
cases of a device whose raw traces were kept (``results/<key>/traces/<workload>.*``,
as the GPU campaign brings them back) can be rebuilt without the device: each
single-rank case gets the graph of its traces, and its workload's overhead
samples are written again from that graph. The measured times, environment and
config stay as captured. A case whose traces are missing is left as it is.
Traces committed xz-compressed (``<file>.xz``, as the campaign packs them) are
read through a temporary folder.
"""

from __future__ import annotations

import dataclasses
import lzma
import shutil
import tempfile
from pathlib import Path

from perfmodel.replay.case import load_case, save_case
from perfmodel.store import paths
from perfmodel.trace.graph import build_graph
from perfmodel.trace.overheads import samples_from_graph, save_samples
from perfmodel.trace.parse import load_trace


def retrace_device(device_dir: Path) -> list[tuple[str, str]]:
    """Rebuild every single-rank replay case of ``device_dir`` (and its overhead
    samples) from its raw traces; (workload, what was done) per case."""
    with tempfile.TemporaryDirectory(prefix="perfmodel-retrace-") as tmp:
        return _retrace(device_dir, Path(tmp))


def _unpacked(path: Path, tmp: Path) -> Path:
    """``path``, or its ``.xz`` copy decompressed under ``tmp`` when only that exists."""
    packed = path.with_name(path.name + ".xz")
    if path.is_file() or not packed.is_file():
        return path
    out = tmp / path.name
    with lzma.open(packed) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _retrace(device_dir: Path, tmp: Path) -> list[tuple[str, str]]:
    done = []
    traces = paths.traces_dir(device_dir)
    for workload, path in paths.replay_files(device_dir).items():
        case = load_case(path)
        if len(case.graphs) != 1:
            done.append((workload, "left as it is: a multi-rank case"))
            continue
        et, kineto, calibration = (_unpacked(f, tmp) for f in paths.trace_files(traces, workload))
        if not et.is_file():
            done.append((workload, f"left as it is: no raw trace {et}"))
            continue
        graph = build_graph(load_trace(et, kineto if kineto.is_file() else None,
                                       calibration if calibration.is_file() else None))
        before = case.graphs[0]
        save_case(path, dataclasses.replace(case, graphs=[graph]))
        save_samples(paths.overhead_file(device_dir, workload),
                     samples_from_graph(workload, graph, case.bandwidth_Bps))
        done.append((workload, f"rebuilt: {len(before.tasks)} -> {len(graph.tasks)} tasks, "
                               f"{_kernels(before)} -> {_kernels(graph)} kernels tied to ops"))
    return done


def _kernels(graph) -> int:
    return sum(len(t.kernels) for t in graph.tasks)
