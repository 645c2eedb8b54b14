"""Shared fixtures of the project's tests (plain helpers: tests/helpers.py)."""

import os

import pytest
from hypothesis import settings

from tests.helpers import FUZZ_KEY, THREADS, plant_cpu_spec, planted_spec

pytest_plugins = ["pytester"]

# Property tests draw the same examples on every run (derandomized, no example
# database) and never fail for taking long (imports, first calls into torch).
# HYPOTHESIS_PROFILE=<name> picks another registered profile, e.g. Hypothesis's
# own "default" for a randomized exploratory run.
settings.register_profile("perfmodel", derandomize=True, database=None, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "perfmodel"))


@pytest.fixture(autouse=True)
def plain_inner_sessions(monkeypatch):
    """The pytest runs a test starts (pytester, subprocesses) are plain sessions even
    when the tests run under pytest-xdist (`pytest -n 2`): its worker variables would
    turn pytest-benchmark off in them."""
    for name in [k for k in os.environ if k.startswith("PYTEST_XDIST")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def heavy_modules_loaded_once():
    """pytester's in-process runs drop the modules a run imported when it ends;
    torch cannot be imported twice in one process, so load it (and the library
    modules that import it) before the first run. Modules that run the plugin
    in-process use it with ``pytestmark = pytest.mark.usefixtures(...)``."""
    import perfmodel.device.probe  # noqa: F401
    import perfmodel.e2e.single  # noqa: F401
    import perfmodel.fit.fitting  # noqa: F401
    import perfmodel.report.build  # noqa: F401
    import perfmodel.trace.parse  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.profiler  # noqa: F401


@pytest.fixture
def planted_results(tmp_path):
    """A results root holding a planted CPU spec for this machine's key, so that
    plugin runs skip the (slow) CPU measurement. Returns (root, device_key)."""
    root = tmp_path / "results"
    return root, plant_cpu_spec(root)


@pytest.fixture
def planted_linear_fit(planted_results):
    """``planted_results`` plus a fit saved for the planted spec (1 thread): linear
    forward and backward at 5 µs + FLOPs / 1 GFLOP/s, ten configs each. Other ops
    have no predictor. Returns (root, device_key)."""
    from perfmodel.fit.fitting import fit_predictors, save_fit
    from perfmodel.ops import get_op
    from perfmodel.store.results import ResultStore

    root, key = planted_results
    spec = planted_spec(root, key)
    linear = get_op("linear")
    cases = [c for direction in ("forward", "backward")
             for c in [c for c in linear.cases("quick") if c.direction == direction][:10]]
    records = [{"kind": "measurement", "op": "linear", "direction": c.direction,
                "dtype": c.dtype, "config": c.params, "replicate": r, "run_id": "planted",
                "env": {"threads": THREADS},
                "measurement": {"median_s": 5e-6 + linear.flops(c.params, c.direction) / 1e9}}
               for c in cases for r in (0, 1)]
    save_fit(fit_predictors(records, spec), ResultStore(root, key), "planted", ["planted"])
    return root, key


@pytest.fixture(scope="module")
def saved_fit(tmp_path_factory):
    """A small fit saved the normal way: one roofline predictor of addmm.forward,
    under device key ``FUZZ_KEY``. Returns {file name: bytes}."""
    import numpy as np

    from perfmodel.fit.fitting import FitReport, OpAccuracy, OpPredictor, load_fit, save_fit
    from perfmodel.fit.predictors import RooflineRegressor
    from perfmodel.store.results import ResultStore

    X = np.array([[1e6 * i, 0, 0, 1e4 * i] for i in range(1, 9)], dtype=float)
    est = RooflineRegressor(peaks=[1e11, 1e11, 1e11, 3e10]).fit(X, 2e-6 + X[:, 0] / 5e10)
    accuracy = OpAccuracy("addmm", "forward", 8, 16, "roofline", "planted", 0.1, 0.1, 0.2,
                          0.2, 0.05, 8)
    report = FitReport({("addmm", "forward"): OpPredictor("addmm", "forward", "roofline", est)},
                       {("addmm", "forward"): accuracy})
    store = ResultStore(tmp_path_factory.mktemp("fit"), FUZZ_KEY)
    folder = save_fit(report, store, "run-1", ["r1"])
    assert load_fit(folder).predictors  # the unmutated fit loads
    return {p.name: p.read_bytes() for p in folder.iterdir()}
