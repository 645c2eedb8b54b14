"""A Ctrl-C is never lost (pytest_perfmodel/interrupt.py): a SIGINT whose
KeyboardInterrupt Python drops inside a finalizer still stops the session after
the item it came in, as interrupted."""

from __future__ import annotations

import signal

LOST_IN_A_FINALIZER = """
import os, signal

class Eater:
    def __del__(self):  # the handler runs here; Python drops what it raises
        os.kill(os.getpid(), signal.SIGINT)
        total = 0
        for i in range(10000):
            total += i

def test_a():
    Eater()

def test_b():
    pass
"""


def test_a_sigint_dropped_in_a_finalizer_still_interrupts(pytester):
    pytester.makepyfile(test_lost=LOST_IN_A_FINALIZER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    assert result.ret == 2  # pytest's "interrupted"
    result.stdout.fnmatch_lines(["*test_a PASSED*"])
    assert "test_b" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*KeyboardInterrupt: SIGINT during test_lost.py::test_a*"])


def test_without_perfmodel_the_sigint_is_lost(pytester):
    """The same file without the plugin runs on: what the module fixes."""
    pytester.makepyfile(test_lost=LOST_IN_A_FINALIZER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:perfmodel")
    assert result.ret == 0
    result.assert_outcomes(passed=2)


def test_the_default_handler_comes_back_after_the_session(pytester):
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # this session's latch
    try:
        assert pytester.runpytest_inprocess("-p", "no:cacheprovider").ret == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_someone_elses_handler_is_left_alone(pytester, monkeypatch):
    def mine(signum, frame):
        pass

    monkeypatch.setattr(signal, "getsignal", lambda sig: mine)
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    installed = []
    monkeypatch.setattr(signal, "signal", lambda sig, handler: installed.append(handler))
    assert pytester.runpytest_inprocess("-p", "no:cacheprovider").ret == 0
    assert installed == []
