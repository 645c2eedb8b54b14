"""The GPU campaign (perfmodel.campaign): its plan, its packing within what a lent
machine returns, unpacking that refuses unsafe members, and a CPU dry run of
the real command (one op, no E2E) end to end."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel import campaign
from perfmodel.campaign import (MAX_FILE_BYTES, MAX_FILES, MAX_TOTAL_BYTES, CampaignError,
                                pack, plan, unpack)
from perfmodel.store import paths
from tests.helpers import REPO, run_lines

KEY = "cuda-test-gpu"


def _device(tmp_path: Path) -> Path:
    folder = paths.device_dir(tmp_path / "results", KEY)
    folder.mkdir(parents=True)
    return folder


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_plan_runs_the_gpu_profile_on_cuda_and_limits_workloads():
    parts = {p.name: p for p in plan("cuda", "gpu", Path("res"), ["mlp_small", "hf_gpt2"],
                                     select="addmm")}
    assert list(parts) == ["check", "sweep", "e2e"]
    sweep, e2e = parts["sweep"].argv, parts["e2e"].argv
    assert "--perfmodel-profile=gpu" in sweep and "--perfmodel-device=cuda" in sweep
    assert sweep[sweep.index("suites/") + 1:sweep.index("suites/") + 3] == [
        "-m", "microbench and not collective"]
    assert sweep[sweep.index("-k") + 1] == "addmm"
    assert e2e[e2e.index("-k") + 1] == "mlp_small or hf_gpt2"
    assert "tests/test_gpu.py" in parts["check"].argv
    assert parts["check"].cap_s is not None and parts["sweep"].cap_s is None


def test_pack_splits_core_fits_and_traces_and_unpack_restores_them(tmp_path):
    folder = _device(tmp_path)
    since = time.time()
    run = _write(paths.run_file(folder, "20261127T000000Z-1-abcd"), b'{"kind": "op"}\n' * 100)
    case = _write(paths.replay_file(folder, "mlp_small"), os.urandom(3000))
    fit = _write(paths.fit_dir(folder, "20261127T000000Z-1-abcd") / "index.json", b"{}")
    et, kineto, calib = paths.trace_files(paths.traces_dir(folder), "mlp_small")
    for f in (et, kineto, calib):
        _write(f, json.dumps({"name": f.name, "x": list(range(2000))}).encode())
    out = tmp_path / "out"
    out.mkdir()
    written, left_out = pack(folder, out, since)
    names = sorted(w["name"] for w in written)
    assert names == [f"{KEY}-core.tar.gz", f"{KEY}-fits.tar.gz", f"{KEY}-traces.tar.part0"]
    assert left_out == []
    back = tmp_path / "back"
    unpack(out, back)
    for original in (run, case, fit, et, kineto, calib):
        copy = back / original.relative_to(tmp_path / "results")
        assert copy.read_bytes() == original.read_bytes()
    assert (back / KEY / "traces" / (kineto.name + ".xz")).is_file()


def test_pack_leaves_out_files_written_before_the_campaign(tmp_path):
    folder = _device(tmp_path)
    old = _write(paths.replay_file(folder, "old"), b"x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    since = time.time()
    _write(paths.replay_file(folder, "new"), b"y")
    out = tmp_path / "out"
    out.mkdir()
    pack(folder, out, since)
    with tarfile.open(out / f"{KEY}-core.tar.gz") as tar:
        assert [m.name for m in tar.getmembers()] == [f"{KEY}/replay/new.json.gz"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6),
       core_mib=st.integers(min_value=0, max_value=20))
def test_what_comes_back_stays_within_the_machines_limits(tmp_path_factory, monkeypatch,
                                                          sizes, core_mib):
    """Incompressible traces of ``sizes`` MiB-units (scaled down 64x with the limits)
    and a core of ``core_mib`` units: at most MAX_FILES files of MAX_FILE_BYTES,
    MAX_TOTAL_BYTES in all, and every capture packed or named as left out."""
    scale = 64
    monkeypatch.setattr(campaign, "MAX_FILE_BYTES", MAX_FILE_BYTES // scale)
    monkeypatch.setattr(campaign, "MAX_TOTAL_BYTES", MAX_TOTAL_BYTES // scale)
    unit = 2**20 // scale
    tmp_path = tmp_path_factory.mktemp("pack")
    folder = _device(tmp_path)
    since = time.time()
    if core_mib:
        _write(paths.replay_file(folder, "big"), os.urandom(core_mib * unit))
    names = []
    for i, size in enumerate(sizes):
        name = f"w{i}"
        names.append(name)
        et, _, _ = paths.trace_files(paths.traces_dir(folder), name)
        _write(et, os.urandom(size * unit))
    out = tmp_path / "out"
    out.mkdir()
    written, left_out = pack(folder, out, since)
    files = list(out.iterdir())
    assert len(files) + 1 <= MAX_FILES  # the logs archive comes on top
    assert all(f.stat().st_size <= MAX_FILE_BYTES // scale for f in files)
    assert sum(f.stat().st_size for f in files) <= MAX_TOTAL_BYTES // scale
    packed = set()
    for piece in sorted(out.glob("*.part*")):
        packed.add(piece)
    data = b"".join(p.read_bytes() for p in sorted(out.glob("*.tar.part*"),
                                                      key=lambda p: int(p.name.rpartition("part")[2])))
    in_traces = set()
    if data:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            in_traces = {Path(m.name).name.split(".")[0] for m in tar.getmembers()}
    named = {item.split()[2] for item in left_out if item.startswith("traces of")}
    assert in_traces | named == set(names) and not in_traces & named


def _tar_gz(path: Path, members: dict[str, bytes], symlink: str | None = None) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(symlink)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)


@pytest.mark.parametrize("members,symlink", [
    ({"../evil.json": b"x"}, None),
    ({"/abs/evil.json": b"x"}, None),
    ({f"{KEY}/../../evil.json": b"x"}, None),
    ({"toplevel.json": b"x"}, None),
    ({f"{KEY}/ok.json": b"x"}, f"{KEY}/link.json"),
])
def test_unpack_refuses_unsafe_members_before_writing_anything(tmp_path, members, symlink):
    folder = tmp_path / "back"
    folder.mkdir()
    _tar_gz(folder / f"{KEY}-core.tar.gz", members, symlink)
    results = tmp_path / "results"
    with pytest.raises(CampaignError, match=f"{KEY}-core.tar.gz: refused member"):
        unpack(folder, results)
    assert not results.exists()
    assert not (tmp_path / "evil.json").exists()


def test_unpack_names_missing_trace_pieces(tmp_path):
    folder = tmp_path / "back"
    folder.mkdir()
    (folder / f"{KEY}-traces.tar.part1").write_bytes(b"x")
    with pytest.raises(CampaignError, match="pieces of .* are missing"):
        unpack(folder, tmp_path / "results")
    with pytest.raises(CampaignError, match="no campaign archives"):
        unpack(tmp_path, tmp_path / "results")


def test_campaign_refuses_a_folder_with_other_files_and_unknown_parts(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CampaignError, match="notes.txt"):
        campaign.run_campaign(tmp_path, REPO, tmp_path / "results", dry_run=True)
    with pytest.raises(CampaignError, match="unknown campaign part"):
        campaign.run_campaign(tmp_path / "o", REPO, tmp_path / "results", parts=["warmup"])


def test_a_dry_run_without_results_leaves_the_repositorys_results_alone(tmp_path):
    """``--dry-run`` with no ``--results`` writes its smoke runs to a new temporary
    folder, never into results/ (where they would join this machine's fit)."""
    root = paths.default_root(REPO)
    before = sorted(p.name for p in root.iterdir())
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "perfmodel.cli.main", "campaign", str(tmp_path / "out"),
         "--dry-run", "--parts", "sweep", "-k", "relu and forward and smoke_nothing_matches"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("[campaign] dry run: "))
    assert "perfmodel-dry-run-" in line
    assert sorted(p.name for p in root.iterdir()) == before
    assert not [p for p in root.rglob("*") if p.is_file() and p.stat().st_mtime >= start]


def test_dry_run_of_the_real_command_measures_packs_and_unpacks(tmp_path):
    """``perfmodel campaign --dry-run``: one op's smoke configs measured on the CPU
    in a child pytest, packed within the limits, and unpacked again."""
    out, results = tmp_path / "out", tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "perfmodel.cli.main", "campaign", str(out), "--dry-run",
         "--parts", "sweep", "-k", "relu and forward", "--results", str(results),
         "--budget-s", "240"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[campaign] sweep: exit 0" in proc.stdout
    files = sorted(p.name for p in out.iterdir())
    assert any(f.endswith("-core.tar.gz") for f in files), files
    assert any(f.endswith("-logs.tar.gz") for f in files), files
    assert len(files) <= MAX_FILES
    back = tmp_path / "back"
    written = unpack(out, back, logs_to=tmp_path / "logs")
    runs = [p for p in written if paths.is_run_file(p)]
    assert len(runs) == 1
    records = [json.loads(line) for line in run_lines(runs[0])]
    assert any(r.get("op") == "relu" for r in records)
    summary = json.loads((tmp_path / "logs" / "campaign" / "campaign.json").read_text())
    assert summary["format"] == "perfmodel.campaign"
    assert [p["name"] for p in summary["parts"]] == ["sweep"]
    assert summary["parts"][0]["returncode"] == 0


def test_the_check_stores_a_gpu_spec_for_offline_refits(tmp_path):
    """The spec a GPU's check printed becomes its device.json (none is measured
    there), so `perfmodel refit --device KEY` works on another machine; a stored
    one is left alone."""
    from tests.helpers import planted_cpu_dict

    spec = {**planted_cpu_dict("cuda-test-gpu"), "kind": "cuda", "index": 0, "threads": None}
    log = tmp_path / "check.log"
    log.write_text("noise\n" + json.dumps(spec) + "\n5 passed\n")
    campaign._store_spec(campaign._checked_spec(log), tmp_path / "results")
    stored = json.loads(paths.spec_file(paths.device_dir(tmp_path / "results", KEY)).read_text())
    assert stored["key"] == KEY and stored["kind"] == "cuda"
    log.write_text(json.dumps({**spec, "name": "other"}) + "\n")
    campaign._store_spec(campaign._checked_spec(log), tmp_path / "results")
    stored = json.loads(paths.spec_file(paths.device_dir(tmp_path / "results", KEY)).read_text())
    assert stored["name"] == spec["name"]
