"""Assemble the report: tables and figures from stored results into one HTML file."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

from perfmodel.plaindata import write_bytes_atomic
from perfmodel.report import html
from perfmodel.store import paths
from perfmodel.report.data import (ReportData, collective_curves, load_report_data, op_points,
                                   resolve_device_key)

Progress = Callable[[str], None]


def default_report_path(results_root: Path, device_key: str) -> Path:
    """``results/<device-key>/report/index.html``."""
    return paths.report_index(paths.device_dir(results_root, device_key))


def build_report(results_root: Path | str, device: str | None = None,
                 profile: str | None = None, out: Path | str | None = None, settings=None,
                 progress: Progress | None = None) -> Path:
    """Write the HTML report of the results under ``results_root`` and return its path.

    ``device`` is a device key (a folder under ``results_root``), ``cpu`` or
    ``cuda[:N]``; default: the only device there. ``out`` defaults to
    ``<root>/<key>/report/index.html``; the figures are also written as PNG
    beside it. ``settings`` (:class:`perfmodel.settings.Settings`) supplies
    accuracy thresholds and the gate policy (default: the defaults).
    :class:`~perfmodel.report.data.ReportError` when there is nothing to report.
    """
    from perfmodel.extras import require
    from perfmodel.settings import Settings

    require("matplotlib", "report")  # before any work: one line naming the extra
    say = progress or (lambda _: None)
    root = Path(results_root)
    say(f"loading results under {root}…")
    data = load_report_data(root, resolve_device_key(root, device), profile)
    out = Path(out) if out is not None else default_report_path(root, data.store.device_key)
    writer = _Figures(out.parent)
    settings = settings or Settings()
    sections = [("environment", "Environment", _environment(data))]
    say("plotting accuracy…")
    sections += _accuracy(data, settings, writer)
    say("plotting E2E breakdown…")
    sections += _e2e(data, settings, writer, say)
    say("plotting collectives…")
    sections.append(("collectives", "Collective bandwidth", _collectives(data, writer)))
    say(f"writing {out}…")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    page = html.page(f"perfmodel report: {data.store.device_key}",
                     f"generated {stamp} from {data.store.dir}; profile {data.profile or 'n/a'}",
                     sections)
    write_bytes_atomic(out, page.encode("utf-8"))
    return out


class _Figures:
    """Renders figures to PNG, writes each beside the report, returns its <img>."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __call__(self, fig, stem: str, alt: str) -> str:
        from perfmodel.report.plots import png_bytes

        png = png_bytes(fig)
        write_bytes_atomic(paths.figure_file(self.folder, stem), png)
        return html.image(png, alt)


# -- sections ----------------------------------------------------------------------------

def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.2f}"


def _flops(value: float) -> str:
    """FLOP/s in TFLOP/s from 1e12 up, else in GFLOP/s."""
    return f"{value / 1e12:.1f} TFLOP/s" if value >= 1e12 else f"{value / 1e9:.1f} GFLOP/s"


def _environment(data: ReportData) -> str:
    parts = []
    spec = data.spec
    if spec is None:
        parts.append(html.empty(f"no device spec stored for {data.store.device_key}"))
    else:
        peaks = ", ".join(f"{d} {_flops(v)}" for d, v in sorted(spec.peak_flops.items()))
        rows = [["device key", spec.key], ["name", spec.name], ["kind", spec.kind],
                ["peak compute", peaks],
                ["memory bandwidth", f"{spec.mem_bandwidth_Bps / 1e9:.1f} GB/s"],
                ["L2 / last-level cache", f"{spec.l2_bytes / 2**20:g} MiB / "
                                          f"{spec.llc_bytes / 2**20:g} MiB"],
                ["compute units", spec.compute_units],
                ["clock", "n/a" if spec.clock_hz is None else f"{spec.clock_hz / 1e9:.2f} GHz"],
                ["threads", spec.threads if spec.threads is not None else "n/a"],
                ["spec source", spec.source]]
        parts += [html.heading("Device"), html.table(["field", "value"], rows, text_columns=2)]
    env = data.env
    rows = [[k, env.get(k) if env.get(k) is not None else "not recorded"]
            for k in ("python", "torch", "fbgemm", "perfmodel", "threads", "commit")]
    parts += [html.heading("Software (newest stored run)"),
              html.table(["field", "value"], rows, text_columns=2)]
    versions = {k: sorted({str(r["env"][k]) for r in data.measurements + data.e2e
                           if r.get("env", {}).get(k) is not None})
                for k in ("torch", "fbgemm", "python")}
    mixed = [f"{k}: {', '.join(v)}" for k, v in versions.items() if len(v) > 1]
    runs = {r.get("run_id") for r in data.measurements + data.e2e}
    parts.append(html.note(f"{len(data.measurements)} measurement and {len(data.e2e)} E2E "
                           f"records from {len(runs)} run files"
                           + (f"; versions differ across runs ({'; '.join(mixed)})"
                              if mixed else "")))
    if data.problems:
        parts += [html.heading("Skipped data"), html.bullet_list(data.problems, "warnings")]
    return "\n".join(parts)


def _accuracy(data: ReportData, settings, figure: _Figures) -> list[tuple[str, str, str]]:
    fit = data.fit
    if fit is None:
        none = html.empty(f"no fitted predictors stored under {data.store.predictors_dir}")
        return [("accuracy", "Per-op accuracy", none),
                ("predicted-vs-measured", "Predicted vs measured", none),
                ("error-cdf", "Error CDF", none)]
    from perfmodel.ops import get_op

    profile = data.profile or "quick"
    rows, classes = [], []
    for (op, direction), acc in sorted(fit.accuracy.items()):
        threshold = settings.gmae_threshold(op, direction, profile)
        passed = acc.gmae <= threshold
        rows.append([f"{op}.{direction}", get_op(op).family, acc.chosen, acc.n_configs,
                     acc.n_samples, _pct(acc.gmae), _pct(acc.gmae_extrapolation),
                     _pct(acc.mape), _pct(acc.max_error), _pct(acc.noise_floor),
                     _pct(acc.noise_floor_runs), _pct(threshold),
                     ("ok", "ok") if passed else ("FAIL", "fail")])
        classes.append("" if passed else "fail")
    table = html.table(["op.direction", "family", "predictor", "configs", "samples", "GMAE",
                        "extrap GMAE", "MAPE", "max", "noise floor", "between runs",
                        f"threshold ({profile})", "status"], rows, text_columns=3,
                       row_classes=classes)
    body = [html.note("Held-out errors from k-fold cross-validation over configs (GMAE, MAPE, "
                      "max) and from an extrapolation split (largest configs held out). Noise "
                      "floor: GMAE between two replicates of the same configs; between runs: "
                      "between the first and last run that measured a config."), table]
    if fit.skipped:
        body += [html.heading("Not fitted"),
                 html.bullet_list(f"{op}.{d}: {why}"
                                  for (op, d), why in sorted(fit.skipped.items()))]
    points = op_points(fit, data.measurements)
    if not points:
        none = html.empty("no stored measurements of the fitted ops")
        return [("accuracy", "Per-op accuracy", "\n".join(body)),
                ("predicted-vs-measured", "Predicted vs measured", none),
                ("error-cdf", "Error CDF", none)]
    from perfmodel.report.plots import accuracy_figure, category_order, error_cdf_figure

    gmae = {key: acc.gmae for key, acc in fit.accuracy.items()}
    families: dict[str, list] = {}
    for p in points.values():
        families.setdefault(p.family, []).append(p)
    scatter = [html.note("Each point is one stored measurement (median) against the stored "
                         "predictor's estimate; the predictor was refitted on every config, so "
                         "points in its training data sit closer than held-out ones. The band "
                         "is ±held-out GMAE. Orange: runs newer than the fit (truly unseen).")]
    for family in category_order(families):
        scatter.append(figure(accuracy_figure(family, families[family], gmae),
                              f"accuracy-{family}", f"{family}: predicted vs measured"))
    cdf = [html.note("Share of stored measurements whose relative error is below x, per op "
                     "(stored predictor against every stored measurement)."),
           figure(error_cdf_figure(points), "error-cdf", "error CDF per op")]
    return [("accuracy", "Per-op accuracy", "\n".join(body)),
            ("predicted-vs-measured", "Predicted vs measured", "\n".join(scatter)),
            ("error-cdf", "Error CDF", "\n".join(cdf))]


def _e2e(data: ReportData, settings, figure: _Figures, say: Progress
         ) -> list[tuple[str, str, str]]:
    latest = data.latest_e2e()
    if not latest:
        none = html.empty(f"no E2E records of profile {data.profile or 'any'} stored under "
                          f"{data.store.runs_dir}")
        return [("e2e", "End-to-end", none), ("breakdown", "E2E breakdown", none),
                ("timeline", "Iteration timeline", none)]
    table = _e2e_table(data, latest, settings)
    breakdown_rows, timelines = _traced(data, latest, figure, say)
    from perfmodel.report.plots import breakdown_figure

    breakdown = [html.note("Per workload, the newest stored run: the measured bar splits the "
                           "measured median iteration time in the traced shares of each "
                           "category (trace durations scaled to the measured time); the "
                           "predicted bar is the stored prediction's breakdown. On a GPU, "
                           "categories sum device and host time, which overlap."),
                 figure(breakdown_figure(breakdown_rows), "e2e-breakdown", "E2E breakdown")]
    return [("e2e", "End-to-end", table), ("breakdown", "E2E breakdown", "\n".join(breakdown)),
            ("timeline", "Iteration timeline", "\n".join(timelines))]


def _e2e_table(data: ReportData, latest: dict[str, dict], settings) -> str:
    from perfmodel.gate.baseline import check_errors

    errors = {w: r.get("signed_error", r["error"]) for w, r in latest.items()}
    verdicts = {}
    if data.baseline is not None:
        report = check_errors(errors, data.baseline, settings.gate_policy(),
                              predicted_s={w: r["predicted_s"] for w, r in latest.items()})
        verdicts = {v.workload: v for v in report.verdicts}
    rows, classes = [], []
    for workload, r in latest.items():
        entry = data.baseline.entries.get(workload) if data.baseline is not None else None
        verdict = verdicts.get(workload)
        status = ("no baseline", "") if verdict is None else \
            (verdict.status, "fail" if verdict.failed else "ok")
        rows.append([workload, r.get("run_id", ""), _ms(r["measured_s"]),
                     _ms(r.get("measured_sd_s")), _ms(r["predicted_s"]),
                     _pct(errors[workload], signed=True), _pct(r.get("error_own")),
                     "n/a" if entry is None else f"{entry.mean:+.1%} ± {entry.spread:.1%}",
                     "n/a" if entry is None else entry.n,
                     _pct(None if verdict is None else verdict.allowed), status,
                     _beyond(r.get("beyond_fit"))])
        classes.append("fail" if verdict is not None and verdict.failed else "")
    source = "no baseline stored" if data.baseline is None else \
        f"baseline {data.store.baseline_path(data.profile)}"
    return "\n".join([
        html.note(f"Newest stored run per workload, profile {data.profile}; times in ms; "
                  f"error = (predicted − measured) / measured; own-ovh: error with the "
                  f"workload's own overhead table; beyond the fit: op calls needing more "
                  f"than 4× the FLOPs or bytes of the largest config their predictor was "
                  f"fitted on (calls, up to ×); {source}."),
        html.table(["workload", "run", "measured", "sd", "predicted", "error", "own-ovh error",
                    "baseline error", "n", "allowed", "verdict", "beyond the fit"], rows,
                   text_columns=2, row_classes=classes)])


def _beyond(entries) -> str:
    """A record's ``beyond_fit`` as ``linear.forward 3, ×94; ...`` (the two
    furthest); "none" when empty, "n/a" when absent (records from before it, or
    fits that did not record their range) or not of that shape."""
    if entries is None:
        return "n/a"
    try:
        rows = sorted(((str(k), int(n), float(r)) for k, (n, r) in entries.items()),
                      key=lambda row: -row[2])
    except (AttributeError, TypeError, ValueError):
        return "n/a"
    if not rows:
        return "none"
    more = f" (+{len(rows) - 2} ops)" if len(rows) > 2 else ""
    return "; ".join(f"{k} {n}, ×{r:.0f}" for k, n, r in rows[:2]) + more


def _traced(data: ReportData, latest: dict[str, dict], figure: _Figures, say: Progress
            ) -> tuple[list[dict], list[str]]:
    """Breakdown rows of every workload, and the timeline section's parts."""
    from perfmodel.e2e.single import shared_table, traced_breakdown
    from perfmodel.report.plots import timeline_figure
    from perfmodel.report.timeline import simulate_stored, stored_graph
    from perfmodel.trace.parse import TraceError

    table = None
    if data.fit is not None and data.spec is not None:
        table, _ = shared_table(data.store.dir, data.spec.mem_bandwidth_Bps)
    on_device = data.store.device_key.startswith("cuda")
    rows, parts = [], [html.note(
        "Measured: the stored trace's last iteration, ops and the host gaps between them laid "
        "end to end on the cpu lane, kernels on their streams. Simulated: the same task graph "
        "re-predicted now with the stored fit and the device's shared overhead table.")]
    for workload, r in latest.items():
        measured_parts = r.get("traced_breakdown_s") or None
        traced_s = r.get("traced_s")
        say(f"plotting timeline of {workload}…")
        try:
            stored = stored_graph(data.store.dir, workload)
        except (TraceError, OSError) as exc:
            stored = None
            parts.append(html.empty(f"{workload}: stored trace unreadable ({exc})"))
        else:
            if stored is None:
                parts.append(html.empty(f"{workload}: no trace stored"))
        if stored is not None:
            trace, graph = stored
            if measured_parts is None:
                measured_parts, traced_s = traced_breakdown(graph), graph.measured_s
            if table is None:
                parts.append(html.empty(f"{workload}: no fitted predictors or device spec to "
                                        f"simulate with"))
            else:
                measured, simulated = simulate_stored(trace, graph, data.fit, table, on_device)
                untimed = sum(task.measured_s is None for task in graph.tasks)
                note = f" ({untimed} tasks untimed in the trace, left out)" if untimed else ""
                parts.append(figure(timeline_figure(workload, measured, simulated, note),
                                    f"timeline-{workload}", f"{workload} timeline"))
        rows.append({"workload": workload, "measured_s": r["measured_s"],
                     "predicted_s": r["predicted_s"],
                     "predicted_breakdown_s": r.get("breakdown_s") or None,
                     "measured_breakdown_s": _scaled(measured_parts, traced_s, r["measured_s"])})
    return rows, parts


#: Traced time left without a category, as a share of the traced iteration,
#: above which the measured bar shows it as "untimed in trace".
UNTIMED_SHARE = 0.01


def _scaled(parts: dict[str, float] | None, traced_s: float | None,
            measured_s: float) -> dict[str, float] | None:
    """``parts`` (traced seconds per category) scaled by measured / traced time;
    traced time no task accounts for (ops the trace left untimed) is added as
    ``untimed in trace``."""
    if not parts or not traced_s or traced_s <= 0 or not math.isfinite(measured_s):
        return None
    parts = dict(parts)
    untimed = traced_s - sum(parts.values())
    if untimed > UNTIMED_SHARE * traced_s:
        parts["untimed in trace"] = untimed
    return {k: v * measured_s / traced_s for k, v in parts.items()}


def _collectives(data: ReportData, figure: _Figures) -> str:
    curves = collective_curves(data.measurements)
    if not curves:
        return html.empty("no collective measurements stored (all_reduce, all_gather, "
                          "reduce_scatter, all_to_all, all_to_all_uneven, broadcast)")
    from perfmodel.report.plots import collectives_figure

    return "\n".join([html.note("Bus bandwidth as nccl-tests defines it: algorithm bytes / "
                                "time, times 2(n−1)/n for all_reduce, (n−1)/n for all_gather, "
                                "reduce_scatter and the all-to-alls, 1 for broadcast. Median "
                                "over the stored measurements of each size."),
                      figure(collectives_figure(curves), "collectives", "collective bandwidth")])

