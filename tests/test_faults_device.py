"""Device faults, injected on a CPU: out of memory, an unsupported dtype, a missing
FBGEMM, a missing CUDA. Each affected item is skipped with its reason, the rest of
the sweep runs and stores its records, and nothing shows a traceback."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import run_plugin

SUITE = """
import pytest
pytestmark = pytest.mark.perfmodel_ops({ops})

@pytest.mark.microbench
def test_microbench(op_case, perfmodel_session):
    perfmodel_session.benchmark(op_case)
"""

#: Wraps relu's runner: its backward cases fail with ``{exc}`` when *called* (inside
#: the timer, as a real OOM would), holding a tensor; the conftest records how many
#: of those tensors are still alive when each later item starts.
INJECT = """
import gc, json, weakref
import pytest, torch
from perfmodel.ops import OPS

HELD, ALIVE = [], []

@pytest.fixture(autouse=True)
def inject(monkeypatch):
    real = OPS["relu"].make_runner

    def make_runner(params, dtype, direction, device):
        run = real(params, dtype, direction, device)
        if direction != "backward":
            return run
        held = torch.empty(1 << 18)
        HELD.append(weakref.ref(held))

        def failing():
            held.add_(1)
            raise {exc}
        return failing

    monkeypatch.setattr(OPS["relu"], "make_runner", make_runner)

def pytest_runtest_setup(item):
    gc.collect()
    ALIVE.append(sum(ref() is not None for ref in HELD))

def pytest_sessionfinish(session):
    with open("alive.json", "w") as f:
        json.dump(ALIVE, f)
"""


pytestmark = pytest.mark.usefixtures("heavy_modules_loaded_once")


def run(pytester, results, *args):
    """The plugin run, in collection order, with short budgets and skip reasons shown."""
    return run_plugin(pytester, results, "-p", "no:randomly", "--perfmodel-budget=0.01", "-rs",
                      *args)


def stored(results, key):
    from perfmodel.store.results import ResultStore

    loaded = ResultStore(results, key).load()
    assert loaded.problems == []
    return loaded.records


@pytest.mark.parametrize("exc, reason", [
    ('torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")',
     "out of memory (CUDA out of memory. Tried to allocate 20.00 GiB)"),
    ("RuntimeError('\"threshold_backward_cpu\" not implemented for \\'Float8_e4m3fn\\'')",
     "unsupported on this device (\"threshold_backward_cpu\" not implemented for"),
])
def test_device_fault_skips_the_item_and_the_sweep_goes_on(pytester, planted_results, exc,
                                                           reason):
    results, key = planted_results
    pytester.makeconftest(INJECT.replace("{exc}", exc))
    pytester.makepyfile(SUITE.format(ops='"relu"'))
    out = run(pytester, results, "-m", "microbench")
    assert out.ret == pytest.ExitCode.OK
    out.assert_outcomes(passed=4, skipped=4)  # relu forward passes, backward is skipped
    out.stdout.fnmatch_lines([f"SKIPPED * relu-backward-float32-*: {reason}*"])
    assert "Traceback" not in out.stdout.str() + out.stderr.str()
    records = stored(results, key)
    assert len(records) == 4 * 2 and not [r for r in records if r["direction"] == "backward"]
    # The failed case's memory is released before the next item starts, even though
    # pytester keeps every skip's exception: an OOM that kept its tensors alive would
    # make the next cases on a GPU run out of memory too.
    assert set(json.loads((pytester.path / "alive.json").read_text())) == {0}


@pytest.mark.parametrize("exc, reason", [
    ("torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')",
     "out of memory (CUDA out of memory. Tried to allocate 2.00 GiB)"),
    ("NotImplementedError('this backend does not support bfloat16')",
     "unsupported on this device (this backend does not support bfloat16)"),
    ("RuntimeError('FBGEMM missing: cannot import fbgemm_gpu (No module named x)')",
     "library missing (FBGEMM missing: cannot import fbgemm_gpu (No module named x))"),
])
def test_fault_inside_the_timed_call_is_unsupported(monkeypatch, exc, reason):
    """The same classification, one case at a time, for the other fault types."""
    import torch

    from perfmodel.measure.bench import CaseUnsupported, TimerSettings, benchmark_case
    from perfmodel.ops import OPS, OpCase
    from tests.helpers import SPEC

    def make_runner(*args):
        def run():
            raise eval(exc, {"torch": torch})
        return run

    monkeypatch.setattr(OPS["relu"], "make_runner", make_runner)
    case = OpCase("relu", "forward", "float32", (("ROWS", 8), ("COLS", 8)))
    with pytest.raises(CaseUnsupported) as info:
        benchmark_case(case, SPEC, "cpu", TimerSettings(budget_s=0.01))
    assert str(info.value) == f"relu-forward-float32-ROWS8-COLS8: {reason}"
    assert info.value.__context__ is None  # the failed case's frames are not kept


@pytest.fixture
def without_fbgemm(monkeypatch):
    """``import fbgemm_gpu`` (and its submodules) fail, as when it is not installed."""
    for name in [m for m in sys.modules if m == "fbgemm_gpu" or m.startswith("fbgemm_gpu.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("fbgemm_gpu", "fbgemm_gpu.split_table_batched_embeddings_ops_training"):
        monkeypatch.setitem(sys.modules, name, None)  # None: import raises ImportError


def test_missing_fbgemm_skips_its_ops_and_the_sweep_goes_on(pytester, planted_results,
                                                            without_fbgemm):
    with pytest.raises(ImportError):
        import fbgemm_gpu  # noqa: F401
    results, key = planted_results
    pytester.makepyfile(SUITE.format(ops='"tbe_sgd", "embedding_bag_sum"'))
    out = run(pytester, results, "-m", "microbench", "-k", "forward")
    out.assert_outcomes(passed=4, skipped=4)
    out.stdout.fnmatch_lines(["SKIPPED * tbe_sgd-forward-*: library missing (FBGEMM missing: "
                              "cannot import fbgemm_gpu*"])
    assert "Traceback" not in out.stdout.str()
    assert {r["op"] for r in stored(results, key)} == {"embedding_bag_sum"}


def test_missing_fbgemm_drops_its_workload_from_the_gate(without_fbgemm):
    """The E2E item's path: building an FBGEMM workload raises ImportError, which
    the session turns into a skip and a ``WARN ... not gated`` line."""
    from perfmodel.workloads import build_workload

    with pytest.raises(ImportError, match="fbgemm_gpu is not installed"):
        build_workload("dlrm_tbe", "cpu", size="tiny")


def test_missing_cuda_skips_every_item_with_one_warning(pytester, planted_results):
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    results, key = planted_results
    pytester.makepyfile(SUITE.format(ops='"relu"'))
    out = run(pytester, results, "-m", "microbench", "--perfmodel-device=cuda")
    assert out.ret == pytest.ExitCode.OK
    out.assert_outcomes(skipped=8)
    out.stdout.fnmatch_lines([
        "WARN --perfmodel-device cuda: device 'cuda' requested but "
        "torch.cuda.is_available() is False; its items were skipped",
        "SKIPPED [[]*] *--perfmodel-device cuda: device 'cuda' requested but*"])
    assert "Traceback" not in out.stdout.str() + out.stderr.str()
    assert not (results / key / "runs").exists()
