"""Predict an iteration from its task graph: op predictors + overhead table + simulator.

Op predictions are made in one batched call per (op, direction, dtype), not
one per node. A cold-cache op (:attr:`~perfmodel.ops.base.OpDef.cold_on_cpu`)
fitted both cold and warm on a CPU is priced between the two by the share of
its data the step leaves in the last-level cache (:func:`llc_share`). On a CPU
device an op task's host time is its predicted time; on CUDA the prediction is
device time, split over the op's kernels in the proportions the trace measured,
and the host time of the op is its launch overheads (T2.launch + n·T4 +
(n-1)·T5 + T3.launch).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, NamedTuple

from perfmodel.fit.generic import GenericModel, generic_model
from perfmodel.trace.graph import Graph, Task
from perfmodel.trace.categories import host_only
from perfmodel.ops import OPS
from perfmodel.ops.base import warm_direction
from perfmodel.simulate.result import Coverage, IterationPrediction, traced_seconds
from perfmodel.simulate.result import furthest_beyond  # noqa: F401  (its old home)
from perfmodel.simulate.walk import COMM_STREAM, SimResult, SimTask, simulate

if TYPE_CHECKING:  # type hints only: the plugin imports parse_bias at start-up
    from perfmodel.trace.overheads import OverheadTable


#: The old name of :class:`IterationPrediction`, kept for one release: other
#: modules and users' scripts still import it.
Prediction = IterationPrediction


def step_bytes(tasks: list[Task]) -> float:
    """Bytes one iteration of ``tasks`` moves: each op task's bytes moved by its
    op's definition, each other task's bytes read from its trace node."""
    total = 0.0
    for task in tasks:
        op = OPS.get(task.op) if task.kind == "op" and task.op else None
        moved = None
        if op is not None and task.params is not None:
            try:
                moved = op.size(op.complete_config(task.params), task.dtype, task.direction)[1]
            except (KeyError, ValueError, TypeError):  # params the op cannot size
                moved = None
        total += moved if moved is not None else (task.bytes or 0.0)
    return total


def shared_step_bytes(graphs: list[Graph], fit) -> float | None:
    """Bytes the iterations of ``graphs`` (ranks sharing one host's last-level
    cache) move together (:func:`step_bytes`); None when ``fit`` records no
    last-level cache, so nothing is priced by it."""
    if not getattr(fit, "llc_bytes", None):
        return None
    return sum(step_bytes(graph.tasks) for graph in graphs)


def llc_share(llc_bytes: int | None, moved_bytes: float) -> float:
    """Share of a cold-cache op's data that a step moving ``moved_bytes`` between
    two uses of it still finds in a last-level cache of ``llc_bytes``: all of it
    when the step moves no more than the cache holds, none when it moves at
    least twice that (what a cold timing writes to evict the cache,
    :meth:`~perfmodel.ops.base.OpDef.cpu_flush_bytes`), linear in between. A
    step repeats its accesses in the same order every iteration, and a cache
    that replaces its least recently used lines keeps nothing of such a cycle
    once it is larger than the cache; the linear part stands for replacement
    policies that keep some of it. 0 (priced cold) when the cache size is
    unknown."""
    if not llc_bytes or llc_bytes <= 0:
        return 0.0
    return min(1.0, max(0.0, 2.0 - moved_bytes / llc_bytes))


def op_predictions(tasks: list[Task], fit, moved_bytes: float | None = None
                   ) -> tuple[list[float | None], dict[str, int]]:
    """Predicted seconds per task (None where no fitted predictor exists), in one
    batched predictor call per (op, direction, dtype), calls below the op's
    measured sizes priced by :func:`below_measured`; and
    the count of op tasks per ``op.direction`` that had no predictor.

    A cold-cache op with a warm predictor in ``fit`` and a fit that records its
    CPU's last-level cache (``fit.llc_bytes``) is priced ``s * warm + (1 - s) *
    cold``, ``s`` the :func:`llc_share` of a step moving ``moved_bytes`` (None:
    :func:`step_bytes` of ``tasks``; ranks sharing a host pass all of theirs)."""
    out: list[float | None] = [None] * len(tasks)
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, task in enumerate(tasks):
        if task.kind == "op":
            groups.setdefault((task.op, task.direction, task.dtype), []).append(i)
    missing: dict[str, int] = {}
    llc = getattr(fit, "llc_bytes", None)
    share = None
    for (op, direction, dtype), indices in groups.items():
        try:
            predictor = fit.predictor(op, direction)
        except LookupError:
            missing[f"{op}.{direction}"] = missing.get(f"{op}.{direction}", 0) + len(indices)
            continue
        definition = OPS.get(op)
        params = [tasks[i].params for i in indices]
        values = below_measured(definition, direction, dtype, predictor, params)
        warm = _warm_predictor(fit, op, direction) if llc else None
        if warm is not None:
            if share is None:
                share = llc_share(llc, step_bytes(tasks) if moved_bytes is None else moved_bytes)
            if share > 0:
                warm_values = below_measured(definition, direction, dtype, warm, params)
                values = [share * w + (1.0 - share) * c for w, c in zip(warm_values, values)]
        for i, value in zip(indices, values):
            out[i] = max(0.0, float(value))
    return out, missing


def warm_share(graphs: list[Graph], fit) -> tuple[float, float] | None:
    """(the :func:`llc_share` that prices the cold-cache ops of ``graphs``, the
    bytes their iteration moves), for ranks sharing one host when several;
    None when ``fit`` prices none of their ops between warm and cold (no
    recorded last-level cache, or no warm predictor for any op task of theirs)."""
    moved = shared_step_bytes(graphs, fit)
    if moved is None or not any(task.kind == "op" and _warm_predictor(fit, task.op, task.direction)
                                for graph in graphs for task in graph.tasks):
        return None
    return llc_share(fit.llc_bytes, moved), moved


def _warm_predictor(fit, name: str, direction: str):
    """``fit``'s warm predictor of cold-cache op ``name`` in ``direction``, or None."""
    op = OPS.get(name)
    if op is None or not op.cold_on_cpu:
        return None
    try:
        return fit.predictor(name, warm_direction(direction))
    except LookupError:
        return None


def below_measured(op, direction: str, dtype: str, predictor, params_list: list) -> list[float]:
    """Predicted seconds of ``params_list``; a call with a size below the op's
    smallest measured one (:meth:`~perfmodel.ops.base.OpDef.raised_to_measured`),
    where a predictor may extrapolate wildly, is priced from the raised config
    instead: its time scaled by the share of the raised config's work the call
    does (the larger of the FLOP and byte ratios), and never below the fastest
    prediction over the op's ``smoke`` and ``quick`` configs."""
    if op is None:
        return [float(v) for v in predictor.predict(dtype, params_list)]
    raised = [op.raised_to_measured(p) for p in params_list]
    lowered = [i for i, (p, r) in enumerate(zip(params_list, raised)) if p != r]
    measured = [c for profile in ("smoke", "quick") for c in op.configs(profile, workloads=False)] \
        if lowered else []
    values = [float(v) for v in predictor.predict(dtype, raised + measured)]  # one batched call
    values, floor = values[:len(raised)], min(values[len(raised):], default=0.0)
    for i in lowered:
        (f, b), (fr, br) = (op.size(params_list[i], dtype, direction),
                            op.size(raised[i], dtype, direction))
        share = min(1.0, max(f / fr if fr > 0 else 0.0, b / br if br > 0 else 0.0))
        values[i] = max(floor, values[i] * share)
    return values


#: An op call needing this many times the FLOPs (or bytes) of the largest config
#: its predictor was fitted on is reported as predicted beyond the fit.
BEYOND_FIT_FACTOR = 4.0


def beyond_fit(tasks: list[Task], fit, factor: float = BEYOND_FIT_FACTOR
               ) -> dict[str, tuple[int, float]] | None:
    """Per ``op.direction``, (calls, largest ratio) of the op tasks that need
    more than ``factor`` times the FLOPs or bytes of the largest config their
    predictor was fitted on (:meth:`perfmodel.fit.fitting.OpAccuracy.beyond`): the
    fit extrapolates there. None when no op task's predictor recorded its range
    (fits saved before it was recorded)."""
    accuracy = getattr(fit, "accuracy", {})
    out: dict[str, tuple[int, float]] = {}
    known = False
    for task in tasks:
        acc = accuracy.get((task.op, task.direction)) if task.kind == "op" else None
        ratio = acc.beyond(task.params, task.dtype) if acc is not None else None
        known = known or ratio is not None
        if ratio is not None and ratio > factor:
            key = f"{task.op}.{task.direction}"
            n, worst = out.get(key, (0, 0.0))
            out[key] = (n + 1, max(worst, ratio))
    return out if known else None


def parse_bias(spec: str) -> dict[str, float]:
    """``"linear=1.1,overhead=1.05"`` -> ``{"linear": 1.1, "overhead": 1.05}``.

    Keys are an op (``linear``), an op and direction (``linear.backward``) or
    ``overhead`` (host gaps and unmodelled nodes); values are factors > 0.
    ValueError naming the bad part otherwise."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        op, _, direction = key.partition(".")
        known = key == "overhead" or (op in OPS and direction in ("", *OPS[op].directions))
        try:
            factor = float(value)
        except ValueError:
            factor = -1.0
        if not sep or not known or not factor > 0:
            raise ValueError(f"bad bias {part!r}: expected <op>[.<direction>]=<factor> or "
                             f"overhead=<factor>, with a known op and a factor > 0")
        out[key] = factor
    return out


class CommPrice(NamedTuple):
    """A collective's predicted seconds: on the communication stream with the
    host idle (``wall_s``), of host CPU (``cpu_s``; None: all of ``wall_s``),
    and with the host computing throughout (``loaded_s``; None: ``wall_s``).
    See :mod:`perfmodel.simulate.walk`."""

    wall_s: float
    cpu_s: float | None = None
    loaded_s: float | None = None


#: The categories of the :class:`SimTask` s that :func:`sim_tasks` makes of
#: anything but an op (ops take their family's).
NON_OP_CATEGORIES = ("host overhead", "communication", "generic", "unmodelled")


def sim_tasks(graph: Graph, fit, table: OverheadTable, on_device: bool,
              bias: dict[str, float] | None = None,
              comm: Callable[[str, dict[str, int]], CommPrice] | None = None,
              host_op_s: Callable[[Task, float], float] | None = None,
              generic: GenericModel | None | bool = True,
              moved_bytes: float | None = None
              ) -> tuple[list[SimTask], dict[str, int]]:
    """The :class:`SimTask` list of ``graph``: op tasks priced by ``fit``, the rest
    by ``table``. ``on_device``: the ops run as kernels on a CUDA device.
    ``bias`` (see :func:`parse_bias`) scales predictions: a planted error, to
    check that the gate catches it. ``comm(op, params)`` prices a collective
    (:class:`CommPrice`); its issue costs the host the table's line for its
    name at 0 bytes.
    Without ``comm`` a collective is priced as an unmodelled node.
    ``host_op_s(task, seconds)`` turns an op's predicted seconds on the host
    (not on a device) into those it takes where it runs (e.g. beside other
    ranks: :meth:`perfmodel.simulate.host.HostModel.op_seconds`).
    ``generic``: the :class:`~perfmodel.fit.generic.GenericModel` that prices
    the memory-bound work (``Task.parts``) of a task no op predictor prices
    (True: the one ``fit`` teaches; False or None: the overhead table prices
    it, as it does a task without parts). ``moved_bytes``: what
    :func:`op_predictions` prices the cold-cache ops by (None: this graph's)."""
    bias = bias or {}
    if generic is True:
        generic = generic_model(fit)
    generic = generic or None
    predicted, missing = op_predictions(graph.tasks, fit, moved_bytes)
    host_factor = bias.get("overhead", 1.0)
    main_stream = _main_stream(graph) if on_device else None
    out = []
    for task, value in zip(graph.tasks, predicted):
        if value is not None:
            value *= bias.get(f"{task.op}.{task.direction}", bias.get(task.op, 1.0))
        if task.kind == "overhead":
            out.append(SimTask(task.name, "host overhead", host_factor * table.gap(task.name),
                               region=task.region))
        elif task.kind == "covered":
            continue
        elif task.kind == "collective" and comm is not None:
            price = comm(task.op, task.params)
            out.append(SimTask(task.op, "communication",
                               host_factor * table.leaf_cost(task.name, 0.0),
                               kernels=[(COMM_STREAM, price.wall_s)],
                               inputs=task.inputs, outputs=task.outputs, sync=task.sync,
                               region=task.region, collective=True, cpu_s=price.cpu_s,
                               loaded_s=price.loaded_s))
        elif task.kind == "op" and value is not None:
            if on_device and (task.kernels or main_stream is not None):
                out.append(_device_task(task, value, table, main_stream))
            else:
                if host_op_s is not None:
                    value = host_op_s(task, value)
                out.append(SimTask(f"{task.op}.{task.direction}", task.family, value,
                                   inputs=task.inputs, outputs=task.outputs, sync=task.sync,
                                   region=task.region))
        elif generic is not None and generic_priced(task, on_device):
            seconds = generic.seconds(task.parts)
            if on_device:  # the host issues it as it does an unmodelled node
                out.append(_kernels_task(task, "generic", seconds, host_factor
                                         * table.leaf_cost(task.name, task.bytes)))
            else:  # host work, as an unmodelled node's
                out.append(SimTask(task.name, "generic", seconds, inputs=task.inputs,
                                   outputs=task.outputs, sync=task.sync, region=task.region))
        else:  # unmodelled, or an op without a fitted predictor
            out.append(SimTask(task.name, "unmodelled",
                               host_factor * table.leaf_cost(task.name, task.bytes),
                               inputs=task.inputs, outputs=task.outputs, sync=task.sync,
                               region=task.region))
    return out, missing


def generic_priced(task: Task, on_device: bool) -> bool:
    """Whether the generic model prices ``task`` (one no op predictor priced):
    an unmodelled node or an op without a fitted predictor, with memory-bound
    parts and, on a device, kernels to run them."""
    return task.kind in ("unmodelled", "op") and bool(task.parts) and \
        (task.kernels != [] or not on_device)


def _main_stream(graph: Graph) -> int | None:
    """The stream most of ``graph``'s traced kernel time ran on (None without kernels)."""
    busy: dict[int, float] = {}
    for task in graph.tasks:
        for k in task.kernels:
            busy[k.stream] = busy.get(k.stream, 0.0) + k.dur_s
    return max(busy, key=busy.get) if busy else None


def _kernels_task(task: Task, category: str, device_s: float, host_s: float) -> SimTask:
    """``task`` taking ``host_s`` on the host and ``device_s`` on the device,
    spread over its traced kernels in their shares of traced time."""
    measured = sum(k.dur_s for k in task.kernels)
    n = len(task.kernels)
    return SimTask(task.name, category, host_s,
                   kernels=[(k.stream, device_s * (k.dur_s / measured if measured > 0 else 1 / n))
                            for k in task.kernels],
                   inputs=task.inputs, outputs=task.outputs, sync=task.sync, region=task.region)


def _device_task(task: Task, device_s: float, table: OverheadTable,
                 main_stream: int | None = None) -> SimTask:
    """An op on the device: its predicted time spread over its traced kernels
    in their shares of traced time; an op whose kernels the trace did not tie
    to it runs as one kernel on ``main_stream`` (a priced op on a device runs
    there, not on the host)."""
    if task.kernels:
        kernels = [(k.stream, k.dur_s) for k in task.kernels]
    else:
        kernels = [(main_stream, 1.0)]
    measured = sum(d for _, d in kernels)
    shares = [d / measured if measured > 0 else 1 / len(kernels) for _, d in kernels]
    n = len(kernels)
    host = table.gap("T2.launch") + n * table.gap("T4") + (n - 1) * table.gap("T5") \
        + table.gap("T3.launch")
    return SimTask(f"{task.op}.{task.direction}", task.family, host,
                   kernels=[(stream, device_s * s) for (stream, _), s in zip(kernels, shares)],
                   inputs=task.inputs, outputs=task.outputs, sync=task.sync, region=task.region)


def predict_graph(graph: Graph, fit, table: OverheadTable, on_device: bool = False,
                  keep_timeline: bool = True, bias: dict[str, float] | None = None,
                  iterations: int = 1) -> IterationPrediction:
    """Predict the iteration of ``graph`` (``bias``: see :func:`sim_tasks`).

    ``iterations``: on a device, the predicted time is that of one iteration of
    a block of that many run back to back (:func:`back_to_back_s`), as a
    measurement of such blocks times it; the breakdown and timeline are one
    iteration's, from idle streams."""
    tasks, missing = sim_tasks(graph, fit, table, on_device, bias)
    sim = simulate(tasks, keep_timeline=keep_timeline)
    if on_device and iterations > 1:
        sim = dataclasses.replace(sim, total_s=back_to_back_s(tasks, iterations))
    return graph_prediction(graph, sim, missing, beyond_fit(graph.tasks, fit),
                            generic=generic_model(fit) is not None, on_device=on_device)


def back_to_back_s(tasks: list[SimTask], iterations: int) -> float:
    """Seconds per iteration when ``iterations`` iterations of ``tasks`` run back
    to back: the host issues the next iteration while the device finishes the
    last, so an iteration whose host leads its kernels takes less than one
    simulated from idle streams (nothing changes where nothing overlaps, as
    on a CPU)."""
    if iterations <= 1:
        return simulate(tasks, keep_timeline=False).total_s
    return simulate(list(tasks) * iterations, keep_timeline=False).total_s / iterations


def graph_prediction(graph: Graph, sim: SimResult, missing: dict[str, int],
                     beyond: dict[str, tuple[int, float]] | None,
                     comm_priced: bool = False, generic: bool = False,
                     on_device: bool = False) -> IterationPrediction:
    """The :class:`IterationPrediction` of ``graph`` from its walk ``sim``, the op
    tasks without a predictor (``missing``, from :func:`sim_tasks`) and the ops
    beyond the fit (``beyond``, from :func:`beyond_fit`); ``comm_priced``: the
    collectives were priced by a communication predictor; ``generic``: a generic
    model priced what no op predictor did (on a device when ``on_device``)."""
    return IterationPrediction(sim.total_s, dict(sorted(sim.breakdown_s.items())),
                               dict(sorted(sim.regions_s.items())),
                               coverage(graph.tasks, missing, comm_priced, generic, on_device),
                               graph.unmodelled(),
                               missing, len(graph.tasks), graph.measured_s, beyond,
                               sim.timeline, sim=sim)


def coverage(tasks: list[Task], missing: dict[str, int], comm_priced: bool = False,
             generic: bool = False, on_device: bool = False) -> Coverage | None:
    """The :class:`~perfmodel.simulate.result.Coverage` of ``tasks`` (of one graph or
    of every rank's) priced as :func:`sim_tasks` prices them: op tasks (and the
    backward nodes they cover) by their predictor unless their ``op.direction``
    is in ``missing``, collectives by the communication predictor when
    ``comm_priced``, gaps by the overhead table, the tasks :func:`generic_priced`
    picks by the generic model when there is one (``generic``), unmodelled nodes
    that are pure host work (:func:`~perfmodel.trace.categories.host_only`) by
    the overhead table as host-only nodes, the rest unmodelled. None for an
    untimed trace."""
    op_s = overheads_s = unmodelled_s = generic_s = host_s = 0.0
    for task in tasks:
        seconds = traced_seconds(task)
        if task.kind == "overhead":
            overheads_s += seconds
        elif (task.kind in ("op", "covered") and f"{task.op}.{task.direction}" not in missing
              or task.kind == "collective" and comm_priced):
            op_s += seconds
        elif generic and generic_priced(task, on_device):
            generic_s += seconds
        elif task.kind == "unmodelled" and not task.parts and not task.kernels \
                and host_only(task.name):
            host_s += seconds
        else:
            unmodelled_s += seconds
    return Coverage.of_seconds(op_s, overheads_s, unmodelled_s, generic_s, host_s)
