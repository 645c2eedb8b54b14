"""DLRM with model-parallel embedding tables and data-parallel MLPs.

As in the reference implementation's distributed mode (facebookresearch/dlrm,
``--dist-backend``): each of the W ranks owns ``T / W`` of the tables and looks
them up for the global batch (W x ``batch`` samples); one ``all_to_all`` sends
each rank the pooled embeddings of its own ``batch`` samples from every table
(and one in backward returns their gradients). The bottom MLP, dot interaction
and top MLP (:mod:`perfmodel.workloads.dlrm`) are wrapped in
``DistributedDataParallel``. Tables are ``nn.EmbeddingBag`` (dense gradients),
updated by each rank's own SGD. Building needs an initialised process group.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from perfmodel.workloads.base import DATA_BATCHES, TrainingStep, cycle_batches, training_step
from perfmodel.workloads.dlrm import DLRMConfig, _mlp, dot_interaction

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DLRMMPConfig:
    """Per-rank ``batch``; the model as :class:`~perfmodel.workloads.dlrm.DLRMConfig`
    describes it (``len(table_rows)`` must divide by the world size)."""

    name: str = "dlrm_mp"
    batch: int = 256
    dense_features: int = 13
    bottom_mlp: tuple[int, ...] = (256, 64)
    top_mlp: tuple[int, ...] = (256, 64, 1)
    table_rows: tuple[int, ...] = (20_000,) * 8
    embedding_dim: int = 64
    pooling: int = 16
    lr: float = 0.01
    world_sizes: tuple[int, ...] = (2, 4)
    kind: ClassVar[str] = "dlrm_mp"
    #: Building needs an initialised torch.distributed process group.
    needs_process_group: ClassVar[bool] = True

    @property
    def model(self) -> DLRMConfig:
        """The single-device DLRM this one distributes (its shapes and checks)."""
        return DLRMConfig(name=self.name, batch=self.batch, dense_features=self.dense_features,
                          bottom_mlp=self.bottom_mlp, top_mlp=self.top_mlp,
                          table_rows=self.table_rows, embedding_dim=self.embedding_dim,
                          pooling=self.pooling, lr=self.lr)

    def tiny(self) -> DLRMMPConfig:
        """Four tables of 50 rows, D=4, batch 8."""
        return dataclasses.replace(self, name=f"{self.name}_tiny", batch=8, dense_features=4,
                                   bottom_mlp=(8, 4), top_mlp=(8, 1), table_rows=(50,) * 4,
                                   embedding_dim=4, pooling=3)

    def full_size(self) -> DLRMMPConfig:
        """Batch 2048 per rank and 1M-row tables."""
        return dataclasses.replace(self, name=f"{self.name}_full", batch=max(self.batch, 2048),
                                   table_rows=(1_000_000,) * len(self.table_rows))

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """This rank's part of the model on ``device``: MLP weights from ``seed``
        (DDP broadcasts rank 0's), tables and data from ``seed`` + rank."""
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch.nn.parallel import DistributedDataParallel

        if not dist.is_initialized():
            raise RuntimeError(f"{self.name} needs an initialised torch.distributed process "
                               f"group (perfmodel.world.init_distributed)")
        rank, world = dist.get_rank(), dist.get_world_size()
        cfg = self.model
        if len(cfg.rows) % world:
            raise ValueError(f"{self.name}: {len(cfg.rows)} tables do not split over {world} ranks")
        mine = cfg.rows[rank * len(cfg.rows) // world:(rank + 1) * len(cfg.rows) // world]
        torch.manual_seed(seed)
        # the only buffers are the interaction's constant indices: nothing to broadcast
        dense_arch = DistributedDataParallel(_dense_arch_class()(cfg).to(device),
                                             broadcast_buffers=False)
        torch.manual_seed(seed + 1 + rank)
        tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(rows, cfg.embedding_dim, mode="sum")
                                     for rows in mine).to(device)
        with torch.no_grad():
            for table, rows in zip(tables, mine):
                table.weight.uniform_(-rows ** -0.5, rows ** -0.5)
        model = torch.nn.ModuleDict({"dense": dense_arch, "tables": tables})
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9, foreach=True)
        global_cfg = dataclasses.replace(cfg, batch=world * self.batch, table_rows=mine)
        next_batch = cycle_batches([self._batch(global_cfg, rank, device)
                                    for _ in range(DATA_BATCHES)])
        exchange = _pooled_all_to_all_class()

        def loss_of() -> torch.Tensor:
            dense, sparse, labels = next_batch()
            pooled = torch.cat([t(idx, off) for t, (idx, off) in zip(tables, sparse)], dim=1)
            return F.binary_cross_entropy_with_logits(
                dense_arch(dense, exchange.apply(pooled, world)), labels)

        return training_step(self.name, model, optimizer, loss_of, self.batch)

    def _batch(self, global_cfg: DLRMConfig, rank: int, device: str) -> tuple:
        """This rank's dense features and labels (``batch`` rows), and the
        indices of its tables for the global batch."""
        import torch

        _, sparse, _ = global_cfg._batch(device)
        b = self.batch
        dense = torch.randn(b, self.dense_features, device=device)
        labels = torch.randint(0, 2, (b,), device=device).float()
        return dense, sparse, labels


def pooled_exchange(x: torch.Tensor, world: int, inverse: bool = False) -> torch.Tensor:
    """One ``all_to_all`` of pooled embeddings. Forward: ``x`` (W·b, F), rows in
    rank order, to (b, W·F), rank j's F columns from rank j. ``inverse``: the
    gradient's way back, (b, W·F) to (W·b, F)."""
    import torch
    import torch.distributed as dist

    if inverse:
        b, wf = x.shape
        send = x.view(b, world, wf // world).transpose(0, 1).contiguous().view(world * b, -1)
        out = torch.empty_like(send)
        dist.all_to_all_single(out, send)
        return out
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x.contiguous())
    wb, f = out.shape
    return out.view(world, wb // world, f).transpose(0, 1).reshape(wb // world, world * f)


@functools.cache
def _pooled_all_to_all_class() -> type:
    import torch

    class PooledAllToAll(torch.autograd.Function):
        """:func:`pooled_exchange` forward, its inverse backward."""

        @staticmethod
        def forward(ctx, x: torch.Tensor, world: int) -> torch.Tensor:
            ctx.world = world
            return pooled_exchange(x, world)

        @staticmethod
        def backward(ctx, grad: torch.Tensor):
            return pooled_exchange(grad, ctx.world, inverse=True), None

    return PooledAllToAll


@functools.cache
def _dense_arch_class() -> type:
    from torch import nn

    class DenseArch(nn.Module):
        """Bottom MLP, dot interaction with the exchanged embeddings, top MLP;
        ``forward(dense (b, F), embedded (b, T·D))`` returns logits (b,)."""

        def __init__(self, cfg: DLRMConfig) -> None:
            import torch

            super().__init__()
            self.bottom = _mlp(cfg.dense_features, cfg.bottom_mlp, final_relu=True)
            self.top = _mlp(cfg.interaction_width, cfg.top_mlp, final_relu=False)
            li, lj = torch.tril_indices(len(cfg.rows) + 1, len(cfg.rows) + 1, offset=-1)
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)

        def forward(self, dense, embedded):
            bottom = self.bottom(dense)
            return self.top(dot_interaction(bottom, [embedded], self.li, self.lj)).squeeze(1)

    return DenseArch
