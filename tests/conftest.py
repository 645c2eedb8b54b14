"""Shared fixtures of the project's tests."""

import json

import pytest

pytest_plugins = ["pytester"]

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
