"""Unit tests for perfmodel.device.probe (no GPU needed: CUDA is faked where used)."""

import json
import math
import os
import re
from types import SimpleNamespace

import pytest

from perfmodel.device import probe as device
from perfmodel.device.datasheet import DATASHEET, match_datasheet
from perfmodel.device.spec import DeviceSpec, parse_device
from perfmodel.device.probe import cpu_cache_sizes, cpu_device_key, cuda_spec_from_properties, detect_device
from tests.helpers import cpu_spec

SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def planted_cpu_spec(threads=2, **overrides) -> DeviceSpec:
    """The synthetic CPU of tests/helpers.py under this machine's CPU key, with its
    own name, L2 size and clock."""
    return cpu_spec(**{"name": "Planted CPU", "key": cpu_device_key(), "l2_bytes": 512 * 1024,
                       "clock_hz": 2.4e9, "threads": threads, **overrides})


def must_not_measure(*args, **kwargs):
    raise AssertionError("measure_cpu_spec was called")


# ---------------------------------------------------------------- keys and names


@pytest.mark.parametrize(
    "model, cpus, family_model, key",
    [
        ("AMD EPYC", 2, (25, 17), "cpu-amd-epyc-f25m17-2c"),  # a masked name: numbers added
        ("AMD EPYC", 2, (25, 1), "cpu-amd-epyc-f25m1-2c"),
        ("AMD EPYC", 2, None, "cpu-amd-epyc-2c"),
        ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", 8, (6, 106),
         "cpu-intel-xeon-platinum-8375c-8c"),
        ("AMD EPYC 7B13 64-Core Processor", 16, (25, 1), "cpu-amd-epyc-7b13-64-core-16c"),
        ("  Neoverse/N1 (TM)  ", 4, None, "cpu-neoverse-n1-4c"),
        ("", 1, None, "cpu-unknown-1c"),
        ("x" * 200, 64, None, "cpu-" + "x" * (80 - len("cpu-") - len("-64c")) + "-64c"),
    ],
)
def test_cpu_device_key_slugs(model, cpus, family_model, key):
    assert cpu_device_key(model, cpus, family_model) == key
    assert SLUG.match(key) and len(key) <= 80


def test_cpu_device_key_for_this_machine_is_stable():
    key = cpu_device_key()
    assert key == cpu_device_key()
    assert SLUG.match(key)
    assert key.startswith("cpu-") and key.endswith(f"-{len(os.sched_getaffinity(0))}c")


@pytest.mark.parametrize(
    "name, parsed",
    [(None, ("auto", None)), ("auto", ("auto", None)), ("cpu", ("cpu", None)), ("cuda", ("cuda", 0)),
     ("cuda:0", ("cuda", 0)), ("cuda:3", ("cuda", 3))],
)
def test_parse_device(name, parsed):
    assert parse_device(name) == parsed


@pytest.mark.parametrize("name", ["gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1:2", "mps", "", " cpu"])
def test_parse_device_rejects_unknown(name):
    with pytest.raises(ValueError) as err:
        parse_device(name)
    assert str(err.value) == f"unknown device {name!r}: expected cpu, cuda or cuda:N"


# ---------------------------------------------------------------- data sheet


def test_datasheet_sanity():
    assert {"cuda-v100-sxm2-16gb", "cuda-v100-sxm2-32gb", "cuda-a100-40gb", "cuda-a100-sxm4-80gb",
            "cuda-h100-sxm-80gb", "cuda-h200-141gb"} == set(DATASHEET)
    for key, sheet in DATASHEET.items():
        assert sheet.key == key and SLUG.match(key)
        assert all(flops > 0 and math.isfinite(flops) for flops in sheet.peak_flops.values())
        assert sheet.peak_flops["float16"] > sheet.peak_flops["float32"]
        assert sheet.mem_bandwidth_Bps > 0 and sheet.l2_bytes > 0 and sheet.sms > 0 and sheet.boost_clock_hz > 0
        spec = sheet.to_spec(index=0)  # validates through DeviceSpec
        assert (spec.kind, spec.source, spec.key) == ("cuda", "datasheet", key)
    h100, h200 = DATASHEET["cuda-h100-sxm-80gb"], DATASHEET["cuda-h200-141gb"]
    assert h200.mem_bandwidth_Bps > h100.mem_bandwidth_Bps
    assert dict(h200.peak_flops) == dict(h100.peak_flops)
    assert DATASHEET["cuda-a100-sxm4-80gb"].mem_bandwidth_Bps > DATASHEET["cuda-a100-40gb"].mem_bandwidth_Bps
    assert h100.peak_flops["bfloat16"] == pytest.approx(989.4e12)
    assert h100.l2_bytes == 50 * 2**20


def test_v100_has_no_bfloat16_and_error_lists_known_dtypes():
    spec = DATASHEET["cuda-v100-sxm2-32gb"].to_spec()
    with pytest.raises(KeyError, match=r"bfloat16.*known dtypes: float16, float32"):
        spec.peak_flops_for("bfloat16")
    assert spec.peak_flops_for("float16") == pytest.approx(125e12)
    assert spec.peak_flops_for("torch.float32") == pytest.approx(15.7e12)


GIB = 2**30


@pytest.mark.parametrize(
    "name, memory, sms, key",
    [
        ("NVIDIA H200", 140 * GIB, 132, "cuda-h200-141gb"),
        ("NVIDIA H100 80GB HBM3", 79 * GIB, 132, "cuda-h100-sxm-80gb"),
        ("NVIDIA A100-SXM4-80GB", 79 * GIB, 108, "cuda-a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", 39 * GIB, 108, "cuda-a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", 39 * GIB, 108, "cuda-a100-40gb"),
        ("Tesla V100-SXM2-16GB", 15 * GIB, 80, "cuda-v100-sxm2-16gb"),
        ("Tesla V100-SXM2-32GB", 31 * GIB, 80, "cuda-v100-sxm2-32gb"),
        ("NVIDIA A100 80GB PCIe", 79 * GIB, 108, None),  # different bandwidth than SXM4
        ("NVIDIA H100 PCIe", 79 * GIB, 114, None),
        ("NVIDIA H200 NVL", 140 * GIB, 132, None),
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19 * GIB, 42, None),
        ("NVIDIA RTX A1000", 8 * GIB, 20, None),
        ("NVIDIA L4", 22 * GIB, 58, None),
    ],
)
def test_match_datasheet(name, memory, sms, key):
    sheet = match_datasheet(name, memory, sms)
    assert (sheet.key if sheet else None) == key


def l4_properties():
    return SimpleNamespace(
        name="NVIDIA L4", major=8, minor=9, multi_processor_count=58, total_memory=23_034_068_992,
        L2_cache_size=48 * 2**20, clock_rate=2_040_000, memory_clock_rate=6_251_000, memory_bus_width=192,
    )


def test_unknown_gpu_gets_estimated_spec_from_properties():
    spec = cuda_spec_from_properties(l4_properties(), index=1)
    assert (spec.source, spec.kind, spec.index, spec.key) == ("torch-properties", "cuda", 1, "cuda-l4-23gb")
    assert spec.peak_flops_for("float32") == pytest.approx(30.3e12, rel=0.01)  # L4 data sheet: 30.3 TF
    assert spec.mem_bandwidth_Bps == pytest.approx(300e9, rel=0.01)  # L4 data sheet: 300 GB/s
    assert set(spec.peak_flops) == {"float32", "float16", "bfloat16", "tf32"}
    assert spec.l2_bytes == spec.llc_bytes == 48 * 2**20
    assert (spec.compute_units, spec.clock_hz) == (58, 2.04e9)


def test_properties_without_optional_fields_still_give_finite_peaks(monkeypatch):
    monkeypatch.setattr(device, "_measure_cuda_copy_bandwidth", lambda index: 5e11)
    props = SimpleNamespace(name="Some Future GPU", major=11, minor=0, multi_processor_count=100,
                            total_memory=64 * 10**9)
    spec = cuda_spec_from_properties(props, index=0)
    assert spec.clock_hz is None and spec.l2_bytes == 0 and spec.mem_bandwidth_Bps == 5e11
    assert all(math.isfinite(v) and v > 0 for v in spec.peak_flops.values())


# ---------------------------------------------------------------- DeviceSpec


def test_device_spec_json_roundtrip():
    for spec in (planted_cpu_spec(), DATASHEET["cuda-h200-141gb"].to_spec(index=0)):
        again = DeviceSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert again == spec
        assert hash(again) == hash(spec)


def test_device_spec_peak_flops_is_read_only_and_copied():
    flops = {"float32": 1e11}
    spec = planted_cpu_spec(peak_flops=flops)
    flops["float32"] = 5.0
    assert spec.peak_flops["float32"] == 1e11
    with pytest.raises(TypeError):
        spec.peak_flops["float32"] = 2.0


@pytest.mark.parametrize(
    "field, value",
    [
        ("kind", "tpu"),
        ("key", "../escape"),
        ("key", "CPU-Upper"),
        ("index", -1),
        ("peak_flops", {"float32": -1.0}),
        ("peak_flops", {}),
        ("peak_flops", [1.0]),
        ("mem_bandwidth_Bps", float("inf")),
        ("l2_bytes", "big"),
        ("llc_bytes", 1.5),
        ("compute_units", 0),
        ("clock_hz", 0),
        ("threads", True),
        ("source", "guess"),
    ],
)
def test_device_spec_from_dict_names_bad_field(field, value):
    d = planted_cpu_spec().to_dict()
    d[field] = value
    with pytest.raises(ValueError, match=rf"DeviceSpec\.{field}\b"):
        DeviceSpec.from_dict(d)


def test_device_spec_from_dict_names_missing_and_unknown_fields():
    d = planted_cpu_spec().to_dict()
    del d["llc_bytes"]
    with pytest.raises(ValueError, match="llc_bytes"):
        DeviceSpec.from_dict(d)
    d = planted_cpu_spec().to_dict()
    d["pickle"] = "no"
    with pytest.raises(ValueError, match="pickle"):
        DeviceSpec.from_dict(d)


# ---------------------------------------------------------------- cache sizes


def test_cpu_cache_sizes_reads_sysfs_layout(tmp_path):
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1M"), (3, "Unified", "32768K")]
    ):
        entry = tmp_path / f"index{index}"
        entry.mkdir()
        (entry / "level").write_text(f"{level}\n")
        (entry / "type").write_text(f"{kind}\n")
        (entry / "size").write_text(f"{size}\n")
    assert cpu_cache_sizes(tmp_path) == (2**20, 32 * 2**20)
    assert cpu_cache_sizes(tmp_path / "missing") == (0, 0)


# ---------------------------------------------------------------- detect_device


def test_detect_device_returns_cached_cpu_spec_without_measuring(tmp_path, monkeypatch):
    planted = planted_cpu_spec(threads=2)
    path = tmp_path / planted.key / "device.json"
    path.parent.mkdir()
    path.write_text(json.dumps(planted.to_dict()))
    monkeypatch.setattr(device, "measure_cpu_spec", must_not_measure)
    assert detect_device("cpu", results_dir=tmp_path, threads=2) == planted


def test_detect_device_auto_without_cuda_uses_cpu_cache(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    planted = planted_cpu_spec(threads=torch.get_num_threads())
    (tmp_path / planted.key).mkdir()
    (tmp_path / planted.key / "device.json").write_text(json.dumps(planted.to_dict()))
    monkeypatch.setattr(device, "measure_cpu_spec", must_not_measure)
    assert detect_device(None, results_dir=tmp_path) == planted


def test_detect_device_corrupt_cache_warns_and_remeasures(tmp_path, monkeypatch):
    planted = planted_cpu_spec(threads=2)
    path = tmp_path / planted.key / "device.json"
    path.parent.mkdir()
    path.write_text("{not json")
    calls = []
    monkeypatch.setattr(device, "measure_cpu_spec", lambda threads=None: calls.append(threads) or planted)
    with pytest.warns(UserWarning, match=re.escape(str(path))):
        spec = detect_device("cpu", results_dir=tmp_path, threads=2)
    assert spec == planted and calls == [2]
    assert DeviceSpec.from_dict(json.loads(path.read_text())) == planted  # rewritten, valid
    assert [p.name for p in path.parent.iterdir()] == ["device.json"]  # no temp files left


def test_detect_device_cache_with_wrong_fields_counts_as_corrupt(tmp_path, monkeypatch):
    planted = planted_cpu_spec(threads=2)
    path = tmp_path / planted.key / "device.json"
    path.parent.mkdir()
    d = planted.to_dict()
    d["mem_bandwidth_Bps"] = "fast"
    path.write_text(json.dumps(d))
    monkeypatch.setattr(device, "measure_cpu_spec", lambda threads=None: planted)
    with pytest.warns(UserWarning, match="mem_bandwidth_Bps"):
        assert detect_device("cpu", results_dir=tmp_path, threads=2) == planted


def test_detect_device_remeasures_for_other_thread_count(tmp_path, monkeypatch):
    cached = planted_cpu_spec(threads=2)
    path = tmp_path / cached.key / "device.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cached.to_dict()))
    fresh = planted_cpu_spec(threads=1, mem_bandwidth_Bps=1.0e10)
    monkeypatch.setattr(device, "measure_cpu_spec", lambda threads=None: fresh if threads == 1 else None)
    assert detect_device("cpu", results_dir=tmp_path, threads=1) == fresh
    # the whole-host spec stays; the single-thread one (an MPI rank's) is cached beside it
    assert DeviceSpec.from_dict(json.loads(path.read_text())) == cached
    beside = path.parent / "device-1threads.json"
    assert DeviceSpec.from_dict(json.loads(beside.read_text())) == fresh
    monkeypatch.setattr(device, "measure_cpu_spec", must_not_measure)
    assert detect_device("cpu", results_dir=tmp_path, threads=1) == fresh
    assert detect_device("cpu", results_dir=tmp_path, threads=2) == cached


def test_detect_device_more_threads_replace_the_main_cache(tmp_path, monkeypatch):
    cached = planted_cpu_spec(threads=1)
    path = tmp_path / cached.key / "device.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cached.to_dict()))
    fresh = planted_cpu_spec(threads=2)
    monkeypatch.setattr(device, "measure_cpu_spec", lambda threads=None: fresh)
    assert detect_device("cpu", results_dir=tmp_path, threads=2) == fresh
    assert DeviceSpec.from_dict(json.loads(path.read_text())) == fresh
    # the one-thread spec (a device first measured by MPI ranks) is kept beside it
    beside = path.parent / "device-1threads.json"
    assert DeviceSpec.from_dict(json.loads(beside.read_text())) == cached
    monkeypatch.setattr(device, "measure_cpu_spec", must_not_measure)
    assert detect_device("cpu", results_dir=tmp_path, threads=1) == cached


def test_detect_device_first_run_writes_cache(tmp_path, monkeypatch):
    planted = planted_cpu_spec(threads=2)
    monkeypatch.setattr(device, "measure_cpu_spec", lambda threads=None: planted)
    results = tmp_path / "results" / "nested"
    detect_device("cpu", results_dir=results, threads=2)
    assert DeviceSpec.from_dict(json.loads((results / planted.key / "device.json").read_text())) == planted


def test_detect_device_without_results_dir_writes_nothing(tmp_path, monkeypatch):
    planted = planted_cpu_spec(threads=2)
    monkeypatch.setattr(device, "measure_cpu_spec", lambda threads=None: planted)
    monkeypatch.chdir(tmp_path)
    assert detect_device("cpu", threads=2) == planted
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_detect_device_cuda_unavailable(monkeypatch, name):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError) as err:
        detect_device(name)
    assert str(err.value) == f"device {name!r} requested but torch.cuda.is_available() is False"


def test_detect_device_cuda_uses_datasheet(monkeypatch):
    import torch

    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                            total_memory=150_000_000_000, L2_cache_size=60 * 2**20)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    spec = detect_device("auto")
    assert (spec.key, spec.index, spec.source, spec.name) == ("cuda-h200-141gb", 0, "datasheet", "NVIDIA H200")
    assert spec.peak_flops_for("tf32") == pytest.approx(494.7e12)
    assert spec.l2_bytes == spec.llc_bytes == 60 * 2**20  # the device's report, not the sheet's
    with pytest.raises(RuntimeError, match="only 1 CUDA device"):
        detect_device("cuda:1")


# ---------------------------------------------------------------- one real measurement


def test_measure_cpu_spec_real_run_is_sane():
    import torch

    before = torch.get_num_threads()
    spec = device.measure_cpu_spec(threads=1)
    assert torch.get_num_threads() == before  # setting restored
    assert (spec.kind, spec.source, spec.threads, spec.key) == ("cpu", "measured", 1, cpu_device_key())
    assert set(spec.peak_flops) == {"float32", "bfloat16"}
    assert all(math.isfinite(v) and v > 0 for v in spec.peak_flops.values())
    assert math.isfinite(spec.mem_bandwidth_Bps) and spec.mem_bandwidth_Bps > 0
