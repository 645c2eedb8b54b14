"""The accuracy gate on committed data: each committed fit's per-op held-out
accuracy, scored again with today's fitting code on the runs it was trained on.

A fit's index records, per (op, direction), the predictor kind it chose and
that kind's held-out GMAE (:func:`perfmodel.fit.fitting.fit_op`). The gate
re-scores that kind the same way (:func:`perfmodel.fit.fitting.held_out_gmae`:
the same seeded folds, each config's newest run) on the fit's training runs as
committed under ``results/<key>/runs/``, and fails a predictor whose GMAE rose
by more than the tolerance (an absolute fraction: 0.01 = 1 percentage point)
over the committed one. Fitting is seeded, so unchanged code reproduces the
committed figures and the gate needs no noise allowance, no device and no
torch.

Which fits: per device and thread count, the newest committed fit (the one
``predict_model`` and ``perfmodel replay`` use), when every run it was trained
on is committed; a fit whose runs were pruned cannot be re-scored and is named
in the summary instead. A predictor the gate fails is either a regression of
the fitting code or an accepted change: then refit from the committed runs
(``perfmodel refit``) and commit the new fit, whose figures become the ones
gated.

What it catches: a predictor that got worse at the configs it holds out (its
features, its estimator, the data it is given). A uniform scale error of a few
percent hardly moves a GMAE (over-predicted configs get worse and
under-predicted ones better); the replay gate (:mod:`perfmodel.gate.replay`)
catches that one in the workloads' predictions.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from perfmodel.store import paths

#: Default tolerance: 1 percentage point of GMAE.
DEFAULT_TOLERANCE = 0.01
#: Verdict statuses that fail the gate.
FAILING = ("regressed", "unscored")


@dataclass(frozen=True)
class GatedFit:
    """One committed fit the gate re-scores: its device, thread count (None:
    a CUDA fit, or one saved without a count), folder name and training runs,
    and per ``"op.direction"`` the committed (kind, GMAE, configs)."""

    device_key: str
    threads: int | None
    name: str
    runs: tuple[str, ...]
    entries: Mapping[str, tuple[str, float, int]]

    @property
    def label(self) -> str:
        return fit_label(self.device_key, self.threads)


def _index(folder: Path) -> dict | None:
    try:
        index = json.loads(paths.fit_index(folder).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return index if isinstance(index, dict) else None


def _threads(index: dict) -> int | None:
    threads = index.get("threads")
    return threads if isinstance(threads, int) and not isinstance(threads, bool) else None


def gated_fits(root: Path | str) -> tuple[list[GatedFit], list[str]]:
    """The fits under ``root`` the gate re-scores (newest per device and thread
    count, with every training run committed), sorted, and one line per newest
    fit it cannot re-score, saying why. Reads the fits' indexes only."""
    root = Path(root)
    from perfmodel.fit.fitting import index_entries

    fits: list[GatedFit] = []
    notes: list[str] = []
    for key in paths.device_keys(root):
        folder = paths.device_dir(root, key)
        committed = {paths.run_id_of(p) for p in paths.run_files(folder)}
        seen: set[int | None] = set()
        for fit_dir in reversed(paths.fit_dirs(folder)):
            index = _index(fit_dir)
            if index is None:
                continue  # unreadable: test_committed_fits and load_latest_fit name it
            threads = _threads(index)
            if threads in seen:
                continue  # an older fit of this thread count: not the one used
            seen.add(threads)
            label = fit_label(key, threads)
            runs = tuple(sorted(str(r) for r in index.get("data_runs") or ()))
            missing = [r for r in runs if r not in committed]
            if not runs or missing:
                why = ("it records no training runs" if not runs else
                       f"{len(missing)} of the {len(runs)} runs it was trained on are not "
                       f"committed")
                notes.append(f"accuracy {label}: fit {fit_dir.name} not re-scored: {why}")
                continue
            fits.append(GatedFit(key, threads, fit_dir.name, runs, index_entries(index)))
    fits.sort(key=lambda f: (f.device_key, f.threads is None, f.threads or 0))
    return fits, notes


def accuracy_items(root: Path | str) -> list[tuple[str, int | None, str]]:
    """(device key, thread count, ``"op.direction"``) of every predictor the
    gate re-scores under ``root``: one pytest item each."""
    fits, _ = gated_fits(root)
    return [(f.device_key, f.threads, target) for f in fits for target in sorted(f.entries)]


def fit_label(key: str, threads: int | None) -> str:
    """``<key>/<N>t``, or ``<key>`` for a fit of no thread count (a GPU's)."""
    return key if threads is None else f"{key}/{threads}t"


def item_id(key: str, threads: int | None, target: str) -> str:
    return f"{fit_label(key, threads)}/{target}"


@dataclass
class AccuracyVerdict:
    """One predictor re-scored: ``ok``, ``improved`` (by more than the
    tolerance), ``regressed``, or ``unscored`` (it could not be scored:
    ``problem``)."""

    device_key: str
    threads: int | None
    target: str
    status: str
    tolerance: float
    kind: str | None = None
    committed: float | None = None
    gmae: float | None = None
    n_configs: int | None = None
    fit: str | None = None
    problem: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def name(self) -> str:
        return item_id(self.device_key, self.threads, self.target)

    def line(self) -> str:
        where = f"accuracy {self.name}"
        if self.status == "unscored":
            return f"FAIL {where}: cannot re-score fit {self.fit}: {self.problem}"
        change = (self.gmae - self.committed) * 100
        text = (f"held-out GMAE {self.gmae:.1%}, committed {self.committed:.1%} "
                f"({change:+.2f} pp; {self.kind}, {self.n_configs} configs, fit {self.fit})")
        if self.status == "regressed":
            return (f"FAIL {where}: {text}: more than {self.tolerance * 100:.2f} pp worse; "
                    f"fix the fitting, or refit and commit the fit (`perfmodel refit "
                    f"--device {self.device_key}"
                    f"{'' if self.threads is None else f' --threads {self.threads}'} --same-runs`)")
        return f"{'improved' if self.status == 'improved' else 'ok'} {where}: {text}"


@dataclass
class _Scored:
    gated: GatedFit
    spec: Any = None
    samples: dict = field(default_factory=dict)
    problem: str | None = None


class AccuracyGate:
    """The accuracy gate over the committed fits under ``root``: :meth:`check`
    one predictor at a time (a pytest item each), then :meth:`finish` (the
    summary and decision lines). Each fit's runs are read once per process.
    ``bias`` plants a scale error in the re-scored predictions
    (``--perfmodel-plant-bias``: an op, or op and direction, to a factor)."""

    def __init__(self, root: Path | str, tolerance: float = DEFAULT_TOLERANCE,
                 bias: Mapping[str, float] | None = None):
        self.root = Path(root)
        self.tolerance = tolerance
        self.bias = dict(bias or {})
        self.verdicts: list[AccuracyVerdict] = []
        self._fits: dict[tuple[str, int | None], _Scored] | None = None
        self._notes: list[str] = []

    def _scored(self, key: str, threads: int | None) -> _Scored | None:
        if self._fits is None:
            fits, self._notes = gated_fits(self.root)
            self._fits = {(f.device_key, f.threads): _Scored(f) for f in fits}
        scored = self._fits.get((key, threads))
        if scored is not None and scored.spec is None and scored.problem is None:
            self._load(scored)
        return scored

    def _load(self, scored: _Scored) -> None:
        """Read the fit's training runs and spec (once), as ``perfmodel refit``
        does: the records of its thread count and of the newest run's allocator."""
        from perfmodel.fit.fitting import runs_allocator, stored_spec, training_samples
        from perfmodel.store.results import ResultStore, measurements_of

        gated = scored.gated
        store = ResultStore(self.root, gated.device_key)
        try:
            spec = stored_spec(store, gated.threads)
        except ValueError as exc:
            scored.problem = str(exc)
            return
        wanted = set(gated.runs)
        records = measurements_of([p for p in paths.run_files(store.dir)
                                   if paths.run_id_of(p) in wanted], gated.device_key)
        scored.spec = spec
        scored.samples = training_samples(records, spec, runs_allocator(records, spec))

    def _factor(self, target: str) -> float:
        from perfmodel.ops.base import base_direction

        op, _, direction = target.partition(".")
        return self.bias.get(f"{op}.{base_direction(direction)}", self.bias.get(op, 1.0))

    def check(self, key: str, threads: int | None, target: str) -> AccuracyVerdict:
        """Re-score ``target`` (``"op.direction"``) of the committed fit of
        ``key`` at ``threads`` and judge it against its committed GMAE."""
        from perfmodel.fit.fitting import held_out_gmae

        scored = self._scored(key, threads)
        common = dict(device_key=key, threads=threads, target=target, tolerance=self.tolerance)
        if scored is None or target not in scored.gated.entries:
            verdict = AccuracyVerdict(status="unscored", problem="no such committed predictor "
                                      "with all its training runs committed", **common)
        else:
            kind, committed, _ = scored.gated.entries[target]
            common.update(kind=kind, committed=committed, fit=scored.gated.name)
            op, _, direction = target.partition(".")
            try:
                if scored.problem:
                    raise ValueError(scored.problem)
                gmae, n = held_out_gmae(op, direction, kind, scored.samples.get((op, direction), []),
                                        scored.spec, scale=self._factor(target))
            except ValueError as exc:
                verdict = AccuracyVerdict(status="unscored", problem=str(exc), **common)
            else:
                status = ("regressed" if gmae > committed + self.tolerance else
                          "improved" if gmae < committed - self.tolerance else "ok")
                verdict = AccuracyVerdict(status=status, gmae=gmae, n_configs=n, **common)
        self.verdicts.append(verdict)
        return verdict

    def finish(self) -> tuple[list[str], bool]:
        """The gate's lines (per fit what was re-scored, the fits it could not
        re-score, each failing predictor, then the decision) and whether it failed."""
        if not self.verdicts:
            return [], False
        if self._fits is None:
            _, self._notes = gated_fits(self.root)
        lines: list[str] = []
        bias = (f" with planted bias {', '.join(f'{k}={v:g}' for k, v in sorted(self.bias.items()))}"
                if self.bias else "")
        by_fit: dict[str, list[AccuracyVerdict]] = {}
        for v in self.verdicts:
            by_fit.setdefault(fit_label(v.device_key, v.threads), []).append(v)
        for label, verdicts in sorted(by_fit.items()):
            changes = [(v.gmae - v.committed, v.target) for v in verdicts if v.gmae is not None]
            worst = max(changes, default=None)
            worst_text = ("" if worst is None else
                          f"; largest rise {worst[0] * 100:+.2f} pp ({worst[1]})")
            improved = sum(v.status == "improved" for v in verdicts)
            better = (f"; {improved} improved by more than {self.tolerance * 100:.2f} pp "
                      f"(refit and commit to keep them)" if improved else "")
            lines.append(f"accuracy {label}: {len(verdicts)} predictor(s) of fit "
                         f"{verdicts[0].fit} re-scored on its committed runs{bias}"
                         f"{worst_text}{better}")
        lines += self._notes
        bad = [v for v in self.verdicts if v.failed]
        lines += [v.line() for v in bad]
        if bad:
            lines.append(f"FAIL perfmodel accuracy gate: {len(bad)} of {len(self.verdicts)} "
                         f"predictor(s) failed ({', '.join(v.name for v in bad[:5])}"
                         f"{', …' if len(bad) > 5 else ''})")
        else:
            lines.append(f"perfmodel accuracy gate: pass, {len(self.verdicts)} predictor(s) "
                         f"within {self.tolerance * 100:.2f} pp of their committed GMAE")
        return lines, bool(bad)

    # -- pytest-xdist workers ----------------------------------------------------------
    def to_plain(self) -> dict:
        """The verdicts of this process, for :meth:`merge_plain`."""
        return {"verdicts": [asdict(v) for v in self.verdicts]}

    def merge_plain(self, data: dict) -> None:
        """Add another process's :meth:`to_plain`."""
        self.verdicts += [AccuracyVerdict(**raw) for raw in data["verdicts"]]
