"""The shared host behind one hook: :class:`HostModel` reproduces, exactly, the
corrections the walk and the multi-rank prediction used to apply inline.

A seeded generator draws task lists and rank setups; each is run through
:func:`simulate` / :func:`simulate_ranks` / :func:`predict_ranks` with a
:class:`HostModel` and through a straightforward reference below (the walk with
every correction written inline, as before the hook), and the results must be
equal to the last bit."""

import math
import random
from types import SimpleNamespace

import pytest

from perfmodel.e2e.ranks import predict_ranks
from perfmodel.measure.contention import WAKE_WORK_S, Contention
from perfmodel.measure.drift import HostDrift
from perfmodel.simulate.host import HostModel, comm_host_share, oversubscription, progress_end
from perfmodel.simulate.predict import NON_OP_CATEGORIES, sim_tasks
from perfmodel.simulate.walk import COMM_STREAM, SimResult, SimTask, simulate, simulate_ranks
from perfmodel.trace.graph import Graph, Task
from perfmodel.trace.overheads import OverheadTable
from tests.helpers import ConstantFit

CASES = 200

# -- the reference: every correction inline ----------------------------------------------


def reference_walk(tasks, starts=(), durations=(), share=0.0, lag=0.0, ramp=0.0):
    """The walk with the multi-rank corrections inline (keyword parameters)."""
    cpu = busy = woke = 0.0
    stream_free, ready, comm_ready = {}, {}, {}
    breakdown, regions, intervals, timeline, coll_ready, waits = {}, {}, [], [], [], []

    def wait(until):
        nonlocal woke
        if until > cpu:
            if lag > 0.0:
                until += lag * (1.0 if ramp <= 0.0 else min(1.0, (busy - woke) / ramp))
            woke = busy
            waits.append((cpu, until))
        return max(cpu, until)

    def account(task, seconds):
        breakdown[task.category] = breakdown.get(task.category, 0.0) + seconds
        if task.region:
            regions[task.region] = regions.get(task.region, 0.0) + seconds

    for task in tasks:
        if comm_ready and not task.kernels:
            cpu = wait(max([cpu, *(comm_ready.get(t, 0.0) for t in task.inputs)]))
        start = cpu
        cpu += task.host_s
        busy += task.host_s
        if task.host_s > 0:
            timeline.append(("cpu", task.name, start, cpu))
        deps = max((ready.get(t, 0.0) for t in task.inputs), default=0.0)
        if not task.kernels:
            account(task, task.host_s)
            for t in task.outputs:
                ready[t] = deps
                comm_ready.pop(t, None)
        n = len(task.kernels)
        for i, (stream, dur) in enumerate(task.kernels):
            launch = cpu if task.collective else start + task.host_s * (i + 1) / (n + 1)
            begin = max(launch, stream_free.get(stream, 0.0), deps)
            if task.collective:
                k = len(coll_ready)
                coll_ready.append(begin)
                begin = max(begin, starts[k]) if k < len(starts) else begin
                cpu += share * (dur if task.cpu_s is None else task.cpu_s / n)
                dur = durations[k] if k < len(durations) else dur
            stream_free[stream] = begin + dur
            intervals.append((begin, begin + dur))
            account(task, dur)
            timeline.append((f"stream {stream}", task.name, begin, begin + dur))
            if i == n - 1:
                for t in task.outputs:
                    ready[t] = begin + dur
                    if task.collective:
                        comm_ready[t] = begin + dur
        if task.sync and stream_free:
            cpu = wait(max(cpu, max(stream_free.values())))
    total = max([cpu, *stream_free.values()])
    active = union_length(intervals)
    return SimResult(total, breakdown, regions, busy, active,
                     total - active if intervals else 0.0, timeline, coll_ready, waits, cpu)


def union_length(intervals):
    total, block = 0.0, None  # block: the [start, end] of the merged intervals so far
    for start, end in sorted(intervals):
        if block is None or start > block[1]:
            total += block[1] - block[0] if block else 0.0
            block = [start, end]
        else:
            block[1] = max(block[1], end)
    return total + (block[1] - block[0] if block else 0.0)


def reference_ranks(ranks, share=0.0, lag=0.0, ramp=0.0):
    """Synchronised starts and loaded durations, iterated as simulate_ranks does."""
    colls = [[t for t in tasks if t.collective] for tasks in ranks]
    n = len(colls[0])
    loaded = any(t.loaded_s is not None for c in colls for t in c)
    starts, durations = [0.0] * n, []
    for _ in range(3 * n + 1):
        results = [reference_walk(t, starts, durations, share, lag, ramp) for t in ranks]
        latest = [max(r.collective_ready_s[k] for r in results) for k in range(n)]
        settled, starts = latest == starts, latest
        if loaded:
            now = [max(progress_end(s, sum(d for _, d in c[k].kernels),
                                    sum(d for _, d in c[k].kernels) if c[k].loaded_s is None
                                    else c[k].loaded_s, r.host_waits_s, r.host_end_s)
                       for c, r in zip(colls, results)) - s for k, s in enumerate(starts)]
            settled = settled and len(now) == len(durations) and all(
                abs(a - b) <= 1e-9 for a, b in zip(now, durations))
            durations = now
        if settled:
            break
    return [reference_walk(t, starts, durations, share, lag, ramp) for t in ranks], starts


# -- random inputs ----------------------------------------------------------------------


def seconds(rng, scale=1e-3):
    r = rng.random()
    return 0.0 if r < 0.08 else round(rng.uniform(0, 4 * scale), 6) if r < 0.15 \
        else rng.uniform(0, scale)


def sim_task(rng, kind):
    io = dict(inputs=tuple(rng.sample(range(8), rng.randint(0, 3))),
              outputs=tuple(rng.sample(range(8), rng.randint(0, 2))),
              region=rng.choice([None, "fwd"]), sync=rng.random() < 0.12)
    if kind == "host":
        return SimTask("op", rng.choice(["gemm", "optim"]), seconds(rng), **io)
    if kind == "device":
        kernels = [(rng.randint(0, 2), seconds(rng)) for _ in range(rng.randint(1, 3))]
        return SimTask("kernel", "gemm", seconds(rng, 1e-4), kernels, **io)
    io["inputs"] = io["outputs"] = io["outputs"] or (rng.randrange(8),)
    idle = [seconds(rng) for _ in range(1 if rng.random() < 0.85 else 2)]
    return SimTask("all_reduce", "communication", seconds(rng, 1e-4),
                   [(COMM_STREAM, d) for d in idle], collective=True,
                   cpu_s=rng.choice([None, seconds(rng)]),
                   loaded_s=rng.choice([None, sum(idle) * rng.uniform(0.5, 10.0)]), **io)


def task_list(rng, collectives):
    kinds = [rng.choice(["host", "host", "device"]) for _ in range(rng.randint(1, 15))]
    for _ in range(collectives):
        kinds.insert(rng.randint(0, len(kinds)), "collective")
    return [sim_task(rng, kind) for kind in kinds]


def host_figures(rng):
    return dict(comm_host_share=rng.choice([0.0, 1.0, rng.random()]),
                wake_lag_s=rng.choice([0.0, seconds(rng, 5e-4)]),
                wake_ramp_s=rng.choice([0.0, seconds(rng, 4e-3)]))


def as_reference(figures):
    return figures["comm_host_share"], figures["wake_lag_s"], figures["wake_ramp_s"]


# -- the walk -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(CASES))
def test_one_walk_on_a_shared_host_is_the_reference_walk(seed):
    rng = random.Random(seed)
    tasks = task_list(rng, rng.randint(0, 3))
    m = sum(len(t.kernels) for t in tasks if t.collective)
    starts = [seconds(rng, 3e-3) for _ in range(rng.randint(0, m + 1))]
    durations = [seconds(rng) for _ in range(rng.randint(0, m + 1))]
    figures = host_figures(rng)
    host = HostModel(**figures).synced(starts, durations)
    assert simulate(tasks, host=host) == reference_walk(tasks, starts, durations,
                                                       *as_reference(figures))
    # no host is the plain walk, and so is a host that changes nothing
    assert simulate(tasks) == simulate(tasks, host=HostModel()) == reference_walk(tasks)


@pytest.mark.parametrize("seed", range(CASES))
def test_ranks_on_a_shared_host_are_the_reference_ranks(seed):
    rng = random.Random(10_000 + seed)
    collectives = rng.randint(0, 3)
    ranks = [task_list(rng, collectives) for _ in range(rng.randint(1, 4))]
    figures = host_figures(rng) if rng.random() < 0.7 else None
    result = simulate_ranks(ranks, host=None if figures is None else HostModel(**figures))
    walks, starts = reference_ranks(ranks, *(as_reference(figures) if figures else ()))
    assert result.ranks == walks and result.collective_start_s == starts
    assert result.total_s == max(r.total_s for r in walks)


# -- pricing a rank's work ------------------------------------------------------------------

OPS = {"linear": {"B": 136, "IN": 344, "OUT": 8, "GRAD_INPUT": 1},
       "relu": {"ROWS": 571, "COLS": 16}, "sgd_foreach": {"NTENSORS": 14, "NUMEL": 37017}}


def graph(rng, collectives):
    tasks = []
    for _ in range(rng.randint(1, 10)):
        kind = rng.choice(["op", "op", "overhead", "unmodelled"])
        io = dict(inputs=tuple(rng.sample(range(6), rng.randint(0, 2))),
                  outputs=tuple(rng.sample(range(6), rng.randint(0, 1))))
        if kind == "op":
            op = rng.choice(list(OPS))
            tasks.append(Task("op", f"aten::{op}", "gemm", op=op, direction="forward",
                              dtype="float32", params=OPS[op], **io))
        elif kind == "overhead":
            tasks.append(Task("overhead", "T1", "overhead"))
        else:
            tasks.append(Task("unmodelled", "aten::foo", "unmodelled", bytes=1e5, **io))
    for _ in range(collectives):
        out = (rng.randrange(6),)
        tasks.insert(rng.randint(0, len(tasks)), Task(
            "collective", "c10d::allreduce_", "communication", op="all_reduce",
            params={"world_size": 2, "bytes": 4096}, inputs=out, outputs=out))
    return Graph(tasks, None)


def reference_predict(graphs, fit, table, share, comm, contention, drift):
    """predict_ranks with the corrections inline, as before the HostModel."""
    from perfmodel.e2e.ranks import comm_pricer

    def beside(task, fit_s):
        now_s = fit_s if drift is None else drift.seconds(
            task.op, task.params, task.dtype, task.direction, fit_s)
        return now_s * share if contention is None else contention.seconds(
            task.op, task.params, task.dtype, task.direction, now_s)

    ranks = []
    for g in graphs:
        tasks, _ = sim_tasks(g, fit, table, False, None, comm_pricer(fit), beside)
        for task in tasks:
            if task.category in NON_OP_CATEGORIES:
                task.host_s *= share
            if task.cpu_s is not None:
                task.cpu_s *= share
        ranks.append(tasks)
    lag = 0.0 if contention is None else contention.wake_lag_s
    return reference_ranks(ranks, comm, lag, WAKE_WORK_S[0] * share)


@pytest.mark.parametrize("seed", range(CASES // 4))
def test_a_rank_priced_for_a_shared_host_is_the_reference(seed):
    rng = random.Random(20_000 + seed)
    collectives = rng.randint(0, 2)
    graphs = [graph(rng, collectives) for _ in range(2)]
    fit = ConstantFit({"forward": seconds(rng) + 1e-6, "host_cpu": seconds(rng),
                       "loaded": seconds(rng, 5e-3)}, estimator=SimpleNamespace(world_=[2]))
    table = OverheadTable({"T1": seconds(rng, 1e-5)}, {}, seconds(rng, 1e-5), 3e10, ())
    k = rng.uniform(1.0, 4.0)
    contention = rng.choice([None, Contention(k, 3e10, 3e10 / k, 2, rng.uniform(1.0, k),
                                              wake_lag_s=rng.choice([0.0, 1e-3]))])
    drift = rng.choice([None, HostDrift(rng.uniform(0.5, 2), rng.uniform(0.5, 2), 3e10)])
    world, threads, cores = 2, 1, rng.choice([1, 2, 4])
    host = HostModel.of_ranks(world, threads, cores, contention, drift)
    walks, starts = reference_predict(graphs, fit, table, host.cpu_share, host.comm_host_share,
                                      contention, drift)
    result = predict_ranks(graphs, fit, table, host=host)
    assert [r.sim for r in result.ranks] == walks and result.collective_start_s == starts
    assert result.predicted_s == max(r.predicted_s for r in result.ranks)
    # no host prices as the host that changes nothing
    plain = predict_ranks(graphs, fit, table)
    assert plain == predict_ranks(graphs, fit, table, host=HostModel())
    assert [r.sim for r in plain.ranks] == [r.sim for r in predict_ranks(
        graphs, fit, table, host=HostModel()).ranks]
    assert [r.sim for r in plain.ranks] == reference_predict(graphs, fit, table, 1.0, 0.0,
                                                             None, None)[0]


def test_the_ranks_host_follows_the_contention_where_measured():
    contention = Contention(3.0, 3e10, 1e10, 4, compute_slowdown=2.1, wake_lag_s=2e-3)
    measured = HostModel.of_ranks(4, 1, 2, contention)
    assert (measured.cpu_share, measured.wake_lag_s) == (2.1, 2e-3)
    assert measured.wake_ramp_s == WAKE_WORK_S[0] * 2.1
    assert measured.comm_host_share == comm_host_share(4, 1, 2) == 0.0
    guessed = HostModel.of_ranks(4, 1, 2)
    assert guessed.cpu_share == oversubscription(4, 1, 2) == 2.0 and guessed.wake_lag_s == 0.0
    assert HostModel.of_ranks(2, 1, 2).comm_host_share == 1.0


def test_an_op_is_moved_by_the_drift_then_slowed_by_the_contention():
    task = Task("op", "aten::relu", "elementwise", op="relu", direction="forward",
                dtype="float32", params=OPS["relu"])
    drift = HostDrift(2.0, 1.5, 3e10)
    contention = Contention(2.0, 3e10, 1.5e10, 2, compute_slowdown=1.2)
    fit_s = 1e-4
    now_s = drift.seconds("relu", OPS["relu"], "float32", "forward", fit_s)
    assert HostModel(3.0, drift=drift).op_seconds(task, fit_s) == now_s * 3.0
    assert HostModel(3.0, drift=drift, contention=contention).op_seconds(task, fit_s) == \
        contention.seconds("relu", OPS["relu"], "float32", "forward", now_s)
    assert HostModel().op_seconds(task, fit_s) == fit_s


def test_a_walk_keeps_its_own_wake_ups():
    """Each walk starts from a host that has not woken yet, whatever walked before."""
    rank = [SimTask("op", "gemm", 1.0), SimTask("c", "communication", 0.0, [(COMM_STREAM, 0.5)],
                                               inputs=(1,), outputs=(1,), collective=True),
            SimTask("op", "gemm", 0.2, inputs=(1,))]
    host = HostModel(wake_lag_s=0.3, wake_ramp_s=4.0)
    first, second = simulate(rank, host=host), simulate(rank, host=host)
    assert first == second and first.total_s == pytest.approx(1.5 + 0.075 + 0.2)


@pytest.mark.parametrize("figures, message", [
    (dict(comm_host_share=1.5), r"comm_host_share must be in \[0, 1\]"),
    (dict(wake_lag_s=-1e-3), "wake-up lag and its ramp must be >= 0 s"),
    (dict(wake_ramp_s=-1.0), "wake-up lag and its ramp must be >= 0 s"),
])
def test_bad_figures_are_refused(figures, message):
    with pytest.raises(ValueError, match=message):
        HostModel(**figures)
