"""Ranks beside each other on one host: the contention model, its measurement
and its use by the multi-rank prediction (counted, not timed)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.measure.contention import (WAKE_WORK_S, Contention, byte_rate, compute_slowdown,
                                  measure_contention, measure_wake_lag, memory_share,
                                  run_seconds, slowest_rank_slowdown, wake_lag_from_rounds)
from perfmodel.world import World, _OneRank
from perfmodel.trace.graph import Graph, Task
from perfmodel.ops import get_op
from perfmodel.trace.overheads import table_from_samples
from perfmodel.simulate.predict import sim_tasks
from tests.helpers import ConstantFit

SGD = {"NTENSORS": 14, "NUMEL": 370172}
LINEAR = {"B": 256, "IN": 100, "OUT": 256, "GRAD_INPUT": 1}

seconds = st.floats(1e-7, 10.0)
slowdowns = st.floats(1.0, 4.0)


def _contention(slowdown, bandwidth=2e10, compute=1.0):
    return Contention(slowdown, bandwidth, bandwidth / slowdown, 2, compute)


@given(st.floats(0.0, 1e12), seconds, st.floats(1e6, 1e12))
def test_memory_share_is_a_fraction(moved, t, bandwidth):
    share = memory_share(moved, t, bandwidth)
    assert 0.0 <= share <= 1.0
    if moved <= bandwidth * t:
        assert share == pytest.approx(moved / (bandwidth * t))


@given(slowdowns, seconds, st.sampled_from([("sgd_foreach", SGD, "forward"),
                                            ("linear", LINEAR, "backward")]))
def test_an_op_beside_others_slows_by_at_most_the_streams_slowdown(k, t, case):
    op, params, direction = case
    beside = _contention(k).seconds(op, params, "float32", direction, t)
    assert t * (1 - 1e-12) <= beside <= k * t * (1 + 1e-12)
    assert _contention(1.0).seconds(op, params, "float32", direction, t) == t


def test_a_streaming_op_slows_more_than_a_compute_bound_one():
    contention = _contention(1.3, bandwidth=2e10)
    sgd_moved = get_op("sgd_foreach").bytes_moved(SGD, "float32", "forward")
    sgd_alone = sgd_moved / 2e10  # at the triad's bandwidth: all of it is memory
    assert contention.seconds("sgd_foreach", SGD, "float32", "forward",
                              sgd_alone) == pytest.approx(1.3 * sgd_alone)
    linear_alone = 1.0  # far longer than its bytes need
    slowed = contention.seconds("linear", LINEAR, "float32", "backward", linear_alone)
    assert 1.0 < slowed < 1.0 + 1e-3


def test_contention_figures_are_checked():
    for bad in ((0.9, 1e10, 1e10, 2), (1.2, 0.0, 1e10, 2), (1.2, 1e10, 1e10, 0),
                (1.2, 1e10, 1e10, 2, 0.5)):
        with pytest.raises(ValueError, match="bad contention figures"):
            Contention(*bad)


class _PlantedRanks:
    """Rank 0 of ``len(factors)`` ranks: the others' times side by side are
    rank 0's times ``factors[r]``."""

    rank = 0

    def __init__(self, factors):
        self.size, self.factors, self.comm = len(factors), factors, self

    def barrier(self, what):
        pass

    def on_rank0_alone(self, fn, what):
        return fn()

    def bcast(self, value, root):
        return value

    def gather(self, took, root):
        return [took * f for f in self.factors]


@given(st.lists(st.floats(0.5, 4.0), min_size=1, max_size=3))
def test_side_by_side_is_the_slowest_ranks_time_over_the_time_alone(others):
    """Each kernel call takes 1 ms on a fake clock; alone that is the
    bandwidth, and side by side the slowest rank (the others planted at
    ``others`` x rank 0's time) sets the slowdown, at least 1."""
    from perfmodel.measure.contention import side_by_side

    now = [0.0]

    def kernel():
        now[0] += 1e-3

    alone, k = side_by_side(_PlantedRanks([1.0, *others]), kernel, 4096, "the kernel",
                            clock=lambda: now[0])
    assert alone == pytest.approx(4096 / 1e-3)
    assert k == pytest.approx(max(1.0, *others))


@given(st.floats(1.0, 3.0), slowdowns, st.floats(0.0, 0.9))
def test_the_compute_slowdown_is_the_gemms_without_its_memory_part(c, k, share):
    gemm = c + (k - c) * share  # what the GEMM measures, by the model
    assert compute_slowdown(gemm, share, k) == pytest.approx(max(1.0, c), rel=1e-9, abs=1e-9)
    assert compute_slowdown(gemm, 0.0, k) == pytest.approx(gemm)


def test_the_compute_kernels_memory_share_must_leave_it_compute():
    with pytest.raises(ValueError, match="memory share"):
        compute_slowdown(2.2, 1.0, 4.0)


@given(st.floats(1.0, 3.0), slowdowns, st.floats(0.0, 1.0))
def test_an_op_slows_between_the_computes_and_the_streams_slowdown(c, k, share):
    factor = _contention(k, compute=c).factor(share)
    assert min(c, k) * (1 - 1e-12) <= factor <= max(c, k) * (1 + 1e-12)
    assert _contention(k, compute=c).factor(0.0) == c
    assert _contention(k, compute=c).factor(1.0) == pytest.approx(k)


def test_time_shared_ranks_slow_even_a_compute_bound_op():
    """Four one-thread ranks on two cores (c 2.2, k 4.2): a linear that needs
    almost none of its time for its bytes takes about 2.2x its time alone."""
    slowed = _contention(4.2, compute=2.2).seconds("linear", LINEAR, "float32", "backward", 1.0)
    assert 2.2 < slowed < 2.2 + 2e-3


def test_byte_rate_is_the_calls_bytes_over_their_total_time():
    durations = iter([1.0, 3.0, 2.0, 2.0, 5.0])
    now = [0.0]

    def clock():
        return now[0]

    def kernel():
        now[0] += next(durations)

    rate = byte_rate(kernel, 600, calls=3, warmup=2, min_s=0.0, clock=clock)
    assert rate == 3 * 600 / 9.0  # calls of 2, 2 and 5 s after warm-ups of 1 and 3 s


def test_byte_rate_runs_calls_for_at_least_the_phases_time():
    now = [0.0]

    def kernel():
        now[0] += 1.0

    rate = byte_rate(kernel, 100, calls=2, warmup=1, min_s=4.5, clock=lambda: now[0])
    assert rate == 5 * 100 / 5.0  # 2 calls are not 4.5 s: 5 are


def test_run_seconds_times_exactly_the_calls():
    now = [0.0]

    def kernel():
        now[0] += 0.5

    assert run_seconds(kernel, 3, clock=lambda: now[0]) == 1.5


@given(st.lists(seconds, min_size=1, max_size=8), seconds)
def test_the_compute_slowdown_is_the_slowest_ranks(times, alone):
    slowdown = slowest_rank_slowdown(times, alone)
    assert slowdown >= 1.0
    assert slowdown == pytest.approx(max(1.0, max(times) / alone))
    # a rank done early (it had a core to itself for a while) does not lower it
    assert slowest_rank_slowdown([*times, alone / 2], alone) == slowdown


@pytest.mark.parametrize("times, alone", [([], 1.0), ([1.0], 0.0), ([1.0], float("nan"))])
def test_the_slowest_ranks_slowdown_needs_times_and_a_positive_time_alone(times, alone):
    with pytest.raises(ValueError, match="time alone"):
        slowest_rank_slowdown(times, alone)


def test_one_rank_measures_itself_alone_and_together():
    world = World(0, 1, 0, 1, _OneRank())
    contention = measure_contention(world, llc_bytes=0)
    assert contention.ranks_together == 1
    assert contention.slowdown >= 1.0 and contention.compute_slowdown >= 1.0
    assert contention.bandwidth_Bps > 1e8 and contention.together_Bps > 1e8


@given(st.floats(1e-5, 0.01), st.floats(1.0, 4.0), st.floats(0.0, 0.01),
       st.floats(0.001, 0.01), st.floats(2.0, 20.0))
def test_the_wake_up_lag_is_what_a_round_leaves_over_its_work(latency, c, lag, short, times):
    long = short * times
    rounds = {0.0: latency, short: latency + c * short + lag, long: latency + c * long + lag}
    assert wake_lag_from_rounds(rounds) == pytest.approx(lag, abs=1e-9)
    # rounds faster than the slope are no negative lag
    assert wake_lag_from_rounds({**rounds, short: latency + c * short - 0.001}) >= 0.0


@pytest.mark.parametrize("rounds", [{0.001: 1.0, 0.004: 2.0, 0.032: 3.0},
                                    {0.0: 1.0, 0.004: 2.0},
                                    {0.0: 0.0, 0.004: 2.0, 0.032: 3.0}])
def test_the_wake_up_lag_needs_three_positive_round_times_with_no_work_among_them(rounds):
    with pytest.raises(ValueError, match="no work and two lengths"):
        wake_lag_from_rounds(rounds)


def test_the_wake_up_lag_is_measured_with_the_given_sync_and_clock():
    """One rank, a fake clock: each GEMM call takes 1 ms, each sync 2 ms, and a
    sync after work 0.5 ms more (the lag); the measurement finds the 0.5 ms."""
    now = [0.0]
    worked = [False]

    def kernel():
        now[0] += 1e-3
        worked[0] = True

    def sync():
        now[0] += 2e-3 + (0.5e-3 if worked[0] else 0.0)
        worked[0] = False

    world = World(0, 1, 0, 1, _OneRank())
    lag = measure_wake_lag(world, sync, kernel, clock=lambda: now[0])
    assert lag == pytest.approx(0.5e-3)
    assert round(WAKE_WORK_S[0] / 1e-3) >= 1


def test_contention_without_a_sync_has_no_wake_up_lag():
    assert measure_contention(World(0, 1, 0, 1, _OneRank()), llc_bytes=0).wake_lag_s == 0.0
    with pytest.raises(ValueError, match="bad contention figures"):
        Contention(2.0, 1e10, 5e9, 4, 2.0, wake_lag_s=-1e-3)


def test_sim_tasks_applies_the_host_op_hook_to_op_tasks_only():
    tasks = [Task("op", "aten::linear", "gemm", op="linear", direction="forward",
                  dtype="float32", params=dict(LINEAR)),
             Task("unmodelled", "aten::foo", "unmodelled", bytes=8.0)]
    table = table_from_samples([], 3e10)
    seen = []

    def twice(task, s):
        seen.append(task.op)
        return 2 * s

    out, _ = sim_tasks(Graph(tasks, None), ConstantFit(1e-3), table, False,
                       host_op_s=twice)
    assert seen == ["linear"]
    assert out[0].host_s == pytest.approx(2e-3)
    plain, _ = sim_tasks(Graph(tasks, None), ConstantFit(1e-3), table, False)
    assert plain[0].host_s == pytest.approx(1e-3) and plain[1].host_s == out[1].host_s
