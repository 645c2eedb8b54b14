"""A predicted training iteration: the one result type of every prediction.

:class:`IterationPrediction` is what :func:`perfmodel.simulate.predict.predict_graph`
returns for one rank and :func:`perfmodel.e2e.ranks.predict_ranks` for several
(then each rank's own prediction is in :attr:`IterationPrediction.ranks`); the
CLI's ``perfmodel predict``, ``predict_model`` and the plugin's E2E items hold one
inside :class:`perfmodel.e2e.result.MeasuredIteration` when the iteration was
also measured.

The walker's own output, :class:`perfmodel.simulate.walk.SimResult`, stays a
separate, internal type: it is the raw state of one walk (host busy time,
device active and idle time, when each collective could start, the host's
waits), which :func:`~perfmodel.simulate.walk.simulate_ranks` iterates on, and
knows nothing of the trace, the fit or the coverage. A prediction keeps the
walk it came from in :attr:`IterationPrediction.sim`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from perfmodel.simulate.walk import SimResult
    from perfmodel.trace.graph import Task


@dataclass(frozen=True)
class Coverage:
    """How a prediction priced its traced iteration: shares (fractions, summing
    to 1) of the traced time of its tasks (kernel time where a task has kernels,
    host time otherwise, as :func:`perfmodel.e2e.result.traced_breakdown` counts).

    ``by_op``: priced by an op definition's fitted predictor (a collective by its
    communication predictor); ``by_overheads``: the host gaps between ops, priced
    by the overhead table; ``by_generic``: nodes no op predictor priced whose
    memory-bound work the generic model (:mod:`perfmodel.fit.generic`) priced
    from their bytes; ``by_host``: nodes that are pure host work
    (:func:`perfmodel.trace.categories.host_only`: views, allocations, autograd's
    bookkeeping, ``zero_grad``), priced per call by the overhead table's line for
    their name (or its default for a name it never saw); ``unmodelled``: the rest
    (compute-bound nodes no op definition knows, ops without a fitted predictor
    and without parts, names of unknown kind), which the overhead table also
    prices per name. ``traced_s``: the traced seconds they share.
    """

    by_op: float
    by_overheads: float
    unmodelled: float
    traced_s: float
    by_generic: float = 0.0
    by_host: float = 0.0

    @classmethod
    def of_seconds(cls, op_s: float, overheads_s: float, unmodelled_s: float,
                   generic_s: float = 0.0, host_s: float = 0.0) -> Coverage | None:
        """The coverage of these traced seconds; None when they sum to nothing
        (an untimed trace)."""
        total = op_s + overheads_s + unmodelled_s + generic_s + host_s
        if not total > 0:
            return None
        return cls(op_s / total, overheads_s / total, unmodelled_s / total, total,
                   generic_s / total, host_s / total)

    def line(self) -> str:
        """``"coverage: 90.1% by op definitions, 5.0% by the generic model, 3.2% by
        the overhead table (1.1% of it host-only nodes), 1.7% unmodelled"``."""
        return (f"coverage: {self.by_op:.1%} by op definitions, {self.by_generic:.1%} by the "
                f"generic model, {self.by_overheads + self.by_host:.1%} by the overhead table "
                f"({self.by_host:.1%} of it host-only nodes), {self.unmodelled:.1%} unmodelled")


@dataclass
class IterationPrediction:
    """A predicted training iteration (seconds).

    ``predicted_s``: the iteration (on several ranks the slowest rank's);
    ``breakdown_s``: predicted seconds per category (an op family, ``host
    overhead``, ``communication``, ``unmodelled``; host time of host-only tasks,
    device time of kernels; on several ranks the mean per rank); ``regions_s``:
    the same per :func:`perfmodel.region`; ``coverage``: the share of traced time
    priced each way (None when the trace was not timed); ``unmodelled``:
    ``(node name, count, share of the traced iteration)`` of the nodes no op
    definition matched, largest first; ``no_predictor``: op tasks per
    ``op.direction`` without a fitted predictor; ``n_tasks``: tasks in the task
    graph(s); ``traced_s``: the traced iteration (the slowest rank's; None when
    untimed); ``beyond_fit``: ``op.direction`` -> (calls, largest ratio) predicted
    beyond the fit's configs (:func:`perfmodel.simulate.predict.beyond_fit`; None
    when the fit does not say); ``timeline``: ``(lane, name, start_s, end_s)``
    with lane ``"cpu"`` or ``"stream <n>"`` (empty when not kept, and for several
    ranks: each rank has its own).

    Several ranks: ``ranks`` holds each rank's own prediction, in rank order,
    and ``collective_start_s`` when each collective started on every rank (s);
    both are empty for one rank.

    ``device_key`` and ``problems`` say what priced it where the caller knew:
    the device key, and the stored files passed over on the way (a newer fit or
    an overhead samples file that could not be read), one line each.
    ``sim`` is the walk it came from (:class:`~perfmodel.simulate.walk.SimResult`:
    host busy, device active and idle time); None when read back from plain data
    and for several ranks (each rank holds its own).
    """

    predicted_s: float
    breakdown_s: dict[str, float] = field(default_factory=dict)
    regions_s: dict[str, float] = field(default_factory=dict)
    coverage: Coverage | None = None
    unmodelled: list[tuple[str, int, float | None]] = field(default_factory=list)
    no_predictor: dict[str, int] = field(default_factory=dict)
    n_tasks: int = 0
    traced_s: float | None = None
    beyond_fit: dict[str, tuple[int, float]] | None = None
    timeline: list[tuple[str, str, float, float]] = field(default_factory=list, repr=False)
    ranks: list[IterationPrediction] = field(default_factory=list, repr=False)
    collective_start_s: list[float] = field(default_factory=list, repr=False)
    device_key: str | None = None
    problems: list[str] = field(default_factory=list)
    sim: SimResult | None = field(default=None, repr=False, compare=False)

    @property
    def total_s(self) -> float:
        """:attr:`predicted_s`, by the name the old ``Prediction`` and
        ``RanksPrediction`` gave it (kept for one release)."""
        return self.predicted_s

    @property
    def world_size(self) -> int:
        """Ranks predicted (1 for a single-rank prediction)."""
        return max(1, len(self.ranks))

    @property
    def unmodelled_share(self) -> float:
        """Share of the traced iteration spent in unmodelled nodes (fraction)."""
        return sum(share or 0.0 for _, _, share in self.unmodelled)

    def to_plain(self) -> dict:
        """This prediction as plain data, without its timeline and walk (large,
        and needed by neither the summary nor the gate); see :meth:`from_plain`."""
        plain = {"predicted_s": self.predicted_s, "breakdown_s": self.breakdown_s,
                 "regions_s": self.regions_s,
                 "coverage": None if self.coverage is None else asdict(self.coverage),
                 "unmodelled": self.unmodelled, "no_predictor": self.no_predictor,
                 "n_tasks": self.n_tasks, "traced_s": self.traced_s,
                 "beyond_fit": self.beyond_fit}
        if self.ranks:
            plain["ranks"] = [r.to_plain() for r in self.ranks]
            plain["collective_start_s"] = self.collective_start_s
        if self.device_key is not None:
            plain["device_key"] = self.device_key
        if self.problems:
            plain["problems"] = self.problems
        return plain

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> IterationPrediction:
        """The prediction that ``data`` holds: :meth:`to_plain` output after a
        JSON round trip, an E2E store record or a multi-rank run's result (its
        ``predicted_rank_s`` become the ranks). Other keys are ignored, missing
        ones take their defaults, lists become tuples where the fields hold
        tuples."""
        beyond = data.get("beyond_fit")
        coverage = data.get("coverage")
        ranks = [cls.from_plain(r) for r in data.get("ranks") or []] or [
            cls(float(s)) for s in data.get("predicted_rank_s") or []]
        return cls(data["predicted_s"], dict(data.get("breakdown_s") or {}),
                   dict(data.get("regions_s") or {}),
                   None if coverage is None else Coverage(**coverage),
                   [tuple(row) for row in data.get("unmodelled") or []],
                   dict(data.get("no_predictor") or {}), data.get("n_tasks", 0),
                   data.get("traced_s"),
                   None if beyond is None else {k: tuple(v) for k, v in beyond.items()},
                   ranks=ranks, collective_start_s=list(data.get("collective_start_s") or []),
                   device_key=data.get("device_key"), problems=list(data.get("problems") or []))

    def lines(self, name: str, notes: Sequence[str] = ()) -> list[str]:
        """What ``perfmodel predict`` prints for this prediction of ``name``:
        predicted time, breakdown by category and region (ms and share), the
        coverage, the largest unmodelled nodes, the ops predicted beyond the fit,
        the traced time, then ``notes`` (a measurement, say) and the stored files
        passed over."""
        total = self.predicted_s
        on = f" on {self.device_key}" if self.device_key else ""
        out = [f"{name}{on}: predicted {total * 1e3:.2f} ms"]
        for title, parts in (("breakdown", self.breakdown_s), ("regions", self.regions_s)):
            if parts:
                out.append(f"  {title}:")
                out += [f"    {k:<24}{v * 1e3:>10.3f} ms {v / total if total else 0:>7.1%}"
                        for k, v in sorted(parts.items(), key=lambda kv: -kv[1])]
        if self.coverage is not None:
            out.append(f"  {self.coverage.line()}")
        top = [f"{n} x{c}" + (f" {s:.1%}" if s is not None else "")
               for n, c, s in self.unmodelled[:3]]
        if top:
            out.append(f"  unmodelled: {', '.join(top)}"[:100])
        far = furthest_beyond(self.beyond_fit)
        if far:
            out.append("  extrapolated beyond the fitted configs (calls, most x the largest "
                       "fitted FLOPs or bytes): "
                       + ", ".join(f"{k} {n}, {r:.0f}x" for k, (n, r) in far))
        if self.traced_s:
            out.append(f"  traced iteration {self.traced_s * 1e3:.2f} ms (under the profiler)")
        out += list(notes)
        out += [f"  skipped: {problem}" for problem in self.problems]
        return out


def traced_seconds(task: Task) -> float:
    """A task's traced seconds: its kernels' device time where it has kernels,
    its host time otherwise (0 when untimed)."""
    return sum(k.dur_s for k in task.kernels) if task.kernels else task.measured_s or 0.0


def furthest_beyond(beyond: dict[str, tuple[int, float]] | None, n: int = 4
                    ) -> list[tuple[str, tuple[int, float]]]:
    """The ``n`` entries of a :func:`~perfmodel.simulate.predict.beyond_fit` result
    furthest beyond the fit, furthest first (none for None)."""
    return sorted((beyond or {}).items(), key=lambda kv: -kv[1][1])[:n]


def measured_line(median_s: float, sd_s: float, repeat: int, number: int,
                  predicted_s: float) -> list[str]:
    """The line of a measured iteration under :meth:`IterationPrediction.lines`
    (none when ``median_s`` is not a finite number: not measured)."""
    if not math.isfinite(median_s):
        return []
    error = (predicted_s - median_s) / median_s
    return [f"  measured {median_s * 1e3:.2f} ms (sd {sd_s * 1e3:.2f}, "
            f"{repeat} x {number} iterations), error {error:+.1%}"]
