"""Registry of op definitions: one :class:`~perfmodel.ops.base.OpDef` per op."""

from __future__ import annotations

from perfmodel.ops import (attention, collective, conv, elementwise, embedding, gemm, memory,
                           norm, optim)
from perfmodel.ops.base import DIRECTIONS, PROFILES, OpCase, OpDef, check_profile

#: One module per op family; each exports ``OPS``, a tuple of op definitions.
FAMILY_MODULES = (gemm, embedding, conv, norm, elementwise, memory, attention, optim, collective)

OPS: dict[str, OpDef] = {op.name: op for module in FAMILY_MODULES for op in module.OPS}


def get_op(name: str) -> OpDef:
    """The op called ``name``; ValueError listing the known ops otherwise."""
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown op {name!r}: known ops are {', '.join(sorted(OPS))}") from None


def cases_for(names, profile: str) -> list[OpCase]:
    """All microbenchmark cases of the ops ``names`` in ``profile``."""
    check_profile(profile)
    return [case for name in names for case in get_op(name).cases(profile)]


__all__ = ["DIRECTIONS", "OPS", "PROFILES", "OpCase", "OpDef", "cases_for", "get_op"]
