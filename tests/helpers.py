"""Plain helpers and constants shared by the test modules (fixtures live in
tests/conftest.py). Test modules import from here, never from each other.

Heavy libraries (torch, the fitting code) are imported inside the functions that
need them, so importing this module stays cheap."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from perfmodel.device.spec import DeviceSpec

#: The repository root (where suites/ and pyproject.toml live).
REPO = Path(__file__).resolve().parents[1]

#: Threads the plugin tests pin torch to; the planted device spec matches it.
THREADS = 1


# -- planted device specs --------------------------------------------------------------

def planted_cpu_dict(key: str, threads: int = THREADS) -> dict:
    """The ``device.json`` content of the planted CPU that plugin runs find cached
    under ``key`` (so they skip the slow CPU measurement)."""
    return {"kind": "cpu", "name": "planted test CPU", "key": key, "index": None,
            "peak_flops": {"float32": 1e11, "bfloat16": 3e9}, "mem_bandwidth_Bps": 3e10,
            "l2_bytes": 1 << 20, "llc_bytes": 32 << 20, "compute_units": 2, "clock_hz": None,
            "threads": threads, "source": "measured"}


def plant_cpu_spec(root: Path, threads: int = THREADS) -> str:
    """Write :func:`planted_cpu_dict` (at ``threads``) for this machine's CPU key
    under ``root``; return the key."""
    from perfmodel.device.probe import cpu_device_key

    key = cpu_device_key()
    (root / key).mkdir(parents=True, exist_ok=True)
    (root / key / "device.json").write_text(json.dumps(planted_cpu_dict(key, threads)))
    return key


def planted_spec(root: Path, key: str) -> DeviceSpec:
    """The DeviceSpec that :func:`plant_cpu_spec` (or the ``planted_results``
    fixture) wrote under ``root``/``key``."""
    return DeviceSpec.from_dict(json.loads((root / key / "device.json").read_text()))


def cpu_spec(**fields) -> DeviceSpec:
    """A synthetic 2-thread CPU (:data:`SPEC`), with ``fields`` replaced."""
    base = dict(kind="cpu", name="planted", key="cpu-planted-2c", index=None,
                peak_flops={"float32": 1e11, "bfloat16": 2e9}, mem_bandwidth_Bps=3e10,
                l2_bytes=1 << 20, llc_bytes=32 << 20, compute_units=2, clock_hz=None,
                threads=2, source="measured")
    return DeviceSpec(**{**base, **fields})


#: The synthetic device that :func:`planted_records` are measured on.
SPEC = cpu_spec()


def planted_records(op_name="linear", noise=0.01, seed=0):
    """Two replicates per config of a synthetic device: 60% of peak plus 5 us."""
    import random

    from perfmodel.ops import get_op

    rng = random.Random(seed)
    op = get_op(op_name)
    records = []
    for case in op.cases("quick"):
        true = 5e-6 + op.flops(case.params, case.direction) / (
            0.6 * SPEC.peak_flops[case.dtype])
        for replicate in range(2):
            seconds = true * (1 + rng.gauss(0, noise))
            records.append({"kind": "measurement", "op": case.op, "direction": case.direction,
                            "dtype": case.dtype, "config": case.params,
                            "replicate": replicate, "run_id": "r1",
                            "measurement": {"median_s": seconds}, "env": {}})
    return records


def case_id(record: dict) -> str:
    """The pytest id of the op case a measurement record belongs to."""
    from perfmodel.ops import OpCase, get_op

    op = get_op(record["op"])
    config = tuple((p, record["config"][p]) for p in op.params)
    return OpCase(record["op"], record["direction"], record["dtype"], config).id


# -- a tiny model ----------------------------------------------------------------------

def tiny_mlp(inputs: int = 16, hidden: int = 32, batch: int = 8, momentum: float = 0.0,
             optimizer=None):
    """A seeded tiny MLP with a foreach SGD optimizer (``momentum``), or the one
    ``optimizer(parameters)`` builds, and one batch: (model, opt, x, y)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 1))
    if optimizer is None:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum, foreach=True)
    else:
        opt = optimizer(model.parameters())
    return model, opt, torch.randn(batch, inputs), torch.randn(batch, 1)


def tiny_mlp_step(**options):
    """One training step (zero_grad, MSE loss, backward, optimizer step) of
    :func:`tiny_mlp`, built with ``options``."""
    import torch

    model, opt, x, y = tiny_mlp(**options)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    return step


# -- a fake fit ------------------------------------------------------------------------

class ConstantFit:
    """A fit whose every predictor says ``seconds`` per call. ``seconds`` may be a
    ``{direction: seconds}`` mapping instead: other directions have no predictor
    (LookupError), as have the ops in ``missing``. ``estimator``, when given, is
    each predictor's ``estimator``; ``calls`` counts the ``predict`` calls."""

    def __init__(self, seconds, missing=(), estimator=None):
        self.seconds, self.missing, self.estimator, self.calls = (
            seconds, set(missing), estimator, 0)

    def predictor(self, op, direction):
        import numpy as np

        if op in self.missing:
            raise LookupError(op)
        if isinstance(self.seconds, dict):
            if direction not in self.seconds:
                raise LookupError(direction)
            seconds = self.seconds[direction]
        else:
            seconds = self.seconds
        fit = self

        class Predictor:
            def predict(self, dtype, params_list):
                fit.calls += 1
                return np.full(len(params_list), seconds)

        predictor = Predictor()
        if self.estimator is not None:
            predictor.estimator = self.estimator
        return predictor


# -- in-process plugin runs -------------------------------------------------------------

#: The settings a plugin test runs under unless it writes its own pyproject.toml:
#: the planted baselines (:data:`BASE`) state their allowed errors for the spread
#: as measured; the bound of a few runs' spread is tested in tests/test_gate.py.
PLANTED_PYPROJECT = "[tool.perfmodel]\ne2e_spread_confidence = 0\n"


def planted_settings(pytester) -> None:
    """Write :data:`PLANTED_PYPROJECT` where the test wrote no pyproject.toml."""
    if not (pytester.path / "pyproject.toml").exists():
        pytester.makefile(".toml", pyproject=PLANTED_PYPROJECT)


def run_plugin(pytester, results, *args):
    """Run pytest in-process with the plugin writing to ``results`` at
    :data:`THREADS` threads (see the ``heavy_modules_loaded_once`` fixture), under
    :data:`PLANTED_PYPROJECT` unless the test wrote its own settings."""
    planted_settings(pytester)
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--perfmodel-results={results}",
        f"--perfmodel-threads={THREADS}", *args)


#: A suite recording one planted E2E result of ``mlp_small`` (100 ms measured,
#: ``{predicted}`` predicted).
GATE_SUITE = """
import pytest
from perfmodel.e2e.result import IterationTiming, MeasuredIteration

@pytest.mark.e2e
@pytest.mark.parametrize("predicted_s", [{predicted}])
def test_planted(perfmodel_session, predicted_s):
    # A planted measurement: 100 ms measured, predicted_s predicted.
    perfmodel_session.record_e2e(
        MeasuredIteration("mlp_small", IterationTiming(0.1, 0.001, 15, 3, 2560.0), predicted_s))
"""

# Baseline errors 3%, 4%, 5%: mean 4.00%, spread (sd) 1.00%; with k = 3 and the
# spread as measured (PLANTED_PYPROJECT) the allowed error is 7.00%.
BASE = [0.03, 0.04, 0.05]


def plant_baseline(results, key, errors, device_key=None):
    """A schema-2 baseline of ``mlp_small`` with ``errors`` from repeated runs."""
    from perfmodel.gate.baseline import save_baseline

    path = results / key / "baseline-smoke.json"
    save_baseline(path, device_key or key, {"mlp_small": errors}, {})
    return path


# -- fuzzing JSON documents ------------------------------------------------------------

#: The device key of the fuzz tests' stores and saved fit.
FUZZ_KEY = "cpu-test-1c"

#: Any JSON value, a few levels deep, with the odd float JSON can carry.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def _paths(obj, prefix=()):
    """Every key path into a JSON document (including the root)."""
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from _paths(value, prefix + (index,))


def mutate(data, doc):
    """``doc`` with one value replaced, one key dropped, or one key added, at a
    path Hypothesis chooses: near-valid documents reach the deep checks."""
    doc = json.loads(json.dumps(doc))
    path = data.draw(st.sampled_from(list(_paths(doc))))
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if not path:
        return data.draw(json_values)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if action == "replace" or isinstance(parent, list):
        parent[path[-1]] = data.draw(json_values)
    elif action == "drop":
        del parent[path[-1]]
    else:
        parent[data.draw(st.text(max_size=6))] = data.draw(json_values)
    return doc


def save_uncompressed(folder: Path) -> None:
    """Rewrite a fit's arrays as an older perfmodel saved them (np.savez), checksums
    updated."""
    import hashlib
    import io

    import numpy as np

    for npz in folder.glob("*.npz"):
        with np.load(npz, allow_pickle=False) as loaded:
            arrays = {name: loaded[name] for name in loaded.files}
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        npz.write_bytes(buffer.getvalue())
        meta = npz.with_suffix(".json")
        document = json.loads(meta.read_text())
        document["npz_sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
        meta.write_text(json.dumps(document))


def forbid_cuda(monkeypatch, who: str) -> None:
    """Make every torch.cuda call that reveals a device fail the test, naming ``who``."""
    import torch

    def refuse(*_, **__):
        raise AssertionError(f"{who} called torch.cuda")

    for name in ("is_available", "synchronize", "device_count", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, name, refuse)


# -- stored runs -----------------------------------------------------------------------

def run_paths(device_folder: Path) -> list[Path]:
    """The run files of a device folder (``results/<key>``), plain or compacted,
    one per run, oldest first."""
    from perfmodel.store import paths

    return paths.run_files(Path(device_folder))


def run_lines(path: Path) -> list[str]:
    """The lines of a run file, plain or compacted (header first)."""
    from perfmodel.store.results import read_run_text

    return read_run_text(path).splitlines()
