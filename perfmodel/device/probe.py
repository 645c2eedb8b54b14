"""Probing the device at hand: `detect_device`.

Known NVIDIA GPUs come from the data sheet (:mod:`perfmodel.device.datasheet`); other GPUs get
a spec estimated from `torch.cuda.get_device_properties`; CPUs are measured once (GEMM peak,
STREAM-style triad bandwidth) and cached as JSON in `<results_dir>/<key>/device.json`.
Nothing here runs at import time and torch is imported inside functions.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from perfmodel.store import paths as store_paths
from perfmodel.plaindata import write_json_atomic
from perfmodel.device.spec import DeviceSpec, _MAX_KEY_LEN, _is_int, parse_device, slugify
from perfmodel.device.datasheet import _FALLBACK_CLOCK_HZ, _FP32_LANES_PER_SM, _TENSOR_RATIOS, match_datasheet
DEVICE_FILE = store_paths.SPEC_FILE
_KIB, _MIB = 1024, 1024 * 1024
_TERA, _GIGA = 1e12, 1e9



def cuda_spec_from_properties(props: Any, index: int) -> DeviceSpec:
    """A `DeviceSpec` for one CUDA device from `torch.cuda.get_device_properties` output.

    Data-sheet figures when the model is in DATASHEET; otherwise peaks estimated from
    SMs x FP32 lanes x clock (tensor dtypes scaled by a per-architecture ratio, or
    equal to FP32 when unknown) and bandwidth from the memory clock and bus width.
    The L2 size is the device's own report when it gives one: a data-sheet table
    may carry a related part's figure (see docs/journal/2026-11-26-nvidia-h200.md).
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

    from perfmodel.measure.timer import Timer

    n_bytes = 256 * _MIB
    src = torch.empty(n_bytes, dtype=torch.uint8, device=f"cuda:{index}")
    dst = torch.empty_like(src)
    m = Timer(lambda: dst.copy_(src), device=f"cuda:{index}", budget_s=0.2, warmup_s=0.02).measure()
    return 2 * n_bytes / m.min_s


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
    AVX-512 BF16, whose bf16 GEMM rates differ by tens of times), so the family
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

    from perfmodel.measure.timer import Timer

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
    from perfmodel.measure.timer import Timer

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
    folder = store_paths.device_dir(results_dir, cpu_device_key())
    main_path = store_paths.spec_file(folder)
    own_path = store_paths.threads_spec_file(folder, effective_threads)
    main = _load_cached_cpu_spec(main_path, cpu_device_key())
    for cached in (main, _load_cached_cpu_spec(own_path, cpu_device_key())):
        if cached is not None and cached.threads == effective_threads:
            return cached
    spec = measure_cpu_spec(threads=effective_threads)
    keep_main = main is not None and (main.threads or 0) > effective_threads
    if main is not None and not keep_main and main.threads:
        displaced = store_paths.threads_spec_file(folder, main.threads)
        if not displaced.exists():
            write_json_atomic(displaced, main.to_dict())
    write_json_atomic(own_path if keep_main else main_path, spec.to_dict())
    return spec
