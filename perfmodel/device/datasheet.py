"""Public NVIDIA data-sheet figures (`DATASHEET`): dense tensor-core peaks, memory
bandwidth and L2 per GPU model, matched by name and memory size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from perfmodel.device.spec import DeviceSpec

_KIB, _MIB = 1024, 1024 * 1024
_TERA, _GIGA = 1e12, 1e9


# V100 has neither TF32 nor BF16 units, so those dtypes are absent.
_V100 = {"float32": 15.7, "float16": 125.0}
_A100 = {"float32": 19.5, "tf32": 156.0, "float16": 312.0, "bfloat16": 312.0}
_H100_SXM = {"float32": 67.0, "tf32": 494.7, "float16": 989.4, "bfloat16": 989.4}


# ---------------------------------------------------------------- GPU data sheets


@dataclass(frozen=True)
class GpuDatasheet:
    """Public NVIDIA data-sheet figures for one GPU model (dense tensor-core peaks).

    `memory_gb` is the nominal memory size (decimal GB) used to tell variants apart;
    `sxm_only` rejects PCIe/NVL parts whose clocks and bandwidth differ.
    """

    key: str
    name: str
    family: str
    memory_gb: float
    sxm_only: bool
    peak_flops: Mapping[str, float] = field(hash=False)
    mem_bandwidth_Bps: float
    l2_bytes: int
    sms: int
    boost_clock_hz: float

    def to_spec(self, index: int | None = None, name: str | None = None) -> DeviceSpec:
        """This entry as a `DeviceSpec` (source "datasheet"; the L2 is the last-level cache)."""
        return DeviceSpec(
            kind="cuda",
            name=name or self.name,
            key=self.key,
            index=index,
            peak_flops=dict(self.peak_flops),
            mem_bandwidth_Bps=self.mem_bandwidth_Bps,
            l2_bytes=self.l2_bytes,
            llc_bytes=self.l2_bytes,
            compute_units=self.sms,
            clock_hz=self.boost_clock_hz,
            threads=None,
            source="datasheet",
        )


def _sheet(key, name, family, memory_gb, sxm_only, flops_tf, bandwidth_Bps, l2_mib, sms, boost_mhz):
    return GpuDatasheet(
        key=key,
        name=name,
        family=family,
        memory_gb=memory_gb,
        sxm_only=sxm_only,
        peak_flops=MappingProxyType({dtype: tf * _TERA for dtype, tf in flops_tf.items()}),
        mem_bandwidth_Bps=bandwidth_Bps,
        l2_bytes=l2_mib * _MIB,
        sms=sms,
        boost_clock_hz=boost_mhz * 1e6,
    )

#: NVIDIA data-sheet figures keyed by device key (FLOP/s, B/s, bytes, Hz).
DATASHEET: Mapping[str, GpuDatasheet] = MappingProxyType(
    {
        sheet.key: sheet
        for sheet in (
            _sheet("cuda-v100-sxm2-16gb", "NVIDIA V100 SXM2 16GB", "V100", 16, True, _V100, 900e9, 6, 80, 1530),
            _sheet("cuda-v100-sxm2-32gb", "NVIDIA V100 SXM2 32GB", "V100", 32, True, _V100, 900e9, 6, 80, 1530),
            # The 40 GB PCIe card has the SXM4 part's peaks and bandwidth.
            _sheet("cuda-a100-40gb", "NVIDIA A100 40GB", "A100", 40, False, _A100, 1555e9, 40, 108, 1410),
            _sheet("cuda-a100-sxm4-80gb", "NVIDIA A100 SXM4 80GB", "A100", 80, True, _A100, 2039e9, 40, 108, 1410),
            _sheet("cuda-h100-sxm-80gb", "NVIDIA H100 SXM 80GB", "H100", 80, True, _H100_SXM, 3.35e12, 50, 132, 1980),
            _sheet("cuda-h200-141gb", "NVIDIA H200 141GB", "H200", 141, True, _H100_SXM, 4.8e12, 50, 132, 1980),
        )
    }
)

_MEMORY_MATCH_TOLERANCE = 0.25  # reported total memory vs nominal size, relative


def match_datasheet(name: str, total_memory_bytes: int, sm_count: int | None = None) -> GpuDatasheet | None:
    """The DATASHEET entry for a CUDA device name and memory size, or None.

    The family (V100, A100, H100, H200) comes from the name, the variant from the
    nearest nominal memory size; PCIe/NVL parts and SM-count mismatches (e.g. MIG
    slices) are not matched to SXM figures.
    """
    upper = name.upper()
    form_factor_differs = "PCIE" in upper or "NVL" in upper
    memory_gb = total_memory_bytes / _GIGA
    best, best_error = None, _MEMORY_MATCH_TOLERANCE
    for sheet in DATASHEET.values():
        if not re.search(rf"(?<![A-Z0-9]){sheet.family}(?![0-9])", upper):
            continue
        if sheet.sxm_only and form_factor_differs:
            continue
        if sm_count is not None and sm_count != sheet.sms:
            continue
        error = abs(memory_gb - sheet.memory_gb) / sheet.memory_gb
        if error < best_error:
            best, best_error = sheet, error
    return best


# Rough FP32 lanes per SM and dense tensor-core/FP32 throughput ratios by compute
# capability; only used for GPUs missing from DATASHEET, so they are estimates.
_FP32_LANES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64}
_TENSOR_RATIOS = {
    (7, 0): {"float16": 8.0},
    (7, 5): {"float16": 8.0},
    (8, 0): {"tf32": 8.0, "float16": 16.0, "bfloat16": 16.0},
    (8, 6): {"tf32": 2.0, "float16": 4.0, "bfloat16": 4.0},
    (8, 9): {"tf32": 2.0, "float16": 4.0, "bfloat16": 4.0},
    (9, 0): {"tf32": 7.4, "float16": 14.8, "bfloat16": 14.8},
}
_FALLBACK_CLOCK_HZ = 1.4e9
