"""What a device can do: the frozen `DeviceSpec` (peak FLOP/s per dtype, memory
bandwidth, caches, clocks) and device-name parsing. Pure data: no probing here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from perfmodel.plaindata import dataclass_from_dict

KINDS = ("cpu", "cuda")
SOURCES = ("datasheet", "measured", "torch-properties")

_KEY_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_MAX_KEY_LEN = 80


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_positive_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# ---------------------------------------------------------------- DeviceSpec


@dataclass(frozen=True)
class DeviceSpec:
    """Capabilities of one device.

    `peak_flops` is FLOP/s per dtype name ("float32", "bfloat16", "float16", "tf32");
    it is stored read-only. `mem_bandwidth_Bps` is bytes/s, cache sizes are bytes,
    `clock_hz` is Hz, `compute_units` counts SMs (GPU) or usable CPUs, `threads` is the
    CPU thread count the figures were measured with. `key` is a filesystem-safe slug
    that names the device's results folder.
    """

    kind: str
    name: str
    key: str
    index: int | None
    peak_flops: Mapping[str, float] = field(hash=False)
    mem_bandwidth_Bps: float
    l2_bytes: int
    llc_bytes: int
    compute_units: int
    clock_hz: float | None
    threads: int | None
    source: str

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"DeviceSpec.kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"DeviceSpec.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.key, str) or len(self.key) > _MAX_KEY_LEN or not _KEY_RE.match(self.key):
            raise ValueError(f"DeviceSpec.key must be a lowercase slug like 'cpu-amd-epyc-2c', got {self.key!r}")
        if self.index is not None and (not _is_int(self.index) or self.index < 0):
            raise ValueError(f"DeviceSpec.index must be None or an int >= 0, got {self.index!r}")
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise ValueError(f"DeviceSpec.peak_flops must be a non-empty dict, got {self.peak_flops!r}")
        for dtype, flops in self.peak_flops.items():
            if not isinstance(dtype, str) or not _is_positive_real(flops):
                raise ValueError(f"DeviceSpec.peak_flops[{dtype!r}] must be a positive finite FLOP/s, got {flops!r}")
        object.__setattr__(
            self, "peak_flops", MappingProxyType({k: float(v) for k, v in self.peak_flops.items()})
        )
        if not _is_positive_real(self.mem_bandwidth_Bps):
            raise ValueError(f"DeviceSpec.mem_bandwidth_Bps must be positive and finite, got {self.mem_bandwidth_Bps!r}")
        object.__setattr__(self, "mem_bandwidth_Bps", float(self.mem_bandwidth_Bps))
        for name in ("l2_bytes", "llc_bytes"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"DeviceSpec.{name} must be an int >= 0, got {value!r}")
        if not _is_int(self.compute_units) or self.compute_units < 1:
            raise ValueError(f"DeviceSpec.compute_units must be an int >= 1, got {self.compute_units!r}")
        if self.clock_hz is not None:
            if not _is_positive_real(self.clock_hz):
                raise ValueError(f"DeviceSpec.clock_hz must be None or positive, got {self.clock_hz!r}")
            object.__setattr__(self, "clock_hz", float(self.clock_hz))
        if self.threads is not None and (not _is_int(self.threads) or self.threads < 1):
            raise ValueError(f"DeviceSpec.threads must be None or an int >= 1, got {self.threads!r}")
        if self.source not in SOURCES:
            raise ValueError(f"DeviceSpec.source must be one of {SOURCES}, got {self.source!r}")

    def peak_flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for a dtype name ("float32", "torch.bfloat16", ...)."""
        name = str(dtype).removeprefix("torch.")
        try:
            return self.peak_flops[name]
        except KeyError:
            known = ", ".join(sorted(self.peak_flops))
            raise KeyError(f"no peak FLOP/s for dtype {name!r} on {self.key}; known dtypes: {known}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["peak_flops"] = dict(self.peak_flops)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DeviceSpec":
        """Rebuild from `to_dict` output; ValueError names a missing, unknown or bad field."""
        if isinstance(d, dict) and not isinstance(d.get("peak_flops", {}), dict):
            raise ValueError(f"DeviceSpec.peak_flops must be a dict, got {type(d['peak_flops']).__name__}")
        return dataclass_from_dict(cls, d)


# ---------------------------------------------------------------- names and keys


def parse_device(name: str | None) -> tuple[str, int | None]:
    """("auto", None), ("cpu", None) or ("cuda", index) for None/"auto", "cpu", "cuda", "cuda:N"."""
    if name is None or name == "auto":
        return "auto", None
    if name == "cpu":
        return "cpu", None
    if name == "cuda":
        return "cuda", 0
    match = re.fullmatch(r"cuda:(\d+)", name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"unknown device {name!r}: expected cpu, cuda or cuda:N")
    return "cuda", int(match.group(1))


def slugify(text: str) -> str:
    """Lowercase `text` into [a-z0-9-] words joined by single dashes."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "unknown"
