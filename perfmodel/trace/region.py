"""Named regions of a training step, recorded in its execution trace.

::

    import perfmodel

    with perfmodel.region("data"):
        batch = next(loader)

    @perfmodel.region("loss")
    def compute_loss(model, batch): ...

    @perfmodel.region            # named after the function's __qualname__
    def optimizer_step(): ...

A region is a ``torch.profiler.record_function`` scope named
``perfmodel.region::<name>``; :mod:`perfmodel.trace.graph` gives every task inside it
that region, and the simulator sums predicted seconds per region
(``MeasuredIteration.regions_s``). Forward scopes only: autograd runs the backward
outside any Python scope, so backward tasks take the region of their forward op.

When nothing records (no profiler running, or torch not even imported) a
region is two attribute checks on entry and one on exit; torch is never
imported here. The execution-trace observer alone does not set the profiler
flag, so :func:`perfmodel.trace.parse.capture_trace` runs its ET pass inside
:func:`recording`; do the same around your own ``ExecutionTraceObserver``.
"""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

#: Prefix :mod:`perfmodel.trace.graph` recognises in record_function names.
PREFIX = "perfmodel.region::"

F = TypeVar("F", bound=Callable)

_profiler = None  # torch.autograd.profiler, once something has imported it
_forced = 0  # open `recording()` scopes


@contextmanager
def recording() -> Iterator[None]:
    """Record regions inside this scope even when no profiler is running
    (e.g. under an ``ExecutionTraceObserver`` alone)."""
    global _forced
    _forced += 1
    try:
        yield
    finally:
        _forced -= 1


class Region:
    """One region scope; use :func:`region` to make one."""

    __slots__ = ("name", "_scopes")

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a region name must be a non-empty string, got {name!r}")
        self.name = name
        self._scopes: list = []  # one per open use (None: not recording): re-entrant

    def __enter__(self) -> Region:
        global _profiler
        if _profiler is None:
            _profiler = sys.modules.get("torch.autograd.profiler")
        scope = None
        if _forced or (_profiler is not None and _profiler._is_profiler_enabled):
            from torch.profiler import record_function

            scope = record_function(PREFIX + self.name)
            scope.__enter__()
        self._scopes.append(scope)
        return self

    def __exit__(self, *exc) -> None:
        scope = self._scopes.pop()
        if scope is not None:
            scope.__exit__(*exc)

    def __call__(self, fn: F) -> F:
        """Decorate ``fn``: each call runs in a fresh scope of this region."""
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with Region(name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def region(name: str | F) -> Region | F:
    """A region named ``name`` (context manager or decorator); applied bare to
    a function, that function decorated with a region named after its
    ``__qualname__``."""
    if callable(name):
        return Region(name.__qualname__)(name)
    return Region(name)
