"""The CI gate: compare each workload's E2E prediction error with a noise-aware baseline.

Errors are signed fractions, (predicted - measured) / measured (0.05 = 5% over).
The baseline keeps, per workload, the signed errors of ``n`` repeated runs of
unchanged code, their mean and their sample standard deviation (the spread). A
new error fails when its magnitude exceeds

    allowed = |mean| + max(k * spread * b(n), min_margin)

so a noisy workload gets room in proportion to its measured noise, and a quiet one
still gets ``min_margin`` (one percentage point by default) rather than none.
``b(n)`` (:func:`spread_bound`) takes the spread of ``n`` runs to the upper
one-sided ``spread_confidence`` bound (95% by default) of the true spread: five
runs' sample spread is below the true one six times in ten and often far below
(with 95% confidence the true one is up to 2.37 times it), and ``k`` times an
underestimate is no floor. With many runs ``b(n)`` tends to 1 (1.37 at 20 runs).
Every spread below (predictions, host-overhead ratios) gets the same bound for
its own number of runs.

That check is bounded by how much the *measured* time moves between runs. A change
of the model shows much more sharply in the *predicted* time, which moves only with
the traced overheads, several times less (measured: see
docs/journal/2026-11-22-gate-on-cpu-amd-epyc-2c.md). So
the baseline also keeps each run's predicted seconds, and a workload ``drifted``
(fails) when its prediction moved from the baseline's mean prediction by more than

    allowed drift = max(k * relative spread of the baseline's predictions, min_margin)

in the direction that makes its expected error, (1 + mean)(1 + shift) - 1, larger
in magnitude than the baseline mean by more than ``min_margin``. A shift that makes
the prediction better passes. A multi-rank prediction follows the host's speed
(:class:`perfmodel.measure.drift.HostDrift`); its drift is checked on the prediction at
the fit's host speed (:attr:`perfmodel.e2e.result.MeasuredIteration.model_predicted_s`), which
moves with the model and with the contention the ranks measure in each run
(:mod:`perfmodel.measure.contention`: a run whose ranks did not slow each other's
memory prices a multi-rank workload lower; see
docs/journal/2026-11-26-multi-rank-time-sharing.md), so build its baseline over
runs of several sessions.

The spread is taken over the signed errors because a workload predicted close to
its measured time has errors of both signs: the spread of their magnitudes would
understate its noise (an example: docs/journal/2026-11-27-figures-from-docstrings.md).
An optional absolute ceiling per workload fails regardless of the baseline.

Host overheads are a few per cent of an iteration on a CPU, and the overhead table
is re-measured by every run, which moves its predicted seconds from run to run,
so a 10% error in the overhead model moves no prediction far enough for either
check. The gate checks that model on its own instead: the ratio of the
host-overhead seconds it predicts to those the same run's traces show
(:func:`perfmodel.trace.overheads.traced_gaps_s`), summed over the workloads, against the
same ratio in each baseline run. Both sides move with the machine's speed, so the
ratio moves much less than either (measured: see
docs/journal/2026-11-22-gate-on-cpu-amd-epyc-2c.md). It fails when it leaves its
baseline mean by more than max(k * relative spread, min_margin).

A measurement can fail the error check on its own, when load slows it down as a
whole; :func:`error_fails` tells the caller to measure once more, and the repeat
decides (:func:`perfmodel.e2e.single.measure_again`).

The baseline file (``results/<device-key>/baseline-<profile>.json``, schema 2) is plain JSON::

    {"schema": 2, "device_key": "cpu-...", "created_unix_s": 1.7e9, "env": {...},
     "workloads": {"mlp_small": {"mean": -0.01, "spread": 0.04, "n": 5,
                                 "errors": [-0.05, 0.03, ...],
                                 "predicted_s": [0.0285, 0.0286, ...],
                                 "overhead_s": [[0.0009, 0.0011], ...]}}}

``predicted_s`` (seconds, one per error) is optional: baselines without it get the
error check only. So is ``overhead_s``: per run, the predicted and the traced
host-overhead seconds; the i-th pairs of every workload are taken as one run.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel.plaindata import write_json_atomic
from perfmodel.store.results import run_start_s

BASELINE_SCHEMA = 2
DEFAULT_SPREAD_K = 3.0
#: One-sided confidence that the spread the gate multiplies by ``k`` is not below
#: the true spread of what it was measured over (:func:`spread_bound`).
DEFAULT_SPREAD_CONFIDENCE = 0.95
DEFAULT_MIN_MARGIN = 0.01
#: Environment keys whose change between baseline and run is worth a warning.
WARN_ENV_KEYS = ("torch", "fbgemm", "python")
#: Relative and absolute slack when checking a stored mean/spread against its errors.
_CONSISTENCY_REL = 1e-9
_CONSISTENCY_ABS = 1e-12

_TOP_KEYS = ("schema", "device_key", "created_unix_s", "env", "workloads")
_OPTIONAL_TOP_KEYS = ("fit_data", "built")
#: Span of separate sessions a baseline's spread should cover to set the gate's
#: allowance at the floor between sessions (s): a shared VM's slow and fast spells
#: last hours, so repeats inside one session, or sessions minutes apart, agree more
#: closely than the next session will.
FLOOR_SPAN_S = 4 * 3600.0
_ENTRY_KEYS = ("mean", "spread", "n", "errors")
_OPTIONAL_ENTRY_KEYS = ("predicted_s", "overhead_s", "fit_data")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_error_value(value: object, what: str) -> float:
    """``value`` as a float when it is a finite, non-negative number; ValueError otherwise."""
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} = {value!r} is not a finite, non-negative fraction")
    return float(value)


def _check_seconds(value: object, what: str) -> float:
    """``value`` as a float when it is a finite, positive number of seconds."""
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} = {value!r} is not a positive, finite number of seconds")
    return float(value)


def _check_overhead_pair(value: object, what: str) -> tuple[float, float]:
    """A (predicted, traced) pair of host-overhead seconds, both >= 0."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(_is_number(v) and math.isfinite(v) and v >= 0 for v in value)):
        raise ValueError(f"{what} = {value!r} is not a [predicted, traced] pair of "
                         f"non-negative seconds")
    return float(value[0]), float(value[1])


def _check_signed_error(value: object, what: str) -> float:
    """``value`` as a float when it is a finite number; ValueError otherwise."""
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{what} = {value!r} is not a finite fraction")
    return float(value)


# -- the baseline ------------------------------------------------------------------------
@dataclass(frozen=True)
class BaselineEntry:
    """One workload's signed E2E errors over ``n`` repeated runs (fractions).

    ``mean`` is their mean and ``spread`` their sample standard deviation
    (0 when ``n == 1``); ``predicted_s`` the same runs' predicted iteration times
    (seconds), or empty when not recorded; ``overhead_s`` the same runs' (predicted,
    traced) host-overhead seconds, or empty; ``fit_data`` the training-data id of
    the fit those runs predicted with (:attr:`perfmodel.fit.fitting.FitReport.data_id`),
    None when unknown or when they used several.
    """

    mean: float
    spread: float
    n: int
    errors: tuple[float, ...]
    predicted_s: tuple[float, ...] = ()
    overhead_s: tuple[tuple[float, float], ...] = ()
    fit_data: str | None = None

    @classmethod
    def from_errors(cls, errors: Iterable[float], predicted_s: Iterable[float] = (),
                    overhead_s: Iterable[Sequence[float]] = (),
                    fit_data: str | None = None) -> BaselineEntry:
        """The entry summarising signed ``errors`` (and their runs' ``predicted_s``
        and ``overhead_s`` pairs, predicted with the fit of ``fit_data``);
        ValueError when empty, not finite, or the lengths differ."""
        values = tuple(_check_signed_error(e, f"errors[{i}]") for i, e in enumerate(errors))
        if not values:
            raise ValueError("a baseline entry needs at least one E2E error; got none")
        predicted = tuple(_check_seconds(p, f"predicted_s[{i}]")
                          for i, p in enumerate(predicted_s))
        if predicted and len(predicted) != len(values):
            raise ValueError(f"{len(predicted)} predicted time(s) for {len(values)} error(s)")
        overhead = tuple(_check_overhead_pair(p, f"overhead_s[{i}]")
                         for i, p in enumerate(overhead_s))
        if overhead and len(overhead) != len(values):
            raise ValueError(f"{len(overhead)} overhead pair(s) for {len(values)} error(s)")
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(float(statistics.mean(values)), float(spread), len(values), values,
                   predicted, overhead, fit_data or None)

    @property
    def predicted_mean_s(self) -> float | None:
        """Mean predicted iteration time (s), None when not recorded."""
        return statistics.mean(self.predicted_s) if self.predicted_s else None

    @property
    def predicted_spread(self) -> float | None:
        """Sample sd of the predicted times relative to their mean (a fraction);
        None when not recorded, 0 for one run."""
        if not self.predicted_s:
            return None
        if len(self.predicted_s) == 1:
            return 0.0
        return statistics.stdev(self.predicted_s) / statistics.mean(self.predicted_s)

    @property
    def measured_s(self) -> tuple[float, ...]:
        """The runs' measured iteration times (s), from each predicted time and
        its signed error; empty when predictions were not recorded."""
        return tuple(p / (1 + e) for p, e in zip(self.predicted_s, self.errors))

    @property
    def noise_floor(self) -> float | None:
        """The E2E error floor of these runs (a fraction): the mean of
        |measured - median measured| / measured over them, the error that the best
        prediction fixed in hindsight (their median) would have shown. No
        prediction can be expected to beat it on this host. None with fewer
        than 2 runs or no recorded predictions."""
        measured = self.measured_s
        if len(measured) < 2:
            return None
        median = statistics.median(measured)
        return statistics.mean(abs(m - median) / m for m in measured)

    def to_dict(self) -> dict:
        """JSON-safe form, as stored under ``workloads`` in the baseline file."""
        out = {"mean": self.mean, "spread": self.spread, "n": self.n,
               "errors": list(self.errors)}
        if self.predicted_s:
            out["predicted_s"] = list(self.predicted_s)
        if self.overhead_s:
            out["overhead_s"] = [list(p) for p in self.overhead_s]
        if self.fit_data:
            out["fit_data"] = self.fit_data
        return out


@dataclass(frozen=True)
class Baseline:
    """Per-workload E2E error statistics recorded on one device."""

    device_key: str
    entries: dict[str, BaselineEntry]
    env: dict
    created_unix_s: float | None = None
    #: :attr:`perfmodel.fit.fitting.FitReport.data_id` of the fit its runs predicted with,
    #: for entries that do not name their own (baselines saved before entries did)
    fit_data: str | None = None
    #: How it was built (:func:`built_from_repeats`, :func:`built_from_sessions`);
    #: None for baselines saved before it was recorded
    built: dict | None = None

    def floor_note(self) -> str | None:
        """One line (under 100 columns) saying why this baseline cannot set the
        gate's allowance at the floor between sessions: built from repeats inside
        one session, from sessions less than :data:`FLOOR_SPAN_S` apart, or not
        recorded. None when it can. docs/gate.md says how to build one that can."""
        how = (self.built or {}).get("from")
        if how == "repeats":
            return (f"note: the baseline is {self.built.get('runs', '?')} repeats in one "
                    f"session: narrower than the floor between sessions")
        if how == "sessions":
            span = float(self.built.get("span_s", 0.0))
            if span < FLOOR_SPAN_S:
                return (f"note: the baseline's {len(self.built.get('runs', []))} sessions span "
                        f"{span / 3600:.1f} h (< {FLOOR_SPAN_S / 3600:.0f} h): it may be "
                        f"narrower than the floor")
            return None
        return "note: the baseline does not record how it was built (see docs/gate.md)"

    def fit_data_for(self, workload: str) -> str | None:
        """The training-data id ``workload``'s runs predicted with: its entry's,
        else the baseline's; None when unknown."""
        entry = self.entries.get(workload)
        return (entry.fit_data if entry is not None else None) or self.fit_data


def save_baseline(path: Path, device_key: str,
                  errors_by_workload: Mapping[str, Sequence[float]], env: dict,
                  created_unix_s: float | None = None,
                  predicted_by_workload: Mapping[str, Sequence[float]] | None = None,
                  fit_data: str | Mapping[str, str | None] | None = None,
                  overhead_by_workload: Mapping[str, Sequence[Sequence[float]]] | None = None,
                  built: Mapping | None = None) -> Baseline:
    """Write a schema-2 baseline from each workload's repeated E2E errors (fractions)
    and, when given, the same runs' predicted times (seconds), their (predicted,
    traced) host-overhead seconds, and the id of the fit's training data they were
    predicted with (``fit_data``: one id for every workload, or one per workload, as
    a multi-rank workload is predicted with its ranks' fit and a single-rank one
    with the session's), and how the runs were taken (``built``: see
    :func:`built_from_repeats`, :func:`built_from_sessions`).

    The write is atomic; ``created_unix_s`` defaults to now. Returns what was written.
    ValueError when a workload has no errors or a bad one.
    """
    entries = {}
    predicted = predicted_by_workload or {}
    overhead = overhead_by_workload or {}
    fits = _per_workload(fit_data, errors_by_workload)
    for workload, errors in sorted(errors_by_workload.items()):
        try:
            entries[workload] = BaselineEntry.from_errors(errors, predicted.get(workload, ()),
                                                          overhead.get(workload, ()),
                                                          fits.get(workload))
        except ValueError as exc:
            raise ValueError(f"{path}: workload {workload!r}: {exc}") from None
    created = time.time() if created_unix_s is None else float(created_unix_s)
    data = {"schema": BASELINE_SCHEMA, "device_key": device_key, "created_unix_s": created,
            "env": dict(env), "workloads": {w: e.to_dict() for w, e in entries.items()}}
    if built is not None:
        data["built"] = dict(built)
    write_json_atomic(path, data)
    return Baseline(device_key, entries, dict(env), created,
                    built=None if built is None else dict(built))


def built_from_repeats(runs: int, run_id: str | None) -> dict:
    """``built`` of a baseline from ``runs`` repeats inside the session ``run_id``."""
    return {"from": "repeats", "runs": int(runs), "run_id": run_id}


def built_from_sessions(run_ids: Sequence[str]) -> dict:
    """``built`` of a baseline from the separate sessions ``run_ids`` (time-ordered
    run ids, ``<UTC yyyymmddThhmmssZ>-...``): their ids and the span between the
    first and the last one's start (s)."""
    starts = [s for s in map(run_start_s, run_ids) if s is not None]
    span = float(max(starts) - min(starts)) if len(starts) >= 2 else 0.0
    return {"from": "sessions", "runs": sorted(run_ids), "span_s": span}


def _per_workload(fit_data: str | Mapping[str, str | None] | None,
                  workloads: Iterable[str]) -> Mapping[str, str | None]:
    """``fit_data`` as one fit id per workload: a mapping as it is, one id (or
    None) for each of ``workloads``."""
    return fit_data if isinstance(fit_data, Mapping) else {w: fit_data for w in workloads}


@dataclass
class BaselineRuns:
    """What a baseline is saved from, per workload and in run order: signed E2E
    errors, predicted times (s), (predicted, traced) host-overhead seconds (only for
    workloads whose every run has them), and the set of fit data ids its records
    carry (None for records without one); the workloads left out for having
    fewer runs, and the environment of the newest chosen run."""

    errors: dict[str, list[float]] = field(default_factory=dict)
    predicted_s: dict[str, list[float]] = field(default_factory=dict)
    overhead_s: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    fits: dict[str, set] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    #: every run id chosen, for any workload, sorted
    run_ids: list[str] = field(default_factory=list)
    #: per workload, the ids of its chosen runs in the order of its errors
    workload_run_ids: dict[str, list[str]] = field(default_factory=dict)


def baseline_errors(records: Iterable[Mapping], profile: str, last_runs: int) -> BaselineRuns:
    """The :class:`BaselineRuns` of each workload's newest ``last_runs`` runs of
    ``profile`` (store records, see :meth:`perfmodel.store.results.ResultStore.load`; one
    record per run: the last). Records with a planted bias are left out, and so are
    workloads with fewer runs (a multi-rank workload run once would get a spread of
    zero). A record's predicted time is the one the drift check compares: at the
    fit's host speed where it has one (``predicted_fit_speed_s``, multi-rank runs;
    see :attr:`perfmodel.e2e.result.MeasuredIteration.model_predicted_s`). ValueError when no
    workload has ``last_runs`` runs."""
    by_workload: dict[str, dict[str, Mapping]] = {}
    for r in records:
        if r.get("kind") == "e2e" and r.get("profile") == profile and not r.get("bias"):
            by_workload.setdefault(r["workload"], {})[str(r.get("run_id"))] = r
    if last_runs < 1:
        raise ValueError(f"need at least 1 run, got {last_runs}")
    out = BaselineRuns()
    newest = ""
    for workload, runs in sorted(by_workload.items()):
        if len(runs) < last_runs:
            out.left_out.append(workload)
            continue
        ids = sorted(runs)[-last_runs:]  # ids start with UTC time
        chosen = [runs[run] for run in ids]
        out.run_ids = sorted(set(out.run_ids) | set(ids))
        out.workload_run_ids[workload] = list(ids)
        if ids[-1] > newest:
            newest, out.env = ids[-1], runs[ids[-1]].get("env") or {}
        for r in chosen:
            measured = r["measured_s"]
            out.errors.setdefault(workload, []).append((r["predicted_s"] - measured) / measured)
            at_fit_speed = r.get("predicted_fit_speed_s")
            out.predicted_s.setdefault(workload, []).append(
                r["predicted_s"] if at_fit_speed is None else at_fit_speed)
            out.fits.setdefault(workload, set()).add(r.get("fit_data"))
        if all(r.get("traced_gaps_s") is not None for r in chosen):
            out.overhead_s[workload] = [
                ((r.get("breakdown_s") or {}).get("host overhead", 0.0), r["traced_gaps_s"])
                for r in chosen]
    if not out.errors:
        most = max((len(runs) for runs in by_workload.values()), default=0)
        raise ValueError(f"need {last_runs} run(s) of profile {profile!r} with e2e results "
                         f"and no planted bias; the most any workload has is {most}")
    return out


def load_baseline(path: Path) -> Baseline | None:
    """The baseline at ``path``; None when there is none.

    Plain JSON only. ValueError naming ``path`` and the offending key and value when
    the file is unreadable, of another schema, or holds a bad or inconsistent value.
    """
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"),
                          parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: baseline is not readable JSON ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: baseline is not plain JSON ({exc})") from None
    try:
        return _baseline_from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _baseline_from_dict(data: object) -> Baseline:
    if not isinstance(data, dict):
        raise ValueError(f"not a perfmodel baseline: top level is a JSON "
                         f"{type(data).__name__}, not an object")
    schema = data.get("schema")
    if schema == 1:
        raise ValueError("old baseline (schema 1, one error per workload); re-save it "
                         "with --perfmodel-save-baseline to record repeated runs (schema 2)")
    if schema != BASELINE_SCHEMA:
        raise ValueError(f"'schema' = {schema!r}: not a perfmodel baseline of schema "
                         f"{BASELINE_SCHEMA}")
    _exact_keys(data, _TOP_KEYS, "baseline", optional=_OPTIONAL_TOP_KEYS)
    fit_data = data.get("fit_data")
    if fit_data is not None and (not isinstance(fit_data, str) or not fit_data):
        raise ValueError(f"'fit_data' = {fit_data!r} is not a non-empty string")
    device_key = data["device_key"]
    if not isinstance(device_key, str) or not device_key:
        raise ValueError(f"'device_key' = {device_key!r} is not a non-empty string")
    created = data["created_unix_s"]
    if not _is_number(created) or not math.isfinite(created) or created < 0:
        raise ValueError(f"'created_unix_s' = {created!r} is not a non-negative number "
                         f"of seconds")
    if not isinstance(data["env"], dict):
        raise ValueError(f"'env' = {data['env']!r} is not an object")
    workloads = data["workloads"]
    if not isinstance(workloads, dict):
        raise ValueError(f"'workloads' = {workloads!r} is not an object")
    entries = {name: _entry_from_dict(name, raw) for name, raw in workloads.items()}
    built = data.get("built")
    if built is not None:
        if not isinstance(built, dict) or built.get("from") not in ("repeats", "sessions"):
            raise ValueError(f"'built' = {built!r} is not an object with 'from' "
                             f"\"repeats\" or \"sessions\"")
        if built["from"] == "sessions" and not (
                isinstance(built.get("runs"), list) and _is_number(built.get("span_s"))
                and math.isfinite(built["span_s"]) and built["span_s"] >= 0):
            raise ValueError(f"'built' = {built!r} lacks its list of 'runs' or a "
                             f"non-negative 'span_s'")
    return Baseline(device_key, entries, data["env"], float(created), fit_data, built)


def _exact_keys(d: dict, keys: tuple[str, ...], what: str,
                optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise ValueError(f"{what} lacks key(s) {', '.join(map(repr, missing))}")
    unknown = sorted(set(d) - set(keys) - set(optional))
    if unknown:
        raise ValueError(f"{what} has unknown key(s) {', '.join(map(repr, unknown))}")


def _entry_from_dict(name: str, raw: object) -> BaselineEntry:
    where = f"workloads.{name}"
    if not isinstance(raw, dict):
        raise ValueError(f"'{where}' = {raw!r} is not an object")
    _exact_keys(raw, _ENTRY_KEYS, f"'{where}'", optional=_OPTIONAL_ENTRY_KEYS)
    errors = raw["errors"]
    if not isinstance(errors, list) or not errors:
        raise ValueError(f"'{where}.errors' = {errors!r} is not a non-empty list")
    values = tuple(_check_signed_error(e, f"'{where}.errors[{i}]'")
                   for i, e in enumerate(errors))
    n = raw["n"]
    if not isinstance(n, int) or isinstance(n, bool) or n != len(values):
        raise ValueError(f"'{where}.n' = {n!r} does not match the {len(values)} "
                         f"error(s) in '{where}.errors'")
    mean = _check_signed_error(raw["mean"], f"'{where}.mean'")
    spread = _check_error_value(raw["spread"], f"'{where}.spread'")
    expected = BaselineEntry.from_errors(values)
    for key, stored, derived in (("mean", mean, expected.mean),
                                 ("spread", spread, expected.spread)):
        if not math.isclose(stored, derived, rel_tol=_CONSISTENCY_REL,
                            abs_tol=_CONSISTENCY_ABS):
            raise ValueError(f"'{where}.{key}' = {stored!r} does not match the {key} of "
                             f"'{where}.errors' ({derived!r})")
    predicted = _per_run(raw, "predicted_s", n, where, "predicted time(s)", _check_seconds)
    overhead = _per_run(raw, "overhead_s", n, where, "[predicted, traced] pair(s)",
                        _check_overhead_pair)
    fit_data = raw.get("fit_data")
    if fit_data is not None and (not isinstance(fit_data, str) or not fit_data):
        raise ValueError(f"'{where}.fit_data' = {fit_data!r} is not a non-empty string")
    return BaselineEntry(mean, spread, n, values, predicted, overhead, fit_data)


def _per_run(raw: dict, key: str, n: int, where: str, what: str, check) -> tuple:
    """The optional per-run list ``raw[key]`` (empty when absent), each value passed
    through ``check(value, name)``; ValueError unless it holds ``n`` values."""
    values = raw.get(key, [])
    if not isinstance(values, list) or (values and len(values) != n):
        raise ValueError(f"'{where}.{key}' = {values!r} is not a list of {n} {what}")
    return tuple(check(v, f"'{where}.{key}[{i}]'") for i, v in enumerate(values))


# -- verdicts ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def spread_bound(n: int, confidence: float = DEFAULT_SPREAD_CONFIDENCE) -> float:
    """The factor taking the sample standard deviation of ``n`` values to the upper
    one-sided ``confidence`` bound of their true standard deviation (normal
    values): ``sqrt((n - 1) / chi2_{1 - confidence}(n - 1))``. 1 when
    ``confidence`` is 0 (the sample spread as it is) or ``n < 2``."""
    if confidence <= 0 or n < 2:
        return 1.0
    from scipy.stats import chi2

    return math.sqrt((n - 1) / float(chi2.ppf(1.0 - confidence, n - 1)))


@dataclass(frozen=True)
class GatePolicy:
    """How far an E2E error's magnitude (a fraction) may exceed its baseline's.

    ``k`` multiplies the baseline spread, taken at its upper one-sided
    ``spread_confidence`` bound for the number of runs it came from
    (:func:`spread_bound`; 0: as measured); ``min_margin`` is the least allowed
    growth (0.01 = one percentage point); ``ceilings`` maps a workload to an
    absolute error it must never exceed, baseline or not.
    """

    k: float = DEFAULT_SPREAD_K
    min_margin: float = DEFAULT_MIN_MARGIN
    ceilings: dict[str, float] = field(default_factory=dict)
    spread_confidence: float = DEFAULT_SPREAD_CONFIDENCE

    def __post_init__(self) -> None:
        if not _is_number(self.k) or not math.isfinite(self.k) or self.k <= 0:
            raise ValueError(f"GatePolicy k = {self.k!r} is not a positive number")
        if not _is_number(self.spread_confidence) or not 0 <= self.spread_confidence < 1:
            raise ValueError(f"GatePolicy spread_confidence = {self.spread_confidence!r} is "
                             f"not a fraction in [0, 1)")
        _check_error_value(self.min_margin, "GatePolicy min_margin")
        for workload, ceiling in self.ceilings.items():
            if not _is_number(ceiling) or not math.isfinite(ceiling) or ceiling <= 0:
                raise ValueError(f"GatePolicy ceilings[{workload!r}] = {ceiling!r} is not "
                                 f"a positive fraction")

    def bound(self, n: int) -> float:
        """:func:`spread_bound` of ``n`` runs at this policy's confidence."""
        return spread_bound(n, self.spread_confidence)

    def allowed(self, entry: BaselineEntry) -> float:
        """The largest E2E error magnitude (fraction) that passes against ``entry``."""
        return abs(entry.mean) + max(self.k * entry.spread * self.bound(entry.n),
                                     self.min_margin)

    def allowed_drift(self, entry: BaselineEntry) -> float | None:
        """The largest relative move of the predicted time from ``entry``'s mean
        prediction that passes (a fraction); None when ``entry`` has no predictions."""
        if entry.predicted_spread is None:
            return None
        return max(self.k * entry.predicted_spread * self.bound(len(entry.predicted_s)),
                   self.min_margin)


@dataclass(frozen=True)
class HeldOutRuns:
    """A leave-one-run-out check of one workload's baseline: run ``i`` judged by
    the gate against the entry built from the other runs. ``allowed[i]`` is that
    entry's allowed |error| and ``statuses[i]`` the :class:`Verdict` status run
    ``i`` gets: its error checked, and its predicted time too where the entry
    has one fit for all its runs (the drift check, as a gate on that fit runs it).
    The share of runs not ``ok`` estimates how often the entry of all the runs
    fails a new run of unchanged code; a little high, as each has one run fewer."""

    workload: str
    run_ids: tuple[str, ...]
    errors: tuple[float, ...]
    allowed: tuple[float, ...]
    statuses: tuple[str, ...]

    @property
    def margins(self) -> tuple[float, ...]:
        """Each run's allowed |error| less its |error| (negative: outside the band)."""
        return tuple(a - abs(e) for a, e in zip(self.allowed, self.errors))

    @property
    def outside(self) -> tuple[int, ...]:
        """The indices of the runs the gate fails against the others."""
        return tuple(i for i, status in enumerate(self.statuses) if status != "ok")

    @property
    def tightest(self) -> int:
        """The index of the run with the smallest error margin."""
        margins = self.margins
        return min(range(len(margins)), key=margins.__getitem__)


def held_out_runs(workload: str, entry: BaselineEntry, policy: GatePolicy,
                  run_ids: Sequence[str] = ()) -> HeldOutRuns | None:
    """The :class:`HeldOutRuns` of ``entry``'s runs under ``policy`` (``run_ids``:
    the runs' ids in the order of ``entry.errors``; else they are numbered). None
    with fewer than 3 runs: the others need two for a spread."""
    if entry.n < 3:
        return None
    errors, predicted = entry.errors, entry.predicted_s
    allowed, statuses = [], []
    for i in range(entry.n):
        others = BaselineEntry.from_errors(
            errors[:i] + errors[i + 1:], predicted[:i] + predicted[i + 1:],
            fit_data=entry.fit_data)
        allowed.append(policy.allowed(others))
        own = predicted[i] if predicted and entry.fit_data else None
        statuses.append(_judge(workload, errors[i], others, policy, predicted_s=own).status)
    ids = tuple(run_ids) if len(run_ids) == entry.n else \
        tuple(f"run {i + 1}" for i in range(entry.n))
    return HeldOutRuns(workload, ids, errors, tuple(allowed), tuple(statuses))


@dataclass(frozen=True)
class Verdict:
    """The gate's decision for one workload (all errors are fractions).

    ``status`` is one of ``ok``, ``regressed`` (error magnitude above the allowed
    one), ``drifted`` (the prediction moved beyond the allowed drift, making the
    expected error worse), ``over_ceiling`` (magnitude above the workload's ceiling;
    checked first), ``new`` (no baseline entry), ``missing`` (in the baseline and
    expected, but no error) or ``invalid`` (the error is not a finite number).
    ``shift`` is the prediction's relative move from the baseline's mean prediction.
    """

    workload: str
    status: str
    error: float | None
    entry: BaselineEntry | None
    policy: GatePolicy
    shift: float | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("regressed", "drifted", "over_ceiling", "missing", "invalid")

    @property
    def expected_error(self) -> float | None:
        """The error the baseline's runs would have had with this prediction:
        (1 + mean)(1 + shift) - 1; None without a shift."""
        if self.shift is None or self.entry is None:
            return None
        return (1 + self.entry.mean) * (1 + self.shift) - 1

    @property
    def allowed(self) -> float | None:
        """Largest passing error against the baseline, None without an entry."""
        return None if self.entry is None else self.policy.allowed(self.entry)

    @property
    def ceiling(self) -> float | None:
        return self.policy.ceilings.get(self.workload)

    def line(self) -> str:
        """One human-readable line; failing ones start with ``FAIL``."""
        w = self.workload
        if self.status == "missing":
            return f"FAIL {w}: in the baseline but produced no E2E result"
        if self.status == "invalid":
            return f"FAIL {w}: E2E error {self.error!r} is not a finite fraction"
        if self.status == "over_ceiling":
            return (f"FAIL {w}: E2E error {self.error:+.2%} exceeds the ceiling "
                    f"{self.ceiling:.2%} set in pyproject.toml")
        if self.status == "drifted":
            return (f"FAIL {w}: prediction moved {self.shift:+.2%} from the baseline's "
                    f"(allowed ±{self.policy.allowed_drift(self.entry):.2%}); expected error "
                    f"{self.expected_error:+.2%} against baseline {self.entry.mean:+.2%}")
        if self.status == "new":
            return (f"NEW  {w}: E2E error {self.error:+.2%} (no baseline entry; save one "
                    f"with --perfmodel-save-baseline)")
        verb, relation = ("FAIL", "outside") if self.failed else ("ok  ", "within")
        return (f"{verb} {w}: E2E error {self.error:+.2%} {relation} baseline "
                f"{self.entry.mean:+.2%} ± {self._margin_text()} (allowed |error| ≤ "
                f"{self.allowed:.2%})")

    def _margin_text(self) -> str:
        k, spread, n = self.policy.k, self.entry.spread, self.entry.n
        bound = self.policy.bound(n)
        if k * spread * bound >= self.policy.min_margin:
            if bound == 1.0:
                return f"{_k_text(k)}×spread {spread:.2%}"
            return f"{_k_text(k)}×spread {spread:.2%}×{bound:.2f} ({n} runs)"
        return f"minimum margin {self.policy.min_margin:.2%}"


def _k_text(k: float) -> str:
    """``3`` -> ``3.0``, ``2.5`` -> ``2.5``: a multiplier that reads as one."""
    text = f"{k:g}"
    return text if any(c in text for c in ".e") else text + ".0"


@dataclass(frozen=True)
class OverheadVerdict:
    """The host-overhead model's check: predicted over traced host-overhead seconds,
    summed over ``workloads``, in this run (``ratio``) and in each baseline run
    (``baseline_ratios``)."""

    workloads: tuple[str, ...]
    ratio: float
    baseline_ratios: tuple[float, ...]
    policy: GatePolicy

    @property
    def mean(self) -> float:
        return statistics.mean(self.baseline_ratios)

    @property
    def spread(self) -> float:
        """Sample sd of the baseline's ratios relative to their mean (a fraction)."""
        return statistics.stdev(self.baseline_ratios) / self.mean

    @property
    def shift(self) -> float:
        """This run's ratio relative to the baseline's mean, minus 1 (a fraction)."""
        return self.ratio / self.mean - 1

    @property
    def allowed(self) -> float:
        """The largest passing |shift| (a fraction)."""
        return max(self.policy.k * self.spread * self.policy.bound(len(self.baseline_ratios)),
                   self.policy.min_margin)

    @property
    def failed(self) -> bool:
        return abs(self.shift) > self.allowed

    def line(self) -> str:
        verb = "FAIL" if self.failed else "ok  "
        return (f"{verb} host-overhead model: predicts {self.ratio:.3f}x the traced host "
                f"overheads of {len(self.workloads)} workload(s), baseline {self.mean:.3f}x: "
                f"{self.shift:+.2%} (allowed ±{self.allowed:.2%})")


def overhead_ratios(baseline: Baseline, workloads: Sequence[str]) -> list[float]:
    """Per baseline run, predicted over traced host-overhead seconds summed over
    ``workloads`` (which must all have ``overhead_s``): the newest ``m`` pairs of
    each, ``m`` the fewest any of them has, the i-th pairs making one run. Runs
    with no traced or no predicted seconds are left out."""
    entries = [baseline.entries[w] for w in workloads]
    runs = min((len(e.overhead_s) for e in entries), default=0)
    ratios = []
    for i in range(-runs, 0):
        predicted = sum(e.overhead_s[i][0] for e in entries)
        traced = sum(e.overhead_s[i][1] for e in entries)
        if traced > 0 and predicted > 0:
            ratios.append(predicted / traced)
    return ratios


def overhead_check(overhead_s: Mapping[str, Sequence[float]], baseline: Baseline,
                   policy: GatePolicy) -> OverheadVerdict | None:
    """Judge this run's (predicted, traced) host-overhead seconds per workload
    against the baseline runs' pairs of the same workloads (:func:`overhead_ratios`).
    None when fewer than two baseline runs or no traced overhead can be compared."""
    pairs = {w: _check_overhead_pair(p, f"overhead_s[{w!r}]") for w, p in overhead_s.items()}
    common = tuple(sorted(w for w in pairs if w in baseline.entries
                          and baseline.entries[w].overhead_s))
    if not common:
        return None
    ratios = overhead_ratios(baseline, common)
    traced = sum(pairs[w][1] for w in common)
    if len(ratios) < 2 or traced <= 0:
        return None
    return OverheadVerdict(common, sum(pairs[w][0] for w in common) / traced,
                           tuple(ratios), policy)


@dataclass(frozen=True)
class GateReport:
    """Verdicts sorted by workload, the host-overhead model's verdict (None when not
    checked), plus ``WARN`` (and ``note``) lines about the comparison itself."""

    verdicts: list[Verdict]
    warnings: list[str]
    overhead: OverheadVerdict | None = None

    @property
    def failed(self) -> bool:
        return (any(v.failed for v in self.verdicts)
                or (self.overhead is not None and self.overhead.failed))

    def lines(self) -> list[str]:
        """Warnings first, then one line per verdict, then the overhead model's."""
        tail = [self.overhead.line()] if self.overhead is not None else []
        return [*self.warnings, *(v.line() for v in self.verdicts), *tail]


def check_errors(errors: Mapping[str, float], baseline: Baseline, policy: GatePolicy,
                 expected: Iterable[str] = (), device_key: str | None = None,
                 env: Mapping | None = None,
                 predicted_s: Mapping[str, float] | None = None,
                 fit_data: str | Mapping[str, str | None] | None = None,
                 overhead_s: Mapping[str, Sequence[float]] | None = None) -> GateReport:
    """Judge each workload's signed E2E error (fraction) against ``baseline`` under
    ``policy``, and, where ``predicted_s`` (seconds) and the baseline's predictions
    are both there and the workload was predicted with a fit trained on the same
    measurements as its baseline runs (``fit_data``, one id or one per workload,
    equals :meth:`Baseline.fit_data_for`), its prediction's drift: a fit on other
    data moves predictions by itself, and that is for the error check to judge.
    ``overhead_s`` (workload -> (predicted, traced) host-overhead seconds) feeds the
    overhead model's check (:func:`overhead_check`).

    Workloads in ``expected`` that the baseline has but ``errors`` lacks are reported
    ``missing``; baseline workloads not expected (deselected) are not reported.
    ``device_key`` and ``env`` describe this run; differences from the baseline's
    become warnings, not failures.
    """
    notes = []
    fits = _per_workload(fit_data, errors)
    predicted_s = predicted_s or {}
    unchecked = sorted(w for w in predicted_s
                       if not fits.get(w) or fits.get(w) != baseline.fit_data_for(w))
    if any(baseline.entries[w].predicted_s for w in unchecked if w in baseline.entries):
        notes.append(f"note: prediction drift not checked for {', '.join(unchecked)}: "
                     f"predicted with a fit trained on other measurements than the "
                     f"baseline's (re-save the baseline to check it)")
    predicted_s = {w: p for w, p in predicted_s.items() if w not in unchecked}
    verdicts = [_judge(w, e, baseline.entries.get(w), policy, predicted_s.get(w))
                for w, e in errors.items()]
    verdicts += [Verdict(w, "missing", None, baseline.entries[w], policy)
                 for w in set(expected) if w in baseline.entries and w not in errors]
    verdicts.sort(key=lambda v: v.workload)
    overhead = overhead_check(overhead_s, baseline, policy) if overhead_s else None
    if overhead_s and overhead is None:
        notes.append("note: host-overhead model not checked: the baseline has fewer than "
                     "two runs with traced overheads of these workloads (re-save it)")
    return GateReport(verdicts, _warnings(baseline, device_key, env) + notes, overhead)


def error_fails(workload: str, error: float, baseline: Baseline, policy: GatePolicy) -> bool:
    """Whether a signed E2E ``error`` (fraction) alone fails the gate for
    ``workload`` (above its allowed error or its ceiling): the cue to measure once
    more before the gate decides (see the module docstring)."""
    verdict = _judge(workload, error, baseline.entries.get(workload), policy)
    return verdict.status in ("regressed", "over_ceiling")


def _judge(workload: str, error: float, entry: BaselineEntry | None,
           policy: GatePolicy, predicted_s: float | None = None) -> Verdict:
    if not _is_number(error) or not math.isfinite(error):
        return Verdict(workload, "invalid", error, entry, policy)
    shift = None
    if (entry is not None and entry.predicted_mean_s is not None and _is_number(predicted_s)
            and math.isfinite(predicted_s) and predicted_s > 0):
        shift = predicted_s / entry.predicted_mean_s - 1
    ceiling = policy.ceilings.get(workload)
    if ceiling is not None and abs(error) > ceiling:
        status = "over_ceiling"
    elif entry is None:
        status = "new"
    elif abs(error) > policy.allowed(entry):
        status = "regressed"
    elif shift is not None and _drifted(shift, entry, policy):
        status = "drifted"
    else:
        status = "ok"
    return Verdict(workload, status, float(error), entry, policy, shift)


def _drifted(shift: float, entry: BaselineEntry, policy: GatePolicy) -> bool:
    """Whether a prediction ``shift`` is beyond the allowed drift and makes the
    expected error worse than the baseline mean by more than ``min_margin``."""
    expected = (1 + entry.mean) * (1 + shift) - 1
    return (abs(shift) > policy.allowed_drift(entry)
            and abs(expected) > abs(entry.mean) + policy.min_margin)


def _warnings(baseline: Baseline, device_key: str | None, env: Mapping | None) -> list[str]:
    out = []
    if device_key is not None and device_key != baseline.device_key:
        out.append(f"WARN baseline was saved on device {baseline.device_key!r} but this run "
                   f"is on {device_key!r}; its errors may not apply here")
    if env is not None:
        for key in WARN_ENV_KEYS:
            then, now = baseline.env.get(key), env.get(key)
            if then != now:
                out.append(f"WARN {key} differs from the baseline's: baseline "
                           f"{_version_text(then)}, this run {_version_text(now)}; re-save "
                           f"the baseline with --perfmodel-save-baseline if this is intended")
    return out


def _version_text(value: object) -> str:
    return "not recorded" if value is None else str(value)


@dataclass
class WorkloadRuns:
    """What the gate reads from a session's E2E results, per workload, in run
    order: signed errors (fractions), predicted times the drift check compares
    (s, :attr:`~perfmodel.e2e.result.MeasuredIteration.model_predicted_s`) and (predicted,
    traced) host gaps (s; only runs that traced them)."""

    errors: dict[str, list[float]] = field(default_factory=dict)
    predicted_s: dict[str, list[float]] = field(default_factory=dict)
    overhead_s: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, results) -> WorkloadRuns:
        """The runs of ``results`` (:class:`~perfmodel.e2e.result.MeasuredIteration`)."""
        out = cls()
        for r in results:
            out.errors.setdefault(r.workload, []).append(r.signed_error)
            out.predicted_s.setdefault(r.workload, []).append(r.model_predicted_s)
            if r.traced_gaps_s is not None:
                out.overhead_s.setdefault(r.workload, []).append(
                    (r.predicted_gaps_s, r.traced_gaps_s))
        return out
