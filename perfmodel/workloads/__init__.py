"""End-to-end workloads, each built from a config with synthetic data.

A config is a frozen dataclass (see :class:`WorkloadConfig`); its ``build``
returns a :class:`TrainingStep`. The registered sizes are small enough for a
CPU main job; ``tiny()`` gives a miniature for tests and ``full_size()`` a variant sized for
one data-centre GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from perfmodel.registry import Registry, RegistryView, expand
from perfmodel.workloads.base import TrainingStep, WorkloadConfig
from perfmodel.workloads.cnn import CNNConfig
from perfmodel.workloads.ddp import DDPConfig
from perfmodel.workloads.dlrm import MLPERF_TABLE_ROWS, DLRMConfig
from perfmodel.workloads.dlrm_mp import DLRMMPConfig
from perfmodel.workloads.hf import HFGPT2Config
from perfmodel.workloads.mlp import MLPConfig
from perfmodel.workloads.transformer import TransformerConfig

__all__ = ["MULTIRANK_WORKLOADS", "WORKLOADS", "ZOO_WORKLOADS", "TrainingStep", "WorkloadConfig",
           "build_workload", "check_workload", "get_multirank_workload", "get_workload",
           "is_zoo", "register_workload"]

_W = TypeVar("_W")

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
    dataclasses.replace(_DLRM_MEDIUM, name="dlrm_ebag", backend="embedding_bag"),
    dataclasses.replace(_DLRM_MEDIUM, name="dlrm_tbe", backend="tbe"),
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

_MULTIRANK_CONFIGS: tuple[WorkloadConfig, ...] = (
    DDPConfig(name="ddp_mlp"),
    DLRMMPConfig(name="dlrm_mp"),
)

#: What a ``perfmodel.workloads`` entry point may load.
ENTRY_POINT_EXPECTS = "a workload config (see WorkloadConfig) or an iterable of them"


def _zoo_configs() -> tuple[WorkloadConfig, ...]:
    from perfmodel.workloads.zoo import ZOO_CONFIGS

    return tuple(ZOO_CONFIGS)


def is_zoo(config: WorkloadConfig) -> bool:
    """Whether ``config`` is one of the held-out zoo's models
    (:mod:`perfmodel.workloads.zoo`), which ``pytest -m zoo`` runs and the
    project's own E2E suite and gate leave out."""
    return any(config is z for z in _zoo_configs())


def is_multirank(config: WorkloadConfig) -> bool:
    """Whether ``config`` runs on several ranks (``needs_process_group``)."""
    return bool(getattr(config, "needs_process_group", False))


def check_workload(config: Any) -> None:
    """ValueError naming ``config`` when it is not a workload config: a
    non-empty ``name`` and callable ``build``, ``tiny`` and ``full_size``; a
    multi-rank one (``needs_process_group``) also needs ``world_sizes``, a
    tuple of ints above 1."""
    name = getattr(config, "name", None)
    if isinstance(config, type) or not isinstance(name, str) or not name:
        raise ValueError(f"{config!r} ({type(config).__name__}) is not a workload config: it "
                         f"needs a non-empty str name (see perfmodel.workloads.WorkloadConfig)")
    missing = [m for m in ("build", "tiny", "full_size") if not callable(getattr(config, m, None))]
    if missing:
        raise ValueError(f"workload {name!r} ({type(config).__name__}) lacks the method(s) "
                         f"{', '.join(missing)} of a workload config "
                         f"(see perfmodel.workloads.WorkloadConfig)")
    sizes = getattr(config, "world_sizes", None)
    if is_multirank(config) and not (isinstance(sizes, tuple) and sizes and all(
            isinstance(n, int) and n > 1 for n in sizes)):
        raise ValueError(f"multi-rank workload {name!r} needs world_sizes, a tuple of rank "
                         f"counts above 1, got {sizes!r}")


def _one_workload(obj: Any) -> WorkloadConfig | None:
    if isinstance(obj, type) or not hasattr(obj, "build"):
        return None
    check_workload(obj)
    return obj


def _workload_definitions(obj: Any) -> list[WorkloadConfig]:
    return expand(obj, _one_workload, ENTRY_POINT_EXPECTS)


#: Every workload config, single- and multi-rank, filled on the first lookup.
ALL_WORKLOADS: Registry[WorkloadConfig] = Registry(
    "workload", "perfmodel.workloads", lambda: _CONFIGS + _MULTIRANK_CONFIGS + _zoo_configs(),
    _workload_definitions, lambda cfg: cfg.name)

#: Named single-rank workload configs that ``pytest -m e2e`` gates and the CLI
#: knows (built-in, from entry points and registered); a read-only mapping.
WORKLOADS: RegistryView[WorkloadConfig] = RegistryView(
    ALL_WORKLOADS, lambda cfg: not is_multirank(cfg) and not is_zoo(cfg), "workload")

#: The held-out model zoo (:mod:`perfmodel.workloads.zoo`): single-rank models
#: the op definitions and overhead table were not tuned on; ``pytest -m zoo``
#: runs them (``suites/test_zoo.py``), the CLI knows them, the gate does not.
ZOO_WORKLOADS: RegistryView[WorkloadConfig] = RegistryView(ALL_WORKLOADS, is_zoo, "zoo model")

#: Workloads that run on several ranks: their configs have ``needs_process_group``
#: (building needs torch.distributed initialised) and ``world_sizes``; see
#: :mod:`perfmodel.e2e.ranks`.
MULTIRANK_WORKLOADS: RegistryView[WorkloadConfig] = RegistryView(
    ALL_WORKLOADS, is_multirank, "multi-rank workload")


def register_workload(config: _W, *, replace: bool = False) -> _W:
    """Register a workload config under its ``name``: ``pytest.mark.perfmodel_workloads(name)``,
    ``suites/test_e2e.py``, :func:`build_workload` and the CLI then know it; a config
    with ``needs_process_group`` joins :data:`MULTIRANK_WORKLOADS` instead.

    ValueError naming the workload when its name is taken (``replace=True``
    replaces that config) or it is not a workload config. Returns ``config``.
    """
    check_workload(config)
    ALL_WORKLOADS.register(config, replace=replace)
    return config


#: Variants :func:`build_workload` can build of a registered config.
SIZES = ("registered", "tiny", "full")


def get_workload(name: str) -> WorkloadConfig:
    """The config of single-rank workload or zoo model ``name``; ValueError
    listing the known workloads otherwise."""
    if name in ZOO_WORKLOADS:
        return ZOO_WORKLOADS[name]
    return WORKLOADS.lookup(name)


def get_multirank_workload(name: str) -> WorkloadConfig:
    """The config of multi-rank workload ``name``; ValueError listing the known ones."""
    return MULTIRANK_WORKLOADS.lookup(name)


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
