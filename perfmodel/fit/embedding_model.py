"""Analytical GPU model of table-batched embedding lookups (seed notebook 001).

Each kernel is modelled as one warp per (sample, table) bag, with DRAM traffic
counted in 32-byte sectors. Forward also estimates the L2 hit rate of table
rows; backward models the fused exact-SGD and (approximately) the exact
row-wise Adagrad kernels. All functions return seconds.

Device constants come from :class:`~perfmodel.device.spec.DeviceSpec`:
``mem_bandwidth_Bps`` (peak DRAM B/s), ``l2_bytes``, ``compute_units`` (SMs)
and ``peak_flops["float32"]``. The L2 bandwidth is not in ``DeviceSpec`` and is
a keyword argument (``l2_bandwidth_Bps``, default the notebook's V100 figure).
The notebook's own V100 constants were an effective DRAM bandwidth of 809 GB/s,
an "L2 size" of 6·1024·1024·4 B, 80 SMs and 12.2 TFLOP/s; pass a spec with
those values to reproduce its numbers (see :func:`notebook_v100_spec`).
"""

from __future__ import annotations

import dataclasses

from perfmodel.device.datasheet import DATASHEET
from perfmodel.device.spec import DeviceSpec

#: Bytes of one DRAM/L2 sector.
SECTOR_BYTES = 32
#: Bytes of one fp32 element and of one (int32) index in the modelled kernels.
FLOAT_BYTES = 4
INDEX_BYTES = 4
#: The notebook's V100 L2 bandwidth (B/s).
NOTEBOOK_L2_BANDWIDTH_BPS = 2888e9
#: Bytes read per warp for its table offset and its bag offsets.
_OFFSET_TRAFFIC = SECTOR_BYTES


def sectors_bytes(n_bytes: int) -> int:
    """``n_bytes`` rounded up to whole 32-byte sectors (B)."""
    return -(-int(n_bytes) // SECTOR_BYTES) * SECTOR_BYTES


def notebook_v100_spec() -> DeviceSpec:
    """The V100 spec with the notebook's constants: 809 GB/s DRAM, 6·1024·1024·4 B
    "L2", 80 SMs, 12.2 TFLOP/s fp32."""
    base = DATASHEET["cuda-v100-sxm2-32gb"].to_spec()
    return dataclasses.replace(base, mem_bandwidth_Bps=809e9, l2_bytes=6 * 1024 * 1024 * 4,
                               compute_units=80,
                               peak_flops={**base.peak_flops, "float32": 12.2e12})


def l2_hit_rate(rows_in_l2: float, rows: int, batch: int) -> float:
    """C(X, B) / C(E, B): probability that all ``batch`` rows drawn without
    replacement from ``rows`` fall in the ``rows_in_l2`` cached ones."""
    x, e = float(rows_in_l2), float(rows)
    if x >= e:
        return 1.0
    ratio = 1.0
    for _ in range(int(batch)):
        if x <= 0:
            return 0.0
        ratio *= x / e
        x -= 1
        e -= 1
    return ratio


def predict_forward_s(B: int, E: int, T: int, L: int, D: int, spec: DeviceSpec, *,
                      rows_per_block: int = 128, shmem: bool = True,
                      l2_bandwidth_Bps: float = NOTEBOOK_L2_BANDWIDTH_BPS) -> float:
    """Forward lookup time (s): the larger of DRAM traffic / DRAM bandwidth and L2
    traffic / L2 bandwidth. ``rows_per_block`` is warps per SM of the launch;
    ``shmem`` says whether indices are staged in shared memory."""
    warps_at_once = spec.compute_units * rows_per_block
    tables_at_once = (warps_at_once + B - 1) // B
    table_l2_bytes = min(spec.l2_bytes // tables_at_once, E * D * FLOAT_BYTES)
    indices_bytes = sectors_bytes(L * INDEX_BYTES)
    staged = 0 if shmem else indices_bytes
    rows_in_l2 = (table_l2_bytes - staged) // FLOAT_BYTES // D
    hit = l2_hit_rate(rows_in_l2, E, B)
    threads_x = max(D / 4, 1024 / rows_per_block)

    indices_l2 = 0 if shmem else D // (4 * threads_x) * indices_bytes
    table = L * sectors_bytes(D * FLOAT_BYTES)
    output = sectors_bytes(D * FLOAT_BYTES)
    l2_bytes = ((2 * _OFFSET_TRAFFIC + indices_l2) * B + hit * (table * B - table_l2_bytes)) * T
    dram_bytes = ((indices_bytes + output) * B + (1 - hit) * (table * B - table_l2_bytes)
                  + table_l2_bytes) * T
    return max(dram_bytes / spec.mem_bandwidth_Bps, l2_bytes / l2_bandwidth_Bps)


def predict_backward_sgd_s(B: int, E: int, T: int, L: int, D: int, spec: DeviceSpec, *,
                           shmem: bool = False) -> float:
    """Backward + fused exact-SGD time (s): the larger of DRAM traffic / bandwidth
    and multiply-accumulates / ``peak_flops["float32"]`` (one MAC counted as one
    op, as the notebook does). ``E`` is unused by the model."""
    row = sectors_bytes(D * FLOAT_BYTES)
    if shmem:
        indices, grad_output = sectors_bytes(L * INDEX_BYTES), row
    else:
        indices, grad_output = L * SECTOR_BYTES, 2 * L * row
    per_warp = 2 * _OFFSET_TRAFFIC + indices + 2 * L * row + grad_output
    macs = B * T * L * 4 * (D // 4)
    return max(B * T * per_warp / spec.mem_bandwidth_Bps, macs / spec.peak_flops["float32"])


def predict_backward_rowwise_adagrad_s(B: int, E: int, T: int, L: int, D: int,
                                       spec: DeviceSpec) -> float:
    """Backward + fused exact row-wise Adagrad time (s), DRAM-bound approximation.
    ``E`` is unused by the model."""
    row = sectors_bytes(D * FLOAT_BYTES)
    per_warp = 2 * _OFFSET_TRAFFIC + 2 * sectors_bytes(L * INDEX_BYTES) + L * row \
        + (L + 1) * row + L * row
    return B * T * per_warp / spec.mem_bandwidth_Bps


#: The model functions by kind; each takes (B, E, T, L, D, spec) and returns seconds.
MODELS = {
    "forward": predict_forward_s,
    "backward_sgd": predict_backward_sgd_s,
    "backward_rowwise_adagrad": predict_backward_rowwise_adagrad_s,
}
