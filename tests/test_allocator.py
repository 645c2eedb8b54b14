"""The host allocator policy: pinned, it keeps freed memory, so re-allocating a
large buffer page-faults no more (counted, not timed)."""

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.measure.allocator import DEFAULT, KEEP_FREED, glibc, record_allocator

needs_glibc = pytest.mark.skipif(glibc() is None, reason="the C library is not glibc")


def _thp_always() -> bool:
    """Whether transparent huge pages back every anonymous mapping (``[always]``)."""
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[always]" in mode


needs_base_pages = pytest.mark.skipif(
    _thp_always(), reason="transparent huge pages are [always]: a fresh 64 MiB buffer faults "
    "in whole huge pages, so the default policy's fault count is no longer one per base page")

#: Runs a depthwise convolution backward (the layer of the module docstring) 25
#: times and a 64 MiB allocation 15 times; prints the policy and the page faults
#: per call of the last 20 backward calls and of the last 10 allocations.
_CHURN = """
import resource, sys
import torch
from perfmodel.measure.allocator import allocator_policy, keep_freed_memory
if sys.argv[1] == "pin":
    assert keep_freed_memory() == keep_freed_memory()  # idempotent
torch.set_num_threads(1)
x, w, g = torch.randn(8, 16, 64, 64), torch.randn(16, 1, 3, 3), torch.randn(8, 16, 64, 64)
def backward():
    torch.ops.aten.convolution_backward(g, x, w, [16], [1, 1], [1, 1], [1, 1], False, [0, 0],
                                        16, [True, True, True])
def allocate():
    a = torch.ones(16 << 20)  # 64 MiB, above glibc's largest default mmap threshold
    del a
def faults_per_call(fn, warmup, calls):
    for _ in range(warmup):
        fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls
print(allocator_policy(), faults_per_call(backward, 20, 20), faults_per_call(allocate, 5, 10))
"""


def _faults(mode: str) -> tuple[str, float, float]:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    return out[0], float(out[1]), float(out[2])


@needs_glibc
@needs_base_pages
def test_keeping_freed_memory_stops_the_page_faults_of_reallocation():
    policy, backward, pinned_allocate = _faults("pin")
    default_policy, _, allocate = _faults("none")
    assert (policy, default_policy) == (KEEP_FREED, DEFAULT)
    # the counter sees faults: by default a 64 MiB buffer is mmapped and faulted in each time
    assert allocate > 0.9 * (64 << 20) / resource.getpagesize()
    # pinned, the backward's 2 MiB gradient buffers are reused (unpinned: 0 or ~1,000
    # faults per call, depending on the allocation history). The backward warms up for
    # 20 calls: after 5, some heap layouts still paged in one 2 MiB buffer (512 faults)
    # inside the 20 timed calls, a one-off first touch that is not a reallocation.
    assert backward < 8 and pinned_allocate < 8


def test_a_record_without_a_policy_was_measured_under_the_default():
    assert record_allocator({"env": {"threads": 2}}) == DEFAULT
    assert record_allocator({}) == DEFAULT
    assert record_allocator({"env": {"cpu_allocator": KEEP_FREED}}) == KEEP_FREED
    assert record_allocator({"env": {"cpu_allocator": 3}}) == DEFAULT
