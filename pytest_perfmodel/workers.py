"""pytest-xdist: every worker sends what its items produced to the controller,
which shows it and runs the E2E gate once, over all of it.

Each xdist worker is a pytest session of its own: it collects every item but
runs only its share, so on its own it would gate a few workloads and count the
others as missing, and the controller (which collects nothing) would not gate
at all. Instead a worker does not gate (see ``pytest_runtestloop`` in
:mod:`pytest_perfmodel.plugin`); at the end of its session it puts its E2E
results, accuracy scores, summary lines and device into ``workeroutput``
(:func:`worker_output`), and the controller merges each into its own session
when the worker goes down (:func:`merge_worker_output`); what is sent and how it
merges is :class:`perfmodel.session.Session`'s. Without xdist none of
these hooks is called.
"""

from __future__ import annotations

import json

import pytest

from pytest_perfmodel.keys import SESSION_KEY

#: The ``workeroutput`` key of the perfmodel data (a JSON string).
OUTPUT_KEY = "perfmodel"


def _json_default(value):
    """numpy scalars as Python numbers; anything else as its text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def worker_output(pm) -> str:
    """What a worker's session sends to the controller, as JSON
    (:meth:`perfmodel.session.Session.to_worker_state`)."""
    return json.dumps(pm.to_worker_state(), default=_json_default)


def merge_worker_output(pm, text: str) -> None:
    """Add one worker's :func:`worker_output` to the controller's session ``pm``."""
    pm.merge_worker_state(json.loads(text))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand this session's results to the controller."""
    config = session.config
    output = getattr(config, "workeroutput", None)
    if output is None or config.option.collectonly:
        return
    pm = config.stash.get(SESSION_KEY, None)
    if pm is not None:
        output[OUTPUT_KEY] = worker_output(pm)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """On the xdist controller: merge what the worker that finished sent."""
    text = getattr(node, "workeroutput", {}).get(OUTPUT_KEY)
    pm = node.config.stash.get(SESSION_KEY, None)
    if text is not None and pm is not None:
        merge_worker_output(pm, text)
