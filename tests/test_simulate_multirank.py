"""Several simulated ranks: collectives synchronise the ranks' clocks, readers of a
collective's output wait for it, and the iteration is the slowest rank's."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.simulate.host import HostModel, progress_end
from perfmodel.simulate.walk import COMM_STREAM, SimTask, simulate, simulate_ranks


def compute(seconds, inputs=(), outputs=()):
    return SimTask("compute", "gemm", seconds, inputs=inputs, outputs=outputs)


def collective(seconds, tensor, issue_s=0.0, cpu_s=None, loaded_s=None):
    return SimTask("all_reduce", "communication", issue_s, kernels=[(COMM_STREAM, seconds)],
                   inputs=(tensor,), outputs=(tensor,), collective=True, cpu_s=cpu_s,
                   loaded_s=loaded_s)


def test_a_collective_starts_when_the_last_rank_issues_it():
    fast = [compute(1.0), collective(0.5, 7), compute(0.1, inputs=(7,))]
    slow = [compute(2.0), collective(0.5, 7), compute(0.1, inputs=(7,))]
    result = simulate_ranks([fast, slow])
    assert result.collective_start_s == [2.0]
    # both ranks wait for the collective (2.0 + 0.5), then read its output
    assert [r.total_s for r in result.ranks] == [pytest.approx(2.6), pytest.approx(2.6)]
    assert result.total_s == pytest.approx(2.6)
    lanes = [[(lane, start, end) for lane, name, start, end in r.timeline
              if lane == f"stream {COMM_STREAM}"] for r in result.ranks]
    assert lanes[0] == lanes[1] == [(f"stream {COMM_STREAM}", 2.0, 2.5)]
    # alone, the fast rank would not have waited for the slow one
    assert simulate(fast).total_s == pytest.approx(1.6)


def test_compute_that_does_not_read_the_output_overlaps_the_collective():
    """DDP: a bucket's all-reduce runs while backward goes on; only the copy back waits."""
    rank = [compute(1.0), collective(2.0, 7, issue_s=0.1), compute(1.0), compute(0.2, inputs=(7,))]
    result = simulate_ranks([rank, rank])
    assert result.total_s == pytest.approx(1.1 + 2.0 + 0.2)  # comm hides the 1.0 of compute
    short = [compute(1.0), collective(0.5, 7, issue_s=0.1), compute(1.0), compute(0.2, inputs=(7,))]
    assert simulate_ranks([short, short]).total_s == pytest.approx(1.1 + 1.0 + 0.2)


def test_a_collective_on_busy_cores_takes_its_time_from_the_host():
    """gloo on a CPU whose cores the ranks fill: the overlap above is not free."""
    rank = [compute(1.0), collective(2.0, 7, issue_s=0.1), compute(1.0), compute(0.2, inputs=(7,))]
    # the host computes 1.1, lends 2.0 to the collective, computes 1.0 more; the
    # collective (1.1 to 3.1) is over by then, and the reader runs at once
    charged = HostModel(comm_host_share=1.0)
    assert simulate_ranks([rank, rank], host=charged).total_s == pytest.approx(4.3)
    half = simulate_ranks([rank, rank], host=HostModel(comm_host_share=0.5))
    assert half.total_s == pytest.approx(1.1 + 2.0 + 0.2)  # host (3.1) waits for comm (3.1)
    assert half.ranks[0].host_busy_s == pytest.approx(2.3)  # communication is not host work
    with pytest.raises(ValueError, match=r"comm_host_share must be in \[0, 1\], got 1.5"):
        HostModel(comm_host_share=1.5)


def test_collectives_run_in_order_on_the_communication_stream():
    rank0 = [compute(1.0), collective(1.0, 1), collective(1.0, 2), compute(0.1, inputs=(2,))]
    rank1 = [compute(0.5), collective(1.0, 1), compute(2.0), collective(1.0, 2),
             compute(0.1, inputs=(2,))]
    result = simulate_ranks([rank0, rank1])
    # first: starts at 1.0 (rank 0 issues last); second: rank 1 issues it at 2.5
    assert result.collective_start_s == [1.0, 2.5]
    assert result.total_s == pytest.approx(3.6)


def test_a_reused_tensor_id_does_not_wait():
    """A host op that writes a new tensor under the collective's id clears the wait."""
    rank = [collective(5.0, 7), compute(0.1, outputs=(7,)), compute(0.1, inputs=(7,))]
    assert simulate_ranks([rank]).total_s == pytest.approx(5.0)  # the stream still ends at 5
    assert simulate_ranks([rank]).ranks[0].host_busy_s == pytest.approx(0.2)
    assert simulate(rank[:1] + rank[2:]).total_s == pytest.approx(5.1)


def test_one_rank_is_the_single_rank_simulation():
    tasks = [compute(1.0), collective(0.5, 3, issue_s=0.01), compute(0.3), compute(0.2, inputs=(3,))]
    assert simulate_ranks([tasks]).total_s == simulate(tasks).total_s == pytest.approx(1.71)


def test_ranks_must_issue_the_same_collectives():
    with pytest.raises(ValueError, match=r"different numbers of collectives: \[1, 0\]"):
        simulate_ranks([[collective(1.0, 1)], [compute(1.0)]])


def test_a_collective_takes_only_its_cpu_time_from_the_host():
    """A 2.0 s collective that keeps the CPU busy for 0.5 s of it: the host
    loses 0.5 s (not 2.0) and waits for the rest only where it reads the output."""
    rank = [compute(1.0), collective(2.0, 7, issue_s=0.1, cpu_s=0.5), compute(1.0),
            compute(0.2, inputs=(7,))]
    charged = HostModel(comm_host_share=1.0)
    result = simulate_ranks([rank, rank], host=charged)
    # host: 1.1, +0.5 for gloo, +1.0 compute = 2.6 < the collective's end 3.1
    assert result.total_s == pytest.approx(3.1 + 0.2)
    async_only = [compute(1.0), collective(2.0, 7, issue_s=0.1, cpu_s=0.5), compute(3.0)]
    assert simulate_ranks([async_only] * 2, host=charged).total_s == pytest.approx(4.6)
    half = HostModel(comm_host_share=0.5)
    assert simulate_ranks([async_only] * 2, host=half).total_s == pytest.approx(4.35)


def comm_lane(result):
    return [[(start, end) for lane, _, start, end in r.timeline if lane == f"stream {COMM_STREAM}"]
            for r in result.ranks]


def test_a_collective_slows_down_while_its_rank_computes():
    """Idle 2.0 s, 4.0 s with the host busy throughout: issued at 1.1, a quarter
    is done by the end of the 1.0 s of compute (2.1); the host then waits, and
    the other three quarters take 1.5 s at the idle rate."""
    rank = [compute(1.0), collective(2.0, 7, issue_s=0.1, loaded_s=4.0), compute(1.0),
            compute(0.2, inputs=(7,))]
    result = simulate_ranks([rank, rank])
    assert comm_lane(result) == [[(1.1, pytest.approx(3.6))]] * 2
    assert result.total_s == pytest.approx(3.6 + 0.2)
    assert result.ranks[0].host_waits_s == [(pytest.approx(2.1), pytest.approx(3.6))]
    # a host that computes past the collective's loaded end never waits for it
    busy = [compute(1.0), collective(2.0, 7, issue_s=0.1, loaded_s=4.0), compute(5.0),
            compute(0.2, inputs=(7,))]
    result = simulate_ranks([busy, busy])
    assert comm_lane(result) == [[(1.1, pytest.approx(5.1))]] * 2
    assert result.total_s == pytest.approx(6.3)
    # the collective ends when the slowest rank's share is done: the busy rank's
    mixed = simulate_ranks([rank, busy])
    assert comm_lane(mixed) == [[(1.1, pytest.approx(5.1))]] * 2
    assert mixed.ranks[0].total_s == pytest.approx(5.3)
    # without a loaded time nothing slows down
    plain = [compute(1.0), collective(2.0, 7, issue_s=0.1), compute(1.0),
             compute(0.2, inputs=(7,))]
    assert simulate_ranks([plain, plain]).total_s == pytest.approx(3.3)


def test_a_collective_queued_behind_a_slowed_one_starts_when_it_ends():
    """Two buckets: the second (issued at the end of compute) waits for the first,
    whose remaining half runs at the idle rate once the host stops (at 2.0)."""
    rank = [compute(1.0), collective(2.0, 1, loaded_s=2.0 * 2), compute(1.0),
            collective(1.0, 2, loaded_s=3.0), compute(0.1, inputs=(1,)),
            compute(0.1, inputs=(2,))]
    result = simulate_ranks([rank, rank])
    # first: 1.0 to 2.0 busy (a quarter), then idle: 1.5 s more -> 3.5. Second from
    # 3.5: a third of the rate while the host reads the first's output (0.1 s), the
    # idle rate after: ends 3.6 + (1 - 0.1 / 3) x 1.0
    second_end = 3.6 + (1 - 0.1 / 3)
    assert comm_lane(result)[0] == [(1.0, pytest.approx(3.5)), (pytest.approx(3.5),
                                                               pytest.approx(second_end))]
    assert result.total_s == pytest.approx(second_end + 0.1)


@pytest.mark.parametrize("start, idle, loaded, waits, host_end, end", [
    (0.0, 1.0, 2.0, [], 10.0, 2.0),            # busy throughout
    (0.0, 1.0, 2.0, [], 0.0, 1.0),             # host already done
    (0.0, 1.0, 2.0, [(0.5, 10.0)], 10.0, 1.25),  # a quarter busy, the rest idle
    (1.0, 1.0, 2.0, [(0.0, 2.0)], 10.0, 2.0),  # started inside a wait
    (0.0, 1.0, 2.0, [(0.5, 0.75)], 10.0, 1.75),  # busy, idle, busy again
    (0.0, 2.0, 1.0, [], 10.0, 2.0),            # "loaded" below idle counts as idle
    (0.0, 0.0, 1.0, [], 10.0, 0.0),            # a free collective
])
def test_progress_end(start, idle, loaded, waits, host_end, end):
    assert progress_end(start, idle, loaded, waits, host_end) == pytest.approx(end)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 5.0), st.floats(1e-3, 2.0), st.floats(1.0, 20.0),
       st.lists(st.floats(0.0, 1.0), max_size=8), st.floats(0.0, 10.0))
def test_progress_end_lies_between_the_idle_and_the_loaded_time(start, idle, factor, cuts,
                                                               host_end):
    edges = sorted(cuts)
    waits = [(a * 10, b * 10) for a, b in zip(edges[::2], edges[1::2]) if b > a]
    end = progress_end(start, idle, idle * factor, waits, host_end)
    assert start + idle - 1e-9 <= end <= start + idle * factor + 1e-9
    assert end <= progress_end(start, idle, idle * factor * 1.5, waits, host_end) + 1e-9


_rank = st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.booleans()),
                 min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(_rank, min_size=2, max_size=4), st.data())
def test_predicted_covers_every_rank_and_the_communication(ranks, data):
    """Per rank: compute, then a collective (its output read at once or at the
    end); every rank issues the same collectives (same durations). Charging
    communication to the host never makes the iteration shorter."""
    n = min(len(r) for r in ranks)
    durations = [data.draw(st.floats(0.0, 1.0)) for _ in range(n)]
    task_lists, compute_alone = [], []
    for steps in ranks:
        tasks, late = [], []
        for k, (work, issue, wait_now) in enumerate(steps[:n]):
            tasks += [compute(work), collective(durations[k], 100 + k, issue_s=issue)]
            (tasks if wait_now else late).append(compute(0.0, inputs=(100 + k,)))
        task_lists.append(tasks + late)
        compute_alone.append(sum(t.host_s for t in tasks))
    share = data.draw(st.floats(0.0, 1.0))
    result = simulate_ranks(task_lists, host=HostModel(comm_host_share=share))
    assert result.total_s >= simulate_ranks(task_lists).total_s - 1e-9
    # slowed down by the rank's compute, the iteration never gets shorter
    factors = [data.draw(st.floats(1.0, 5.0)) for _ in range(n)]
    for tasks in task_lists:
        for task, factor in zip([t for t in tasks if t.collective], factors):
            task.loaded_s = task.kernels[0][1] * factor
    loaded = simulate_ranks(task_lists, host=HostModel(comm_host_share=share))
    assert loaded.total_s >= result.total_s - 1e-9
    assert all(loaded.total_s >= c - 1e-9 for c in compute_alone)
    for tasks in task_lists:
        for task in tasks:
            task.loaded_s = None
    assert result.total_s == max(r.total_s for r in result.ranks)
    assert all(result.total_s >= c - 1e-9 for c in compute_alone)
    assert result.total_s >= sum(durations) - 1e-9
    for k, start in enumerate(result.collective_start_s):
        # no rank could have started it earlier, and it starts at the same time everywhere
        assert all(start >= r.collective_ready_s[k] - 1e-12 for r in result.ranks)
        assert any(start == r.collective_ready_s[k] for r in result.ranks)


def test_a_rank_that_wakes_from_a_collective_runs_again_the_lag_later():
    """Ranks that outnumber the cores: after sleeping in a collective, a rank waits
    for a core; only waits count, and after short work only a share of the lag."""
    rank = [compute(1.0), collective(0.5, 7), compute(0.2, inputs=(7,))]
    plain = simulate_ranks([rank, rank]).total_s
    lagged = simulate_ranks([rank, rank], host=HostModel(wake_lag_s=0.3))
    assert lagged.total_s == pytest.approx(plain + 0.3)
    assert lagged.ranks[0].host_waits_s == [(pytest.approx(1.0), pytest.approx(1.8))]
    # 1.0 s of host work before the wait is a quarter of a 4.0 s ramp
    ramped = HostModel(wake_lag_s=0.3, wake_ramp_s=4.0)
    assert simulate_ranks([rank, rank], host=ramped).total_s == pytest.approx(plain + 0.075)
    # a host that reads the output after the collective is over never sleeps
    late = [compute(1.0), collective(0.5, 7), compute(1.0), compute(0.2, inputs=(7,))]
    assert simulate_ranks([late, late], host=HostModel(wake_lag_s=0.3)).total_s == \
        pytest.approx(simulate_ranks([late, late]).total_s)
    with pytest.raises(ValueError, match="wake-up lag and its ramp must be >= 0 s"):
        HostModel(wake_lag_s=-0.1)


@settings(max_examples=50)
@given(st.lists(st.floats(0.0, 0.1), min_size=1, max_size=6), st.floats(0.0, 0.05),
       st.floats(0.0, 0.2))
def test_the_wake_up_lag_never_shortens_an_iteration(work, lag, ramp):
    rank = []
    for i, seconds in enumerate(work):
        rank += [compute(seconds), collective(0.01, i), compute(0.001, inputs=(i,))]
    plain = simulate_ranks([rank, rank]).total_s
    host = HostModel(wake_lag_s=lag, wake_ramp_s=ramp)
    lagged = simulate_ranks([rank, rank], host=host).total_s
    assert plain - 1e-12 <= lagged <= plain + len(work) * lag + 1e-9
