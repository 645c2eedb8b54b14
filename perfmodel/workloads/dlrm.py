"""DLRM: bottom MLP, embedding tables, dot interaction, top MLP, BCE loss.

The interaction follows the reference implementation (facebookresearch/dlrm):
the bottom-MLP output and the T pooled embeddings are stacked into a
(B, T+1, D) matrix, multiplied by its transpose with ``bmm``, the strict lower
triangle is gathered with precomputed row and column indices, and the result
is concatenated with the bottom-MLP output.

Embeddings come from one ``torch.nn.EmbeddingBag(mode="sum")`` per table
(``backend="embedding_bag"``; dense gradients, updated by the dense SGD) or
from FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen`` (``backend="tbe"``),
whose optimizer update is fused into its backward, so the dense SGD then only
covers the MLPs.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from perfmodel.workloads.base import DATA_BATCHES, TrainingStep, cycle_batches, training_step

if TYPE_CHECKING:
    import torch

#: Rows of the 26 Criteo Terabyte tables in MLPerf Training's DLRM
#: (``--max-ind-range=40000000``).
MLPERF_TABLE_ROWS = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951,
                     2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14, 39979771, 25641295,
                     39664984, 585935, 12972, 108, 36)
#: fp32 embedding bytes a :meth:`DLRMConfig.full_size` model may hold: half of
#: an 80 GB GPU, leaving room for optimizer state, activations and the allocator.
GPU_TABLE_BUDGET_BYTES = 40e9

BACKENDS = ("embedding_bag", "tbe")
INDEX_DISTRIBUTIONS = ("uniform", "zipf")
TBE_OPTIMIZERS = ("EXACT_SGD", "EXACT_ROWWISE_ADAGRAD")


@dataclass(frozen=True)
class DLRMConfig:
    """A DLRM with synthetic dense features, indices and click labels.

    ``bottom_mlp`` and ``top_mlp`` list the output widths of their Linear
    layers (the inputs follow from ``dense_features`` and the interaction);
    the bottom MLP ends at ``embedding_dim`` and the top MLP at one logit.
    ``table_rows`` are the tables' nominal sizes; each is capped at
    ``max_rows`` rows when that is set (to fit a small machine). Every bag
    pools exactly ``pooling`` rows. Zipf indices draw rank r with probability
    proportional to r**-zipf_alpha, hot ranks scattered over the table.
    """

    name: str = "dlrm"
    batch: int = 256
    dense_features: int = 13
    bottom_mlp: tuple[int, ...] = (64, 32)
    top_mlp: tuple[int, ...] = (64, 1)
    table_rows: tuple[int, ...] = (1000,) * 8
    max_rows: int | None = None
    embedding_dim: int = 32
    pooling: int = 8
    index_distribution: str = "uniform"
    zipf_alpha: float = 1.05
    backend: str = "embedding_bag"
    tbe_optimizer: str = "EXACT_SGD"
    lr: float = 0.01
    kind: ClassVar[str] = "dlrm"

    def __post_init__(self) -> None:
        if self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(f"bottom_mlp must end at embedding_dim={self.embedding_dim}, "
                             f"got {self.bottom_mlp}")
        if self.top_mlp[-1] != 1:
            raise ValueError(f"top_mlp must end at one logit, got {self.top_mlp}")
        for field, value, allowed in (("backend", self.backend, BACKENDS),
                                      ("index_distribution", self.index_distribution,
                                       INDEX_DISTRIBUTIONS),
                                      ("tbe_optimizer", self.tbe_optimizer, TBE_OPTIMIZERS)):
            if value not in allowed:
                raise ValueError(f"{field} must be one of {allowed}, got {value!r}")

    @property
    def rows(self) -> tuple[int, ...]:
        """Rows of each table as built (``table_rows`` capped at ``max_rows``)."""
        cap = self.max_rows or max(self.table_rows)
        return tuple(min(r, cap) for r in self.table_rows)

    @property
    def embedding_bytes(self) -> int:
        """fp32 bytes of all tables as built (B)."""
        return sum(self.rows) * self.embedding_dim * 4

    @property
    def interaction_width(self) -> int:
        """Width of the interaction output: n(n-1)/2 pairs for n = tables + 1
        features, plus the bottom-MLP output."""
        n = len(self.table_rows) + 1
        return n * (n - 1) // 2 + self.embedding_dim

    def tiny(self) -> DLRMConfig:
        """Three tables of 50 rows, D=4, batch 8; backend and indices as here."""
        return dataclasses.replace(
            self, name=f"{self.name}_tiny", batch=8, dense_features=4, bottom_mlp=(8, 4),
            top_mlp=(8, 1), table_rows=(50,) * min(3, len(self.table_rows)), max_rows=None,
            embedding_dim=4, pooling=min(self.pooling, 3))

    def full_size(self) -> DLRMConfig:
        """Batch 2048 and the nominal tables, capped so that the embeddings fit
        in :data:`GPU_TABLE_BUDGET_BYTES`."""
        budget_rows = int(GPU_TABLE_BUDGET_BYTES // (self.embedding_dim * 4))
        cap = max(self.table_rows)
        while sum(min(r, cap) for r in self.table_rows) > budget_rows:
            cap = int(cap * 0.95)
        return dataclasses.replace(self, name=f"{self.name}_full", batch=max(self.batch, 2048),
                                   max_rows=cap)

    def build(self, device: str, seed: int = 0) -> TrainingStep:
        """The DLRM on ``device`` with :data:`DATA_BATCHES` synthetic batches."""
        import torch
        import torch.nn.functional as F

        torch.manual_seed(seed)
        model = _dlrm_class()(self, device)
        sparse_params = set(model.tbe.parameters()) if self.backend == "tbe" else set()
        dense_params = [p for p in model.parameters() if p not in sparse_params]
        optimizer = torch.optim.SGD(dense_params, lr=self.lr, momentum=0.9, foreach=True)
        next_batch = cycle_batches([self._batch(device) for _ in range(DATA_BATCHES)])

        def loss_of() -> torch.Tensor:
            dense, sparse, labels = next_batch()
            return F.binary_cross_entropy_with_logits(model(dense, sparse), labels)

        return training_step(self.name, model, optimizer, loss_of, self.batch)

    def _batch(self, device: str) -> tuple:
        """Dense features (B, F), sparse input in the backend's form, labels (B,)."""
        import torch

        b, l = self.batch, self.pooling
        dense = torch.randn(b, self.dense_features)
        labels = torch.randint(0, 2, (b,)).float()
        indices = [self._table_indices(rows, b * l) for rows in self.rows]
        if self.backend == "tbe":  # one flat list, T*B bags, offsets of length T*B+1
            sparse = (torch.cat(indices).to(device),
                      torch.arange(0, len(indices) * b * l + 1, l, device=device))
        else:  # per table: 1-D indices and the B bag starts
            offsets = torch.arange(0, b * l, l, device=device)
            sparse = [(idx.to(device), offsets) for idx in indices]
        return dense.to(device), sparse, labels.to(device)

    def _table_indices(self, rows: int, n: int) -> torch.Tensor:
        """``n`` int64 row indices in [0, rows) from the configured distribution."""
        import torch

        if self.index_distribution == "uniform" or rows == 1:
            return torch.randint(0, rows, (n,))
        cdf = torch.arange(1, rows + 1, dtype=torch.float64).pow(-self.zipf_alpha).cumsum(0)
        ranks = torch.searchsorted(cdf / cdf[-1], torch.rand(n, dtype=torch.float64))
        return torch.randperm(rows)[ranks.clamp_(max=rows - 1)]


def dot_interaction(bottom: torch.Tensor, pooled: list[torch.Tensor], li: torch.Tensor,
                    lj: torch.Tensor) -> torch.Tensor:
    """The (B, n(n-1)/2 + D) interaction of the bottom output (B, D) and the
    pooled embeddings (each (B, k·D)), for n = 1 + the number of embeddings
    and ``li``, ``lj`` the strict lower triangle of an n×n matrix."""
    import torch

    b, d = bottom.shape
    features = torch.cat([bottom, *pooled], dim=1).view(b, -1, d)
    z = torch.bmm(features, features.transpose(1, 2))
    return torch.cat([bottom, z[:, li, lj]], dim=1)


@functools.cache
def _dlrm_class() -> type:
    import torch
    from torch import nn

    class DLRM(nn.Module):
        """``forward(dense, sparse)`` returns the click logits (B,)."""

        def __init__(self, cfg: DLRMConfig, device: str) -> None:
            super().__init__()
            self.bottom = _mlp(cfg.dense_features, cfg.bottom_mlp, final_relu=True)
            self.top = _mlp(cfg.interaction_width, cfg.top_mlp, final_relu=False)
            if cfg.backend == "tbe":
                self.tbe = _tbe(cfg, device)
            else:
                self.tables = nn.ModuleList(nn.EmbeddingBag(rows, cfg.embedding_dim, mode="sum")
                                            for rows in cfg.rows)
                with torch.no_grad():
                    for table, rows in zip(self.tables, cfg.rows):
                        table.weight.uniform_(-rows ** -0.5, rows ** -0.5)
            li, lj = torch.tril_indices(len(cfg.rows) + 1, len(cfg.rows) + 1, offset=-1)
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)
            self.to(device)

        def forward(self, dense: torch.Tensor, sparse) -> torch.Tensor:
            bottom = self.bottom(dense)
            if hasattr(self, "tbe"):
                pooled = [self.tbe(*sparse)]
            else:
                pooled = [table(idx, offsets) for table, (idx, offsets) in zip(self.tables, sparse)]
            return self.top(dot_interaction(bottom, pooled, self.li, self.lj)).squeeze(1)

    return DLRM


def _mlp(n_in: int, widths: tuple[int, ...], final_relu: bool) -> torch.nn.Sequential:
    from torch import nn

    layers: list = []
    for i, n_out in enumerate(widths):
        layers.append(nn.Linear(n_in, n_out))
        if final_relu or i < len(widths) - 1:
            layers.append(nn.ReLU())
        n_in = n_out
    return nn.Sequential(*layers)


def _tbe(cfg: DLRMConfig, device: str) -> torch.nn.Module:
    """FBGEMM's table-batched embedding bags for ``cfg``, sum pooling, fp32."""
    import torch

    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            EmbeddingLocation,
            OptimType,
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except (ImportError, OSError) as exc:
        raise ImportError("fbgemm_gpu is not installed (or failed to load); pip install "
                          f"fbgemm-gpu-cpu (CPU) or fbgemm-gpu (CUDA): {exc}") from exc
    dev = torch.device(device)
    on_cpu = dev.type == "cpu"
    location = EmbeddingLocation.HOST if on_cpu else EmbeddingLocation.DEVICE
    compute = ComputeDevice.CPU if on_cpu else ComputeDevice.CUDA
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, cfg.embedding_dim, location, compute) for rows in cfg.rows],
        optimizer=getattr(OptimType, cfg.tbe_optimizer), learning_rate=cfg.lr, eps=1e-8,
        device=dev)
    with torch.no_grad():
        for weights, rows in zip(tbe.split_embedding_weights(), cfg.rows):
            weights.uniform_(-rows ** -0.5, rows ** -0.5)
    return tbe
