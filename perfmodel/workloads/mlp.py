"""A small MLP training step (forward, MSE loss, backward, SGD step).

Its prediction is the placeholder E2E path: the Linear layers come from the
fitted GEMM predictors; the remaining ops (ReLU, loss, optimizer step) are
timed in isolation with the Timer, and host overheads are not modelled yet.
The trace-driven simulator replaces this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from perfmodel.ops.base import torch_dtype


@dataclass(frozen=True)
class MLPConfig:
    """Layer widths (input first, output last), batch size and dtype."""

    batch: int = 256
    widths: tuple[int, ...] = (256, 1024, 1024, 512, 1)
    dtype: str = "float32"
    lr: float = 0.01

    @property
    def layers(self) -> list[dict[str, int]]:
        """``linear`` configs of the layers, in order."""
        return [{"B": self.batch, "IN": i, "OUT": o}
                for i, o in zip(self.widths[:-1], self.widths[1:])]


@dataclass
class MLPStep:
    """A built model with synthetic data; ``step()`` runs one training iteration."""

    model: object
    inputs: object
    targets: object
    optimizer: object

    def step(self) -> None:
        import torch.nn.functional as F

        self.optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.model(self.inputs), self.targets)
        loss.backward()
        self.optimizer.step()


def build_mlp(cfg: MLPConfig, device: str, seed: int = 0) -> MLPStep:
    """The MLP of ``cfg`` on ``device`` with random inputs and targets."""
    import torch

    torch.manual_seed(seed)
    layers: list = []
    for i, (n_in, n_out) in enumerate(zip(cfg.widths[:-1], cfg.widths[1:])):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(cfg.widths) - 2:
            layers.append(torch.nn.ReLU())
    dtype = torch_dtype(cfg.dtype)
    model = torch.nn.Sequential(*layers).to(device=device, dtype=dtype)
    inputs = torch.randn(cfg.batch, cfg.widths[0], device=device, dtype=dtype)
    targets = torch.randn(cfg.batch, cfg.widths[-1], device=device, dtype=dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    return MLPStep(model, inputs, targets, optimizer)


def non_gemm_runners(cfg: MLPConfig, device: str) -> dict[str, list[Callable[[], object]]]:
    """Isolated callables of the step's non-GEMM work, grouped by breakdown bucket."""
    import torch
    import torch.nn.functional as F

    t = dict(device=device, dtype=torch_dtype(cfg.dtype))
    runners: dict[str, list[Callable[[], object]]] = {"relu": [], "loss": [], "optimizer": []}
    for width in cfg.widths[1:-1]:
        h = torch.randn(cfg.batch, width, requires_grad=True, **t)
        out = torch.relu(h)
        grad = torch.randn_like(out)
        runners["relu"].append(lambda h=h: torch.relu(h))
        runners["relu"].append(
            lambda out=out, h=h, grad=grad: torch.autograd.grad(out, h, grad, retain_graph=True))
    pred = torch.randn(cfg.batch, cfg.widths[-1], requires_grad=True, **t)
    target = torch.randn(cfg.batch, cfg.widths[-1], **t)
    runners["loss"].append(lambda: torch.autograd.grad(F.mse_loss(pred, target), pred))
    step = build_mlp(cfg, device)
    for p in step.model.parameters():
        p.grad = torch.randn_like(p)
    runners["optimizer"].append(step.optimizer.step)
    return runners
