"""The library's :class:`perfmodel.session.Session` as pytest items see it.

The policy lives in :mod:`perfmodel.session`; here are only the two pytest
touches: a microbench item's samples go on to pytest-benchmark, and the
library's :class:`~perfmodel.session.Unavailable` / :class:`~perfmodel.session.CheckFailed`
become ``pytest.skip`` / ``pytest.fail`` (same message, no traceback).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from perfmodel.session import CheckFailed, Options, Session, Unavailable

__all__ = ["Options", "PerfmodelSession", "as_pytest_outcome"]


class PerfmodelSession(Session):
    """The session of the perfmodel items of one pytest session."""

    def benchmark(self, case, request: pytest.FixtureRequest | None = None) -> list:
        """:meth:`Session.benchmark`; with the item's ``request``, the samples are
        also reported to pytest-benchmark."""
        measurements = super().benchmark(case)
        if request is not None:
            from pytest_perfmodel.benchmark_interop import feed_benchmark

            feed_benchmark(request, measurements)
        return measurements


@contextmanager
def as_pytest_outcome():
    """Turn :class:`Unavailable` into ``pytest.skip`` and :class:`CheckFailed`
    into ``pytest.fail`` without a traceback, keeping the message."""
    try:
        yield
    except Unavailable as exc:
        skipped, failed = str(exc), None
    except CheckFailed as exc:
        skipped, failed = None, str(exc)
    else:
        return
    # raised here, outside the except blocks, and from None: neither the library's
    # frames nor the exception it replaces are shown (a generator's context manager
    # would otherwise chain them)
    if failed is not None:
        raise pytest.fail.Exception(failed, pytrace=False) from None
    raise pytest.skip.Exception(skipped, allow_module_level=False) from None
