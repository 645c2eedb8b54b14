"""Results store: ``results/<device-key>/``, one immutable JSON Lines file per run.

A run appends to ``results/<device-key>/runs/<run-id>.jsonl``; every path of
the folder is named by :mod:`perfmodel.store.paths`.

A run appends and flushes each record as it is produced, so a run that dies
loses at most the line it was writing. When the run closes, its file is
compacted: the same lines, gzip-compressed, are written beside it as
``<run-id>.jsonl.gz`` (through a temporary file renamed into place), and only
then is the plain file removed. A run that dies before that keeps its plain
file, and ``perfmodel prune --compact-runs`` compacts it later. Readers merge
every run file, plain or compacted, and a corrupt, truncated or foreign file is
reported by path while the rest loads. Only JSON is read; nothing loaded from
here can execute code.
"""

from __future__ import annotations

import calendar
import gzip
import hashlib
import json
import math
import os
import secrets
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable

from perfmodel.store import paths

SCHEMA_VERSION = 1

#: Keys every record of a given kind must carry, with their JSON types.
_REQUIRED = {
    "measurement": {"op": str, "direction": str, "dtype": str, "config": dict,
                    "replicate": int, "measurement": dict, "env": dict},
    "e2e": {"workload": str, "measured_s": float, "predicted_s": float, "error": float,
            "env": dict},
    # a held-out zoo model's E2E record (not gated), with its half of the zoo
    "zoo": {"workload": str, "measured_s": float, "predicted_s": float, "error": float,
            "env": dict, "half": str},
}


def data_id(run_ids: Iterable[str]) -> str:
    """A fingerprint of a set of run files (16 hex digits, "" for none): the id of
    a fit's training data (:attr:`perfmodel.fit.fitting.FitReport.data_id`), which
    baselines name."""
    runs = sorted(run_ids)
    if not runs:
        return ""
    return hashlib.sha256("\n".join(runs).encode()).hexdigest()[:16]


def run_start_s(run_id: str) -> float | None:
    """When the run ``run_id`` started (Unix seconds, from the UTC stamp its id
    begins with, as :func:`new_run_id` writes it); None for an id without one."""
    try:
        return float(calendar.timegm(time.strptime(run_id[:16], "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return None


def new_run_id() -> str:
    """A unique, time-ordered run id such as ``20261122T051500Z-4242-9f3a``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{stamp}-{os.getpid()}-{secrets.token_hex(2)}"


@dataclass
class LoadResult:
    """Records merged from every run file, and one message per problem found."""

    records: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[dict]:
        return [r for r in self.records if r.get("kind") == kind]


class RunWriter:
    """Appends the records of one run to its own file, flushing each line."""

    def __init__(self, path: Path, header: dict):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # "x": a run never overwrites another run's file, plain or compacted.
        if paths.compact_path(path).exists():
            raise FileExistsError(f"run file {paths.compact_path(path)} exists")
        self._file: IO[str] | None = open(path, "x", encoding="utf-8")
        self._write(header)

    def append(self, record: dict) -> None:
        """Write ``record`` as one line and push it to disk."""
        _validate(record, where=str(self.path))
        self._write(record)

    def _write(self, obj: dict) -> None:
        if self._file is None:
            raise ValueError(f"run file {self.path} is closed")
        self._file.write(json.dumps(obj, sort_keys=True, allow_nan=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self, compact: bool = True) -> None:
        """Close the file; with ``compact``, replace it by its compacted form
        (:func:`compact_run`) and point :attr:`path` there."""
        if self._file is not None:
            self._file.close()
            self._file = None
            if compact:
                self.path = compact_run(self.path)


class ResultStore:
    """The results of one device: ``<root>/<device_key>/``."""

    def __init__(self, root: Path | str, device_key: str):
        self.root = Path(root)
        self.device_key = device_key
        self.dir = paths.device_dir(self.root, device_key)

    @property
    def runs_dir(self) -> Path:
        return paths.runs_dir(self.dir)

    def run_file(self, run_id: str) -> Path:
        return paths.run_file(self.dir, run_id)

    def baseline_path(self, profile: str) -> Path:
        """The E2E baseline of ``profile`` (workload sizes differ per profile)."""
        return paths.baseline_file(self.dir, profile)

    @property
    def predictors_dir(self) -> Path:
        return paths.predictors_dir(self.dir)

    def fit_dir(self, run_id: str) -> Path:
        """The folder of the fit saved by run ``run_id``."""
        return paths.fit_dir(self.dir, run_id)

    @property
    def spec_file(self) -> Path:
        return paths.spec_file(self.dir)

    @property
    def traces_dir(self) -> Path:
        return paths.traces_dir(self.dir)

    @property
    def overheads_dir(self) -> Path:
        return paths.overheads_dir(self.dir)

    def stability_file(self, run_id: str) -> Path:
        return paths.stability_file(self.dir, run_id)

    def drift_file(self, run_id: str) -> Path:
        return paths.drift_file(self.dir, run_id)

    def replay_path(self, workload: str) -> Path:
        """The replay case of ``workload`` (``<workload>@<W>`` for W ranks)."""
        return paths.replay_file(self.dir, workload)

    @property
    def report_index(self) -> Path:
        return paths.report_index(self.dir)

    def open_run(self, env: dict, profile: str | None = None, run_id: str | None = None) -> RunWriter:
        """Start a new run file; its header carries the schema version and ``env``."""
        run_id = run_id or new_run_id()
        header = {"kind": "header", "schema": SCHEMA_VERSION, "run_id": run_id,
                  "device_key": self.device_key, "created_unix_s": time.time(),
                  "profile": profile, "env": env}
        return RunWriter(self.run_file(run_id), header)

    def load(self, kind: str | None = None) -> LoadResult:
        """Merge the records of every run file (of ``kind`` when given)."""
        result = LoadResult()
        for path in paths.run_files(self.dir):
            records, problems = read_run_file(path, self.device_key)
            result.records.extend(r for r in records if kind is None or r["kind"] == kind)
            result.problems.extend(problems)
        return result


#: gzip level of compacted run files (6: within a few % of 9's size, several times faster).
COMPACT_LEVEL = 6


def compact_run(path: Path) -> Path:
    """Replace the plain run file ``path`` by ``<path>.gz`` holding the same bytes,
    gzip-compressed; return the compacted path. The compressed copy is written
    to a temporary name, flushed to disk and renamed into place before the plain
    file is removed, so an interruption at any point loses nothing. A compacted
    path is returned unchanged."""
    if paths.is_compact_run_file(path):
        return path
    target = paths.compact_path(path)
    partial = target.with_name(target.name + ".partial")
    with open(path, "rb") as source, open(partial, "wb") as raw:
        # mtime=0: the same run compacts to the same bytes
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=COMPACT_LEVEL,
                           filename="", mtime=0) as packed:
            while chunk := source.read(1 << 20):
                packed.write(chunk)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, target)
    path.unlink()
    return target


def _open_run_text(path: Path) -> IO[str]:
    """``path`` opened for reading text, through gzip when it is compacted."""
    if paths.is_compact_run_file(path):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_run_text(path: Path) -> str:
    """The text of a run file, plain or compacted; OSError (gzip's errors
    included) or UnicodeDecodeError when it cannot be read. A plain file that
    was compacted after it was listed is read from its compacted form."""
    if not paths.is_compact_run_file(path) and not path.exists() \
            and paths.compact_path(path).exists():
        path = paths.compact_path(path)
    try:
        with _open_run_text(path) as handle:
            return handle.read()
    except (EOFError, zlib.error) as exc:
        raise OSError(f"corrupt gzip data ({exc})") from None


def read_run_header(path: Path) -> dict:
    """The header of a run file, plain or compacted; ValueError naming ``path``
    when it has none."""
    try:
        with _open_run_text(path) as handle:
            header = json.loads(handle.readline())
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable run file ({exc})") from None
    if not isinstance(header, dict) or header.get("kind") != "header":
        raise ValueError(f"{path}: line 1 is not a perfmodel run header")
    return header


def first_record_kind(path: Path) -> str | None:
    """The ``kind`` of the first record after a run file's header (None when it
    has none, or it does not read): a zoo run starts with ``"zoo"``."""
    try:
        with _open_run_text(path) as handle:
            handle.readline()
            record = json.loads(handle.readline() or "null")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError):
        return None
    return record.get("kind") if isinstance(record, dict) else None


def measurements_of(files: Iterable[Path], device_key: str) -> list[dict]:
    """The measurement records of the run ``files`` (:func:`read_run_file`; its
    problems are left to the readers that report them)."""
    records: list[dict] = []
    for path in files:
        loaded, _ = read_run_file(path, device_key)
        records += [r for r in loaded if r.get("kind") == "measurement"]
    return records


def read_run_file(path: Path, device_key: str) -> tuple[list[dict], list[str]]:
    """Records of one run file (plain or compacted) plus problems, each message
    naming ``path``.

    A bad header rejects the whole file (wrong schema, foreign device); a bad
    record line is skipped and reported, and the other lines still load.
    """
    try:
        text = read_run_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"{path}: unreadable ({exc})"]
    lines = text.split("\n")
    truncated = bool(lines) and lines[-1] != ""
    if not text.strip():
        return [], [f"{path}: empty file"]
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        return [], [f"{path}: line 1 is not JSON ({exc.msg}); not a perfmodel run file"]
    if not isinstance(header, dict) or header.get("kind") != "header":
        return [], [f"{path}: line 1 is not a perfmodel run header"]
    if header.get("schema") != SCHEMA_VERSION:
        return [], [f"{path}: schema version {header.get('schema')!r}, "
                    f"this perfmodel reads {SCHEMA_VERSION}"]
    if header.get("device_key") != device_key:
        return [], [f"{path}: records device {header.get('device_key')!r}, "
                    f"not {device_key!r}; ignored"]
    records: list[dict] = []
    problems: list[str] = []
    body = lines[1:-1] if truncated else lines[1:]
    for number, line in enumerate(body, start=2):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            _validate(record, where=f"{path}:{number}")
        except (json.JSONDecodeError, ValueError) as exc:
            problems.append(f"{path}:{number}: bad record skipped ({exc})")
            continue
        record["run_id"] = header.get("run_id")
        record["profile"] = header.get("profile")
        records.append(record)
    if truncated and len(lines) > 1:
        problems.append(f"{path}:{len(lines)}: truncated last line skipped (run interrupted?)")
    return records, problems


def _validate(record: object, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: record is not a JSON object")
    kind = record.get("kind")
    required = _REQUIRED.get(kind) if isinstance(kind, str) else None
    if required is None:
        raise ValueError(f"{where}: unknown record kind {kind!r}")
    for key, typ in required.items():
        value = record.get(key)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            if typ is float else isinstance(value, typ) and not isinstance(value, bool)
        if not ok:
            raise ValueError(f"{where}: field {key!r} should be {typ.__name__}, got {value!r}")
    # Values readers compute with: a record that loads can be fitted and gated on.
    if kind == "measurement":
        bad = {k: v for k, v in record["config"].items() if not _is_int(v)}
        if bad:
            raise ValueError(f"{where}: config values should be integers, got {bad!r}")
        _check_seconds(record["measurement"].get("median_s"), f"{where}: measurement.median_s")
        if record.get("host_speed") is not None:
            from perfmodel.measure.drift import HostSpeed

            HostSpeed.from_dict(record["host_speed"], f"{where}: field 'host_speed'")
        beside = record.get("timed_beside")
        if beside is not None and not (_is_int(beside) and beside >= 0):
            raise ValueError(f"{where}: field 'timed_beside' should be an int >= 0, "
                             f"got {beside!r}")
    elif kind == "e2e":
        _check_seconds(record["measured_s"], f"{where}: field 'measured_s'")
        if not math.isfinite(record["predicted_s"]) or record["predicted_s"] < 0:
            raise ValueError(f"{where}: field 'predicted_s' should be seconds >= 0, "
                             f"got {record['predicted_s']!r}")


def _is_int(value: object) -> bool:
    """Whether ``value`` loaded from a file is an int (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_seconds(value: object, what: str) -> None:
    """ValueError unless ``value`` is a finite number of seconds > 0."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} should be seconds > 0, got {value!r}")
