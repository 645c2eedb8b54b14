"""What a device can do: `DeviceSpec`, the GPU data-sheet table, and CPU measurement.

Known NVIDIA GPUs come from `DATASHEET`; other GPUs get a spec estimated from
`torch.cuda.get_device_properties`; CPUs are measured once (GEMM peak, STREAM-style
triad bandwidth) and cached as JSON in `<results_dir>/<key>/device.json`.
Nothing here runs at import time and torch is imported inside functions.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import time
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from perfmodel.plaindata import dataclass_from_dict, write_json_atomic

KINDS = ("cpu", "cuda")
SOURCES = ("datasheet", "measured", "torch-properties")
DEVICE_FILE = "device.json"

_KEY_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_MAX_KEY_LEN = 80
_KIB, _MIB = 1024, 1024 * 1024
_TERA, _GIGA = 1e12, 1e9


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


# V100 has neither TF32 nor BF16 units, so those dtypes are absent.
_V100 = {"float32": 15.7, "float16": 125.0}
_A100 = {"float32": 19.5, "tf32": 156.0, "float16": 312.0, "bfloat16": 312.0}
_H100_SXM = {"float32": 67.0, "tf32": 494.7, "float16": 989.4, "bfloat16": 989.4}

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


def cuda_spec_from_properties(props: Any, index: int) -> DeviceSpec:
    """A `DeviceSpec` for one CUDA device from `torch.cuda.get_device_properties` output.

    Data-sheet figures when the model is in DATASHEET; otherwise peaks estimated from
    SMs x FP32 lanes x clock (tensor dtypes scaled by a per-architecture ratio, or
    equal to FP32 when unknown) and bandwidth from the memory clock and bus width.
    The L2 size is the device's own report when it gives one (an H200 reported
    60 MiB, where the data sheet's 50 MiB is the H100's).
    """
    sms = int(props.multi_processor_count)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    sheet = match_datasheet(props.name, int(props.total_memory), sms)
    if sheet is not None:
        spec = sheet.to_spec(index=index, name=props.name)
        return replace(spec, l2_bytes=l2, llc_bytes=l2) if l2 > 0 else spec

    major, minor = int(props.major), int(props.minor)
    clock_khz = int(getattr(props, "clock_rate", 0) or 0)
    clock_hz = clock_khz * 1e3 if clock_khz > 0 else None
    lanes = _FP32_LANES_PER_SM.get((major, minor), 128 if major >= 8 else 64)
    fp32 = 2.0 * lanes * sms * (clock_hz or _FALLBACK_CLOCK_HZ)
    ratios = _TENSOR_RATIOS.get((major, minor), {})
    dtypes = ["float32", "float16"] + (["tf32", "bfloat16"] if major >= 8 else [])
    peak_flops = {dtype: fp32 * ratios.get(dtype, 1.0) for dtype in dtypes}

    mem_clock_khz = int(getattr(props, "memory_clock_rate", 0) or 0)
    bus_bits = int(getattr(props, "memory_bus_width", 0) or 0)
    if mem_clock_khz > 0 and bus_bits > 0:
        bandwidth = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8  # double data rate
    else:
        bandwidth = _measure_cuda_copy_bandwidth(index)
    short_name = re.sub(r"^nvidia\s+", "", props.name.strip(), flags=re.IGNORECASE)
    key = f"cuda-{slugify(short_name)}-{round(int(props.total_memory) / _GIGA)}gb"
    return DeviceSpec(
        kind="cuda",
        name=props.name,
        key=key,
        index=index,
        peak_flops=peak_flops,
        mem_bandwidth_Bps=bandwidth,
        l2_bytes=l2,
        llc_bytes=l2,
        compute_units=sms,
        clock_hz=clock_hz,
        threads=None,
        source="torch-properties",
    )


def _measure_cuda_copy_bandwidth(index: int) -> float:
    """Device-to-device copy bandwidth on cuda:index (B/s, read + write), best sample."""
    import torch

    from perfmodel.timing import Timer

    n_bytes = 256 * _MIB
    src = torch.empty(n_bytes, dtype=torch.uint8, device=f"cuda:{index}")
    dst = torch.empty_like(src)
    m = Timer(lambda: dst.copy_(src), device=f"cuda:{index}", budget_s=0.2, warmup_s=0.02).measure()
    return 2 * n_bytes / m.min_s


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


def _cpuinfo_fields(*labels: str) -> dict[str, str]:
    """The first non-empty value of each of ``labels`` in /proc/cpuinfo (absent ones left out)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                label, _, value = line.partition(":")
                label, value = label.strip(), value.strip()
                if label in labels and value and label not in found:
                    found[label] = value
                    if len(found) == len(labels):
                        break
    except OSError:
        pass
    return found


def _cpu_model_name() -> str:
    name = _cpuinfo_fields("model name").get("model name")
    return name or platform.processor() or platform.machine() or "unknown"


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_family_model() -> tuple[int, int] | None:
    """(cpu family, model) numbers from /proc/cpuinfo, or None where absent."""
    fields = _cpuinfo_fields("cpu family", "model")
    numbers = [fields.get(label, "") for label in ("cpu family", "model")]
    return (int(numbers[0]), int(numbers[1])) if all(n.isdigit() for n in numbers) else None


def cpu_device_key(model_name: str | None = None, cpus: int | None = None,
                   family_model: tuple[int, int] | None = None) -> str:
    """Stable slug "cpu-<model>-<N>c" from the CPU model name and usable CPU count.

    Trademark marks, the words "CPU"/"Processor" and the "@ x.xxGHz" suffix are
    dropped, e.g. "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz" on 8 CPUs becomes
    "cpu-intel-xeon-gold-6248-8c". A name with no digit is one a hypervisor
    masked (cloud VMs report "AMD EPYC" for generations with and without
    AVX-512 BF16, ~2 against ~100 GFLOP/s bf16 GEMM on 2 cores), so the family
    and model numbers (``family_model``) are added: "cpu-amd-epyc-f25m17-2c".
    With no ``model_name``, the name, the numbers and the CPU count are read
    from /proc/cpuinfo and the affinity mask.
    """
    if model_name is None:
        model_name = _cpu_model_name()
        family_model = _cpu_family_model() if family_model is None else family_model
    cpus = usable_cpus() if cpus is None else cpus
    model = re.sub(r"\((r|tm|c)\)", " ", model_name, flags=re.IGNORECASE)
    model = re.sub(r"@.*$", " ", model)
    model = re.sub(r"\b(cpu|processor)\b", " ", model, flags=re.IGNORECASE)
    if family_model is not None and not re.search(r"\d", model):
        model += " f{}m{}".format(*family_model)
    suffix = f"-{cpus}c"
    body = slugify(model)[: _MAX_KEY_LEN - len("cpu-") - len(suffix)].strip("-") or "unknown"
    return f"cpu-{body}{suffix}"


# ---------------------------------------------------------------- CPU measurement


def _parse_cache_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if match is None:
        return 0
    scale = {"": 1, "K": _KIB, "M": _MIB, "G": 1024 * _MIB}[match.group(2).upper()]
    return int(match.group(1)) * scale


def cpu_cache_sizes(cache_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> tuple[int, int]:
    """(L2 bytes, last-level cache bytes) from sysfs; 0 where unknown."""
    by_level: dict[int, int] = {}
    try:
        entries = sorted(Path(cache_dir).glob("index*"))
    except OSError:
        return 0, 0
    for entry in entries:
        try:
            level = int((entry / "level").read_text().strip())
            kind = (entry / "type").read_text().strip()
            size = _parse_cache_size((entry / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            by_level[level] = max(by_level.get(level, 0), size)
    if not by_level:
        return 0, 0
    return by_level.get(2, 0), by_level[max(by_level)]


def _cpu_clock_hz() -> float | None:
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text().strip())
        if khz > 0:
            return khz * 1e3
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                label, _, value = line.partition(":")
                if label.strip() == "cpu MHz":
                    return float(value) * 1e6
    except (OSError, ValueError):
        pass
    return None


def _spin_up_thread_pool(seconds: float) -> None:
    """Run float32 GEMMs for `seconds` so the first timed calls do not pay thread start-up."""
    import torch

    x = torch.ones(256, 256)
    out = torch.empty(256, 256)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(x, x, out=out)


def measure_gemm_flops(
    dtype_name: str,
    sizes: tuple[int, ...] = (128, 256, 512, 1024),
    max_call_s: float = 0.05,
    budget_s: float = 0.15,
    spin_up_s: float = 0.05,
) -> float:
    """Best torch.mm rate (FLOP/s) on the CPU over square `sizes`, each timed by median.

    Sizes whose predicted call time exceeds `max_call_s` (from the best rate so far)
    are skipped, so slow dtypes (e.g. bfloat16 without native support) stay quick.
    """
    import torch

    from perfmodel.timing import Timer

    dtype = getattr(torch, dtype_name)
    _spin_up_thread_pool(spin_up_s)
    generator = torch.Generator().manual_seed(0)
    best = 0.0
    for n in sizes:
        flops = 2.0 * n**3
        if best > 0 and flops / best > max_call_s:
            break
        a = torch.randn(n, n, generator=generator).to(dtype)
        b = torch.randn(n, n, generator=generator).to(dtype)
        out = torch.empty(n, n, dtype=dtype)
        m = Timer(lambda: torch.mm(a, b, out=out), budget_s=budget_s, warmup_s=0.01).measure()
        best = max(best, flops / m.median_s)
    return best


def triad_kernel(llc_bytes: int = 0) -> tuple[Callable[[], Any], int]:
    """A STREAM-style triad a = b + s*c on float32 arrays well beyond the LLC, and
    the bytes one call moves (B). Arrays are 4 x LLC, clamped to 64..256 MiB
    each; bytes moved = 3 x array bytes."""
    import torch

    array_bytes = min(max(4 * llc_bytes, 64 * _MIB), 256 * _MIB)
    n = array_bytes // 4
    b = torch.ones(n, dtype=torch.float32)
    c = torch.full((n,), 2.0, dtype=torch.float32)
    a = torch.empty(n, dtype=torch.float32)
    return (lambda: torch.add(b, c, alpha=3.0, out=a)), 3 * array_bytes


def measure_triad_bandwidth(llc_bytes: int = 0, budget_s: float = 0.2) -> float:
    """Bandwidth of :func:`triad_kernel` (B/s, best sample)."""
    from perfmodel.timing import Timer

    fn, moved = triad_kernel(llc_bytes)
    m = Timer(fn, budget_s=budget_s, warmup_s=0.0, min_warmup=2, min_samples=3).measure()
    return moved / m.min_s


def measure_cpu_spec(threads: int | None = None) -> DeviceSpec:
    """Measure this CPU: peak GEMM FLOP/s (float32, bfloat16) and triad bandwidth (B/s).

    Runs with `threads` torch threads (default: the current setting) and restores the
    previous setting. Takes a few seconds.
    """
    import torch

    if threads is not None and (not _is_int(threads) or threads < 1):
        raise ValueError(f"threads must be None or an int >= 1, got {threads!r}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        used_threads = torch.get_num_threads()
        l2_bytes, llc_bytes = cpu_cache_sizes()
        peak_flops = {dtype: measure_gemm_flops(dtype) for dtype in ("float32", "bfloat16")}
        bandwidth = measure_triad_bandwidth(llc_bytes)
    finally:
        torch.set_num_threads(previous)
    return DeviceSpec(
        kind="cpu",
        name=_cpu_model_name(),
        key=cpu_device_key(),
        index=None,
        peak_flops=peak_flops,
        mem_bandwidth_Bps=bandwidth,
        l2_bytes=l2_bytes,
        llc_bytes=llc_bytes,
        compute_units=usable_cpus(),
        clock_hz=_cpu_clock_hz(),
        threads=used_threads,
        source="measured",
    )


# ---------------------------------------------------------------- detection


def _load_cached_cpu_spec(path: Path, key: str) -> DeviceSpec | None:
    """The cached spec at `path` if it describes CPU `key`; warns when the file is corrupt."""
    if not path.exists():
        return None
    try:
        spec = DeviceSpec.from_dict(json.loads(path.read_text(encoding="utf-8")))
        if spec.kind != "cpu" or spec.key != key:
            raise ValueError(f"it describes {spec.kind} device {spec.key!r}, expected cpu device {key!r}")
    except (OSError, ValueError, TypeError) as err:  # json.JSONDecodeError is a ValueError
        warnings.warn(f"ignoring corrupt device cache {path}: {err}; re-measuring", stacklevel=3)
        return None
    return spec


def detect_device(
    name: str | None = None, results_dir: Path | None = None, threads: int | None = None
) -> DeviceSpec:
    """The `DeviceSpec` for "auto" (CUDA when available, else CPU), "cpu", "cuda" or "cuda:N".

    CPU specs are measured with `threads` torch threads (default: current setting) and
    cached in `results_dir/<key>/device.json`. A spec for fewer threads than that file's
    (e.g. one MPI rank of several sharing the host) goes to `device-<N>threads.json`
    instead, so ranks never replace the whole-host spec; a spec for more threads
    replaces that file's and moves it to its own `device-<N>threads.json` (a device
    first measured by ranks keeps their spec). Without `results_dir` nothing is read
    or written.
    """
    import torch

    kind, index = parse_device(name)
    if kind == "auto":
        kind, index = ("cuda", 0) if torch.cuda.is_available() else ("cpu", None)
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} requested but torch.cuda.is_available() is False")
        count = torch.cuda.device_count()
        if index >= count:
            raise RuntimeError(f"device {name!r} requested but only {count} CUDA device(s) are visible")
        return cuda_spec_from_properties(torch.cuda.get_device_properties(index), index)

    effective_threads = threads if threads is not None else torch.get_num_threads()
    if results_dir is None:
        return measure_cpu_spec(threads=effective_threads)
    folder = Path(results_dir) / cpu_device_key()
    main_path, own_path = folder / DEVICE_FILE, folder / f"device-{effective_threads}threads.json"
    main = _load_cached_cpu_spec(main_path, cpu_device_key())
    for cached in (main, _load_cached_cpu_spec(own_path, cpu_device_key())):
        if cached is not None and cached.threads == effective_threads:
            return cached
    spec = measure_cpu_spec(threads=effective_threads)
    keep_main = main is not None and (main.threads or 0) > effective_threads
    if main is not None and not keep_main and main.threads:
        displaced = folder / f"device-{main.threads}threads.json"
        if not displaced.exists():
            write_json_atomic(displaced, main.to_dict())
    write_json_atomic(own_path if keep_main else main_path, spec.to_dict())
    return spec
