"""The host memory allocator's policy, pinned for every CPU timing.

glibc's malloc hands large blocks back to the kernel when they are freed (an
``mmap`` above ``M_MMAP_THRESHOLD``, a trim of the heap's top above
``M_TRIM_THRESHOLD``), so the next allocation of that size page-faults its memory
in again. Whether a given call faults then depends on the allocation history of
the process, and a call that faults can take several times as long as one that
does not, whether a single op or a whole training step (measured: see
docs/journal/2026-11-23-cpu-timing.md). Microbenchmarks and the training steps
they predict would each land in either mode by chance.

:func:`keep_freed_memory` raises both thresholds, so freed memory stays in the
process and is reused, as PyTorch's caching allocator does on CUDA and as
tcmalloc or jemalloc (the usual advice for PyTorch on CPUs) do. Every run
records the policy in effect (``env["cpu_allocator"]``) and a fit on a CPU uses
only measurements taken under the policy of the process that fits.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: ``env["cpu_allocator"]`` of a process whose glibc keeps freed memory.
KEEP_FREED = "glibc-keep-freed"
#: ``env["cpu_allocator"]`` otherwise (another libc, or not yet pinned). Records
#: stored before the field existed are read as this.
DEFAULT = "default"

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Thresholds tried in turn (bytes): 1 GiB, then glibc's documented mmap maximum
#: on 64-bit hosts (32 MiB), for a glibc that refuses the larger one.
_THRESHOLDS = (1 << 30, 32 << 20)

_policy = DEFAULT


def glibc():
    """glibc as a ctypes library, or None on another C library."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it)
        libc.mallopt
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc


def keep_freed_memory() -> str:
    """Make this process's malloc keep freed memory for reuse (idempotent) and
    return the policy now in effect: :data:`KEEP_FREED`, or :data:`DEFAULT`
    where the C library is not glibc."""
    global _policy
    if _policy == KEEP_FREED:
        return _policy
    libc = glibc()
    if libc is None:
        return _policy
    for threshold in _THRESHOLDS:
        if (libc.mallopt(_M_MMAP_THRESHOLD, threshold) == 1
                and libc.mallopt(_M_TRIM_THRESHOLD, threshold) == 1):
            _policy = KEEP_FREED
            break
    return _policy


def allocator_policy() -> str:
    """The policy in effect in this process (what :func:`keep_freed_memory` set)."""
    return _policy


def record_allocator(record: dict) -> str:
    """The allocator policy ``record``'s run was measured under (``env["cpu_allocator"]``,
    :data:`DEFAULT` when absent)."""
    value = record.get("env", {}).get("cpu_allocator")
    return value if isinstance(value, str) else DEFAULT
