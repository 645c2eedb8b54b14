"""Statistics over several stored runs: is a result stable, and did it move?

For every item (an E2E workload, or one op config: op, direction, dtype,
config) each run contributes one value, the median of that run's records of
the item (a baseline-saving run holds several). Over the N runs an item gets
its mean, sample sd and sd% (sd / |mean|), as in the seed work's training
benchmark reports, and a diff against a baseline value:

- E2E signed error (predicted - measured) / measured, a fraction: against the
  stored ``baseline-<profile>.json`` mean, or against a reference run;
  the diff is ``mean - baseline`` in percentage points.
- E2E measured time and op medians (seconds): against a reference run only;
  the diff is relative, ``mean / reference - 1``.

Pass/fail: the baseline is judged as if it were one more run. An item fails
when ``|diff|`` exceeds the bound ``t_q' · sd · sqrt(1 + 1/N)`` (relative to
the mean for times), where ``t_q'`` is the ``(1 + q) / 2`` quantile of
Student's t with N - 1 degrees of freedom (q = 0.95 by default): the
two-sided ``q`` prediction interval of one new run. With runs and baseline
drawn from one normal distribution the false-alarm rate is exactly ``1 - q``
for any N, and the bound widens by itself on a noisy machine or with few runs
(N = 3: 4.9 sd). A simpler bound, the 0.95 quantile of the pairwise run-to-run
differences, raised false alarms in 25% of simulated 3-run cases, so it is
not used. A reference *run* is one sample: its own noise is part of the test,
as the sqrt(1 + 1/N) says.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from perfmodel.store import paths

#: Fewest runs of a kind the statistics are computed on.
MIN_RUNS = 3
#: Rounding a diff may show without failing (runs of identical values: bound 0).
_TOLERANCE = 1e-9
#: Coverage of the prediction interval an item's diff must stay in.
DEFAULT_QUANTILE = 0.95


def spread_bound(values: Sequence[float], q: float = DEFAULT_QUANTILE,
                 relative: bool = False) -> float:
    """Half-width of the two-sided ``q`` prediction interval of one more run:
    ``t_{(1+q)/2, N-1} · sd · sqrt(1 + 1/N)`` (divided by ``|mean|`` when
    ``relative``). ValueError with fewer than two values."""
    from scipy.stats import t

    n = len(values)
    if n < 2:
        raise ValueError(f"a run-to-run spread needs at least 2 runs, got {n}")
    bound = float(t.ppf((1.0 + q) / 2.0, n - 1)) * statistics.stdev(values) * math.sqrt(1 + 1 / n)
    if relative:
        mean = abs(statistics.fmean(values))
        return math.inf if mean == 0 else bound / mean
    return bound


@dataclass(frozen=True)
class ItemStats:
    """One item's values over runs, and its diff against a baseline.

    ``relative``: diff and bound are fractions of the baseline and the mean
    (times); otherwise absolute, in the values' unit (signed errors).
    """

    item: str
    values: tuple[float, ...]
    baseline: float | None = None
    relative: bool = False
    q: float = DEFAULT_QUANTILE

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def sd(self) -> float:
        """Sample standard deviation over runs (0 for one run)."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def sd_rel(self) -> float:
        """sd / |mean| (fraction; inf when the mean is 0 and sd is not)."""
        mean = abs(self.mean)
        return (0.0 if self.sd == 0 else math.inf) if mean == 0 else self.sd / mean

    @property
    def diff(self) -> float | None:
        """``mean - baseline`` (absolute) or ``mean / baseline - 1`` (relative)."""
        if self.baseline is None:
            return None
        if self.relative:
            return math.inf if self.baseline == 0 else self.mean / self.baseline - 1.0
        return self.mean - self.baseline

    @property
    def bound(self) -> float | None:
        """Largest passing ``|diff|``: see the module docstring."""
        return None if self.baseline is None or self.n < 2 else \
            spread_bound(self.values, self.q, self.relative)

    @property
    def verdict(self) -> str:
        """``ok``, ``FAIL``, or ``-`` without a baseline."""
        if self.baseline is None or self.bound is None:
            return "-"
        return "FAIL" if abs(self.diff) > self.bound + _TOLERANCE else "ok"


@dataclass
class StatsReport:
    """Per-item statistics of the e2e and op records of the runs used."""

    profile: str
    runs_dir: Path
    e2e_runs: list[str] = field(default_factory=list)
    op_runs: list[str] = field(default_factory=list)
    e2e_errors: list[ItemStats] = field(default_factory=list)
    e2e_times: list[ItemStats] = field(default_factory=list)
    ops: list[ItemStats] = field(default_factory=list)
    baseline_source: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[ItemStats]:
        return [s for s in [*self.e2e_errors, *self.e2e_times, *self.ops] if s.verdict == "FAIL"]


def op_item(record: Mapping) -> str:
    """A stable name of a measurement record's op config."""
    config = ",".join(f"{k}={v}" for k, v in sorted(record["config"].items()))
    return f"{record['op']}.{record['direction']} {record['dtype']} {config}"


def values_by_run(records: Iterable[Mapping], kind: str,
                  metric: str) -> dict[str, dict[str, float]]:
    """``{item: {run_id: value}}``: per run, the median ``metric`` of the item's
    records of ``kind`` (``e2e``: ``measured_s`` or ``error``, the signed
    error; ``measurement``: ``median_s``). Planted-bias e2e records are left out."""
    collected: dict[str, dict[str, list[float]]] = {}
    for r in records:
        if r.get("kind") != kind or (kind == "e2e" and r.get("bias")):
            continue
        if kind == "e2e":
            item = r["workload"]
            value = ((r["predicted_s"] - r["measured_s"]) / r["measured_s"]
                     if metric == "error" else r[metric])
        else:
            item, value = op_item(r), r["measurement"][metric]
        if isinstance(value, (int, float)) and math.isfinite(value):
            collected.setdefault(item, {}).setdefault(str(r["run_id"]), []).append(float(value))
    return {item: {run: statistics.median(v) for run, v in runs.items()}
            for item, runs in collected.items()}


def _runs_of(records: Iterable[Mapping], kind: str) -> list[str]:
    return sorted({str(r["run_id"]) for r in records
                   if r.get("kind") == kind and not (kind == "e2e" and r.get("bias"))})


def multi_run_stats(records: Sequence[Mapping], profile: str, runs_dir: Path,
                    baseline_errors: Mapping[str, float] | None = None,
                    baseline_source: str | None = None, reference_run: str | None = None,
                    last: int | None = None, min_runs: int = MIN_RUNS,
                    q: float = DEFAULT_QUANTILE) -> StatsReport:
    """Statistics of the ``profile`` runs among ``records`` (store records with
    ``run_id`` and ``profile``, see :meth:`perfmodel.store.results.ResultStore.load`).

    Uses the newest ``last`` runs of each kind (all when None), leaving out
    ``reference_run``, which is the baseline of every item when given;
    otherwise E2E errors are judged against ``baseline_errors`` (workload ->
    mean signed error). ValueError when neither kind has ``min_runs`` runs or
    the reference run holds no records of the profile.
    """
    if min_runs < 2:
        raise ValueError(f"min_runs must be >= 2, got {min_runs}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if last is not None and last < min_runs:
        raise ValueError(f"last = {last} runs is fewer than the {min_runs} stats needs")
    ours = [r for r in records if r.get("profile") == profile]
    reference = [r for r in ours if str(r.get("run_id")) == reference_run]
    if reference_run is not None and not reference:
        raise ValueError(f"reference run {reference_run} holds no records of profile "
                         f"{profile} under {runs_dir}")
    pool = [r for r in ours if str(r.get("run_id")) != reference_run]
    report = StatsReport(profile, runs_dir, baseline_source=baseline_source)
    counts = {}
    for kind in ("e2e", "measurement"):
        runs = _runs_of(pool, kind)
        counts[kind] = len(runs)
        if len(runs) < min_runs:
            if runs:
                report.notes.append(f"{kind} records: {len(runs)} run(s), fewer than "
                                    f"{min_runs}; not summarised")
            continue
        runs = runs[-last:] if last else runs  # run ids start with their UTC time
        chosen = [r for r in pool if str(r["run_id"]) in set(runs)]
        if kind == "e2e":
            report.e2e_runs = runs
            ref_err = _reference(reference, "e2e", "error")
            ref_time = _reference(reference, "e2e", "measured_s")
            base = ref_err if reference_run is not None else dict(baseline_errors or {})
            if reference_run is not None:
                report.baseline_source = f"run {reference_run}"
            report.e2e_errors = _items(values_by_run(chosen, "e2e", "error"), runs, base,
                                       False, q)
            report.e2e_times = _items(values_by_run(chosen, "e2e", "measured_s"), runs,
                                      ref_time, True, q)
        else:
            report.op_runs = runs
            report.ops = _items(values_by_run(chosen, "measurement", "median_s"), runs,
                                _reference(reference, "measurement", "median_s"), True, q)
    if not report.e2e_runs and not report.op_runs:
        found = max(counts.values())
        raise ValueError(f"stats needs at least {min_runs} runs of profile {profile}, "
                         f"found {found} under {runs_dir}")
    return report


def _reference(records: Sequence[Mapping], kind: str, metric: str) -> dict[str, float]:
    return {item: next(iter(runs.values()))
            for item, runs in values_by_run(records, kind, metric).items()}


def _items(values: dict[str, dict[str, float]], runs: list[str], baseline: Mapping[str, float],
           relative: bool, q: float) -> list[ItemStats]:
    """Items seen in at least two of ``runs`` (one run has no spread)."""
    out = []
    for item in sorted(values):
        by_run = values[item]
        xs = tuple(by_run[run] for run in runs if run in by_run)
        if len(xs) >= 2:
            out.append(ItemStats(item, xs, baseline.get(item), relative, q))
    return out


def load_stats(results_root: Path, device_key: str, profile: str,
               reference_run: str | None = None, last: int | None = None,
               min_runs: int = MIN_RUNS, q: float = DEFAULT_QUANTILE
               ) -> tuple[StatsReport, list[str]]:
    """:func:`multi_run_stats` of the runs stored under
    ``results_root/device_key``, judged against its ``baseline-<profile>.json``;
    and one line per unreadable file skipped."""
    from perfmodel.gate.baseline import load_baseline
    from perfmodel.store.results import ResultStore

    store = ResultStore(results_root, device_key)
    if not store.runs_dir.is_dir():
        raise ValueError(f"no runs under {store.runs_dir}")
    loaded = store.load()
    reference_run = _run_id(reference_run)
    path = store.baseline_path(profile)
    baseline = None if reference_run else load_baseline(path)
    errors = {w: e.mean for w, e in baseline.entries.items()} if baseline else None
    report = multi_run_stats(loaded.records, profile, store.runs_dir, errors,
                             str(path) if baseline else None, reference_run, last, min_runs, q)
    return report, loaded.problems


def _run_id(run: str | None) -> str | None:
    """A run id from a run id or a run file's path."""
    if run is None:
        return None
    path = Path(run)
    if paths.is_run_file(path):
        if not path.is_file():
            raise ValueError(f"run file {path} does not exist")
        from perfmodel.store.results import read_run_header

        run_id = read_run_header(path).get("run_id")
        if not isinstance(run_id, str):
            raise ValueError(f"{path}: not a perfmodel run file (no run id in its header)")
        return run_id
    return run


def format_stats(report: StatsReport, max_lines: int = 20) -> list[str]:
    """The report as lines of at most 100 columns: E2E per workload, ops per
    (op, direction), then a FAIL line per failing item (``max_lines`` at most)."""
    q = next((s.q for s in [*report.e2e_errors, *report.ops]), DEFAULT_QUANTILE)
    lines = [f"profile {report.profile}: {len(report.e2e_runs)} e2e run(s), "
             f"{len(report.op_runs)} op run(s) under {report.runs_dir}",
             f"fail: |diff| > bound = {q:.0%} prediction interval of one more run "
             f"(t x sd x sqrt(1+1/n))"]
    if report.baseline_source:
        lines.append(f"baseline: {report.baseline_source}")
    lines.extend(report.notes)
    if report.e2e_errors:
        times = {s.item: s for s in report.e2e_times}
        lines.append("")
        lines.append(f"{'workload':<20}{'n':>3}{'measured':>10}{'sd%':>7}{'diff':>8}"
                     f"{'error':>9}{'sd':>7}{'base':>9}{'diff':>8}{'bound':>8}  verdict")
        for s in report.e2e_errors:
            t = times.get(s.item)
            measured = f"{t.mean * 1e3:8.2f}ms{t.sd_rel:>7.1%}{_pct(t.diff, '+'):>8}" if t \
                else f"{'':>25}"
            lines.append(f"{s.item:<20}{s.n:>3}{measured}{s.mean:>+9.2%}{s.sd:>7.2%}"
                         f"{_pct(s.baseline, '+'):>9}{_pct(s.diff, '+'):>8}"
                         f"{_pct(s.bound, ''):>8}  {_verdict(s, t)}")
    if report.ops:
        lines.append("")
        lines.append(f"{'op.dir':<38}{'configs':>8}{'median sd%':>11}{'max sd%':>9}"
                     f"{'geo diff':>10}{'fail':>6}")
        groups: dict[str, list[ItemStats]] = {}
        for s in report.ops:
            name = s.item.split(" ", 1)[0]
            groups.setdefault(name.replace(".forward", ".fwd").replace(".backward", ".bwd"),
                              []).append(s)
        for name, items in sorted(groups.items()):
            sds = [s.sd_rel for s in items]
            diffs = [s.diff for s in items if s.diff is not None and s.diff > -1]
            geo = math.exp(statistics.fmean(math.log1p(d) for d in diffs)) - 1 if diffs else None
            fails = sum(s.verdict == "FAIL" for s in items)
            lines.append(f"{name[:37]:<38}{len(items):>8}{statistics.median(sds):>11.1%}"
                         f"{max(sds):>9.1%}{_pct(geo, '+'):>10}"
                         f"{fails if diffs else '-':>6}")
    failed = report.failed
    if failed:
        lines.append("")
        for s in failed[:max_lines]:
            lines.append(f"FAIL {s.item}: diff {s.diff:+.2%} beyond bound {s.bound:.2%} "
                         f"(mean of {s.n} runs, sd {s.sd_rel if s.relative else s.sd:.2%})")
        if len(failed) > max_lines:
            lines.append(f"FAIL ... and {len(failed) - max_lines} more")
    return lines


def _pct(value: float | None, sign: str) -> str:
    return "-" if value is None else f"{value:{sign}.1%}"


def _verdict(error: ItemStats, time: ItemStats | None) -> str:
    verdicts = {error.verdict, time.verdict if time else "-"}
    return "FAIL" if "FAIL" in verdicts else "ok" if "ok" in verdicts else "-"
