"""Pruning a device's results: keep what the code and the gate use, remove the rest.

Per device folder, :func:`plan_prune` keeps

- per profile, the newest ``keep`` run files (run ids start with their UTC time), and
  apart from them the newest ``keep`` zoo runs (whose first record is a ``zoo`` one),
  so that main jobs do not push out the runs hours apart the zoo's noise floor needs;
- every run file holding E2E records a baseline was computed from (matched by
  workload and signed error, as :func:`perfmodel.gate.baseline.baseline_errors`
  computes it, or as the record carries it);
- per thread count, the newest fit, and the newest of all (what
  :func:`perfmodel.fit.fitting.load_latest_fit` and so ``current_fit`` pick: the newest
  fit folder whose index reads, of that thread count or of any; a fit saved without a
  thread count is never picked for one, so an older one is not kept), and every fit
  whose training data a baseline names (``fit_data``);
- the run files every kept fit was trained on (its ``data_runs``): without them
  ``current_fit`` sees other training data and refits, on the runs left, at the next
  session that needs a fit (``keep_fit_runs=False`` removes them all the same, for
  a tight size budget: the kept fits still load, but baselines naming them stop
  matching the fit sessions use until a new baseline is saved);

and removes the other run files and fit folders. Nothing else is touched (the
spec, baselines, overheads, traces, report, stability and drift files). What
cannot be read (a run file without a header, a fit without a readable index, a
baseline that does not parse) is reported and left alone; an unreadable baseline
also keeps every run file of its profile. Everything here reads plain JSON only.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from perfmodel.store import paths
from perfmodel.store.results import (compact_run, data_id, first_record_kind, read_run_header,
                                     read_run_text)

#: Run files kept per device and profile by default.
DEFAULT_KEEP = 10


@dataclass(frozen=True)
class Entry:
    """One run file or fit folder, its size (bytes) and why it is kept or removed."""

    path: Path
    bytes: int
    why: str
    kind: str  # "run" or "fit"


@dataclass
class PrunePlan:
    """What pruning one device folder keeps and removes."""

    device_key: str
    folder: Path
    keep: list[Entry] = field(default_factory=list)
    remove: list[Entry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(e.bytes for e in self.remove)

    @property
    def bytes_kept(self) -> int:
        return sum(e.bytes for e in self.keep)

    def lines(self, dry_run: bool = False) -> list[str]:
        """What is kept and removed, one line each, and a closing total."""
        verb = "would remove" if dry_run else "removed"
        out = [f"{self.device_key}:"]
        for entry in sorted(self.keep + self.remove, key=lambda e: (e.kind, e.path.name)):
            what = "keep" if entry in self.keep else verb
            name = entry.path.relative_to(self.folder).as_posix() + ("/" if entry.kind == "fit"
                                                                      else "")
            out.append(f"  {what:<12} {name:<60} {human_bytes(entry.bytes):>9}  {entry.why}")
        out += [f"  problem: {p}" for p in self.problems]
        count = {kind: sum(e.kind == kind for e in self.remove) for kind in ("run", "fit")}
        kept = {kind: sum(e.kind == kind for e in self.keep) for kind in ("run", "fit")}
        out.append(f"{self.device_key}: {verb} {count['run']} run file(s) and {count['fit']} "
                   f"fit(s), {'would free' if dry_run else 'freed'} "
                   f"{human_bytes(self.bytes_freed)} ({self.bytes_freed} bytes); kept "
                   f"{kept['run']} run file(s) and {kept['fit']} fit(s), "
                   f"{human_bytes(self.bytes_kept)}")
        return out


def human_bytes(n: int) -> str:
    """``n`` bytes in B, KiB, MiB or GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def plan_prune(root: Path | str, device_key: str, keep: int = DEFAULT_KEEP,
               keep_fit_runs: bool = True) -> PrunePlan:
    """What pruning ``root/<device_key>`` keeps and removes (see the module doc);
    changes nothing."""
    if keep < 0:
        raise ValueError(f"--keep must be >= 0, got {keep}")
    folder = paths.device_dir(root, device_key)
    if not folder.is_dir():
        raise ValueError(f"no results folder at {folder}")
    plan = PrunePlan(device_key, folder)
    runs = _read_run_headers(folder, plan.problems)
    reasons: dict[str, list[str]] = {run_id: [] for run_id in runs}

    by_profile: dict[str | None, list[str]] = {}
    for run_id, (profile, _) in runs.items():
        by_profile.setdefault(profile, []).append(run_id)
    for profile, ids in by_profile.items():
        zoo = [run_id for run_id in ids if first_record_kind(runs[run_id][1]) == "zoo"]
        others = [run_id for run_id in ids if run_id not in zoo]
        for group, what in ((others, ""), (zoo, "zoo runs ")):
            for run_id in sorted(group)[-keep:] if keep else []:
                reasons[run_id].append(f"newest {keep} {what}of profile {profile}")

    named_fits: dict[str, list[str]] = {}  # fit data id -> baselines naming it
    for profile, path in paths.baseline_files(folder).items():
        try:
            baseline = json.loads(path.read_text(encoding="utf-8"))
            wanted, fit_ids = _baseline_errors(baseline)
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError,
                AttributeError) as exc:
            plan.problems.append(f"{path}: unreadable baseline ({exc}); every run file of "
                                 f"profile {profile} is kept")
            for run_id in by_profile.get(profile, []):
                reasons[run_id].append(f"profile of unreadable {path.name}")
            continue
        for fit_id in fit_ids:
            named_fits.setdefault(fit_id, []).append(path.name)
        found = _runs_holding(runs, profile, wanted, plan.problems)
        for run_id in found:
            reasons[run_id].append(f"runs of {path.name}")
        missing = sum(len(v) for v in wanted.values()) - sum(found.values())
        if missing > 0:
            plan.problems.append(f"{path.name}: {missing} of its runs' records were not "
                                 f"found in any run file (their runs are not stored here; "
                                 f"the baseline keeps what the gate reads)")

    fits = _read_fits(folder, plan.problems)
    fit_reasons: dict[Path, list[str]] = {path: [] for path in fits}
    newest: dict[int | None, Path] = {}
    for path, (threads, _) in fits.items():  # oldest first: the last one wins
        newest[threads] = path
    if newest.get(None) not in (None, next(reversed(fits), None)):
        del newest[None]  # a lookup without a thread count takes the newest of all
    for threads, path in newest.items():
        fit_reasons[path].append("newest fit" + (f" of {threads} thread(s)" if threads else ""))
    for path, (_, data_runs) in fits.items():
        names = named_fits.get(data_id(data_runs), [])
        if names:
            fit_reasons[path].append(f"named by {', '.join(names)}")
    for path, why in fit_reasons.items():
        if why and keep_fit_runs:
            for run_id in fits[path][1]:
                if run_id in reasons:
                    reasons[run_id].append(f"trained fit {path.name}")
    for run_id, why in reasons.items():
        _, file = runs[run_id]
        entry = Entry(file, _size(file), "; ".join(_unique(why)) or "older", "run")
        (plan.keep if why else plan.remove).append(entry)
    for path in paths.fit_dirs(folder):
        if path not in fits:  # unreadable: left alone, already a problem
            continue
        why = fit_reasons[path]
        entry = Entry(path, _size(path), "; ".join(why) or "older fit", "fit")
        (plan.keep if why else plan.remove).append(entry)
    return plan


def apply_prune(plan: PrunePlan) -> int:
    """Remove what ``plan`` removes; the bytes freed."""
    predictors = paths.predictors_dir(plan.folder).resolve()
    runs = paths.runs_dir(plan.folder).resolve()
    for entry in plan.remove:
        path = entry.path
        if entry.kind == "fit":
            if path.resolve().parent != predictors or path.is_symlink():
                raise ValueError(f"{path}: not a fit folder of {plan.folder}")
            shutil.rmtree(path)
        else:
            if path.resolve().parent != runs or not paths.is_run_file(path):
                raise ValueError(f"{path}: not a run file of {plan.folder}")
            path.unlink()
    return plan.bytes_freed


def prune(root: Path | str, device_keys: Iterable[str] | None = None, keep: int = DEFAULT_KEEP,
          dry_run: bool = False, keep_fit_runs: bool = True) -> list[PrunePlan]:
    """Plan (and unless ``dry_run``, apply) pruning of each device under ``root``
    (default: every device key with results)."""
    keys = list(device_keys) if device_keys is not None else paths.device_keys(root)
    if not keys:
        raise ValueError(f"no stored results under {root}")
    plans = [plan_prune(root, key, keep, keep_fit_runs) for key in keys]
    if not dry_run:
        for plan in plans:
            apply_prune(plan)
    return plans


#: A plain run file modified this recently may still be written by a live run.
COMPACT_MIN_AGE_S = 3600.0


def compact_runs(root: Path | str, device_keys: Iterable[str] | None = None,
                 dry_run: bool = False, min_age_s: float = COMPACT_MIN_AGE_S,
                 now_s: float | None = None) -> list[tuple[Path, int, int]]:
    """Compact (gzip, :func:`perfmodel.store.results.compact_run`) every plain run
    file under ``root`` not modified for ``min_age_s`` seconds: runs that died
    before they closed, and runs of an older perfmodel. Returns (path, bytes
    before, bytes after) per file; with ``dry_run`` nothing is written and the
    size after is 0."""
    now_s = time.time() if now_s is None else now_s
    keys = list(device_keys) if device_keys is not None else paths.device_keys(root)
    done = []
    for key in keys:
        for path in paths.run_files(paths.device_dir(root, key)):
            if paths.is_compact_run_file(path):
                continue
            stat = path.stat()
            if now_s - stat.st_mtime < min_age_s:
                continue
            if dry_run:
                done.append((path, stat.st_size, 0))
                continue
            packed = compact_run(path)
            done.append((packed, stat.st_size, packed.stat().st_size))
    return done


# -- reading ---------------------------------------------------------------------------

def _read_run_headers(folder: Path, problems: list[str]
                      ) -> dict[str, tuple[str | None, Path]]:
    """Run id -> (profile, file) of every run file whose header reads."""
    out = {}
    for path in paths.run_files(folder):
        try:
            header = read_run_header(path)
            profile = header.get("profile")
            if profile is not None and not isinstance(profile, str):
                raise ValueError(f"bad profile {profile!r}")
        except ValueError as exc:
            problems.append(f"{path}: not a readable run file ({exc}); left alone")
            continue
        out[paths.run_id_of(path)] = (profile, path)
    return out


def _baseline_errors(baseline: dict) -> tuple[dict[str, list[float]], set[str]]:
    """Per workload the signed errors of a baseline's runs, and the fit ids it names."""
    if not isinstance(baseline, dict) or not isinstance(baseline.get("workloads"), dict):
        raise ValueError("no 'workloads' mapping")
    fit_ids = {baseline["fit_data"]} if isinstance(baseline.get("fit_data"), str) else set()
    wanted = {}
    for workload, entry in baseline["workloads"].items():
        wanted[workload] = [float(e) for e in entry["errors"]]
        if isinstance(entry.get("fit_data"), str):
            fit_ids.add(entry["fit_data"])
    return wanted, fit_ids


def _runs_holding(runs: dict[str, tuple[str | None, Path]], profile: str,
                  wanted: dict[str, list[float]], problems: list[str]) -> dict[str, int]:
    """Run id -> how many baseline errors its E2E records of ``profile`` account for."""
    found: dict[str, int] = {}
    left = {w: list(errors) for w, errors in wanted.items()}
    for run_id, (run_profile, path) in sorted(runs.items(), reverse=True):
        if run_profile != profile:
            continue
        try:
            lines = [line for line in read_run_text(path).split("\n") if '"e2e"' in line]
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: unreadable ({exc})")
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("kind") != "e2e" or record.get("bias"):
                continue
            errors = left.get(record.get("workload"))
            index = _matching(errors or [], _signed_errors(record))
            if index is not None:
                del errors[index]
                found[run_id] = found.get(run_id, 0) + 1
    return found


def _signed_errors(record: dict) -> list[float]:
    """The signed errors a baseline may have taken from ``record``."""
    out = [record[k] for k in ("signed_error", "error") if _finite(record.get(k))]
    measured, predicted = record.get("measured_s"), record.get("predicted_s")
    if _finite(measured) and _finite(predicted) and measured > 0:
        out.append((predicted - measured) / measured)
    return out


def _matching(errors: list[float], candidates: list[float]) -> int | None:
    for i, error in enumerate(errors):
        if any(math.isclose(error, c, rel_tol=1e-9, abs_tol=1e-15) for c in candidates):
            return i
    return None


def _read_fits(folder: Path, problems: list[str]
               ) -> dict[Path, tuple[int | None, tuple[str, ...]]]:
    """Fit folder -> (threads, training run ids) of every fit whose index reads and
    whose predictor files are all there, oldest first."""
    out = {}
    for path in paths.fit_dirs(folder):
        index_path = paths.fit_index(path)
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            if not isinstance(index, dict) or not isinstance(index.get("entries"), list):
                raise ValueError("not a predictor index")
            threads = index.get("threads")
            runs = index.get("data_runs", [])
            if threads is not None and not isinstance(threads, int):
                raise ValueError(f"bad threads {threads!r}")
            if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
                raise ValueError("bad data_runs")
            for entry in index["entries"]:
                for file in paths.predictor_files(paths.fit_member(path, entry["stem"])):
                    if not file.is_file():
                        raise ValueError(f"{file.name} missing")
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            problems.append(f"{path}: not a loadable fit ({exc}); left alone")
            continue
        out[path] = (threads, tuple(runs))
    return out


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
