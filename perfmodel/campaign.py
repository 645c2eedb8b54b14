"""A GPU campaign: what one short GPU window must bring back, in one command.

A lent GPU machine is available for minutes at a time and reaches no package
index, and at most 8 files of at most 16 MiB each come back from it. The
campaign (``perfmodel campaign OUT``; ``scripts/gpu_campaign.sh OUT`` installs
the package first) runs, in order and against one deadline:

1. ``check``: the device's spec (``perfmodel devices``) and ``tests/test_gpu.py``;
2. ``sweep``: the microbenchmark sweep of every op family at the ``gpu`` profile
   (which includes the op calls the full-size workloads make), stopped at its
   share of the deadline: the run file is written as it goes, so what was
   measured is kept;
3. ``e2e``: every full-size single-rank workload traced, predicted and measured,
   each saved as a replay case (:mod:`perfmodel.replay.case`) with its raw traces.

After each part it packs what the campaign wrote under ``results/<device-key>/``
into ``OUT`` (:func:`pack`), so a command cut off at its limit still returns
everything up to the last finished part. ``perfmodel unpack OUT`` puts the files
back under ``results/`` on another machine.

``--dry-run`` runs the same parts on the CPU at the ``smoke`` profile, to time
them and check the packing before the first GPU run. Nothing here imports
pytest: each part is a child process.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from perfmodel.store import paths

#: What comes back from a lent machine: at most this many files, each at most
#: :data:`MAX_FILE_BYTES`, all together at most :data:`MAX_TOTAL_BYTES` (a margin
#: under the 64 MiB the machine returns).
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
MAX_TOTAL_BYTES = 60 * 2**20
#: The parts, in the order they run.
PARTS = ("check", "sweep", "e2e")
#: Seconds kept back at the end for the last pack, and the share of the deadline
#: held for the E2E part while the sweep runs (the traces are the scarcer data).
PACK_RESERVE_S = 25.0
E2E_RESERVE_S = 210.0
#: Longest the check part may take.
CHECK_CAP_S = 90.0
#: What a campaign's summary file says it is.
FORMAT = "perfmodel.campaign"
SCHEMA = 1


class CampaignError(ValueError):
    """A campaign that cannot start, or files that cannot be unpacked; the
    message names the file or option."""


@dataclass
class Part:
    """One part: its command, and how long it may run (s)."""

    name: str
    argv: list[str]
    cap_s: float | None = None  # None: until the deadline less what later parts keep


@dataclass
class PartResult:
    name: str
    argv: list[str]
    returncode: int | None
    wall_s: float
    stopped_at_deadline: bool


@dataclass
class CampaignLog:
    """The campaign's own record (``campaign.json`` in the logs archive)."""

    device: str
    profile: str
    device_key: str | None
    budget_s: float
    started: str
    parts: list[PartResult] = field(default_factory=list)
    packed: list[dict] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def to_plain(self) -> dict:
        return {"format": FORMAT, "schema": SCHEMA, **asdict(self)}


def plan(device: str, profile: str, results: Path, workloads: Sequence[str] = (),
         select: str | None = None, python: str = sys.executable) -> list[Part]:
    """The parts' commands for ``device`` at ``profile``, writing under ``results``.
    ``workloads`` limits the E2E part (default: all); ``select`` is a ``-k``
    expression for the sweep."""
    common = [f"--perfmodel-device={device}", f"--perfmodel-profile={profile}",
              f"--perfmodel-results={results}", "-q", "-p", "no:cacheprovider"]
    pytest = [python, "-m", "pytest"]
    sweep = pytest + ["suites/", "-m", "microbench and not collective",
                      "--ignore=suites/test_e2e_multirank.py", *common]
    if select:
        sweep += ["-k", select]
    e2e = pytest + ["suites/test_e2e.py", "-m", "e2e and not stability", *common]
    if workloads:
        e2e += ["-k", " or ".join(workloads)]
    check = [python, "-c", _CHECK, device, str(results)]
    return [Part("check", check + ["&&"] + pytest + ["tests/test_gpu.py", "-q", "-p",
                                                     "no:cacheprovider"], CHECK_CAP_S),
            Part("sweep", sweep), Part("e2e", e2e)]


#: The check part's first command: the device's spec, as the campaign keys it.
_CHECK = ("import json, sys; from pathlib import Path; "
          "from perfmodel.device.probe import detect_device; "
          "spec = detect_device(sys.argv[1], Path(sys.argv[2])); "
          "print(json.dumps(spec.to_dict(), sort_keys=True))")


def run_campaign(out: Path, repo: Path, results: Path, *, dry_run: bool = False,
                 parts: Sequence[str] = PARTS, budget_s: float = 540.0,
                 e2e_reserve_s: float = E2E_RESERVE_S, workloads: Sequence[str] = (),
                 select: str | None = None, echo: Callable[[str], None] = print) -> CampaignLog:
    """Run ``parts`` of the campaign in ``repo`` within ``budget_s`` seconds,
    packing into ``out`` after each; ``dry_run`` runs them on the CPU at the
    ``smoke`` profile."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise CampaignError(f"unknown campaign part(s) {', '.join(unknown)}: expected "
                            f"{', '.join(PARTS)}")
    if not (repo / "suites").is_dir():
        raise CampaignError(f"{repo} has no suites/ folder: run the campaign from the "
                            f"perfmodel repository's root")
    out.mkdir(parents=True, exist_ok=True)
    strays = [p.name for p in out.iterdir() if not _packed_name(p.name)]
    if strays:
        raise CampaignError(f"{out} holds other files ({', '.join(sorted(strays)[:3])}): "
                            f"give the campaign an empty folder")
    start = time.time()
    deadline = start + budget_s
    device, profile = ("cpu", "smoke") if dry_run else ("cuda", "gpu")
    log = CampaignLog(device, profile, None, budget_s,
                      time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)))
    logs = Path(tempfile.mkdtemp(prefix="perfmodel-campaign-"))  # packed, never left in out
    chosen = [p for p in plan(device, profile, results, workloads, select) if p.name in parts]
    for i, part in enumerate(chosen):
        keep = PACK_RESERVE_S + (e2e_reserve_s if any(p.name == "e2e" for p in chosen[i + 1:])
                                 else 0.0)
        limit = deadline - keep - time.time()
        if part.cap_s is not None:
            limit = min(limit, part.cap_s)
        if limit <= 5:
            echo(f"[campaign] {part.name}: skipped, {max(limit, 0):.0f} s left before the deadline")
            log.parts.append(PartResult(part.name, part.argv, None, 0.0, True))
            continue
        echo(f"[campaign] {part.name}: up to {limit:.0f} s: {' '.join(part.argv)}")
        result = _run_part(part, repo, limit, logs / f"{part.name}.log", echo)
        log.parts.append(result)
        echo(f"[campaign] {part.name}: exit {result.returncode} after {result.wall_s:.1f} s"
             + (" (stopped at its deadline)" if result.stopped_at_deadline else ""))
        if part.name == "check":
            spec = _checked_spec(logs / "check.log")
            if spec is not None:
                log.device_key = spec.key
                _store_spec(spec, results)
            else:
                echo("[campaign] the device check found no device: nothing else runs")
                break
            if result.returncode != 0:
                echo("[campaign] tests/test_gpu.py failed (see its log): the campaign goes on")
        log.wall_s = time.time() - start
        if part is not chosen[-1]:
            _pack_logged(log, out, results, start, logs, traces=False, echo=echo)
    if log.device_key is None:
        log.device_key = _newest_key(results, start)
    log.wall_s = time.time() - start
    _pack_logged(log, out, results, start, logs, traces=True, echo=echo)
    return log


def _pack_logged(log: CampaignLog, out: Path, results: Path, since: float, logs: Path,
                 traces: bool, echo: Callable[[str], None]) -> None:
    if log.device_key is None:
        return
    packed, left_out = pack(paths.device_dir(results, log.device_key), out, since, logs,
                            with_traces=traces)
    log.packed = packed
    log.left_out = left_out
    (logs / "campaign.json").write_text(json.dumps(log.to_plain(), indent=1, sort_keys=True))
    # the summary itself goes into the logs archive once more, with what was packed
    _write_tar_gz(out / _logs_name(log.device_key), [(f"campaign/{p.name}", p)
                                                     for p in sorted(logs.iterdir())])
    total = sum(p["bytes"] for p in packed)
    echo(f"[campaign] packed {len(packed)} file(s), {total / 2**20:.1f} MiB, into {out}"
         + (f"; left out: {', '.join(left_out)}" if left_out else ""))


def _run_part(part: Part, repo: Path, limit_s: float, log_path: Path,
              echo: Callable[[str], None]) -> PartResult:
    """Run ``part`` (its ``&&``-joined commands in turn) in ``repo``, its output
    to ``log_path`` and, line by line, to ``echo``; interrupted (SIGINT, then
    SIGKILL 15 s later) at ``limit_s``."""
    start = time.time()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    commands, current = [], []
    for arg in part.argv:
        if arg == "&&":
            commands.append(current)
            current = []
        else:
            current.append(arg)
    commands.append(current)
    returncode: int | None = 0
    stopped = False
    with open(log_path, "a", encoding="utf-8") as log:
        for argv in commands:
            left = limit_s - (time.time() - start)
            proc = subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    start_new_session=True)
            reader = threading.Thread(target=_tee, args=(proc.stdout, log, echo), daemon=True)
            reader.start()
            try:
                returncode = proc.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                stopped = True
                returncode = _stop(proc)
            reader.join(timeout=5)
            if returncode != 0 or stopped:
                break
    return PartResult(part.name, part.argv, returncode, round(time.time() - start, 1), stopped)


def _tee(stream, log, echo: Callable[[str], None]) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        echo(line.rstrip("\n"))


def _stop(proc: subprocess.Popen) -> int | None:
    """Interrupt ``proc``'s process group (pytest then writes its summary), and
    kill it when it has not ended 15 s later."""
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()


def _checked_spec(check_log: Path):
    """The device spec the check part printed (its first JSON line that reads as
    a :class:`~perfmodel.device.spec.DeviceSpec`), or None."""
    from perfmodel.device.spec import DeviceSpec

    for line in check_log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            try:
                return DeviceSpec.from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue
    return None


def _store_spec(spec, results: Path) -> None:
    """Store a GPU's ``spec`` as its ``device.json`` (when none is stored), so that
    ``perfmodel refit`` can refit the device's runs on another machine; a CPU's
    probe stores its own."""
    path = paths.spec_file(paths.device_dir(results, spec.key))
    if spec.kind != "cpu" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True) + "\n")


def _newest_key(results: Path, since: float) -> str | None:
    """The device folder under ``results`` with the newest file written since ``since``."""
    best = None
    for key in paths.device_keys(results):
        for file in _written_since(paths.device_dir(results, key), since):
            mtime = file.stat().st_mtime
            if best is None or mtime > best[0]:
                best = (mtime, key)
    return None if best is None else best[1]


# -- packing ----------------------------------------------------------------------------

def _core_name(key: str) -> str:
    return f"{key}-core.tar.gz"


def _fits_name(key: str) -> str:
    return f"{key}-fits.tar.gz"


def _logs_name(key: str) -> str:
    return f"{key}-logs.tar.gz"


def _traces_name(key: str, part: int) -> str:
    return f"{key}-traces.tar.part{part}"


def _packed_name(name: str) -> bool:
    return any(name.endswith(s) for s in
                                  ("-core.tar.gz", "-fits.tar.gz", "-logs.tar.gz")) \
        or ".tar.part" in name


def _written_since(folder: Path, since: float) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and p.stat().st_mtime >= since - 1
                  and not p.name.startswith("."))


def pack(device_dir: Path, out: Path, since: float, logs: Path | None = None,
         with_traces: bool = True) -> tuple[list[dict], list[str]]:
    """Pack the files written under ``device_dir`` since ``since`` into ``out``:

    - ``<key>-core.tar.gz``: runs, E2E records, replay cases, overhead samples, specs;
    - ``<key>-fits.tar.gz``: the fits (``predictors/``);
    - ``<key>-traces.tar.part<N>``: each raw trace compressed with xz, in one tar
      stream cut into pieces of at most :data:`MAX_FILE_BYTES` (``perfmodel
      unpack`` joins them), smallest workloads first while the total stays
      within :data:`MAX_TOTAL_BYTES` and the file count within :data:`MAX_FILES`
      (the logs archive, written after this, is counted as one file).

    Members are named ``<key>/<path under the device folder>``. Returns what was
    written (name, bytes) and what was left out for lack of room."""
    key = device_dir.name
    root = device_dir.parent
    files = _written_since(device_dir, since)
    traces_root = paths.traces_dir(device_dir)
    fits_root = paths.predictors_dir(device_dir)
    trace_files = [f for f in files if traces_root in f.parents]
    fit_files = [f for f in files if fits_root in f.parents]
    core_files = [f for f in files if f not in set(trace_files) | set(fit_files)]
    for stale in out.glob(f"{key}-traces.tar.part*"):
        stale.unlink()
    written: list[dict] = []
    left_out: list[str] = []
    for name, members in ((_core_name(key), core_files), (_fits_name(key), fit_files)):
        target = out / name
        if not members:
            target.unlink(missing_ok=True)
            continue
        _write_tar_gz(target, [(str(f.relative_to(root)), f) for f in members])
        if target.stat().st_size > MAX_FILE_BYTES:
            target.unlink()
            left_out.append(f"{name} ({len(members)} files, over {MAX_FILE_BYTES // 2**20} MiB)")
            continue
        written.append({"name": name, "bytes": target.stat().st_size, "files": len(members)})
    logs_bytes = 0 if logs is None else sum(p.stat().st_size for p in logs.iterdir()) // 4
    room = MAX_TOTAL_BYTES - sum(w["bytes"] for w in written) - logs_bytes
    slots = MAX_FILES - len(written) - 1
    if with_traces and trace_files:
        parts, dropped = _pack_traces(trace_files, root, out, key, room, slots)
        written += parts
        left_out += dropped
    return written, left_out


def _pack_traces(files: list[Path], root: Path, out: Path, key: str, room: int,
                 slots: int) -> tuple[list[dict], list[str]]:
    """Compress each capture's files (xz), add whole captures, smallest first,
    while the stream fits ``room`` bytes and ``slots`` pieces; cut it into pieces."""
    captures: dict[str, list[Path]] = {}
    for f in files:
        captures.setdefault(f.name.split(".")[0], []).append(f)
    compressed = []
    for name, members in captures.items():
        blobs = [(str(f.relative_to(root)) + ".xz",
                  lzma.compress(f.read_bytes(), preset=3)) for f in sorted(members)]
        compressed.append((sum(len(b) for _, b in blobs), name, blobs))
    compressed.sort()
    limit = min(room, max(slots, 0) * MAX_FILE_BYTES)
    stream = io.BytesIO()
    dropped = []
    included = 0
    with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for size, name, blobs in compressed:
            if stream.tell() + size + 2048 * (len(blobs) + 2) > limit:
                dropped.append(f"traces of {name} ({size / 2**20:.1f} MiB compressed)")
                continue
            included += 1
            for arcname, blob in blobs:
                info = tarfile.TarInfo(arcname)
                info.size = len(blob)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(blob))
    data = stream.getvalue()
    if not included:
        return [], dropped
    written = []
    for i in range(0, len(data), MAX_FILE_BYTES):
        name = _traces_name(key, i // MAX_FILE_BYTES)
        (out / name).write_bytes(data[i:i + MAX_FILE_BYTES])
        written.append({"name": name, "bytes": len(data[i:i + MAX_FILE_BYTES])})
    return written, dropped


def _write_tar_gz(target: Path, members: list[tuple[str, Path]]) -> None:
    """A gzip'd tar of ``members`` (name in the archive, file), written atomically."""
    stream = io.BytesIO()
    with gzip.GzipFile(fileobj=stream, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for arcname, path in members:
                tar.add(path, arcname=arcname, recursive=False)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(stream.getvalue())
    os.replace(tmp, target)


# -- unpacking ---------------------------------------------------------------------------

def unpack(folder: Path, results: Path, logs_to: Path | None = None) -> list[Path]:
    """Put a campaign's files from ``folder`` back: the core, fits and trace
    archives under ``results`` (traces decompressed beside their ``.xz``), the
    logs archive under ``logs_to`` (default: ``folder``). Members must be plain
    files named ``<key>/...`` with no ``..``: anything else is refused, naming
    the archive, before a file is written. Returns the files written."""
    if not folder.is_dir():
        raise CampaignError(f"{folder} is not a folder")
    archives = sorted(p for p in folder.iterdir() if p.name.endswith("-core.tar.gz")
                      or p.name.endswith("-fits.tar.gz"))
    pieces: dict[str, list[Path]] = {}
    for p in folder.iterdir():
        if ".tar.part" in p.name:
            stem, _, n = p.name.rpartition(".part")
            if not n.isdigit():
                raise CampaignError(f"{p}: not a trace piece (<key>-traces.tar.part<N>)")
            pieces.setdefault(stem, []).append(p)
    if not archives and not pieces:
        raise CampaignError(f"{folder} holds no campaign archives (<key>-core.tar.gz, "
                            f"<key>-fits.tar.gz, <key>-traces.tar.part<N>)")
    written: list[Path] = []
    for archive in archives:
        with tarfile.open(archive, mode="r:gz") as tar:
            written += _extract(tar, archive, results)
    for stem, parts in sorted(pieces.items()):
        parts.sort(key=lambda p: int(p.name.rpartition(".part")[2]))
        numbers = [int(p.name.rpartition(".part")[2]) for p in parts]
        if numbers != list(range(len(parts))):
            raise CampaignError(f"{folder}: pieces of {stem} are missing: have {numbers}")
        data = b"".join(p.read_bytes() for p in parts)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for path in _extract(tar, folder / stem, results):
                written.append(path)
                if path.suffix == ".xz":
                    plain = path.with_suffix("")
                    plain.write_bytes(lzma.decompress(path.read_bytes()))
                    written.append(plain)
    logs = sorted(folder.glob("*-logs.tar.gz"))
    for archive in logs:
        with tarfile.open(archive, mode="r:gz") as tar:
            written += _extract(tar, archive, logs_to or folder, prefix="campaign/")
    return written


def _extract(tar: tarfile.TarFile, source: Path, dest: Path, prefix: str | None = None
             ) -> list[Path]:
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if (not m.isfile() or m.name.startswith("/") or ".." in parts or len(parts) < 2
                or (prefix is not None and not m.name.startswith(prefix))):
            raise CampaignError(f"{source}: refused member {m.name!r} (only plain files "
                                f"named {prefix or '<key>/'}... are unpacked)")
    out = []
    for m in members:
        target = dest / m.name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = tar.extractfile(m).read()
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        out.append(target)
    return out
