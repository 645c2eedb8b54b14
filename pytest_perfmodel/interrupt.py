"""Ctrl-C is never lost: a SIGINT always stops the session.

Python runs a signal's handler between the bytecodes of whatever Python code is
running. When that code is a finalizer (a ``__del__``, a weakref callback, run as
an object is freed), the ``KeyboardInterrupt`` the handler raises is printed as
"Exception ignored in ..." and dropped, and the session goes on as if no one had
pressed Ctrl-C. This module chains a handler that remembers every SIGINT before
Python's own raises it; after each item, a SIGINT that did not stop the session
raises ``KeyboardInterrupt`` there, so pytest ends the run as interrupted
(exit status 2) with every finished item's records kept.

Only Python's default SIGINT handler is chained; a handler someone else installed
is left alone.
"""

from __future__ import annotations

import signal
import threading

import pytest

_INSTALLED = pytest.StashKey[object]()


class _Latch:
    """Remembers a SIGINT until :meth:`take` reads it."""

    def __init__(self) -> None:
        self.hit = False

    def __call__(self, signum, frame) -> None:
        self.hit = True
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt

    def take(self) -> bool:
        hit, self.hit = self.hit, False
        return hit


def pytest_sessionstart(session: pytest.Session) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    latch = _Latch()
    signal.signal(signal.SIGINT, latch)
    session.config.stash[_INSTALLED] = latch


def pytest_runtest_logfinish(nodeid: str, location) -> None:
    latch = _latch_of_current_session()
    if latch is not None and latch.take():
        raise KeyboardInterrupt(f"SIGINT during {nodeid} (its KeyboardInterrupt was dropped, "
                                f"e.g. inside a finalizer)")


def _latch_of_current_session() -> _Latch | None:
    handler = signal.getsignal(signal.SIGINT)
    return handler if isinstance(handler, _Latch) else None


def pytest_sessionfinish(session: pytest.Session) -> None:
    latch = session.config.stash.get(_INSTALLED, None)
    if latch is not None and signal.getsignal(signal.SIGINT) is latch:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        del session.config.stash[_INSTALLED]
