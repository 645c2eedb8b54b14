"""The replay gate: the committed replay cases of every device, predicted again
with the current code, against a committed replay baseline.

Replay (:mod:`perfmodel.replay.rerun`) is a pure function of the code and the
committed data, so this gate needs no device and no noise allowance: CI on a
CPU runner gates every device's model, GPUs included.

Per device, ``results/<key>/replay-baseline.json``
(:func:`perfmodel.store.paths.replay_baseline_file`) holds, per workload, the
replayed signed error, the predicted and measured seconds and the fit used
(plain JSON: :func:`save_replay_baseline`, :func:`load_replay_baseline`).

A case fails (:func:`judge`) when

- ``regressed``: its |replayed error| grew by more than the tolerance (an
  absolute fraction of the measured time: 0.005 = 0.5 pp) over the baseline's;
- ``moved``: its replayed prediction moved by more than the tolerance either way
  (``|error - baseline error| > tolerance``), even when that made the error
  smaller: a model change worth a look, and a new baseline
  (``replay_fail_on_improvement = false`` in ``[tool.perfmodel]`` lets an
  improvement pass).

Which fit (:func:`choose_fit`): the newest committed fit of the case's thread
count (as ``perfmodel replay`` picks it; on a CUDA device the newest fit).
When a predictor the device's cases need is stale for today's code
(:attr:`perfmodel.fit.fitting.FitReport.stale`), or a newer fit does not load,
the predictors the cases need are refitted from the committed measurement
runs (those the committed fit was trained on when they are all there, else
every run of the device), at the case's thread count, with the fitting's fixed
seeds: the same data and code give the same fit. The summary says which.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from perfmodel.plaindata import write_json_atomic
from perfmodel.store import paths

#: What a replay baseline file says it is, and the schema this code reads and writes.
FORMAT = "perfmodel.replay-baseline"
SCHEMA = 1
#: Default tolerance (fraction of the measured time: 0.5 percentage point).
DEFAULT_TOLERANCE = 0.005
#: Verdict statuses that fail the gate.
FAILING = ("regressed", "moved", "missing", "invalid", "unpredicted")


# -- the baseline ------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayEntry:
    """One workload's replay in the baseline: signed error (None when the case
    holds no measured time), predicted and measured seconds, and the fit used."""

    error: float | None
    predicted_s: float
    measured_s: float | None
    fit: str | None


@dataclass(frozen=True)
class ReplayBaseline:
    device_key: str
    workloads: dict[str, ReplayEntry]
    fits: tuple[str, ...] = ()


def save_replay_baseline(path: Path | str, device_key: str, replayed: Iterable[Any]) -> Path:
    """Write the replay baseline of ``device_key`` to ``path`` from ``replayed``
    (objects with ``workload``, ``error``, ``predicted_s``, ``measured_s`` and
    ``fit``: :class:`perfmodel.replay.rerun.Replayed`); those without a
    prediction are left out. ValueError for a non-finite number."""
    workloads = {}
    for r in sorted(replayed, key=lambda r: r.workload):
        if r.predicted_s is None:
            continue
        for name, value in (("error", r.error), ("predicted_s", r.predicted_s),
                            ("measured_s", r.measured_s)):
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{path}: {r.workload}: {name} {value!r} is not finite")
        workloads[r.workload] = {"error": r.error, "predicted_s": float(r.predicted_s),
                                 "measured_s": r.measured_s, "fit": r.fit}
    fits = sorted({w["fit"] for w in workloads.values() if w["fit"] is not None})
    path = Path(path)
    write_json_atomic(path, {"format": FORMAT, "schema": SCHEMA, "device_key": device_key,
                             "fits": fits, "workloads": workloads})
    return path


def load_replay_baseline(path: Path | str) -> ReplayBaseline | None:
    """The replay baseline at ``path``; None when there is none. Plain JSON only
    (nothing executes); ValueError starting with ``path`` and naming the bad key
    when the file is unreadable, of another schema or holds a bad value."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: replay baseline is not readable JSON ({exc})") from None
    try:
        return _baseline_from_plain(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _baseline_from_plain(data: Any) -> ReplayBaseline:
    if not isinstance(data, dict):
        raise ValueError(f"not a replay baseline: top level is a JSON {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise ValueError(f"'format' = {data.get('format')!r}: not a replay baseline "
                         f"({FORMAT!r})")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"'schema' = {data.get('schema')!r}; this perfmodel reads "
                         f"schema {SCHEMA}")
    key = data.get("device_key")
    if not isinstance(key, str) or not key:
        raise ValueError(f"'device_key' = {key!r} is not a non-empty string")
    fits = data.get("fits", [])
    if not isinstance(fits, list) or not all(isinstance(f, str) for f in fits):
        raise ValueError(f"'fits' = {fits!r} is not a list of fit ids")
    raw = data.get("workloads")
    if not isinstance(raw, dict):
        raise ValueError(f"'workloads' = {raw!r} is not an object")
    return ReplayBaseline(key, {name: _entry(name, value) for name, value in raw.items()},
                          tuple(fits))


def _entry(name: str, raw: Any) -> ReplayEntry:
    if not isinstance(raw, dict):
        raise ValueError(f"workloads.{name} = {raw!r} is not an object")

    def number(key: str, optional: bool) -> float | None:
        value = raw.get(key)
        if value is None and optional and key in raw:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) \
                or not math.isfinite(value):
            raise ValueError(f"workloads.{name}.{key} = {value!r} is not a finite number")
        return float(value)

    predicted = number("predicted_s", False)
    if predicted < 0:
        raise ValueError(f"workloads.{name}.predicted_s = {predicted!r} is negative")
    fit = raw.get("fit")
    if fit is not None and not isinstance(fit, str):
        raise ValueError(f"workloads.{name}.fit = {fit!r} is not a fit id")
    return ReplayEntry(number("error", True), predicted, number("measured_s", True), fit)


# -- the verdict -------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayVerdict:
    """The replay gate's decision on one case (errors are fractions).

    ``status``: ``ok``; ``regressed`` (|error| grew by more than ``tolerance``);
    ``moved`` (the prediction moved by more than ``tolerance`` either way);
    ``new`` (no baseline entry: passes); ``saved`` (replayed for a new baseline);
    ``missing`` (in the baseline, but no case); ``invalid`` (the case or the
    baseline does not read); ``unpredicted`` (the case cannot be predicted)."""

    device_key: str
    workload: str
    status: str
    tolerance: float
    error: float | None = None
    predicted_s: float | None = None
    measured_s: float | None = None
    fit: str | None = None
    entry: ReplayEntry | None = None
    problem: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def name(self) -> str:
        return f"{self.device_key}/{self.workload}"

    @property
    def shift(self) -> float | None:
        """The prediction's move since the baseline, as a fraction of the measured
        time (error - baseline error); relative to the baseline's prediction
        when the case has no measured time. None without both."""
        if self.entry is None or self.predicted_s is None:
            return None
        if self.error is not None and self.entry.error is not None:
            return self.error - self.entry.error
        if self.entry.predicted_s > 0:
            return self.predicted_s / self.entry.predicted_s - 1
        return None

    def line(self) -> str:
        """One line; failing ones start with ``FAIL``."""
        tol = f"tolerance {self.tolerance * 100:.2f} pp"
        if self.status in ("invalid", "unpredicted"):
            return f"FAIL {self.name}: {self.problem}"
        if self.status == "missing":
            return f"FAIL {self.name}: in the replay baseline but no replay case ({self.problem})"
        if self.status in ("new", "saved"):
            verb = "NEW " if self.status == "new" else "save"
            return (f"{verb} {self.name}: replayed error {_pct(self.error)}, predicted "
                    f"{_ms(self.predicted_s)}" + (" (no replay baseline entry)"
                                                   if self.status == "new" else ""))
        e = self.entry
        fit_note = (f"; fit {self.fit}, baseline's {e.fit}" if e.fit and self.fit != e.fit
                    else "")
        if self.status == "moved":
            return (f"FAIL {self.name}: replayed prediction moved {_pp(self.shift)} "
                    f"({_ms(e.predicted_s)} -> {_ms(self.predicted_s)}; replayed error "
                    f"{_pct(self.error)}, baseline {_pct(e.error)}; {tol}{fit_note})")
        verb, relation = ("FAIL", "outside") if self.failed else ("ok  ", "within")
        return (f"{verb} {self.name}: replayed error {_pct(self.error)} {relation} baseline "
                f"{_pct(e.error)} ({tol}{fit_note})")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2%}"


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.2f} pp"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.4f} ms"


def judge(device_key: str, replayed, entry: ReplayEntry | None, tolerance: float,
          fail_on_improvement: bool = True) -> ReplayVerdict:
    """The verdict on ``replayed`` (a :class:`perfmodel.replay.rerun.Replayed`)
    against its baseline ``entry`` (None: ``new``); see the module docstring.
    A case without a measured time is judged by its relative prediction change."""
    common = dict(tolerance=tolerance, error=replayed.error, predicted_s=replayed.predicted_s,
                  measured_s=replayed.measured_s, fit=replayed.fit, entry=entry)
    if replayed.problem is not None or replayed.predicted_s is None:
        return ReplayVerdict(device_key, replayed.workload, "unpredicted",
                             problem=f"not replayed: {replayed.problem}", **common)
    if entry is None:
        return ReplayVerdict(device_key, replayed.workload, "new", **common)
    verdict = ReplayVerdict(device_key, replayed.workload, "ok", **common)
    if replayed.error is not None and entry.error is not None:
        grown = abs(replayed.error) - abs(entry.error)
        if grown > tolerance:
            return ReplayVerdict(device_key, replayed.workload, "regressed", **common)
    shift = verdict.shift
    if shift is not None and abs(shift) > tolerance:
        worse = replayed.error is None or entry.error is None \
            or abs(replayed.error) > abs(entry.error)
        if fail_on_improvement or worse:
            return ReplayVerdict(device_key, replayed.workload, "moved", **common)
    return verdict


def check_replay(case, fit, table, baseline: ReplayBaseline | None,
                 tolerance: float = DEFAULT_TOLERANCE, *, fit_name: str | None = None,
                 bias: Mapping[str, float] | None = None,
                 fail_on_improvement: bool = True) -> ReplayVerdict:
    """Replay ``case`` (:class:`perfmodel.replay.case.ReplayCase`) with ``fit``
    and the overhead ``table`` (``bias``: a planted error,
    :func:`perfmodel.simulate.predict.parse_bias`), and judge it against
    ``baseline``'s entry for its workload (:func:`judge`)."""
    from perfmodel.replay.rerun import replay_case

    replayed = replay_case(case, fit, table, fit_name, bias=dict(bias) if bias else None)
    entry = None if baseline is None else baseline.workloads.get(case.workload)
    return judge(case.device_key, replayed, entry, tolerance, fail_on_improvement)


# -- which fit ---------------------------------------------------------------------------

@dataclass
class FitChoice:
    """The fit a device's cases of one thread count replay with: ``fit`` (None:
    none to use, ``problem`` says why), its id (``name``) and the summary text."""

    fit: Any
    name: str | None
    summary: str
    problem: str | None = None


def needed_keys(cases: Iterable[Any]) -> set[tuple[str, str]]:
    """The (op, direction) predictors that replaying ``cases`` asks a fit for: each
    op task's (and on a CPU a cold-cache op's warm one), and each collective's
    time, host CPU and loaded predictors."""
    from perfmodel.ops import OPS
    from perfmodel.ops.base import warm_direction
    from perfmodel.ops.collective import HOST_CPU, LOADED

    keys: set[tuple[str, str]] = set()
    for case in cases:
        for graph in case.graphs:
            for task in graph.tasks:
                if task.op is None:
                    continue
                if task.kind == "op":
                    keys.add((task.op, task.direction))
                    if task.op in OPS and OPS[task.op].cold_on_cpu and not case.on_device:
                        keys.add((task.op, warm_direction(task.direction)))
                elif task.kind == "collective":
                    keys |= {(task.op, "forward"), (task.op, HOST_CPU), (task.op, LOADED)}
    return keys


def choose_fit(folder: Path, threads: int | None, cases: Iterable[Any]) -> FitChoice:
    """The fit of the device folder ``folder`` for cases of ``threads`` (None: any;
    a CUDA device's) that ``cases`` replay with: the newest committed one, or a
    deterministic refit when it is stale for today's code (module docstring)."""
    from perfmodel.replay.rerun import latest_fit
    from perfmodel.store.results import ResultStore

    store = ResultStore(folder.parent, folder.name)
    problems: list[str] = []
    fit, name = latest_fit(store, threads, problems)
    needed = needed_keys(cases)
    why = None
    if problems:  # a newer fit does not load with today's code
        why = problems[0]
    elif fit is not None:
        stale = sorted(set(fit.stale) & needed)
        if stale:
            why = (f"{len(stale)} predictor(s) the cases need: "
                   f"{fit.skipped.get(stale[0], stale[0])}")
    if fit is not None and why is None:
        return FitChoice(fit, name, f"fit: committed {name}")
    if fit is None and why is None:
        why = f"no committed fit for {_threads_text(threads)}"
    return _refit(store, threads, fit, needed, why)


def _threads_text(threads: int | None) -> str:
    return "any thread count" if threads is None else f"{threads} thread(s)"


def _refit(store, threads: int | None, committed, needed: set, why: str) -> FitChoice:
    """Refit the ``needed`` predictors from the committed runs of ``store``."""
    from perfmodel.fit.fitting import fit_predictors, fit_run_ids
    from perfmodel.store.results import data_id, measurements_of

    spec, problem = _spec(store.dir, store.device_key, threads)
    if spec is None:
        return FitChoice(None, None, f"fit: none (committed fit stale: {why})",
                         f"committed fit stale ({why}) and no device spec to refit with: "
                         f"{problem}")
    files = paths.run_files(store.dir)
    if committed is not None and committed.data_runs:
        by_id = {paths.run_id_of(p): p for p in files}
        if all(r in by_id for r in committed.data_runs):
            files = [by_id[r] for r in sorted(committed.data_runs)]
    records = measurements_of(files, store.device_key)
    runs = fit_run_ids(records, spec)
    if not runs:
        return FitChoice(None, None, f"fit: none (committed fit stale: {why})",
                         f"committed fit stale ({why}) and no committed measurements of "
                         f"{_threads_text(threads)} under {paths.runs_dir(store.dir)} to refit")
    fit = fit_predictors(records, spec, only=sorted(needed))
    fit.data_runs = tuple(runs)
    name = f"refit:{data_id(runs)}"
    return FitChoice(fit, name, f"fit: refitted from {len(runs)} committed runs "
                                f"(committed fit stale: {why})")


def _spec(folder: Path, key: str, threads: int | None):
    """The stored device spec for ``threads`` (a CPU's ``device-<N>threads.json``,
    else ``device.json`` at that thread count; a GPU's ``device.json`` or data
    sheet), and a problem line when there is none."""
    from dataclasses import replace

    from perfmodel.device.spec import DeviceSpec

    candidates = ([paths.threads_spec_file(folder, threads)] if threads is not None else [])
    candidates.append(paths.spec_file(folder))
    for path in candidates:
        if path.is_file():
            try:
                spec = DeviceSpec.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError) as exc:
                return None, f"{path}: unreadable device spec ({exc})"
            if spec.kind == "cpu" and threads is not None and spec.threads != threads:
                spec = replace(spec, threads=threads)
            return spec, None
    from perfmodel.device.datasheet import DATASHEET

    sheet = DATASHEET.get(key)
    if sheet is not None:
        return sheet.to_spec(), None
    return None, f"no {paths.spec_file(folder)} and no data sheet for {key}"


# -- the gate over a results root ----------------------------------------------------------

def replay_items(root: Path | str) -> list[tuple[str, str]]:
    """(device key, workload) of every replay case under ``root``, sorted: one
    gate item each (every device folder with cases, GPUs included)."""
    from perfmodel.replay.rerun import replay_devices

    root = Path(root)
    return [(key, workload) for key in replay_devices(root)
            for workload in paths.replay_files(paths.device_dir(root, key))]


@dataclass
class _Device:
    folder: Path
    baseline: ReplayBaseline | None = None
    baseline_problem: str | None = None
    cases: dict[str, Any] = field(default_factory=dict)  # workload -> case (readable ones)
    fits: dict[int | None, FitChoice] = field(default_factory=dict)
    tables: dict[float, Any] = field(default_factory=dict)
    replayed: list = field(default_factory=list)  # Replayed, for saving


class ReplayGate:
    """The replay gate over the cases under ``root``: :meth:`check` one case at a
    time (a pytest item each), then :meth:`finish` (save the baselines, or the
    summary and decision lines). Fits, tables and baselines are read once per
    device."""

    def __init__(self, root: Path | str, tolerance: float = DEFAULT_TOLERANCE,
                 fail_on_improvement: bool = True, bias: Mapping[str, float] | None = None,
                 save: bool = False):
        self.root = Path(root)
        self.tolerance = tolerance
        self.fail_on_improvement = fail_on_improvement
        self.bias = dict(bias or {})
        self.save = save
        self.verdicts: list[ReplayVerdict] = []
        self._devices: dict[str, _Device] = {}

    def _device(self, key: str) -> _Device:
        if key not in self._devices:
            from perfmodel.replay.case import ReplayError, load_case

            folder = paths.device_dir(self.root, key)
            dev = _Device(folder)
            for workload, path in paths.replay_files(folder).items():
                try:
                    dev.cases[workload] = load_case(path)
                except ReplayError:
                    pass  # the item of that case reports it
            if not self.save:
                try:
                    dev.baseline = load_replay_baseline(paths.replay_baseline_file(folder))
                except ValueError as exc:
                    dev.baseline_problem = str(exc)
            self._devices[key] = dev
        return self._devices[key]

    def _fit(self, dev: _Device, case) -> FitChoice:
        threads = None if case.on_device else case.threads
        if threads not in dev.fits:
            same = [c for c in dev.cases.values()
                    if (None if c.on_device else c.threads) == threads]
            dev.fits[threads] = choose_fit(dev.folder, threads, same)
        return dev.fits[threads]

    def check(self, device_key: str, workload: str) -> ReplayVerdict:
        """Replay ``workload``'s case of ``device_key`` and judge it (or, when
        saving, keep it for the baseline: status ``saved``)."""
        from perfmodel.e2e.single import shared_table
        from perfmodel.replay.case import ReplayError, load_case
        from perfmodel.replay.rerun import replay_case

        dev = self._device(device_key)
        verdict = self._check(dev, device_key, workload, load_case, ReplayError, shared_table,
                              replay_case)
        self.verdicts.append(verdict)
        return verdict

    def _check(self, dev, key, workload, load_case, ReplayError, shared_table, replay_case
               ) -> ReplayVerdict:
        common = dict(tolerance=self.tolerance)
        case = dev.cases.get(workload)
        if case is None:
            try:
                case = load_case(paths.replay_file(dev.folder, workload))
            except ReplayError as exc:
                return ReplayVerdict(key, workload, "invalid", problem=str(exc), **common)
        if dev.baseline_problem and not self.save:
            return ReplayVerdict(key, workload, "invalid", problem=dev.baseline_problem,
                                 **common)
        choice = self._fit(dev, case)
        if choice.fit is None:
            return ReplayVerdict(key, workload, "unpredicted", problem=choice.problem, **common)
        if case.bandwidth_Bps not in dev.tables:
            dev.tables[case.bandwidth_Bps], _ = shared_table(dev.folder, case.bandwidth_Bps)
        replayed = replay_case(case, choice.fit, dev.tables[case.bandwidth_Bps], choice.name,
                               bias=self.bias or None)
        if self.save:
            if replayed.problem is not None:
                return judge(key, replayed, None, self.tolerance)
            dev.replayed.append(replayed)
            return ReplayVerdict(key, workload, "saved", error=replayed.error,
                                 predicted_s=replayed.predicted_s,
                                 measured_s=replayed.measured_s, fit=replayed.fit, **common)
        entry = None if dev.baseline is None else dev.baseline.workloads.get(workload)
        return judge(key, replayed, entry, self.tolerance, self.fail_on_improvement)

    def finish(self) -> tuple[list[str], bool]:
        """The gate's lines (per device its fit and baseline, each failing or new
        case, then the decision, last) and whether it failed. When saving, write
        each device's baseline (an unwritable one fails)."""
        if not self.verdicts:
            return [], False
        lines: list[str] = []
        failed = False
        bias = (f" with planted bias {', '.join(f'{k}={v:g}' for k, v in sorted(self.bias.items()))}"
                if self.bias else "")
        for key in sorted(self._devices):
            dev = self._devices[key]
            path = paths.replay_baseline_file(dev.folder)
            fits = "; ".join(c.summary for _, c in sorted(dev.fits.items(),
                                                           key=lambda kv: (kv[0] is None, kv[0] or 0)))
            n = sum(v.device_key == key for v in self.verdicts)
            lines.append(f"replay {key}: {n} case(s){bias}; {fits or 'fit: none'}")
            if self.save:
                if dev.replayed:
                    try:
                        save_replay_baseline(path, key, dev.replayed)
                    except (OSError, ValueError) as exc:
                        failed = True
                        lines.append(f"FAIL perfmodel replay gate: cannot save the replay "
                                     f"baseline {path}: {getattr(exc, 'strerror', None) or exc}")
                        continue
                    lines.append(f"replay baseline saved to {path}: {len(dev.replayed)} "
                                 f"workload(s)")
                continue
            if dev.baseline is None and dev.baseline_problem is None:
                lines.append(f"no replay baseline at {path}; not gating. Create one with "
                             f"pytest -m replay suites/test_replay.py "
                             f"--perfmodel-save-replay-baseline")
            elif dev.baseline is not None:
                on_disk = set(paths.replay_files(dev.folder))
                for workload in sorted(set(dev.baseline.workloads) - on_disk):
                    verdict = ReplayVerdict(key, workload, "missing", self.tolerance,
                                            entry=dev.baseline.workloads[workload],
                                            problem=f"no {paths.replay_file(dev.folder, workload)}")
                    self.verdicts.append(verdict)
        if self.save:
            failed = failed or any(v.failed for v in self.verdicts)
            lines += [v.line() for v in self.verdicts if v.failed]
            return lines, failed
        lines += [v.line() for v in self.verdicts]
        bad = [v.name for v in self.verdicts if v.failed]
        if bad:
            lines.append(f"FAIL perfmodel replay gate: {len(bad)} of {len(self.verdicts)} "
                         f"case(s) failed ({', '.join(bad)})")
        else:
            new = sum(v.status == "new" for v in self.verdicts)
            extra = f", {new} new (no replay baseline entry)" if new else ""
            lines.append(f"perfmodel replay gate: pass, {len(self.verdicts) - new} case(s) "
                         f"within {self.tolerance * 100:.2f} pp of their replay "
                         f"baseline{extra}")
        return lines, bool(bad)

    # -- pytest-xdist workers ----------------------------------------------------------
    def to_plain(self) -> dict:
        """The verdicts and replays of this process, for :meth:`merge_plain`."""
        from dataclasses import asdict

        return {"verdicts": [asdict(v) for v in self.verdicts],
                "replayed": {k: [asdict(r) for r in d.replayed] for k, d in self._devices.items()},
                "fits": {k: [[t, c.name, c.summary, c.problem] for t, c in d.fits.items()]
                         for k, d in self._devices.items()}}

    def merge_plain(self, data: dict) -> None:
        """Add another process's :meth:`to_plain`."""
        from perfmodel.replay.rerun import Replayed

        for raw in data["verdicts"]:
            entry = raw.get("entry")
            self.verdicts.append(ReplayVerdict(**{**raw, "entry": None if entry is None
                                                  else ReplayEntry(**entry)}))
        for key, rows in data["replayed"].items():
            dev = self._device(key)
            known = {r.workload for r in dev.replayed}
            dev.replayed += [Replayed(**{k: v for k, v in r.items()
                                         if k in ("workload", "device_key", "predicted_s",
                                                  "measured_s", "traced_s", "fit",
                                                  "recorded_predicted_s", "problem")})
                             for r in rows if r["workload"] not in known]
        for key, rows in data["fits"].items():
            dev = self._device(key)
            for threads, name, summary, problem in rows:
                dev.fits.setdefault(threads, FitChoice(None, name, summary, problem))
