"""The report's figures, drawn with matplotlib's object API (Agg, no pyplot state).

Every function takes stored data (see :mod:`perfmodel.report.data`) and
returns a :class:`matplotlib.figure.Figure`; :func:`png_bytes` renders one.
matplotlib is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

import numpy as np

from perfmodel.report.data import OpPoints
from perfmodel.report.timeline import Span

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Breakdown categories in drawing order, with their colours.
CATEGORY_COLOURS = {
    "gemm": "#4C72B0", "conv": "#55A868", "attention": "#8172B2", "embedding": "#C44E52",
    "norm": "#CCB974", "elementwise": "#64B5CD", "memory": "#DD8452", "optim": "#937860",
    "host overhead": "#8C8C8C", "unmodelled": "#D9D9D9", "untimed in trace": "#F4CCCC",
}
_OTHER_COLOUR = "#DA8BC3"
DPI = 96


def category_order(categories) -> list[str]:
    """``categories`` in :data:`CATEGORY_COLOURS` order, unknown ones last (sorted)."""
    known = [c for c in CATEGORY_COLOURS if c in categories]
    return known + sorted(set(categories) - set(known))


def colour(category: str) -> str:
    return CATEGORY_COLOURS.get(category, _OTHER_COLOUR)


def _figure(width_in: float, height_in: float) -> Figure:
    from perfmodel.extras import require

    Figure = require("matplotlib.figure", "report").Figure  # noqa: N806

    return Figure(figsize=(width_in, height_in), dpi=DPI)


def _margins(fig: Figure, left: float, right: float, top: float, bottom: float,
             hspace: float = 0.0, wspace: float = 0.0) -> dict:
    """``subplots`` gridspec arguments for margins given in inches (fixed
    margins: a layout engine costs seconds per figure on log axes)."""
    width, height = fig.get_size_inches()
    return {"left": left / width, "right": 1 - right / width, "top": 1 - top / height,
            "bottom": bottom / height, "hspace": hspace, "wspace": wspace}


def png_bytes(fig: Figure) -> bytes:
    """``fig`` rendered as PNG."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _grid(n: int, columns: int) -> tuple[int, int]:
    cols = max(1, min(columns, n))
    return math.ceil(n / cols), cols


# -- per-op accuracy -----------------------------------------------------------------

def accuracy_figure(family: str, points: list[OpPoints], gmae: dict[tuple[str, str], float]
                    ) -> Figure:
    """Predicted against measured time (log-log, µs) of each op of ``family``,
    one panel per op and direction, with y = x and the ±GMAE band (held-out
    GMAE from ``gmae``, a fraction)."""
    rows, cols = _grid(len(points), 4)
    fig = _figure(3.1 * cols + 0.8, 3.0 * rows + 1.4)
    fig.suptitle(f"{family}: predicted vs measured", fontsize=11, x=0.01, y=0.995, ha="left")
    axes = fig.subplots(rows, cols, squeeze=False, gridspec_kw=_margins(
        fig, 0.85, 0.3, 1.05, 0.65, hspace=0.45, wspace=0.32)).ravel()
    newer = False
    for ax, p in zip(axes, points):
        meas, pred = p.measured_s * 1e6, np.maximum(p.predicted_s, 1e-12) * 1e6
        lo, hi = min(meas.min(), pred.min()) / 1.5, max(meas.max(), pred.max()) * 1.5
        line = np.geomspace(lo, hi, 50)
        g = gmae.get((p.op, p.direction))
        if g is not None and math.isfinite(g):
            ax.fill_between(line, line * max(1 - g, 1e-3), line * (1 + g), color="#4C72B0",
                            alpha=0.15, linewidth=0)
        ax.plot(line, line, color="black", linewidth=0.8)
        ax.scatter(meas[p.in_fit], pred[p.in_fit], s=7, alpha=0.6, color="#4C72B0",
                   linewidths=0)
        if (~p.in_fit).any():
            newer = True
            ax.scatter(meas[~p.in_fit], pred[~p.in_fit], s=9, alpha=0.8, color="#DD8452",
                       linewidths=0)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
        _log_ticks(ax.xaxis, lo, hi)
        _log_ticks(ax.yaxis, lo, hi)
        gmae_text = "" if g is None else f"\nheld-out GMAE {g:.1%}"
        ax.set_title(f"{p.op}.{p.direction}{gmae_text}", fontsize=8.5)
        ax.tick_params(labelsize=7)
    for ax in axes[len(points):]:
        ax.set_visible(False)
    _accuracy_legend(fig, newer)
    fig.supxlabel("measured (µs)", fontsize=9)
    fig.supylabel("predicted (µs)", fontsize=9)
    return fig


def _log_ticks(axis, lo: float, hi: float) -> None:
    """Log ticks over [lo, hi] labelled as plain numbers, no minor ticks (cheap to
    draw): at 1, 2, 5 × 10^k over up to two decades, so that a narrow range
    still gets labels, else at every decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    subs = (1.0, 2.0, 5.0) if hi / lo <= 150 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=8))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(NullLocator())


def _accuracy_legend(fig: Figure, newer: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    dot = {"marker": "o", "linestyle": "", "markersize": 4}
    handles = [Line2D([], [], color="black", linewidth=0.8, label="predicted = measured"),
               Patch(color="#4C72B0", alpha=0.15, label="± held-out GMAE"),
               Line2D([], [], color="#4C72B0", label="in the fit's data", **dot)]
    if newer:
        handles.append(Line2D([], [], color="#DD8452", label="newer than the fit", **dot))
    below_title = 1 - 0.3 / fig.get_size_inches()[1]
    fig.legend(handles=handles, loc="upper left", ncol=len(handles), fontsize=8,
               frameon=False, bbox_to_anchor=(0.0, below_title))


def error_cdf_figure(points: dict[tuple[str, str], OpPoints]) -> Figure:
    """CDF of |predicted - measured| / measured per op and direction, one panel
    per op family (log x, percent), each with its legend beside it."""
    families: dict[str, list[OpPoints]] = {}
    for p in points.values():
        families.setdefault(p.family, []).append(p)
    order = category_order(families)
    rows, cols = _grid(len(order), 2)
    panel_w, legend_w, panel_h = 3.7, 2.9, 3.3
    fig = _figure(cols * (panel_w + legend_w) + 0.8, rows * (panel_h + 0.6) + 1.0)
    fig.suptitle("prediction error CDF per op", fontsize=11, x=0.01, y=0.995, ha="left")
    axes = fig.subplots(rows, cols, squeeze=False, gridspec_kw=_margins(
        fig, 0.8, legend_w, 0.6, 0.75, hspace=0.6 / panel_h, wspace=legend_w / panel_w)).ravel()
    worst = max(float(p.rel_errors.max()) * 100 for p in points.values())
    xlim = (0.1, max(100.0, worst * 1.2))
    for ax, family in zip(axes, order):
        for i, p in enumerate(families[family]):
            errors = np.sort(np.maximum(p.rel_errors * 100, 0.01))
            ax.step(errors, np.arange(1, errors.size + 1) / errors.size, where="post",
                    linewidth=1.1, color=f"C{i % 10}", linestyle=("-", "--", ":")[i // 10 % 3],
                    label=f"{p.op}.{p.direction}")
        ax.set(xscale="log", xlim=xlim, ylim=(0, 1.01))
        ax.set_title(family, fontsize=9)
        _log_ticks(ax.xaxis, *xlim)
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6.3, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
                  borderaxespad=0.0, handlelength=2.2, labelspacing=0.3)
    for ax in axes[len(order):]:
        ax.set_visible(False)
    fig.supxlabel("|predicted − measured| / measured (%)", fontsize=9)
    fig.supylabel("fraction of measurements", fontsize=9)
    return fig


# -- end to end ----------------------------------------------------------------------

def breakdown_figure(rows: list[dict]) -> Figure:
    """Stacked bars (ms) per workload: measured next to predicted.

    Each row holds ``workload``, ``measured_s``, ``predicted_s``,
    ``predicted_breakdown_s`` and ``measured_breakdown_s`` (seconds per
    category, or None: that bar is then drawn unsplit). A black tick
    marks each bar's iteration time (on a GPU, breakdowns overlap in time).
    """
    categories = category_order({c for r in rows for key in ("predicted_breakdown_s",
                                                             "measured_breakdown_s")
                                 for c in (r[key] or {})})
    n_rows, cols = _grid(len(rows), 5)
    fig = _figure(2.5 * cols + 0.5, 2.8 * n_rows + 1.5)
    fig.suptitle("E2E breakdown per workload: measured vs predicted", fontsize=11, x=0.01,
                 y=0.995, ha="left")
    axes = fig.subplots(n_rows, cols, squeeze=False, gridspec_kw=_margins(
        fig, 0.55, 0.1, 0.6, 1.0, hspace=0.35, wspace=0.45)).ravel()
    for ax, row in zip(axes, rows):
        bars = (("measured", row["measured_breakdown_s"], row["measured_s"]),
                ("predicted", row["predicted_breakdown_s"], row["predicted_s"]))
        for x, (_, parts, total) in enumerate(bars):
            if parts is None:
                ax.bar(x, total * 1e3, width=0.6, color="white", edgecolor="#444444",
                       hatch="//", linewidth=0.8)
            else:
                bottom = 0.0
                for c in categories:
                    value = parts.get(c, 0.0) * 1e3
                    ax.bar(x, value, bottom=bottom, width=0.6, color=colour(c))
                    bottom += value
            if total is not None and math.isfinite(total):
                ax.hlines(total * 1e3, x - 0.38, x + 0.38, color="black", linewidth=1.6)
        heights = [total or 0.0 for _, _, total in bars] + \
            [sum(parts.values()) for _, parts, _ in bars if parts]
        ax.set_ylim(0, 1.08 * max(heights) * 1e3 or 1.0)
        ax.set_xticks([0, 1], ["measured", "predicted"], fontsize=8)
        ax.set_title(row["workload"], fontsize=9)
        ax.set_ylabel("ms", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlim(-0.6, 1.6)
    for ax in axes[len(rows):]:
        ax.set_visible(False)
    _category_legend(fig, categories, extra_unsplit=any(
        r[key] is None for r in rows for key in ("measured_breakdown_s", "predicted_breakdown_s")))
    return fig


def _category_legend(fig: Figure, categories: list[str], extra_unsplit: bool = False,
                     totals: bool = True) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=colour(c), label=c) for c in categories]
    if totals:
        handles.append(Line2D([], [], color="black", linewidth=1.6, label="iteration time"))
    if extra_unsplit:
        handles.append(Patch(facecolor="white", edgecolor="#444444", hatch="//",
                             label="no breakdown stored"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 0.0))


def timeline_figure(workload: str, measured: list[Span], simulated: list[Span],
                    measured_note: str = "") -> Figure:
    """The measured iteration (top) above the simulated one (bottom): one lane
    per host thread and stream, spans coloured by category, x in ms.
    ``measured_note`` is appended to the measured panel's title."""
    lanes_m, lanes_s = _lanes(measured), _lanes(simulated)
    heights = [max(1, len(lanes_m)), max(1, len(lanes_s))]
    fig = _figure(12.5, 0.55 * sum(heights) + 2.4)
    axes = fig.subplots(2, 1, sharex=True, height_ratios=heights, gridspec_kw=_margins(
        fig, 1.0, 0.2, 0.75, 1.1, hspace=0.6))
    end = max([s.end_s for s in measured + simulated] or [0.0]) * 1e3
    for ax, spans, lanes, label, extra in (
            (axes[0], measured, lanes_m, "measured (trace)", measured_note),
            (axes[1], simulated, lanes_s, "simulated", "")):
        total = max([s.end_s for s in spans] or [0.0]) * 1e3
        for y, lane in enumerate(lanes):
            by_category: dict[str, list[tuple[float, float]]] = {}
            for s in spans:
                if s.lane == lane:
                    by_category.setdefault(s.category, []).append(
                        (s.start_s * 1e3, (s.end_s - s.start_s) * 1e3))
            for category, bars in by_category.items():
                ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=colour(category),
                               linewidth=0)
        ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
        ax.set_ylim(len(lanes) - 0.5, -0.5)
        ax.set_title(f"{label}: {total:.2f} ms{extra}", fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    axes[1].set_xlim(0, end * 1.01 if end > 0 else 1)
    axes[1].set_xlabel("ms from the start of the iteration", fontsize=9)
    fig.suptitle(f"{workload}: one iteration", fontsize=11)
    _category_legend(fig, category_order({s.category for s in measured + simulated}),
                     totals=False)
    return fig


def _lanes(spans: list[Span]) -> list[str]:
    """Lane names, cpu lanes first, streams in number order."""
    def key(lane: str):
        kind, _, number = lane.partition(" ")
        return (kind != "cpu", kind, int(number) if number.isdigit() else 0, lane)

    return sorted({s.lane for s in spans}, key=key)


# -- collectives ---------------------------------------------------------------------

def collectives_figure(curves: dict[tuple[str, int], list[tuple[int, float]]]) -> Figure:
    """Bus bandwidth (GB/s) against message size per rank (bytes, log x), one
    line per (op, world size): a colour per op, a line style per world size."""
    fig = _figure(9.0, 5.0)
    ax = fig.subplots(gridspec_kw=_margins(fig, 0.8, 0.2, 0.45, 0.6))
    ops = sorted({op for op, _ in curves})
    sizes_seen = sorted({ranks for _, ranks in curves})
    styles = ["-", "--", ":", "-."]
    for (op, ranks), points in curves.items():
        sizes, busbw = zip(*points)
        ax.plot(sizes, np.array(busbw) / 1e9, marker="o", markersize=3, linewidth=1.2,
                color=f"C{ops.index(op) % 10}",
                linestyle=styles[sizes_seen.index(ranks) % len(styles)],
                label=f"{op}, {ranks} ranks")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size per rank (bytes)", fontsize=9)
    ax.set_ylabel("bus bandwidth (GB/s)", fontsize=9)
    ax.set_title("collective bus bandwidth vs message size", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    return fig
