"""Data-parallel MLP training with ``DistributedDataParallel``.

Every rank holds the whole MLP (the ``mlp`` workload's Linear/ReLU layers, MSE
loss, foreach SGD with momentum) and its own batch; DDP all-reduces the
gradients in buckets of ``bucket_cap_mb`` while backward runs, and copies the
averaged gradients back before ``optimizer.step()``. Building needs an
initialised process group (:func:`perfmodel.world.init_distributed`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from perfmodel.workloads.base import TrainingStep
from perfmodel.workloads.mlp import MLPConfig, build_mlp


@dataclass(frozen=True)
class DDPConfig:
    """Per-rank ``batch``, layer ``widths`` (input first), DDP bucket size (MB)
    and the world sizes the workload is run at."""

    name: str = "ddp_mlp"
    batch: int = 128
    widths: tuple[int, ...] = (256, 1024, 1024, 256, 1)
    bucket_cap_mb: float = 2.0
    lr: float = 0.01
    world_sizes: tuple[int, ...] = (2, 4)
    kind: ClassVar[str] = "ddp"
    #: Building needs an initialised torch.distributed process group.
    needs_process_group: ClassVar[bool] = True

    def tiny(self) -> DDPConfig:
        """Batch 8, widths 8-64-64-1, buckets of 8 KB (two of them)."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", batch=8, widths=(8, 64, 64, 1),
                                   bucket_cap_mb=0.008)

    def full_size(self) -> DDPConfig:
        """16 times the batch, 4 times every width but the output, 25 MB buckets."""
        return dataclasses.replace(self, name=f"{self.name}_full", batch=16 * self.batch,
                                   widths=tuple(4 * w for w in self.widths[:-1])
                                   + self.widths[-1:], bucket_cap_mb=25.0)

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The DDP-wrapped MLP on ``device``: weights from ``seed`` (DDP broadcasts
        rank 0's), data from ``seed`` + rank."""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        if not dist.is_initialized():
            raise RuntimeError(f"{self.name} needs an initialised torch.distributed process "
                               f"group (perfmodel.world.init_distributed)")
        built = build_mlp(MLPConfig(self.batch, self.widths, lr=self.lr), device, seed)
        model = DistributedDataParallel(built.model, bucket_cap_mb=self.bucket_cap_mb)
        torch.manual_seed(seed + 1 + dist.get_rank())
        built.model = model
        built.inputs = torch.randn_like(built.inputs)
        built.targets = torch.randn_like(built.targets)
        built.optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9,
                                          foreach=True)
        model.train()
        return TrainingStep(self.name, model, built.step, self.batch)
