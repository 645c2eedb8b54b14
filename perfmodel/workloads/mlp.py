"""A small MLP training step: Linear/ReLU layers, MSE loss, backward, and a
foreach SGD step with momentum 0.9 (the ``sgd_foreach`` microbenchmark's)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from perfmodel.ops.base import torch_dtype
from perfmodel.workloads.base import TrainingStep


@dataclass(frozen=True)
class MLPConfig:
    """Layer widths (input first, output last), batch size and dtype."""

    batch: int = 256
    widths: tuple[int, ...] = (256, 1024, 1024, 512, 1)
    dtype: str = "float32"
    lr: float = 0.01
    name: str = "mlp"
    kind: ClassVar[str] = "mlp"

    @property
    def layers(self) -> list[dict[str, int]]:
        """``linear`` configs of the layers, in order."""
        return [{"B": self.batch, "IN": i, "OUT": o}
                for i, o in zip(self.widths[:-1], self.widths[1:])]

    def tiny(self) -> MLPConfig:
        """Batch 8, widths 8-16-1."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", batch=8, widths=(8, 16, 1))

    def full_size(self) -> MLPConfig:
        """16 times the batch, 4 times every width but the output."""
        return dataclasses.replace(self, name=f"{self.name}_full", batch=16 * self.batch,
                                   widths=tuple(4 * w for w in self.widths[:-1])
                                   + self.widths[-1:])

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The MLP on ``device``; see :func:`build_mlp`."""
        built = build_mlp(self, device, seed)
        built.model.train()
        return TrainingStep(self.name, built.model, built.step, self.batch)


@dataclass
class MLPStep:
    """A built model with synthetic data; ``step()`` runs one training iteration."""

    model: object
    inputs: object
    targets: object
    optimizer: object

    def step(self):
        """One iteration; returns the loss (a 0-d tensor, not synchronised)."""
        import torch.nn.functional as F

        self.optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.model(self.inputs), self.targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


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
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, foreach=True)
    return MLPStep(model, inputs, targets, optimizer)
