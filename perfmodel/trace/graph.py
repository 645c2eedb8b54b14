"""From an execution trace to the graph the simulator walks.

One iteration of a trace becomes a flat list of :class:`Task` in execution
order. Each trace node is mapped through the op definitions
(:mod:`perfmodel.ops`, the same ones the microbenchmarks use):

- a node named in some op's ``trace_names`` whose ``params_from_node`` reads
  a config is an **op task** (forward);
- an autograd ``evaluate_function`` node is the **backward** of the forward op
  whose subtree recorded the same sequence number: the first such node of an
  op instance is an op task (``direction="backward"``; the microbenchmark
  times autograd's whole backward of the op), later ones are **covered** by it;
- a torch.distributed collective (a c10d node), forward or inside a backward
  node, is a **collective task** (:func:`match_collective`);
- a node that matches nothing but has matching descendants is opened: its
  children are planned in its place, with host-overhead tasks between them;
- anything else is **unmodelled**: kept as one task, named, with the bytes its
  tensors hold and the memory-bound work of its leaf nodes by category
  (``Task.parts``, :mod:`perfmodel.trace.categories`), and priced by the
  generic model from those parts (:mod:`perfmodel.fit.generic`) or, without
  parts, by the overhead table. Nothing is dropped.

Overhead tasks carry the taxonomy of :mod:`perfmodel.trace.overheads` (T1 between
siblings, T2 from a parent's start to its first child, T3 from the last
child to the parent's end).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from perfmodel.ops import OPS, OpDef
from perfmodel.trace.categories import AUTOGRAD_PREFIX as _AUTOGRAD_PREFIX
from perfmodel.trace.categories import add_part, leaf_category
from perfmodel.trace.parse import Trace, TraceNode

#: ET tensor element types -> the dtype names the op definitions use.
_DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16",
           "double": "float64"}


@dataclass
class Task:
    """One step of the simulated iteration, on the host thread.

    ``kind`` is ``"op"`` (predicted by a fitted op predictor), ``"covered"``
    (part of an earlier op task's backward; no time of its own),
    ``"unmodelled"`` (priced by the overhead table from ``bytes``) or
    ``"overhead"`` (a gap of the taxonomy; ``name`` is its table key) or
    ``"collective"`` (a torch.distributed collective, forward or backward; its
    ``outputs`` are every tensor it reads or writes).
    ``measured_s`` is the node's duration in the trace, when timed, and
    ``waited_s`` the part of it the host spent waiting for the device (CUDA
    synchronize calls; see :data:`perfmodel.trace.parse.HOST_WAIT_CALLS`).
    """

    kind: str
    name: str
    family: str
    op: str | None = None
    direction: str | None = None
    dtype: str | None = None
    params: dict[str, int] | None = None
    bytes: float = 0.0
    measured_s: float | None = None
    waited_s: float = 0.0
    region: str | None = None
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    kernels: list = field(default_factory=list)  # measured Kernels (CUDA traces)
    sync: bool = False  # the host waits for the device after this task
    n_nodes: int = 1  # trace nodes the task spans (itself and its descendants)
    #: the node's memory-bound work: category -> [leaf nodes, bytes] (see
    #: :mod:`perfmodel.trace.categories`), which the generic model prices when
    #: no op predictor does
    parts: dict = field(default_factory=dict)
    #: CUDA: host seconds from the node's start to its first kernel launch and
    #: from its last launch's end to its own end (None without kernels or times)
    launch_gaps: tuple[float, float] | None = None


@dataclass
class Graph:
    """The tasks of one iteration, and what could not be mapped."""

    tasks: list[Task]
    measured_s: float | None  # the iteration's duration in the trace
    profiler_overhead_s: float = 0.0  # the profiler's cost per recorded op (s)
    #: the profiler's further cost per kernel launch on CUDA (s)
    profiler_launch_overhead_s: float = 0.0

    def unmodelled(self) -> list[tuple[str, int, float | None]]:
        """``(name, count, share of the traced iteration time)`` of every
        unmodelled node name, largest share first (share None when untimed)."""
        counts: Counter = Counter()
        times: Counter = Counter()
        timed = self.measured_s is not None and self.measured_s > 0
        for task in self.tasks:
            if task.kind == "unmodelled":
                counts[task.name] += 1
                times[task.name] += task.measured_s or 0.0
        rows = [(name, n, times[name] / self.measured_s if timed else None)
                for name, n in counts.items()]
        return sorted(rows, key=lambda r: (-(r[2] or 0.0), -r[1], r[0]))

    def op_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.kind == "op"]


def _index_ops(ops: Iterable[OpDef]) -> dict[str, list[OpDef]]:
    by_name: dict[str, list[OpDef]] = {}
    for op in ops:
        for name in op.trace_names:
            by_name.setdefault(name, []).append(op)
    return by_name


#: Op family of the torch.distributed collectives (:mod:`perfmodel.ops.collective`).
COLLECTIVE_FAMILY = "collective"
#: (registry version, ops by trace name, collectives by trace name): rebuilt when an
#: op is registered, so ops registered after this module was imported map too.
_INDEX: tuple[int, dict[str, list[OpDef]], dict[str, list[OpDef]]] = (-1, {}, {})


def _op_index() -> tuple[dict[str, list[OpDef]], dict[str, list[OpDef]]]:
    """Every registered op by trace name, and the collectives alone."""
    global _INDEX
    version = OPS.version
    if _INDEX[0] != version:
        ops = list(OPS.values())
        _INDEX = (version, _index_ops(ops),
                  _index_ops(op for op in ops if op.family == COLLECTIVE_FAMILY))
    return _INDEX[1], _INDEX[2]


def _by_trace_name() -> dict[str, list[OpDef]]:
    return _op_index()[0]


def _collectives() -> dict[str, list[OpDef]]:
    return _op_index()[1]


def node_dtype(node: TraceNode) -> str | None:
    """The dtype of the node's first floating tensor input, as op definitions
    name it; for a node without tensor inputs (an optimizer step's scope), that
    of its first descendant with one. 0-d tensors (an optimizer's float32 step
    counters beside bfloat16 parameters) count only when nothing else does."""
    for scalars in (False, True):
        for n in node.walk():
            for typ, shape in zip(n.input_types, list(n.input_shapes) + [None] * len(
                    n.input_types)):
                if not scalars and shape == []:
                    continue
                for inner in _tensor_types(str(typ)):
                    dtype = _DTYPES.get(inner)
                    if dtype is not None:
                        return dtype
    return None


def _tensor_types(typ: str) -> list[str]:
    """The element types inside ``Tensor(...)`` in an ET input type string
    (``"GenericList[Tensor(float),Tensor(long)]"``: float, long); an unclosed
    ``Tensor(`` ends the list."""
    out = []
    start = 0
    while True:
        i = typ.find("Tensor(", start)
        j = typ.find(")", i) if i >= 0 else -1
        if j < 0:
            return out
        out.append(typ[i + len("Tensor("):j])
        start = j + 1


def match_node(node: TraceNode) -> tuple[OpDef, dict[str, int], str] | None:
    """``(op, params, dtype)`` of the first op definition that recognises the
    forward node, or None."""
    candidates = _by_trace_name().get(node.name)
    if not candidates:
        return None
    dtype = node_dtype(node)
    for op in candidates:
        # an op whose input is a mask (nonzero) is priced in its one dtype
        op_dtype = op.dtypes[0] if dtype is None and op.untyped_input else dtype
        if op_dtype not in op.dtypes:
            continue
        params = op.params_from_node(node)
        if params is not None:
            return op, {p: int(params[p]) for p in op.params}, op_dtype
    return None


def match_collective(node: TraceNode, world_size: int | None) -> tuple[OpDef, dict[str, int]] | None:
    """``(op, params)`` of a collective node: from its ``record_param_comms``
    (NCCL), else from the c10d node and the trace's ``world_size`` (gloo)."""
    for op in _collectives().get(node.name, ()):
        params = op.params_from_node(node)
        if params is None and world_size is not None:
            params = op.params_from_c10d(node, world_size)
        if params is not None:
            return op, {p: int(params[p]) for p in op.params}
    return None


def tensor_bytes(node: TraceNode) -> float:
    """Bytes of the distinct tensors among the node's inputs and outputs (B);
    0 for a view (:attr:`TraceNode.is_view`), which moves none of them."""
    if node.is_view:
        return 0.0
    sizes: dict[int, float] = {}
    for _, storage, _, numel, elem_size, _ in node.tensors("inputs") + node.tensors("outputs"):
        sizes[storage] = max(sizes.get(storage, 0.0), float(numel * elem_size))
    return float(sum(sizes.values()))


def category(name: str) -> str:
    """Overhead category of a node: ``iteration``, ``autograd``, ``optimizer``
    or ``op``."""
    if name.startswith(_AUTOGRAD_PREFIX):
        return "autograd"
    if name.startswith("Optimizer."):
        return "optimizer"
    if name == "perfmodel::iteration":
        return "iteration"
    return "op"


class _Planner:
    def __init__(self, world_size: int | None = None,
                 host_waits: list[tuple[float, float]] | None = None):
        self.world_size = world_size
        self.host_waits = host_waits or []
        self.matches: dict[int, tuple | None] = {}
        self.tasks: list[Task] = []
        self.seq_owner: dict[int, int] = {}  # seq_id -> index of the forward op task
        #: forward task index -> index of its backward op task (the first node of its backward)
        self.backward_task: dict[int, int] = {}

    def plan_children(self, parent: TraceNode, children: list[TraceNode], backward: bool,
                      region: str | None) -> None:
        cat = category(parent.name)
        if not children:
            return
        self._gap_task(f"T2.{cat}", region, parent.ts_s, children[0].ts_s)
        for i, child in enumerate(children):
            if i:
                self._gap_task(f"T1.{cat}.{category(child.name)}", region,
                               children[i - 1].end_s, child.ts_s)
            self.plan(child, backward, region)
        self._gap_task(f"T3.{cat}", region, children[-1].end_s, parent.end_s)

    def _gap_task(self, key: str, region: str | None, start: float | None,
                  end: float | None) -> None:
        self.tasks.append(Task("overhead", key, "host overhead", region=region,
                               measured_s=_gap(start, end),
                               waited_s=self._waited(start, end)))

    def _waited(self, start: float | None, end: float | None) -> float:
        """Seconds of ``[start, end]`` the host spent waiting for the device."""
        if start is None or end is None:
            return 0.0
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.host_waits
                   if a < end and b > start)

    def plan(self, node: TraceNode, backward: bool, region: str | None) -> None:
        collective = match_collective(node, self.world_size) if node.name in _collectives() \
            else None
        if collective is not None:
            op, params = collective
            task = self._task(node, "collective", op.family, region, op=op.name,
                              direction="forward", dtype=node_dtype(node), params=params)
            task.outputs = tuple(dict.fromkeys(task.inputs + task.outputs))
            task.sync = _is_blocking(node)
            self.tasks.append(task)
            return
        if node.name.startswith(_AUTOGRAD_PREFIX):
            if self._plan_backward(node, region):
                return
            backward = True
        elif not backward:
            matched = self.match(node)
            if matched is not None:
                op, params, dtype = matched
                index = len(self.tasks)
                self.tasks.append(self._task(node, "op", op.family, region, op=op.name,
                                             direction="forward", dtype=dtype, params=params))
                self._own_sequence_numbers(node, index)
                return
        if not backward and _is_region(node):
            region = node.name.split("::", 1)[1]
        if self._has_match(node, backward):
            self.plan_children(node, node.children, backward, region)
        else:
            if not backward:
                self._own_sequence_numbers(node, None)
            self.tasks.append(self._task(node, "unmodelled", "unmodelled", region))

    def _own_sequence_numbers(self, node: TraceNode, index: int | None) -> None:
        """Give the autograd sequence numbers in ``node``'s subtree to forward
        task ``index`` (None: an unmodelled node, whose backward no op prices).
        An op that makes no autograd node (``nonzero``, any op on tensors that
        need no gradient) records the number that the next op's node gets, so
        the last forward node with a number owns it: later nodes replace."""
        for n in node.walk():
            if n.seq_id >= 0:
                self.seq_owner[n.seq_id] = index

    def _plan_backward(self, node: TraceNode, region: str | None) -> bool:
        """Plan an ``evaluate_function`` node as its forward op's backward;
        False when no forward op owns its sequence number."""
        function = node.children[0] if node.children else None
        seq = function.seq_id if function is not None else -1
        owner = self.seq_owner.get(seq)
        if owner is None:
            return False
        fwd = self.tasks[owner]
        op, params = OPS[fwd.op], fwd.params
        if "backward" not in op.directions:
            via = op.backward_via(params)
            if via is None:
                return False
            op, params = OPS[via[0]], via[1]
        params = op.backward_params(params, node)
        task = self._task(node, "op", op.family, fwd.region, op=op.name,
                          direction="backward", dtype=fwd.dtype, params=params)
        first = self.backward_task.get(owner)
        if first is not None:
            # a later node of the same backward: its kernels are part of the op's
            # backward, which the first node's task prices (and launches)
            task.kind = "covered"
            self.tasks[first].kernels.extend(task.kernels)
            task.kernels = []
        else:
            self.backward_task[owner] = len(self.tasks)
        self.tasks.append(task)
        return True

    def match(self, node: TraceNode):
        if node.id not in self.matches:
            self.matches[node.id] = match_node(node)
        return self.matches[node.id]

    def _has_match(self, node: TraceNode, backward: bool) -> bool:
        for n in node.walk():
            if n is node:
                continue
            if n.name.startswith(_AUTOGRAD_PREFIX) or n.name in _collectives():
                return True
            if not backward and (self.match(n) is not None or _is_region(n)):
                return True
        return False

    def _task(self, node: TraceNode, kind: str, family: str, region: str | None, **kw) -> Task:
        return Task(kind, node.name, family, bytes=tensor_bytes(node), measured_s=node.dur_s,
                    waited_s=self._waited(node.ts_s, node.end_s), region=region,
                    inputs=tuple(node.tensor_ids("inputs")),
                    outputs=tuple(node.tensor_ids("outputs")),
                    kernels=[k for n in node.walk() for k in n.kernels],
                    sync=_is_sync(node), n_nodes=sum(1 for _ in node.walk()),
                    parts=node_parts(node), launch_gaps=launch_gaps(node), **kw)


def node_parts(node: TraceNode) -> dict[str, list]:
    """The memory-bound work of ``node``'s subtree: per category (see
    :mod:`perfmodel.trace.categories`), ``[leaf nodes, bytes]``. A node counts
    itself only when none of its descendants has a category (a composite op's
    work is that of the ops it calls)."""
    parts: dict[str, list] = {}
    for child in node.children:
        for cat, (count, nbytes) in node_parts(child).items():
            add_part(parts, cat, nbytes)
            parts[cat][0] += count - 1
    if not parts:
        cat = leaf_category(node.name, node.is_view, node.tensors("inputs"),
                            node.tensors("outputs"))
        if cat is not None:
            add_part(parts, cat, tensor_bytes(node))
    return parts


def launch_gaps(node: TraceNode) -> tuple[float, float] | None:
    """(s from ``node``'s start to its first kernel launch, s from its last
    launch's end to its end), both floored at 0; None when its subtree launched
    no kernel or it is untimed."""
    kernels = [k for n in node.walk() for k in n.kernels]
    if not kernels or node.ts_s is None or node.end_s is None:
        return None
    first = min(k.launch_ts_s for k in kernels)
    last = max(k.launch_ts_s + k.launch_dur_s for k in kernels)
    return max(0.0, first - node.ts_s), max(0.0, node.end_s - last)


def _gap(start: float | None, end: float | None) -> float | None:
    """``end - start`` (s), clamped at 0; None when either is untimed."""
    return None if start is None or end is None else max(0.0, end - start)


def _is_region(node: TraceNode) -> bool:
    """A ``perfmodel.trace.region`` scope (``perfmodel.region::<name>``)."""
    return node.name.startswith("perfmodel.region::")


def _is_blocking(node: TraceNode) -> bool:
    """A c10d collective called with ``async_op=False`` (its ``asyncOp``, the
    last bool argument, is false): the caller waits for it at once."""
    flags = [v for v in node.input_values if isinstance(v, bool)]
    return bool(flags) and not flags[-1]


def _is_sync(node: TraceNode) -> bool:
    """Ops that make the host wait for the device (a device-to-host read)."""
    return node.name in ("aten::item", "aten::_local_scalar_dense", "aten::nonzero") or \
        (node.name in ("aten::to", "aten::_to_copy", "aten::copy_")
         and any(k.name.startswith("Memcpy DtoH") for k in node.kernels))


def build_graph(trace: Trace, iteration: TraceNode | None = None) -> Graph:
    """The task graph of ``iteration`` (default: the trace's last iteration)."""
    node = iteration if iteration is not None else trace.last_iteration()
    planner = _Planner(trace.world_size(), trace.host_waits)
    planner.plan_children(node, node.children, backward=False, region=None)
    return Graph(planner.tasks, node.dur_s, trace.profiler_overhead_s,
                 trace.profiler_launch_overhead_s)

