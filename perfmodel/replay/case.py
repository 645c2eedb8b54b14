"""A replay case: one E2E capture as plain data, to predict it again anywhere.

A case holds what the predictor reads of a capture, so that
:mod:`perfmodel.replay.rerun` can price it again with today's code and a
stored fit, on any machine, without torch or the device:

- the task graph of each rank (:class:`~perfmodel.trace.graph.Graph`, every
  field of every :class:`~perfmodel.trace.graph.Task` and of its CUDA
  :class:`~perfmodel.trace.parse.Kernel` s: op family, op, direction, params,
  dtype, host gaps, tensor dependencies, kernels with stream and traced
  duration, collectives, regions);
- the traced and measured iteration times (:class:`MeasuredTiming`: median,
  sd, repeat x number);
- the device key, its memory bandwidth (prices unmodelled bytes), the thread
  count, the environment (versions, commit), the workload's name and config,
  and for several ranks what their shared host needs (:attr:`ReplayCase.ranks`).

On disk (docs/results-format.md): gzip JSON, one object with ``format``
(:data:`FORMAT`) and ``schema`` (:data:`SCHEMA`); each graph's tasks are rows
whose columns ``task_fields`` names (schema 1, without ``parts``, still
loads). Saving is deterministic (sorted keys,
gzip without a time stamp). Loading never executes code: any file that is not
a complete case of this schema raises one :class:`ReplayError` naming it.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.plaindata import write_bytes_atomic
from perfmodel.trace.categories import CATEGORIES
from perfmodel.trace.graph import Graph, Task
from perfmodel.trace.parse import Kernel

#: What a case file says it is, and the schema version this code reads and writes.
FORMAT = "perfmodel.replay-case"
SCHEMA = 2
#: Older schema versions this code still reads: version 1's task rows lack
#: ``parts`` (their unmodelled tasks are priced by the overhead table alone)
#: and ``launch_gaps``.
READS_SCHEMAS = (1, 2)
#: The columns of a task row, in order (the fields of :class:`Task`).
TASK_FIELDS = ("kind", "name", "family", "op", "direction", "dtype", "params", "bytes",
               "measured_s", "waited_s", "region", "inputs", "outputs", "kernels", "sync",
               "n_nodes", "parts", "launch_gaps")
#: The task columns of schema version 1.
TASK_FIELDS_V1 = TASK_FIELDS[:-2]
#: The columns of a kernel row (the fields of :class:`Kernel`).
KERNEL_FIELDS = ("name", "stream", "ts_s", "dur_s", "launch_ts_s", "launch_dur_s")
#: Largest decompressed case read (B): a bigger one is refused, not parsed.
MAX_BYTES = 256 * 2**20


class ReplayError(ValueError):
    """A replay case that cannot be read; the message starts with the file."""


@dataclass(frozen=True)
class MeasuredTiming:
    """The measured iteration: median and sd over ``repeat`` blocks of ``number``
    iterations (s; None when not measured)."""

    median_s: float | None
    sd_s: float | None
    repeat: int
    number: int
    items_per_s: float | None = None


@dataclass
class ReplayCase:
    """One E2E capture, as :mod:`perfmodel.replay.rerun` predicts it again.

    ``graphs``: one task graph per rank, in rank order (one for a single rank);
    ``on_device``: its op tasks ran as kernels on a CUDA device;
    ``bandwidth_Bps``: the device's memory bandwidth (B/s), which prices the
    overhead table's unmodelled bytes; ``threads``: the torch threads of the
    process (of each rank); ``ranks``: for several ranks, ``threads_per_rank``,
    ``cores``, the ``contention`` they measured, rank 0's ``host_speed`` and
    each op's own drift since the fit, ``op_drift`` (``"op.direction"`` to a
    factor; plain dicts, None when not measured); ``recorded``: what the capture itself
    predicted (``predicted_s``, ``fit_data``, ``bias``), for reference."""

    workload: str
    device_key: str
    on_device: bool
    bandwidth_Bps: float
    threads: int | None
    graphs: list[Graph]
    measured: MeasuredTiming
    env: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    ranks: dict | None = None
    recorded: dict = field(default_factory=dict)

    @property
    def traced_s(self) -> float | None:
        """The traced iteration (s): the slowest rank's; None when untimed."""
        timed = [g.measured_s for g in self.graphs if g.measured_s is not None]
        return max(timed) if timed else None

    @property
    def measured_s(self) -> float | None:
        return self.measured.median_s


# -- to plain data ------------------------------------------------------------------------

def plain_config(config: Any) -> dict:
    """A workload config (a dataclass, or a mapping) as JSON-safe plain data:
    tuples become lists, anything else not JSON becomes its ``repr``."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    if not isinstance(config, dict):
        return {"repr": repr(config)}
    return {str(k): _plain(v) for k, v in config.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain_config(value)
    return repr(value)


def measured_timing(median_s: float, sd_s: float, repeat: int, number: int,
                    items_per_s: float | None = None) -> MeasuredTiming:
    """A :class:`MeasuredTiming` with NaN (not measured) as None."""
    def finite(x):
        return None if x is None or not math.isfinite(x) else float(x)

    return MeasuredTiming(finite(median_s), finite(sd_s), int(repeat), int(number),
                          finite(items_per_s))


def _float(value: float | None) -> float | None:
    """Seconds and bytes as floats (a graph may hold an int 0), so that a loaded
    case saves to the same bytes."""
    return None if value is None else float(value)


def _task_row(task: Task) -> list:
    return [task.kind, task.name, task.family, task.op, task.direction, task.dtype,
            None if task.params is None else dict(sorted(task.params.items())),
            _float(task.bytes), _float(task.measured_s), _float(task.waited_s), task.region,
            list(task.inputs), list(task.outputs),
            [[k.name, k.stream, _float(k.ts_s), _float(k.dur_s), _float(k.launch_ts_s),
              _float(k.launch_dur_s)] for k in task.kernels], task.sync, task.n_nodes,
            {cat: [int(n), float(b)] for cat, (n, b) in sorted(task.parts.items())},
            None if task.launch_gaps is None else [float(g) for g in task.launch_gaps]]


def graph_to_plain(graph: Graph) -> dict:
    return {"measured_s": _float(graph.measured_s),
            "profiler_overhead_s": _float(graph.profiler_overhead_s),
            "profiler_launch_overhead_s": _float(graph.profiler_launch_overhead_s),
            "task_fields": list(TASK_FIELDS), "kernel_fields": list(KERNEL_FIELDS),
            "tasks": [_task_row(t) for t in graph.tasks]}


def case_to_plain(case: ReplayCase) -> dict:
    return {"format": FORMAT, "schema": SCHEMA, "workload": case.workload,
            "device_key": case.device_key, "on_device": case.on_device,
            "bandwidth_Bps": _float(case.bandwidth_Bps), "threads": case.threads,
            "measured": dataclasses.asdict(case.measured), "env": case.env,
            "config": case.config, "ranks": case.ranks, "recorded": case.recorded,
            "graphs": [graph_to_plain(g) for g in case.graphs]}


def case_bytes(case: ReplayCase) -> bytes:
    """The gzip JSON bytes of ``case``: the same case gives the same bytes."""
    text = json.dumps(case_to_plain(case), sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def save_case(path: Path | str, case: ReplayCase) -> Path:
    """Write ``case`` to ``path`` atomically (replacing an earlier case); returns it."""
    path = Path(path)
    write_bytes_atomic(path, case_bytes(case))
    return path


# -- from plain data ----------------------------------------------------------------------

def load_case(path: Path | str) -> ReplayCase:
    """The case saved at ``path``; :class:`ReplayError` naming the file and what
    is wrong when it is unreadable, truncated, not gzip JSON, not a replay case,
    of another schema version, or has a missing or mistyped field."""
    path = Path(path)
    try:
        with gzip.open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such replay case") from None
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise ReplayError(f"{path}: not a complete gzip file ({exc or type(exc).__name__})"
                          ) from None
    if len(raw) > MAX_BYTES:
        raise ReplayError(f"{path}: larger than {MAX_BYTES} bytes uncompressed; not read")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReplayError(f"{path}: not JSON ({exc})") from None
    return case_from_plain(data, str(path))


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def case_from_plain(data: Any, where: str = "<case>") -> ReplayCase:
    """The :class:`ReplayCase` of :func:`case_to_plain`'s output; ReplayError
    (starting with ``where``) when anything is missing or of the wrong type."""
    r = _Reader(where)
    r.mapping(data, "the case")
    if data.get("format") != FORMAT:
        r.fail("format", f"not a replay case (format {data.get('format')!r}, "
                         f"expected {FORMAT!r})")
    schema = data.get("schema")
    if schema not in READS_SCHEMAS:
        r.fail("schema", f"schema version {schema!r}; this perfmodel reads "
                         f"versions {', '.join(map(str, READS_SCHEMAS))}")
    fields = TASK_FIELDS if schema == SCHEMA else TASK_FIELDS_V1
    m = r.mapping(r.get(data, "measured"), "measured")
    measured = MeasuredTiming(r.number(r.get(m, "median_s", "measured"), "measured.median_s", True),
                              r.number(r.get(m, "sd_s", "measured"), "measured.sd_s", True),
                              r.integer(r.get(m, "repeat", "measured"), "measured.repeat"),
                              r.integer(r.get(m, "number", "measured"), "measured.number"),
                              r.number(m.get("items_per_s"), "measured.items_per_s", True))
    graphs = r.array(r.get(data, "graphs"), "graphs")
    if not graphs:
        r.fail("graphs", "no task graph")
    ranks = r.get(data, "ranks")
    return ReplayCase(
        workload=r.string(r.get(data, "workload"), "workload"),
        device_key=r.string(r.get(data, "device_key"), "device_key"),
        on_device=r.boolean(r.get(data, "on_device"), "on_device"),
        bandwidth_Bps=r.number(r.get(data, "bandwidth_Bps"), "bandwidth_Bps"),
        threads=r.integer(r.get(data, "threads"), "threads", optional=True),
        graphs=[_graph(r, g, f"graphs[{i}]", fields) for i, g in enumerate(graphs)],
        measured=measured,
        env=r.mapping(r.get(data, "env"), "env"),
        config=r.mapping(r.get(data, "config"), "config"),
        ranks=None if ranks is None else r.mapping(ranks, "ranks"),
        recorded=r.mapping(r.get(data, "recorded"), "recorded"))


def _graph(r: _Reader, data: Any, where: str, fields: tuple[str, ...] = TASK_FIELDS) -> Graph:
    r.mapping(data, where)
    for key, expected in (("task_fields", fields), ("kernel_fields", KERNEL_FIELDS)):
        if r.get(data, key, where) != list(expected):
            r.fail(f"{where}.{key}", f"columns {data[key]!r} are not this schema's")
    rows = r.array(r.get(data, "tasks", where), f"{where}.tasks")
    return Graph([_task(r, row, f"{where}.tasks[{i}]", len(fields))
                  for i, row in enumerate(rows)],
                 r.number(r.get(data, "measured_s", where), f"{where}.measured_s", True),
                 r.number(r.get(data, "profiler_overhead_s", where),
                          f"{where}.profiler_overhead_s"),
                 r.number(r.get(data, "profiler_launch_overhead_s", where),
                          f"{where}.profiler_launch_overhead_s"))


def _task(r: _Reader, row: Any, where: str, columns: int = len(TASK_FIELDS)) -> Task:
    r.array(row, where)
    if len(row) != columns:
        r.fail(where, f"{len(row)} columns, expected {columns}")
    (kind, name, family, op, direction, dtype, params, nbytes, measured_s, waited_s, region,
     inputs, outputs, kernels, sync, n_nodes) = row[:len(TASK_FIELDS_V1)]
    parts, gaps = row[len(TASK_FIELDS_V1):] if columns > len(TASK_FIELDS_V1) else ({}, None)
    if params is not None:
        r.mapping(params, f"{where}.params")
        params = {k: r.integer(v, f"{where}.params.{k}") for k, v in params.items()}
    return Task(r.string(kind, f"{where}.kind"), r.string(name, f"{where}.name"),
                r.string(family, f"{where}.family"),
                op=r.string(op, f"{where}.op", True),
                direction=r.string(direction, f"{where}.direction", True),
                dtype=r.string(dtype, f"{where}.dtype", True), params=params,
                bytes=r.number(nbytes, f"{where}.bytes"),
                measured_s=r.number(measured_s, f"{where}.measured_s", True),
                waited_s=r.number(waited_s, f"{where}.waited_s"),
                region=r.string(region, f"{where}.region", True),
                inputs=tuple(r.integers(inputs, f"{where}.inputs")),
                outputs=tuple(r.integers(outputs, f"{where}.outputs")),
                kernels=[_kernel(r, k, f"{where}.kernels[{i}]")
                         for i, k in enumerate(r.array(kernels, f"{where}.kernels"))],
                sync=r.boolean(sync, f"{where}.sync"),
                n_nodes=r.integer(n_nodes, f"{where}.n_nodes"),
                parts=_parts(r, parts, f"{where}.parts"),
                launch_gaps=None if gaps is None else _launch_gaps(r, gaps, f"{where}.launch_gaps"))


def _launch_gaps(r: _Reader, gaps: Any, where: str) -> tuple[float, float]:
    r.array(gaps, where)
    if len(gaps) != 2:
        r.fail(where, "expected [to first launch, after last launch]")
    return r.number(gaps[0], f"{where}[0]"), r.number(gaps[1], f"{where}[1]")


def _parts(r: _Reader, parts: Any, where: str) -> dict[str, list]:
    """A task's ``parts``: category -> [leaf nodes, bytes], categories known."""
    r.mapping(parts, where)
    out = {}
    for cat, value in parts.items():
        if cat not in CATEGORIES:
            r.fail(where, f"unknown category {cat!r} (expected one of {', '.join(CATEGORIES)})")
        r.array(value, f"{where}.{cat}")
        if len(value) != 2:
            r.fail(f"{where}.{cat}", "expected [leaf nodes, bytes]")
        out[cat] = [r.integer(value[0], f"{where}.{cat}[0]"),
                    r.number(value[1], f"{where}.{cat}[1]")]
    return out


def _kernel(r: _Reader, row: Any, where: str) -> Kernel:
    r.array(row, where)
    if len(row) != len(KERNEL_FIELDS):
        r.fail(where, f"{len(row)} columns, expected {len(KERNEL_FIELDS)}")
    name, stream, ts_s, dur_s, launch_ts_s, launch_dur_s = row
    return Kernel(r.string(name, f"{where}.name"), r.integer(stream, f"{where}.stream"),
                  r.number(ts_s, f"{where}.ts_s"), r.number(dur_s, f"{where}.dur_s"),
                  r.number(launch_ts_s, f"{where}.launch_ts_s"),
                  r.number(launch_dur_s, f"{where}.launch_dur_s"))


class _Reader:
    """Typed field access that fails with one :class:`ReplayError` naming the file."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field_name: str, what: str):
        raise ReplayError(f"{self.where}: {field_name}: {what}")

    def get(self, data: dict, key: str, parent: str | None = None) -> Any:
        if key not in data:
            self.fail(f"{parent}.{key}" if parent else key, "missing")
        return data[key]

    def _type(self, value: Any, name: str, expected: str):
        self.fail(name, f"expected {expected}, got {type(value).__name__} {value!r:.40}")

    def mapping(self, value: Any, name: str) -> dict:
        if not isinstance(value, dict):
            self._type(value, name, "an object")
        return value

    def array(self, value: Any, name: str) -> list:
        if not isinstance(value, list):
            self._type(value, name, "a list")
        return value

    def string(self, value: Any, name: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self._type(value, name, "a string" + (" or null" if optional else ""))
        return value

    def boolean(self, value: Any, name: str) -> bool:
        if not isinstance(value, bool):
            self._type(value, name, "true or false")
        return value

    def integer(self, value: Any, name: str, optional: bool = False) -> int | None:
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            self._type(value, name, "an integer" + (" or null" if optional else ""))
        return value

    def integers(self, value: Any, name: str) -> list[int]:
        return [self.integer(v, f"{name}[{i}]") for i, v in enumerate(self.array(value, name))]

    def number(self, value: Any, name: str, optional: bool = False) -> float | None:
        if value is None and optional:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) \
                or not math.isfinite(value):
            self._type(value, name, "a finite number" + (" or null" if optional else ""))
        return float(value)
