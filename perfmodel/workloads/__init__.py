"""End-to-end workloads, each built from a config with synthetic data.

A config is a frozen dataclass (see :class:`WorkloadConfig`); its ``build``
returns a :class:`TrainingStep`. The registered sizes run one iteration in
roughly 15-80 ms on a 2-core CPU; ``tiny()`` gives a miniature for tests and
``full_size()`` a variant sized for one data-centre GPU.
"""

from __future__ import annotations

import dataclasses

from perfmodel.workloads.base import TrainingStep, WorkloadConfig
from perfmodel.workloads.cnn import CNNConfig
from perfmodel.workloads.ddp import DDPConfig
from perfmodel.workloads.dlrm import MLPERF_TABLE_ROWS, DLRMConfig
from perfmodel.workloads.dlrm_mp import DLRMMPConfig
from perfmodel.workloads.hf import HFGPT2Config
from perfmodel.workloads.mlp import MLPConfig
from perfmodel.workloads.transformer import TransformerConfig

__all__ = ["MULTIRANK_WORKLOADS", "WORKLOADS", "TrainingStep", "WorkloadConfig",
           "build_workload", "get_multirank_workload", "get_workload"]

_DLRM_MEDIUM = DLRMConfig(batch=512, dense_features=13, bottom_mlp=(128, 64), top_mlp=(128, 64, 1),
                          table_rows=(1_000_000,) * 8, max_rows=20_000, embedding_dim=64,
                          pooling=16)

_CONFIGS: tuple[WorkloadConfig, ...] = (
    MLPConfig(batch=256, widths=(256, 1024, 1024, 512, 1), name="mlp_small"),
    DLRMConfig(name="dlrm_random", batch=1024, dense_features=16, bottom_mlp=(64, 32),
               top_mlp=(64, 1), table_rows=(1000, 2500, 4000, 6000, 8000, 12000, 16000, 20000),
               embedding_dim=32, pooling=12),
    DLRMConfig(name="dlrm_mlperf", batch=128, dense_features=13, bottom_mlp=(512, 256, 128),
               top_mlp=(1024, 1024, 512, 256, 1), table_rows=MLPERF_TABLE_ROWS,
               max_rows=300_000, embedding_dim=128, pooling=1, index_distribution="zipf",
               zipf_alpha=1.05, backend="tbe", tbe_optimizer="EXACT_ROWWISE_ADAGRAD"),
    dataclasses.replace(_DLRM_MEDIUM, name="dlrm_tbe", backend="tbe"),
    dataclasses.replace(_DLRM_MEDIUM, name="dlrm_ebag", backend="embedding_bag"),
    CNNConfig(name="cnn_resnet", batch=8, image_size=32, width=16, depth=(1, 1, 1),
              architecture="resnet_bottleneck"),
    CNNConfig(name="cnn_mobilenet", batch=8, image_size=64, width=16, depth=(1, 2, 2),
              architecture="depthwise_separable"),
    TransformerConfig(name="transformer_encoder", batch=4, seq_len=64, d_model=256, heads=4,
                      layers=2, ffn=1024, vocab=4096, architecture="encoder"),
    TransformerConfig(name="transformer_decoder", batch=4, seq_len=64, d_model=256, heads=4,
                      layers=2, ffn=1024, vocab=4096, architecture="decoder"),
    HFGPT2Config(name="hf_gpt2", batch=8, seq_len=128, n_layer=2, n_embd=128, n_head=4,
                 vocab=1000),
)

#: Named workload configs that ``pytest -m e2e`` and the CLI know.
WORKLOADS: dict[str, WorkloadConfig] = {cfg.name: cfg for cfg in _CONFIGS}

#: Workloads that run on several ranks: their configs have ``needs_process_group``
#: (building needs torch.distributed initialised) and ``world_sizes``; see
#: :mod:`perfmodel.e2e.ranks`.
MULTIRANK_WORKLOADS: dict[str, WorkloadConfig] = {cfg.name: cfg for cfg in (
    DDPConfig(name="ddp_mlp"),
    DLRMMPConfig(name="dlrm_mp"),
)}

#: Variants :func:`build_workload` can build of a registered config.
SIZES = ("registered", "tiny", "full")


def _lookup(registry: dict[str, WorkloadConfig], name: str, kind: str) -> WorkloadConfig:
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}: known {kind}s are "
                         f"{', '.join(sorted(registry))}") from None


def get_workload(name: str) -> WorkloadConfig:
    """The config of workload ``name``; ValueError listing the known ones otherwise."""
    return _lookup(WORKLOADS, name, "workload")


def get_multirank_workload(name: str) -> WorkloadConfig:
    """The config of multi-rank workload ``name``; ValueError listing the known ones."""
    return _lookup(MULTIRANK_WORKLOADS, name, "multi-rank workload")


def build_workload(name: str, device: str, seed: int = 0, size: str = "registered") -> TrainingStep:
    """Workload ``name`` built on ``device``: as registered, its ``tiny()`` or its
    ``full_size()`` variant (``size``)."""
    cfg = get_workload(name)
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    if size == "tiny":
        cfg = cfg.tiny()
    elif size == "full":
        cfg = cfg.full_size()
    return cfg.build(device, seed)
