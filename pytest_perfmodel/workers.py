"""pytest-xdist: every worker sends what its items produced to the controller,
which shows it and runs the E2E gate once, over all of it.

Each xdist worker is a pytest session of its own: it collects every item but
runs only its share, so on its own it would gate a few workloads and count the
others as missing, and the controller (which collects nothing) would not gate
at all. Instead a worker does not gate (see ``pytest_runtestloop`` in
:mod:`pytest_perfmodel.plugin`); at the end of its session it puts its E2E
results, accuracy scores, summary lines and device into ``workeroutput``
(:func:`worker_output`), and the controller merges each into its own session
when the worker goes down (:func:`merge_worker_output`). Without xdist none of
these hooks is called.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

#: The ``workeroutput`` key of the perfmodel data (a JSON string).
OUTPUT_KEY = "perfmodel"


def _json_default(value):
    """numpy scalars as Python numbers; anything else as its text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def worker_output(pm) -> str:
    """What a worker's :class:`~pytest_perfmodel.session.PerfmodelSession` sends
    to the controller, as JSON."""
    data = {
        "e2e": [r.to_plain() for r in pm.e2e],
        "user_models": [r.to_plain() for r in pm.user_models],
        "accuracy": [asdict(a) for a in pm.accuracy],
        # every worker collects every item: the workloads this run gates, less
        # those this worker found it cannot build (a missing package)
        "expected": sorted(pm.e2e_expected),
        "gate_lines": list(pm.gate.lines),
        "notes": list(pm.notes),
        "problems": list(pm.problems),
        "measured": pm.measured,
        "wide_spread": list(pm.wide_spread),
        "device": None if pm._device is None else pm._device.to_dict(),
        "env": pm._env,
        "device_unavailable": pm.device_unavailable,
    }
    return json.dumps(data, default=_json_default)


def merge_worker_output(pm, text: str) -> None:
    """Add one worker's :func:`worker_output` to the controller's session ``pm``."""
    from perfmodel.e2e.single import E2EResult

    data = json.loads(text)
    pm.e2e.extend(E2EResult.from_plain(r) for r in data["e2e"])
    pm.user_models.extend(E2EResult.from_plain(r) for r in data["user_models"])
    if data["accuracy"]:
        from perfmodel.fit.fitting import OpAccuracy

        pm.accuracy.extend(OpAccuracy(**a) for a in data["accuracy"])
    expected = set(data["expected"])
    # a workload one worker could not build is not gated (its WARN line says so)
    pm.e2e_expected = expected if pm.workers_reported == 0 else pm.e2e_expected & expected
    pm.workers_reported += 1
    pm.measured += data["measured"]
    pm.wide_spread.extend(data["wide_spread"])
    for mine, theirs in ((pm.gate.lines, data["gate_lines"]), (pm.notes, data["notes"]),
                         (pm.problems, data["problems"])):
        mine.extend(line for line in theirs if line not in mine)
    if pm._device is None and data["device"] is not None:
        from perfmodel.device.spec import DeviceSpec

        pm._device = DeviceSpec.from_dict(data["device"])
    if pm._env is None and data["env"] is not None:
        pm._env = data["env"]
    if data["device_unavailable"] and pm.device_unavailable is None:
        pm.device_unavailable = data["device_unavailable"]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand this session's results to the controller."""
    config = session.config
    output = getattr(config, "workeroutput", None)
    if output is None or config.option.collectonly:
        return
    from pytest_perfmodel.plugin import SESSION_KEY

    pm = config.stash.get(SESSION_KEY, None)
    if pm is not None:
        output[OUTPUT_KEY] = worker_output(pm)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """On the xdist controller: merge what the worker that finished sent."""
    from pytest_perfmodel.plugin import SESSION_KEY

    text = getattr(node, "workeroutput", {}).get(OUTPUT_KEY)
    pm = node.config.stash.get(SESSION_KEY, None)
    if text is not None and pm is not None:
        merge_worker_output(pm, text)
