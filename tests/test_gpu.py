"""Checks that need a CUDA device: the CUDA-event timer, the L2 flush, the device
spec and NCCL in a world of one. Skipped where torch sees no GPU (as on CI); on a
GPU machine, ``pytest tests/test_gpu.py``. No check asserts a duration."""

import json

import pytest

torch = pytest.importorskip("torch")

from perfmodel.device.probe import detect_device# noqa: E402
from perfmodel.measure.timer import Timer  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_device_spec_describes_the_gpu():
    spec = detect_device("cuda")
    assert spec.kind == "cuda" and spec.index == 0
    assert spec.key.startswith("cuda-")
    assert spec.l2_bytes > 0 and spec.compute_units == torch.cuda.get_device_properties(0).multi_processor_count
    assert spec.mem_bandwidth_Bps > 0 and spec.peak_flops["float32"] > 0


def test_timer_uses_cuda_events_in_blocks():
    x = torch.randn(1 << 16, device="cuda")
    m = Timer(lambda: x.mul_(1.0), device="cuda", budget_s=0.05, min_block_s=1e-4).measure()
    assert (m.timer, m.cache, m.threads) == ("cuda_event_queued", "hot", None)
    assert m.number > 1 and 0 < m.min_s <= m.median_s


def test_l2_flush_times_single_cold_calls():
    spec = detect_device("cuda")
    x = torch.randn(1 << 20, device="cuda")
    m = Timer(lambda: x.mul_(1.0), device="cuda:0", budget_s=0.05,
              flush_l2_bytes=spec.l2_bytes).measure()
    assert (m.timer, m.cache, m.number) == ("cuda_event", "cold", 1)
    assert m.median_s > 0


def test_nccl_world_of_one_measures_every_collective():
    from perfmodel.measure.bench import TimerSettings
    from perfmodel.world import init_distributed, shutdown_distributed
    from perfmodel.measure.collectives import measure_collective
    from perfmodel.ops import OpCase

    world = init_distributed("cuda")
    try:
        assert world.device == "cuda:0" and world.size == 1
        assert torch.distributed.get_backend() == "nccl"
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                   "all_to_all_uneven", "broadcast"):
            case = OpCase(op, "forward", "float32", (("world_size", 1), ("bytes", 1 << 20)))
            results = measure_collective(case, world, TimerSettings(budget_s=0.05), replicates=1)
            assert len(results) == 1, op
            assert results[0].measurement.median_s > 0, op
    finally:
        shutdown_distributed()


def test_a_traced_step_ties_kernels_to_ops_and_sees_the_host_wait(tmp_path):
    """A CUDA training step's trace: kernels reach their ops, and the step's
    closing synchronize is a host wait, not host overhead."""
    from perfmodel.e2e.single import capture_graph
    from perfmodel.trace.overheads import samples_from_graph

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    x, y = torch.randn(64, 256, device="cuda"), torch.randn(64, 1, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    graph = capture_graph(step, tmp_path, "mlp", "cuda:0")
    linears = [t for t in graph.tasks if t.kind == "op" and t.op == "linear"]
    assert len(linears) == 4 and all(t.kernels for t in linears)  # two forward, two backward
    end = next(t for t in reversed(graph.tasks) if t.name == "T3.iteration")
    assert 0 < end.waited_s <= end.measured_s
    gaps = samples_from_graph("mlp", graph, 1e12).gaps["T3.iteration"]
    assert gaps == [pytest.approx(max(0.0, end.measured_s - end.waited_s
                                      - graph.profiler_overhead_s))]
    # the calibration measured the profiler's cost per launch (CUPTI's) too: a
    # difference of two timings, clamped at 0 (one H200 machine read 0.0 s); a
    # microsecond or so elsewhere, never near a launch-bound kernel's whole time
    calibration = json.loads((tmp_path / "mlp.calibration.json").read_text())
    assert "profiler_overhead_s_per_launch" in calibration
    assert 0 <= graph.profiler_launch_overhead_s < 1e-4
