"""Every path under ``results/<device-key>/``: the one place that names them.

No other module joins these names onto a path (``tests/test_store_paths.py``
checks); each asks here. Per device folder::

    device.json                       the device's spec (a CPU: measured once, cached)
    device-<N>threads.json            a CPU spec measured with N torch threads (e.g. ranks)
    runs/<run-id>.jsonl               a run being written (header, then records, line by line)
    runs/<run-id>.jsonl.gz            a finished run, compacted (the same lines, gzip)
    predictors/<run-id>/index.json    a fit: its index, and per predictor <stem>.json + .npz
    baseline-<profile>.json           the E2E gate's baseline of a profile
    replay-baseline.json              the replay gate's baseline (every replay case)
    overheads/<workload>.json         a workload's host-overhead samples
    traces/<name>.{et,kineto,calibration}.json   captured traces
    replay/<workload>.json.gz         a workload's replay case (the newest capture)
    report/index.html, report/*.png   the HTML report and its figures
    stability/<run-id>.json           a gate-stability tally
    drift/<run-id>.json               a host-speed drift probe

Functions take the device folder (``device_dir(root, key)``, or
:attr:`perfmodel.store.results.ResultStore.dir`) and only build paths: nothing
here reads or writes a file, except the listings (:func:`device_keys`,
:func:`run_files`, :func:`fit_dirs`, :func:`baseline_files`, :func:`replay_files`), which
only list.
"""

from __future__ import annotations

import re
from pathlib import Path

#: The results root a command or the plugin uses by default (relative to its working
#: directory or the pytest root).
DEFAULT_ROOT = "results"

SPEC_FILE = "device.json"
RUNS = "runs"
RUN_SUFFIX = ".jsonl"
#: Suffix of a finished run file, compacted (gzip of the same lines).
COMPACT_RUN_SUFFIX = ".jsonl.gz"
PREDICTORS = "predictors"
FIT_INDEX = "index.json"
OVERHEADS = "overheads"
TRACES = "traces"
REPORT = "report"
REPORT_INDEX = "index.html"
STABILITY = "stability"
DRIFT = "drift"
REPLAY = "replay"
#: The replay gate's baseline (:mod:`perfmodel.gate.replay`).
REPLAY_BASELINE = "replay-baseline.json"
#: Suffix of a replay case (gzip JSON, :mod:`perfmodel.replay.case`).
REPLAY_SUFFIX = ".json.gz"
#: Suffixes of one captured trace: execution trace, Kineto trace, profiler calibration.
TRACE_SUFFIXES = (".et.json", ".kineto.json", ".calibration.json")

_BASELINE = re.compile(r"baseline-(?P<profile>[^/]+)\.json")
_THREADS_SPEC = re.compile(r"device-(?P<threads>[0-9]+)threads\.json")


def default_root(base: Path | str) -> Path:
    """The default results root under ``base`` (e.g. the pytest root)."""
    return Path(base) / DEFAULT_ROOT


def device_dir(root: Path | str, device_key: str) -> Path:
    """``<root>/<device_key>``: everything stored for one device."""
    if not device_key or "/" in device_key or device_key in (".", ".."):
        raise ValueError(f"bad device key {device_key!r}")
    return Path(root) / device_key


def has_results(folder: Path) -> bool:
    """Whether a device folder holds results (a ``runs/`` or ``predictors/`` folder)."""
    return (folder / RUNS).is_dir() or (folder / PREDICTORS).is_dir()


def device_keys(root: Path | str) -> list[str]:
    """The device keys under ``root`` that hold results, sorted ([] without ``root``)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and has_results(p))


# -- device spec -------------------------------------------------------------------------

def spec_file(folder: Path) -> Path:
    """``device.json``: the device's spec."""
    return folder / SPEC_FILE


def threads_spec_file(folder: Path, threads: int) -> Path:
    """``device-<threads>threads.json``: a CPU spec measured with ``threads`` threads."""
    return folder / f"device-{int(threads)}threads.json"


def threads_spec_files(folder: Path) -> dict[int, Path]:
    """Every ``device-<N>threads.json`` of ``folder``, by N."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.iterdir():
        match = _THREADS_SPEC.fullmatch(path.name)
        if match:
            found[int(match["threads"])] = path
    return dict(sorted(found.items()))


# -- runs --------------------------------------------------------------------------------

def runs_dir(folder: Path) -> Path:
    """``runs/``: one immutable file per run."""
    return folder / RUNS


def run_file(folder: Path, run_id: str) -> Path:
    """``runs/<run_id>.jsonl``: the file a run appends to while it runs."""
    _check_id(run_id, "run id")
    return runs_dir(folder) / f"{run_id}{RUN_SUFFIX}"


def compact_run_file(folder: Path, run_id: str) -> Path:
    """``runs/<run_id>.jsonl.gz``: the run once finished and compacted."""
    _check_id(run_id, "run id")
    return runs_dir(folder) / f"{run_id}{COMPACT_RUN_SUFFIX}"


def compact_path(run: Path) -> Path:
    """The compacted name (``.jsonl.gz``) of the run file ``run``."""
    return run if run.name.endswith(COMPACT_RUN_SUFFIX) else run.with_name(run.name + ".gz")


def run_files(folder: Path) -> list[Path]:
    """Every run file of ``folder``, one per run id, oldest first (run ids start with
    their UTC time). Where a run is there both as ``.jsonl`` and ``.jsonl.gz`` (a
    compaction stopped before it removed the plain file), the compacted file wins:
    it is only ever renamed into place complete."""
    runs = runs_dir(folder)
    if not runs.is_dir():
        return []
    found: dict[str, Path] = {}
    for path in runs.iterdir():
        if is_run_file(path):
            run_id = run_id_of(path)
            if run_id not in found or path.name.endswith(COMPACT_RUN_SUFFIX):
                found[run_id] = path
    return [found[k] for k in sorted(found)]


def run_id_of(path: Path) -> str:
    """The run id a run file is named after."""
    for suffix in (COMPACT_RUN_SUFFIX, RUN_SUFFIX):
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return path.stem


def is_run_file(path: Path) -> bool:
    """Whether ``path`` is named like a run file (plain or compacted)."""
    return path.name.endswith((RUN_SUFFIX, COMPACT_RUN_SUFFIX))


def is_compact_run_file(path: Path) -> bool:
    """Whether ``path`` is named like a compacted run file."""
    return path.name.endswith(COMPACT_RUN_SUFFIX)


# -- fits --------------------------------------------------------------------------------

def predictors_dir(folder: Path) -> Path:
    """``predictors/``: one folder per fit."""
    return folder / PREDICTORS


def fit_dir(folder: Path, run_id: str) -> Path:
    """``predictors/<run_id>/``: the fit saved by run ``run_id``."""
    _check_id(run_id, "fit id")
    return predictors_dir(folder) / run_id


def fit_dirs(folder: Path) -> list[Path]:
    """Every fit folder of ``folder``, oldest first."""
    fits = predictors_dir(folder)
    return sorted(p for p in fits.iterdir() if p.is_dir()) if fits.is_dir() else []


def fit_index(fit: Path) -> Path:
    """``index.json`` of a fit folder."""
    return fit / FIT_INDEX


def fit_member(fit: Path, stem: str) -> Path:
    """The path stem (no suffix) of one predictor's files in a fit folder."""
    _check_id(stem, "predictor file stem")
    return fit / stem


# -- gate --------------------------------------------------------------------------------

def baseline_file(folder: Path, profile: str) -> Path:
    """``baseline-<profile>.json``: the E2E baseline of ``profile``."""
    _check_id(profile, "profile")
    return folder / f"baseline-{profile}.json"


def baseline_files(folder: Path) -> dict[str, Path]:
    """Every baseline of ``folder``, by profile."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.iterdir():
        match = _BASELINE.fullmatch(path.name)
        if match and path.is_file():
            found[match["profile"]] = path
    return dict(sorted(found.items()))


def replay_baseline_file(folder: Path) -> Path:
    """``replay-baseline.json``: the replay gate's baseline of the device's replay
    cases (:mod:`perfmodel.gate.replay`)."""
    return folder / REPLAY_BASELINE


def stability_file(folder: Path, run_id: str) -> Path:
    """``stability/<run_id>.json``: the gate-stability tally of a run."""
    _check_id(run_id, "run id")
    return folder / STABILITY / f"{run_id}.json"


def drift_file(folder: Path, run_id: str) -> Path:
    """``drift/<run_id>.json``: a host-speed drift probe."""
    _check_id(run_id, "run id")
    return folder / DRIFT / f"{run_id}.json"


# -- traces and overheads ----------------------------------------------------------------

def traces_dir(folder: Path) -> Path:
    """``traces/``: captured traces of the device's workloads."""
    return folder / TRACES


def trace_files(traces: Path, name: str) -> tuple[Path, Path, Path]:
    """(execution trace, Kineto trace, calibration) of capture ``name`` in the
    folder ``traces`` (:func:`traces_dir`, or any folder a capture is written to)."""
    _check_id(name, "trace name")
    return tuple(traces / f"{name}{suffix}" for suffix in TRACE_SUFFIXES)  # type: ignore[return-value]


def overheads_dir(folder: Path) -> Path:
    """``overheads/``: one file of host-overhead samples per workload."""
    return folder / OVERHEADS


def overhead_file(folder: Path, workload: str) -> Path:
    """``overheads/<workload>.json``."""
    _check_id(workload, "workload name")
    return overheads_dir(folder) / f"{workload}.json"


def replay_dir(folder: Path) -> Path:
    """``replay/``: one replay case per workload (:mod:`perfmodel.replay.case`)."""
    return folder / REPLAY


def replay_file(folder: Path, workload: str) -> Path:
    """``replay/<workload>.json.gz``: the replay case of ``workload``'s newest capture
    (``<workload>@<W>`` for a multi-rank run)."""
    _check_id(workload, "workload name")
    return replay_dir(folder) / f"{workload}{REPLAY_SUFFIX}"


def replay_files(folder: Path) -> dict[str, Path]:
    """Every replay case of ``folder``, by workload, sorted."""
    cases = replay_dir(folder)
    if not cases.is_dir():
        return {}
    return {p.name[: -len(REPLAY_SUFFIX)]: p for p in sorted(cases.iterdir())
            if p.name.endswith(REPLAY_SUFFIX) and p.is_file()}


def predictor_files(stem: Path) -> tuple[Path, Path]:
    """``<stem>.json`` (metadata) and ``<stem>.npz`` (arrays) of one saved predictor
    (the stem may itself contain dots)."""
    stem = Path(stem)
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")


def unreadable_copy(path: Path) -> Path:
    """Where an unreadable file is set aside: ``<name>.unreadable`` beside it."""
    return path.with_name(path.name + ".unreadable")


# -- report ------------------------------------------------------------------------------

def report_dir(folder: Path) -> Path:
    """``report/``: the HTML report and its figures."""
    return folder / REPORT


def report_index(folder: Path) -> Path:
    """``report/index.html``: where the report goes by default."""
    return report_dir(folder) / REPORT_INDEX


def figure_file(report_folder: Path, stem: str) -> Path:
    """A report figure ``<stem>.png`` in the folder that holds the report page."""
    _check_id(stem, "figure name")
    return report_folder / f"{stem}.png"


def _check_id(value: str, what: str) -> None:
    """ValueError unless ``value`` can name one file or folder (no separators)."""
    if not isinstance(value, str) or not value or "/" in value or "\\" in value \
            or value in (".", ".."):
        raise ValueError(f"bad {what} {value!r}")
