"""End-to-end workloads, each built from a config with synthetic data."""

from __future__ import annotations

from perfmodel.workloads.mlp import MLPConfig

#: Named workload configs that ``pytest -m e2e`` and the CLI know.
WORKLOADS = {
    "mlp_small": MLPConfig(batch=256, widths=(256, 1024, 1024, 512, 1)),
}


def get_workload(name: str):
    """The config of workload ``name``; ValueError listing the known ones otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}: known workloads are "
                         f"{', '.join(sorted(WORKLOADS))}") from None
