"""What the report reads: everything comes from ``results/<device-key>/``, nothing is measured.

:func:`load_report_data` gathers the stored measurement and E2E records, the
newest fitted predictors, the device spec and the gate's baseline; the other
functions turn them into the rows the plots and tables draw.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfmodel.device.datasheet import DATASHEET
from perfmodel.device.probe import cpu_device_key
from perfmodel.device.spec import DeviceSpec, parse_device
from perfmodel.fit.fitting import FitReport, load_latest_fit, samples_from_records
from perfmodel.gate.baseline import Baseline, load_baseline
from perfmodel.store import paths
from perfmodel.store.results import ResultStore

#: Collective ops whose measurement records the bandwidth plot draws.
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                  "all_to_all_uneven", "broadcast")


class ReportError(ValueError):
    """Nothing to report from; the message names the path that was looked at."""


@dataclass
class ReportData:
    """The stored results of one device, as the report reads them."""

    store: ResultStore
    spec: DeviceSpec | None
    measurements: list[dict]
    e2e: list[dict]
    fit: FitReport | None
    profile: str | None  # profile of the E2E records and thresholds shown
    baseline: Baseline | None
    problems: list[str] = field(default_factory=list)  # unreadable files, skipped

    @property
    def env(self) -> dict:
        """The ``env`` of the newest stored record ({} when none)."""
        records = self.e2e + self.measurements
        if not records:
            return {}
        return max(records, key=lambda r: str(r.get("run_id"))).get("env", {})

    def latest_e2e(self) -> dict[str, dict]:
        """Newest E2E record of :attr:`profile` per workload, planted-bias runs left out."""
        out: dict[str, dict] = {}
        for r in sorted(self.e2e, key=lambda r: str(r.get("run_id"))):
            if r.get("profile") == self.profile and not r.get("bias"):
                out[r["workload"]] = r
        return dict(sorted(out.items()))


def resolve_device_key(root: Path, device: str | None) -> str:
    """The device key whose results to report: ``device`` when it names a folder
    under ``root``, the key of ``cpu``/``cuda[:N]``, or the only device folder
    there when ``device`` is None. :class:`ReportError` otherwise."""
    if not root.is_dir():
        raise ReportError(f"no results folder at {root}")
    found = paths.device_keys(root)
    if device is None:
        if len(found) == 1:
            return found[0]
        if not found:
            raise ReportError(f"no stored results under {root} (no <device-key>/runs or "
                              f"<device-key>/predictors folder)")
        raise ReportError(f"several devices under {root}: {', '.join(found)}; "
                          f"pick one with --device")
    if "/" not in device and (root / device).is_dir():
        return device
    try:
        kind, index = parse_device(device)
    except ValueError:
        raise ReportError(f"no results for device {device!r} under {root} "
                          f"(found: {', '.join(found) or 'none'})") from None
    if kind == "cpu":
        key = cpu_device_key()
    else:
        from perfmodel.device.probe import detect_device

        key = detect_device(device).key
    if not paths.device_dir(root, key).is_dir():
        raise ReportError(f"no results for device {key} under {root} "
                          f"(found: {', '.join(found) or 'none'})")
    return key


def load_report_data(root: Path, device_key: str, profile: str | None = None) -> ReportData:
    """Load the stored results of ``device_key`` under ``root``. ``profile``
    selects the E2E records, baseline and accuracy thresholds (default: the
    newest E2E run's, else the newest run's).
    :class:`ReportError` when nothing is stored there."""
    store = ResultStore(root, device_key)
    if not store.dir.is_dir():
        raise ReportError(f"no results folder at {store.dir}")
    loaded = store.load()
    spec, spec_problem = stored_spec(store)
    # the fit of the device.json spec's thread count (the whole host), else the newest
    fit, fit_problems = load_latest_fit(store, threads=spec.threads if spec else None)
    if fit is None:
        fit, fit_problems = load_latest_fit(store)
    if not loaded.records and fit is None:
        raise ReportError(f"nothing stored under {store.dir}: no records in runs/ and no "
                          f"fitted predictors in predictors/")
    problems = loaded.problems + fit_problems
    e2e = loaded.of_kind("e2e")
    if profile is None and loaded.records:
        newest = max(e2e or loaded.records, key=lambda r: str(r.get("run_id")))
        profile = newest.get("profile")
    baseline = None
    if profile is not None:
        try:
            baseline = load_baseline(store.baseline_path(profile))
        except ValueError as exc:
            problems.append(str(exc))
    problems += [spec_problem] if spec_problem else []
    return ReportData(store, spec, loaded.of_kind("measurement"), e2e, fit, profile, baseline,
                      problems)


def stored_spec(store: ResultStore) -> tuple[DeviceSpec | None, str | None]:
    """The device spec cached in ``device.json``, else the data sheet of the key,
    else None; and a problem line when ``device.json`` is unreadable."""
    import json

    path = store.spec_file
    if path.is_file():
        try:
            return DeviceSpec.from_dict(json.loads(path.read_text(encoding="utf-8"))), None
        except (OSError, ValueError, TypeError) as exc:
            return _datasheet(store.device_key), f"{path}: unreadable device spec ({exc})"
    return _datasheet(store.device_key), None


def _datasheet(key: str) -> DeviceSpec | None:
    sheet = DATASHEET.get(key)
    return None if sheet is None else sheet.to_spec()


# -- per-op accuracy -----------------------------------------------------------------

@dataclass
class OpPoints:
    """Stored measurements of one (op, direction) and the fit's predictions (seconds)."""

    op: str
    direction: str
    family: str
    measured_s: np.ndarray
    predicted_s: np.ndarray
    in_fit: np.ndarray  # bool: the measurement's run was in the fit's training data

    @property
    def rel_errors(self) -> np.ndarray:
        """|predicted - measured| / measured (fractions)."""
        return np.abs(self.predicted_s - self.measured_s) / self.measured_s


def op_points(fit: FitReport, records: list[dict]) -> dict[tuple[str, str], OpPoints]:
    """Predicted against measured seconds for every fitted (op, direction), one
    batched predictor call per dtype."""
    from perfmodel.ops import get_op

    grouped = samples_from_records(r for r in records if r["op"] not in COLLECTIVE_OPS)
    fit_runs = set(fit.data_runs)
    out = {}
    for key, predictor in sorted(fit.predictors.items()):
        samples = [s for s in grouped.get(key, []) if s.seconds > 0]
        if not samples:
            continue
        predicted = np.empty(len(samples))
        by_dtype: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            by_dtype.setdefault(s.dtype, []).append(i)
        for dtype, indices in by_dtype.items():
            values = predictor.predict(dtype, [dict(samples[i].params) for i in indices])
            predicted[indices] = np.maximum(np.asarray(values, dtype=float), 0.0)
        out[key] = OpPoints(*key, get_op(key[0]).family,
                            np.array([s.seconds for s in samples]), predicted,
                            np.array([not fit_runs or s.run_id in fit_runs for s in samples]))
    return out


# -- collectives -----------------------------------------------------------------------

def bus_bandwidth(record: dict) -> float | None:
    """Bus bandwidth of one collective measurement record (B/s): its
    ``busbw_Bps``, else its ``algbw_Bps`` (else algorithm bytes / median time)
    times the op's bus factor (:mod:`perfmodel.ops.collective`); None when it
    cannot be computed."""
    from perfmodel.ops import get_op

    if _positive(record.get("busbw_Bps")):
        return float(record["busbw_Bps"])
    config = record.get("config", {})
    ranks, median = config.get("world_size"), record.get("measurement", {}).get("median_s")
    if not isinstance(ranks, int) or ranks < 1 or not _positive(config.get("bytes")):
        return None
    op = get_op(record["op"])
    algbw = record.get("algbw_Bps")
    if not _positive(algbw):
        if not _positive(median):
            return None
        algbw = op.algo_bytes(config) / median
    return float(algbw) * op.bus_factor(ranks)


def collective_curves(records: list[dict]) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """``(op, world_size) -> [(bytes per rank, median busbw B/s), ...]`` sorted by
    bytes, over every stored collective measurement."""
    points: dict[tuple[str, int], dict[int, list[float]]] = {}
    for r in records:
        if r.get("op") not in COLLECTIVE_OPS:
            continue
        busbw = bus_bandwidth(r)
        config = r.get("config", {})
        if busbw is None or not _positive(config.get("bytes")):
            continue
        key = (r["op"], int(config["world_size"]))
        points.setdefault(key, {}).setdefault(int(config["bytes"]), []).append(busbw)
    return {key: sorted((size, statistics.median(v)) for size, v in by_size.items())
            for key, by_size in sorted(points.items())}


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0
