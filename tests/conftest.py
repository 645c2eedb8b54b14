"""Shared fixtures of the project's tests."""

import json
import os

import pytest
from hypothesis import settings

pytest_plugins = ["pytester"]

# Property tests draw the same examples on every run (derandomized, no example
# database) and never fail for taking long (imports, first calls into torch).
# HYPOTHESIS_PROFILE=<name> picks another registered profile, e.g. Hypothesis's
# own "default" for a randomized exploratory run.
settings.register_profile("perfmodel", derandomize=True, database=None, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "perfmodel"))

#: Threads the plugin tests pin torch to; the planted device spec matches it.
THREADS = 1


@pytest.fixture
def planted_results(tmp_path):
    """A results root holding a planted CPU spec for this machine's key, so that
    plugin runs skip the (slow) CPU measurement. Returns (root, device_key)."""
    from perfmodel.device import cpu_device_key

    key = cpu_device_key()
    root = tmp_path / "results"
    (root / key).mkdir(parents=True)
    spec = {"kind": "cpu", "name": "planted test CPU", "key": key, "index": None,
            "peak_flops": {"float32": 1e11, "bfloat16": 3e9}, "mem_bandwidth_Bps": 3e10,
            "l2_bytes": 1 << 20, "llc_bytes": 32 << 20, "compute_units": 2, "clock_hz": None,
            "threads": THREADS, "source": "measured"}
    (root / key / "device.json").write_text(json.dumps(spec))
    return root, key


def tiny_mlp(inputs: int = 16, hidden: int = 32, batch: int = 8):
    """A seeded tiny MLP with a foreach SGD optimizer and one batch: (model, opt, x, y)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    return model, opt, torch.randn(batch, inputs), torch.randn(batch, 1)


def tiny_mlp_step(**sizes):
    """One training step (zero_grad, MSE loss, backward, SGD step) of :func:`tiny_mlp`."""
    import torch

    model, opt, x, y = tiny_mlp(**sizes)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    return step


def planted_spec(root, key):
    """The DeviceSpec that :func:`planted_results` wrote under ``root``/``key``."""
    from perfmodel.device import DeviceSpec

    return DeviceSpec.from_dict(json.loads((root / key / "device.json").read_text()))


@pytest.fixture
def planted_linear_fit(planted_results):
    """``planted_results`` plus a fit saved for the planted spec (1 thread): linear
    forward and backward at 5 µs + FLOPs / 1 GFLOP/s, ten configs each. Other ops
    have no predictor. Returns (root, device_key)."""
    from perfmodel.fitting import fit_predictors, save_fit
    from perfmodel.ops import get_op
    from perfmodel.store import ResultStore

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
