"""Execution traces: capture a training step, and parse the trace back.

A capture writes three files next to each other:

- ``<name>.et.json``: PyTorch's execution trace (Chakra schema) of one
  iteration: every CPU op with its parent, input and output shapes, tensor
  ids and sequence number;
- ``<name>.kineto.json``: the profiler's Chrome trace of further iterations,
  which supplies start times and durations (and, on CUDA, kernels, their
  streams and the runtime launches that correlate them to CPU ops);
- ``<name>.calibration.json``: the profiler's own cost per recorded op on
  this device (seconds), measured at capture time, and on CUDA its cost per
  kernel launch (CUPTI's, on top: it makes a host-bound workload's traced
  iteration longer than an unprofiled one by a cost per op and runtime call).

The two traces come from separate passes because the execution-trace
observer costs an order of magnitude more per op than the Kineto profiler
alone: timings taken under the observer would be mostly observer (measured
costs: docs/journal/2026-11-22-cpu-amd-epyc-2c.md). Each iteration runs inside
``record_function(ITERATION_MARK)``; the ET iteration is aligned op by op with
the last Kineto iteration. :func:`load_trace` parses and validates the files;
anything malformed raises :class:`TraceError` naming the file and the node or
byte offset where parsing failed. Parsing is plain JSON: nothing in a trace
file can execute code.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from perfmodel.plaindata import write_json_atomic
from perfmodel.store import paths as store_paths

#: Name of the ``record_function`` scope around each captured iteration.
ITERATION_MARK = "perfmodel::iteration"
#: Execution-trace schema major versions this parser understands.
SUPPORTED_ET_SCHEMAS = ("1.0", "1.1")
#: Root nodes the observer adds; they are not ops.
_ROOT_PREFIX = "[pytorch|profiler|execution_trace|"
#: How far ahead in the Kineto events alignment looks for an ET node's name.
_ALIGN_LOOKAHEAD = 64
#: The observer's record of the process groups (their sizes, as JSON).
PROCESS_GROUP_NODE = "## process_group:init ##"
#: Scopes a collective backend records on its own worker thread (gloo runs each
#: collective there). The execution-trace observer gives them a parent on the
#: main thread and nests main-thread ops started meanwhile under them.
WORKER_SCOPE_PREFIXES = ("gloo:",)


class TraceError(ValueError):
    """A trace that cannot be parsed; the message names the file and where."""


@dataclass
class Kernel:
    """A device kernel (or memcpy/memset) launched by a CPU op; times in seconds."""

    name: str
    stream: int
    ts_s: float
    dur_s: float
    launch_ts_s: float  # when the CPU issued it (the runtime launch call)
    launch_dur_s: float


@dataclass
class TraceNode:
    """One node of an execution trace.

    ``inputs``/``outputs`` keep the trace's ``types``, ``shapes`` and
    ``values`` lists as parsed. Times come from the Kineto trace (seconds,
    relative to the start of the trace) and are None when no timing matched.
    """

    id: int
    name: str
    parent: int
    inputs: dict[str, list]
    outputs: dict[str, list]
    seq_id: int = -1
    rf_id: int | None = None
    tid: int = 0
    ts_s: float | None = None
    dur_s: float | None = None
    children: list[TraceNode] = field(default_factory=list, repr=False)
    #: The ATen schema the trace records for an operator node ("" for others).
    op_schema: str = ""
    kernels: list[Kernel] = field(default_factory=list, repr=False)

    @property
    def input_shapes(self) -> list:
        return self.inputs.get("shapes", [])

    @property
    def input_types(self) -> list[str]:
        return self.inputs.get("types", [])

    @property
    def input_values(self) -> list:
        return self.inputs.get("values", [])

    @property
    def is_view(self) -> bool:
        """Whether the node is an ATen view: its schema returns only aliases of
        its inputs, none written (``-> Tensor(a)``, not ``-> Tensor(a!)``), so it
        moves no data."""
        returns = self.op_schema.rpartition("->")[2]
        tensors = re.findall(r"Tensor(\([^)]*\))?", returns)
        return bool(tensors) and all(t and "!" not in t for t in tensors)

    @property
    def end_s(self) -> float | None:
        return None if self.ts_s is None or self.dur_s is None else self.ts_s + self.dur_s

    def tensors(self, which: str = "inputs") -> list[list]:
        """The ET values ``[tensor id, storage id, offset, numel, element size,
        device]`` of the tensors among this node's inputs or outputs (tensor
        lists flattened)."""
        side = self.inputs if which == "inputs" else self.outputs
        out: list[list] = []
        for typ, value in zip(side.get("types", []), side.get("values", [])):
            _collect_tensors(typ, value, out)
        return out

    def tensor_ids(self, which: str = "inputs") -> list[int]:
        """Ids of the tensors among this node's inputs or outputs."""
        return [t[0] for t in self.tensors(which)]

    def walk(self):
        """This node and its descendants, depth first, in execution order."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class Trace:
    """A parsed trace: nodes by id, the root, and where it came from."""

    path: Path
    nodes: dict[int, TraceNode]
    roots: list[TraceNode]
    schema: str
    timed: bool  # whether Kineto timings were attached
    profiler_overhead_s: float = 0.0  # the profiler's cost per recorded op (s)
    #: the profiler's further cost per kernel launch on CUDA (s; 0 on a CPU, or
    #: where the calibration predates it)
    profiler_launch_overhead_s: float = 0.0
    #: Scopes a collective backend ran on its worker threads (see
    #: :data:`WORKER_SCOPE_PREFIXES`), detached from the tree, untimed.
    worker_nodes: list[TraceNode] = field(default_factory=list)
    #: ``(start_s, end_s)`` of every host call that waited for the device
    #: (:data:`HOST_WAIT_CALLS`), sorted, on the nodes' clock; CUDA traces only.
    host_waits: list[tuple[float, float]] = field(default_factory=list)

    def world_size(self) -> int | None:
        """Ranks of the default process group (``group_size`` of pg ``"0"`` in
        the observer's ``## process_group:init ##`` node), None without one."""
        for node in self.nodes.values():
            if node.name != PROCESS_GROUP_NODE or not node.input_values:
                continue
            try:
                groups = json.loads(node.input_values[0])
            except (TypeError, ValueError):
                continue
            for group in groups if isinstance(groups, list) else []:
                if not isinstance(group, dict):
                    continue
                size = group.get("group_size")
                if group.get("pg_name") == "0" and isinstance(size, int) and size >= 1:
                    return size
        return None

    def iterations(self) -> list[TraceNode]:
        """The :data:`ITERATION_MARK` nodes in execution order (may be empty)."""
        return [n for root in self.roots for n in root.walk() if n.name == ITERATION_MARK]

    def last_iteration(self) -> TraceNode:
        """The last marked iteration, or a synthetic node holding every op of the
        main thread when the trace has no marks (a trace captured elsewhere).

        Ops that other threads ran during the marked iteration (on CUDA,
        autograd's backward thread) are appended to its children: node ids are
        issued in start order across threads, so they are the other threads'
        top-level nodes with ids between the mark's and the next main-thread
        node's after it.
        """
        marks = self.iterations()
        if not marks:
            tops = [c for root in self.roots for c in _top_level(root)]
            node = TraceNode(-1, ITERATION_MARK, -1, {}, {}, children=tops)
            timed = [c for c in tops if c.ts_s is not None and c.dur_s is not None]
            if timed:
                node.ts_s = min(c.ts_s for c in timed)
                node.dur_s = max(c.end_s for c in timed) - node.ts_s
            return node
        mark = marks[-1]
        last_id = max(n.id for n in mark.walk())
        later = [n.id for n in self.nodes.values() if n.tid == mark.tid and n.id > last_id
                 and not n.name.startswith(_ROOT_PREFIX)]
        end = min(later, default=float("inf"))
        have = {c.id for c in mark.children}
        others = [c for root in self.roots for c in _top_level(root)
                  if c.tid != mark.tid and mark.id < c.id < end and c.id not in have]
        if others:
            mark.children = sorted(mark.children + others, key=lambda n: n.id)
        return mark


def _top_level(root: TraceNode) -> list[TraceNode]:
    out = []
    for child in root.children:
        if child.name.startswith(_ROOT_PREFIX):
            out.extend(_top_level(child))
        else:
            out.append(child)
    return out


def _collect_tensors(typ: Any, value: Any, out: list[list]) -> None:
    if isinstance(typ, str) and typ.startswith("Tensor") and isinstance(value, list) \
            and len(value) == 6 and all(isinstance(v, int) for v in value[:5]):
        out.append(value)
    elif isinstance(typ, str) and typ.startswith("GenericList[") and isinstance(value, list):
        for t, v in zip(_split_generic_list(typ), value):
            _collect_tensors(t, v, out)


def _split_generic_list(typ: str) -> list[str]:
    """``'GenericList[Tensor(float),Int]'`` -> ``['Tensor(float)', 'Int']``."""
    body, parts, depth, cur = typ[len("GenericList["):-1], [], 0, ""
    for ch in body:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


# -- capture ----------------------------------------------------------------------------

#: The calibration file's key for :func:`profiler_overhead_per_launch` (CUDA only).
LAUNCH_CALIBRATION = "profiler_overhead_s_per_launch"
#: Kineto categories of the host calls that launch device work: CUDA runtime
#: calls, and CUDA driver calls (``cuLaunchKernel``, which cuBLAS uses).
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


@dataclass(frozen=True)
class TraceFiles:
    """The files of one capture."""

    et: Path
    kineto: Path
    calibration: Path


def capture_trace(step: Callable[[], object], out_dir: Path, name: str, iterations: int = 3,
                  warmup: int = 3, device: str = "cpu") -> TraceFiles:
    """Run ``step`` ``warmup`` times, once under the execution-trace observer,
    then ``iterations`` times under the Kineto profiler, and measure the
    profiler's cost per op; write the three files under ``out_dir``. They are
    written in a temporary folder beside them and moved into place together at
    the end, so a capture that dies midway leaves the earlier three as they were."""
    import shutil
    import tempfile

    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    out_dir.mkdir(parents=True, exist_ok=True)
    files = TraceFiles(*store_paths.trace_files(out_dir, name))
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir))
    try:
        paths = (files.et, files.kineto, files.calibration)
        _capture_into(step, TraceFiles(*(scratch / path.name for path in paths)), iterations,
                      warmup, device)
        for path in paths:
            os.replace(scratch / path.name, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return files


def _capture_into(step: Callable[[], object], files: TraceFiles, iterations: int, warmup: int,
                  device: str) -> None:
    """The work of :func:`capture_trace`, writing ``files``."""
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

    from perfmodel.trace.region import recording

    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    observer = ExecutionTraceObserver()
    observer.register_callback(str(files.et))
    observer.start()
    try:
        # recording(): the ET observer alone sets no profiler flag for regions.
        with recording(), record_function(ITERATION_MARK):
            step()
            sync()
    finally:
        observer.stop()
        observer.unregister_callback()
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(iterations):
            with record_function(ITERATION_MARK):
                step()
                sync()
    prof.export_chrome_trace(str(files.kineto))
    calibration = {"profiler_overhead_s_per_op": profiler_overhead_per_op()}
    if device.startswith("cuda"):
        calibration[LAUNCH_CALIBRATION] = profiler_overhead_per_launch(device)
    write_json_atomic(files.calibration, calibration)


def profiler_overhead_per_op(ops: int = 2000, repeats: int = 5) -> float:
    """The Kineto profiler's added cost per recorded CPU op (s): the time of
    ``ops`` tiny ``torch.add`` calls profiled minus unprofiled, per op (each the
    fastest of ``repeats`` tries)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity

    x = torch.ones(1)

    def loop() -> float:
        start = time.perf_counter()
        for _ in range(ops):
            torch.add(x, x)
        return time.perf_counter() - start

    loop()
    plain = _fastest(loop, repeats)
    return max(0.0, (_fastest(loop, repeats, [ProfilerActivity.CPU]) - plain) / ops)


def profiler_overhead_per_launch(device: str, launches: int = 2000, repeats: int = 5) -> float:
    """The profiler's cost per kernel launch on CUDA ``device`` (s) beyond its
    cost per op: ``launches`` one-element ``torch.add`` calls (one kernel each)
    profiled with CPU and CUDA activities, minus the same profiled with CPU
    activities only, per call (the smaller of ``repeats`` tries each)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity

    x = torch.ones(1, device=device)
    out = torch.empty_like(x)

    def loop() -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(launches):
            torch.add(x, x, out=out)
        torch.cuda.synchronize(device)
        return time.perf_counter() - start

    loop()
    cpu = _fastest(loop, repeats, [ProfilerActivity.CPU])
    cuda = _fastest(loop, repeats, [ProfilerActivity.CPU, ProfilerActivity.CUDA])
    return max(0.0, (cuda - cpu) / launches)


def _fastest(loop: Callable[[], float], repeats: int, activities=None) -> float:
    """The smallest of ``repeats`` runs of ``loop`` (its own seconds), each under
    the profiler with ``activities`` when given."""
    if activities is None:
        return min(loop() for _ in range(repeats))
    from torch.profiler import profile

    runs = []
    for _ in range(repeats):
        with profile(activities=activities):
            runs.append(loop())
    return min(runs)


# -- parsing ----------------------------------------------------------------------------

def load_trace(et_path: Path, kineto_path: Path | None = None,
               calibration_path: Path | None = None) -> Trace:
    """Parse an execution trace, with timings from ``kineto_path`` and the
    profiler's cost per op from ``calibration_path`` when given.

    Raises :class:`TraceError` naming the file and the node (or the byte
    offset, for JSON that does not parse) where parsing failed.
    """
    data = _read_json(et_path)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise TraceError(f"{et_path}: not an execution trace (no 'nodes' list)")
    schema = str(data.get("schema", ""))
    if not any(schema.startswith(s) for s in SUPPORTED_ET_SCHEMAS):
        raise TraceError(f"{et_path}: execution-trace schema {schema!r} is not supported "
                         f"(supported: {', '.join(s + '.x' for s in SUPPORTED_ET_SCHEMAS)})")
    nodes: dict[int, TraceNode] = {}
    for index, raw in enumerate(data["nodes"]):
        node = _parse_node(et_path, index, raw)
        if node.id in nodes:
            raise TraceError(f"{et_path}: node #{index} repeats id {node.id}")
        nodes[node.id] = node
    roots = []
    # With a backend's worker scopes in the trace, the observer's parents are only
    # what was open on the main thread, and some are never written.
    workers_ran = any(n.name.startswith(WORKER_SCOPE_PREFIXES) for n in nodes.values())
    for node in sorted(nodes.values(), key=lambda n: n.id):
        parent = nodes.get(node.parent)
        if parent is None and node.parent not in (-1, 0, node.id) and workers_ran:
            parent = _nearest_earlier(nodes, node)
        if parent is None or parent is node:
            if node.parent != node.id and node.parent not in (-1, 0) and parent is None:
                raise TraceError(f"{et_path}: node {node.id} ({node.name}) names parent "
                                 f"{node.parent}, which is not in the trace (truncated?)")
            roots.append(node)
        else:
            parent.children.append(node)
    if not roots:
        raise TraceError(f"{et_path}: no root node (every node has a parent: a cycle)")
    _check_acyclic(et_path, nodes, roots)
    workers = _detach_worker_scopes(nodes)
    trace = Trace(et_path, nodes, [r for r in roots if r.id in nodes], schema, False,
                  worker_nodes=workers)
    if kineto_path is not None:
        trace.timed = _attach_timings(kineto_path, trace)
        if trace.timed and workers and trace.iterations():
            _reparent_by_time(trace.last_iteration(), nodes)
    if calibration_path is not None:
        data = _read_json(calibration_path)
        if not isinstance(data, dict):
            data = {}
        trace.profiler_overhead_s = _calibration_seconds(calibration_path, data,
                                                         "profiler_overhead_s_per_op")
        if LAUNCH_CALIBRATION in data:  # CUDA captures since it was measured
            trace.profiler_launch_overhead_s = _calibration_seconds(
                calibration_path, data, LAUNCH_CALIBRATION)
    return trace


def _calibration_seconds(path: Path, data: dict, key: str) -> float:
    value = data.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise TraceError(f"{path}: {key!r} must be seconds in [0, 1), got {value!r}")
    return float(value)


def _nearest_earlier(nodes: dict[int, TraceNode], scope: TraceNode) -> TraceNode | None:
    """The parent a node gets when the one it names is not in a trace with
    worker scopes: the node that started just before it (ids are start order).
    The observer parent of a worker scope is only whatever was open on the main
    thread (a 4-rank ``dlrm_mp`` trace once named a node the observer never
    wrote, and a 2-rank ``ddp_mlp`` one an ``aten::as_strided`` whose parent was
    never written); the scopes are detached and the main thread's tree rebuilt
    from the Kineto times anyway."""
    earlier = [i for i in nodes if i < scope.id]
    if not earlier:
        return None
    scope.parent = max(earlier)
    return nodes[scope.parent]


def _detach_worker_scopes(nodes: dict[int, TraceNode]) -> list[TraceNode]:
    """Remove the worker-thread scopes from ``nodes`` and the tree; their
    children go back to their parent, in id order (a root scope's children are
    dropped with it). Returns the scopes."""
    scopes = [n for n in sorted(nodes.values(), key=lambda n: -n.id)
              if n.name.startswith(WORKER_SCOPE_PREFIXES)]
    for scope in scopes:
        parent = nodes.get(scope.parent)
        if parent is not None and parent is not scope:
            for child in scope.children:
                child.parent = parent.id
            parent.children = sorted([c for c in parent.children if c is not scope]
                                     + scope.children, key=lambda n: n.id)
        scope.children = []
        del nodes[scope.id]
    return sorted(scopes, key=lambda n: n.id)


#: Slack when comparing Kineto times (s): they are whole nanoseconds.
_TIME_SLACK_S = 5e-10


def _reparent_by_time(iteration: TraceNode, nodes: dict[int, TraceNode]) -> None:
    """Give every timed node of ``iteration``'s thread the innermost earlier node
    whose Kineto interval holds it as parent (``iteration`` when none does).

    Used when a collective backend's worker scopes were open: the observer then
    pushes and pops them on the main thread's stack, so later ops land too deep
    (a DDP ``c10d::allreduce_`` inside an earlier backward op, 4 gloo ranks) or
    too shallow. Node ids are start order; untimed nodes keep their parent."""
    mine = [n for n in iteration.walk() if n is not iteration and n.tid == iteration.tid
            and n.ts_s is not None and n.dur_s is not None]
    for node in mine:  # moved nodes' children are re-added below
        parent = nodes.get(node.parent)
        if parent is not None:
            parent.children = [c for c in parent.children if c is not node]
    stack = [iteration]
    for node in sorted(mine, key=lambda n: n.id):
        while len(stack) > 1 and not (stack[-1].ts_s <= node.ts_s + _TIME_SLACK_S
                                      and node.ts_s < stack[-1].end_s - _TIME_SLACK_S
                                      and node.end_s <= stack[-1].end_s + _TIME_SLACK_S):
            stack.pop()
        node.parent = stack[-1].id
        stack[-1].children.append(node)
        stack.append(node)
    for node in [iteration] + mine:
        node.children.sort(key=lambda n: n.id)


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text (byte offset {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: invalid JSON at byte offset {exc.pos} "
                         f"(line {exc.lineno}, column {exc.colno}): {exc.msg}") from None


def _parse_node(path: Path, index: int, raw: Any) -> TraceNode:
    where = f"{path}: node #{index}"
    if not isinstance(raw, dict):
        raise TraceError(f"{where}: expected an object, got {type(raw).__name__}")
    for key, kind in (("id", int), ("name", str), ("ctrl_deps", int)):
        if not isinstance(raw.get(key), kind) or isinstance(raw.get(key), bool):
            raise TraceError(f"{where}: field {key!r} missing or not {kind.__name__}")
    where = f"{path}: node {raw['id']} ({raw['name']})"
    sides = {}
    for side in ("inputs", "outputs"):
        value = raw.get(side, {})
        if not isinstance(value, dict):
            raise TraceError(f"{where}: {side!r} must be an object")
        lists = {k: value.get(k, []) for k in ("types", "shapes", "values")}
        if not all(isinstance(v, list) for v in lists.values()):
            raise TraceError(f"{where}: {side} types/shapes/values must be lists")
        if len({len(v) for v in lists.values()}) > 1:
            raise TraceError(f"{where}: {side} types, shapes and values differ in length")
        sides[side] = lists
    attrs = {}
    raw_attrs = raw.get("attrs", [])
    if not isinstance(raw_attrs, list):
        raise TraceError(f"{where}: 'attrs' must be a list")
    for attr in raw_attrs:
        if not isinstance(attr, dict) or not isinstance(attr.get("name"), str):
            raise TraceError(f"{where}: malformed attr {attr!r}")
        attrs[attr["name"]] = attr.get("value")
    seq_id, rf_id, tid = attrs.get("seq_id", -1), attrs.get("rf_id"), attrs.get("tid", 0)
    for key, value in (("seq_id", seq_id), ("tid", tid)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TraceError(f"{where}: attr {key!r} is not an integer: {value!r}")
    schema = attrs.get("op_schema")
    return TraceNode(raw["id"], raw["name"], raw["ctrl_deps"], sides["inputs"],
                     sides["outputs"], seq_id, rf_id if isinstance(rf_id, int) else None, tid,
                     op_schema=schema if isinstance(schema, str) else "")


def _check_acyclic(path: Path, nodes: dict[int, TraceNode], roots: list[TraceNode]) -> None:
    reached = sum(1 for root in roots for _ in root.walk())
    if reached != len(nodes):
        orphan = next(n for n in nodes.values() if not _reaches_root(n, nodes))
        raise TraceError(f"{path}: node {orphan.id} ({orphan.name}) is on a parent cycle")


def _reaches_root(node: TraceNode, nodes: dict[int, TraceNode]) -> bool:
    seen = set()
    while node.parent in nodes and nodes[node.parent] is not node:
        if node.id in seen:
            return False
        seen.add(node.id)
        node = nodes[node.parent]
    return True


#: CUDA runtime and driver calls in which the host waits for the device: time
#: the device's work takes, not host overhead.
HOST_WAIT_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"})


def _attach_timings(path: Path, trace: Trace) -> bool:
    """Set ``ts_s``/``dur_s`` of ET nodes from the Kineto trace, and attach
    device kernels through their launch correlation. Returns whether any node
    got a timing.

    With iteration marks in both traces, the ET's last iteration is aligned
    with the Kineto trace's last one: both in start order, each ET node takes
    the next Kineto op of the same name. Without marks (both traces recorded
    in one profiling session), nodes match by record-function id.
    """
    data = _read_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a Chrome/Kineto trace (no 'traceEvents' list)")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    for i, e in enumerate(spans):
        if not isinstance(e.get("ts"), (int, float)) or not isinstance(e.get("dur"), (int, float)):
            raise TraceError(f"{path}: event {e.get('name')!r} (#{i} of the 'X' events) "
                             f"lacks numeric ts/dur")
    if not spans:
        return False
    origin = min(e["ts"] for e in spans)
    cpu = [e for e in spans if e.get("cat") in ("cpu_op", "user_annotation")]
    marks = [e for e in cpu if e.get("name") == ITERATION_MARK]
    et_marks = trace.iterations()
    if marks and et_marks:
        pairs = _align(trace.last_iteration(), max(marks, key=lambda e: e["ts"]), cpu)
    else:
        by_rf = {n.rf_id: n for n in trace.nodes.values() if n.rf_id is not None}
        pairs = []
        for e in cpu:
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            node = by_rf.get(args.get("Record function id"))
            if node is not None and node.name == e.get("name"):
                pairs.append((e, node))
    for e, node in pairs:
        node.ts_s = (e["ts"] - origin) * 1e-6
        node.dur_s = e["dur"] * 1e-6
    _attach_kernels(path, spans, pairs, origin)
    trace.host_waits = sorted(((e["ts"] - origin) * 1e-6, (e["ts"] + e["dur"] - origin) * 1e-6)
                              for e in spans if e.get("cat") in ("cuda_runtime", "cuda_driver")
                              and e.get("name") in HOST_WAIT_CALLS)
    return bool(pairs)


def _align(iteration: TraceNode, mark: dict, cpu: list[dict]) -> list[tuple[dict, TraceNode]]:
    """Pair the nodes of ``iteration`` with the Kineto ops inside ``mark``."""
    end = mark["ts"] + mark["dur"]
    inside = sorted((e for e in cpu if mark["ts"] <= e["ts"] <= end and e is not mark),
                    key=lambda e: (e["ts"], -e["dur"]))
    pairs = [(mark, iteration)]
    j = 0
    for node in list(iteration.walk())[1:]:
        for k in range(j, min(j + _ALIGN_LOOKAHEAD, len(inside))):
            if inside[k].get("name") == node.name:
                pairs.append((inside[k], node))
                j = k + 1
                break
    return pairs


def _attach_kernels(path: Path, spans: list[dict], cpu_spans: list[tuple[dict, TraceNode]],
                    origin: float) -> None:
    """CUDA path: each kernel is tied to its launch by ``correlation``; the
    launch (a runtime call such as ``cudaLaunchKernel``, or a driver call such
    as ``cuLaunchKernel``, through which cuBLAS launches its GEMMs) is tied to
    the innermost CPU op on the same thread that encloses it in time. :class:`TraceError` naming ``path`` for a kernel whose stream
    is not an integer."""
    launches = {}
    for e in spans:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in args:
            launches[args["correlation"]] = e
    if not launches:
        return
    by_tid: dict[Any, list[tuple[dict, TraceNode]]] = {}
    for e, node in cpu_spans:
        by_tid.setdefault(e.get("tid"), []).append((e, node))
    for e in spans:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = launches.get(args.get("correlation"))
        if launch is None:
            continue
        owner = _innermost(by_tid.get(launch.get("tid"), []), launch["ts"])
        if owner is None:
            continue
        stream = args.get("stream", 0) or 0
        if not isinstance(stream, int):
            raise TraceError(f"{path}: kernel {e.get('name')!r} has a non-integer stream "
                             f"{stream!r}")
        owner.kernels.append(Kernel(
            str(e.get("name")), stream, (e["ts"] - origin) * 1e-6,
            e["dur"] * 1e-6, (launch["ts"] - origin) * 1e-6, launch["dur"] * 1e-6))


def _innermost(candidates: Sequence[tuple[dict, TraceNode]], ts: float) -> TraceNode | None:
    best, best_dur = None, None
    for e, node in candidates:
        if e["ts"] <= ts <= e["ts"] + e["dur"] and (best_dur is None or e["dur"] < best_dur):
            best, best_dur = node, e["dur"]
    return best
