"""A predicted and measured training iteration: :class:`MeasuredIteration`.

It is an :class:`~perfmodel.simulate.result.IterationPrediction` beside the
iteration's measurement (:class:`IterationTiming`) and what the gate needs to
judge it (the error, the overhead table's workloads, a planted bias, the fit's
data id, the host's drift). ``predict_model``, the plugin's E2E items, the
multi-rank runs and ``perfmodel predict --measure`` all return one; the run
files keep it as a plain ``"e2e"`` record (:meth:`MeasuredIteration.record`,
read back by :meth:`MeasuredIteration.from_record`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

from perfmodel.simulate.predict import generic_priced
from perfmodel.simulate.result import IterationPrediction, measured_line, traced_seconds

if TYPE_CHECKING:
    from perfmodel.trace.graph import Graph


@dataclass(frozen=True)
class IterationTiming:
    """Measured iteration time: median and sd over ``repeat`` blocks of
    ``number`` iterations (seconds), and items per second at the median."""

    median_s: float
    sd_s: float
    repeat: int
    number: int
    items_per_s: float


@dataclass
class MeasuredIteration:
    """One workload's iteration, predicted (:attr:`prediction`) and measured
    (:attr:`measured`; NaN figures when not measured).

    ``prediction`` uses the device's shared overhead table; ``predicted_own_s``
    the table of this workload's own trace only (the seed work's "per-workload
    overheads"), for comparison. ``prediction`` may be given as a bare number of
    predicted seconds, as the old ``E2EResult`` took it (kept for one release).
    The prediction's figures read as attributes of this object too
    (:attr:`predicted_s`, :attr:`breakdown_s`, :attr:`regions_s`,
    :attr:`unmodelled`, ...), as they did on ``E2EResult``.
    """

    workload: str
    measured: IterationTiming
    prediction: IterationPrediction
    predicted_own_s: float | None = None
    overhead_workloads: tuple[str, ...] = ()
    bias: dict[str, float] = field(default_factory=dict)  # planted prediction error, if any
    #: host-overhead seconds of the trace, counted robustly (see
    #: :func:`perfmodel.trace.overheads.traced_gaps_s`); None when not traced here
    traced_gaps_s: float | None = None
    #: the measured median (s) of a first measurement that failed the gate's error
    #: check and was repeated (see :func:`perfmodel.e2e.single.measure_again`);
    #: None when measured once
    first_measured_s: float | None = None
    #: training-data id of the fit that predicted it
    #: (:attr:`perfmodel.fit.fitting.FitReport.data_id`); None when not known
    fit_data: str | None = None
    #: on several ranks of one host: the slowdown of memory-bound ops beside the
    #: other ranks that they measured (:meth:`perfmodel.measure.contention.Contention.to_dict`)
    contention: dict[str, float] | None = None
    #: on several ranks: how much slower the host ran than at the fit's
    #: measurements (:meth:`perfmodel.measure.drift.HostDrift.to_dict`), and the
    #: prediction without that drift (s); None when not measured
    host_drift: dict[str, float] | None = None
    predicted_fit_speed_s: float | None = None
    #: on a CPU, the host's speed sampled just before and after the measurement
    #: (``{"before": HostSpeed dict, "after": ...}``); None when not sampled
    host_speed_seen: dict[str, dict[str, float]] | None = None
    #: traced seconds per category (:func:`traced_breakdown`); None: those of
    #: :attr:`graph` (a record read back keeps its own)
    traced_breakdown_s: dict[str, float] | None = None
    graph: Graph | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.prediction, IterationPrediction):  # E2EResult's predicted_s
            self.prediction = IterationPrediction(self.prediction)

    # -- the prediction's figures, under E2EResult's names --------------------------
    @property
    def predicted_s(self) -> float:
        """The predicted iteration (s): :attr:`IterationPrediction.predicted_s`."""
        return self.prediction.predicted_s

    @property
    def breakdown_s(self) -> dict[str, float]:
        return self.prediction.breakdown_s

    @property
    def regions_s(self) -> dict[str, float]:
        return self.prediction.regions_s

    @property
    def unmodelled(self) -> list:
        """(name, count, share of traced time) of the unmodelled nodes."""
        return self.prediction.unmodelled

    @property
    def no_predictor(self) -> dict[str, int]:
        return self.prediction.no_predictor

    @property
    def n_tasks(self) -> int:
        return self.prediction.n_tasks

    @property
    def traced_s(self) -> float | None:
        return self.prediction.traced_s

    @property
    def beyond_fit(self) -> dict[str, tuple[int, float]] | None:
        return self.prediction.beyond_fit

    @property
    def coverage(self):
        """:attr:`IterationPrediction.coverage`."""
        return self.prediction.coverage

    @property
    def unmodelled_share(self) -> float:
        """Share of the traced iteration spent in unmodelled nodes (fraction)."""
        return self.prediction.unmodelled_share

    # -- against the measurement ----------------------------------------------------
    @property
    def model_predicted_s(self) -> float:
        """The prediction at the fit's host speed (s): :attr:`predicted_s`
        without the host's drift, which moves with the host rather than the model
        (what the gate's drift check compares)."""
        return self.predicted_s if self.predicted_fit_speed_s is None \
            else self.predicted_fit_speed_s

    @property
    def error(self) -> float:
        """|predicted - measured| / measured, a fraction."""
        return abs(self.predicted_s - self.measured.median_s) / self.measured.median_s

    @property
    def signed_error(self) -> float:
        """(predicted - measured) / measured: positive when over-predicted."""
        return (self.predicted_s - self.measured.median_s) / self.measured.median_s

    @property
    def predicted_gaps_s(self) -> float:
        """Predicted host-overhead seconds (the taxonomy's gaps, not the unmodelled
        nodes): the prediction's ``host overhead`` share."""
        return self.breakdown_s.get("host overhead", 0.0)

    @property
    def error_own(self) -> float | None:
        """The error with the workload's own overhead table."""
        if self.predicted_own_s is None:
            return None
        return abs(self.predicted_own_s - self.measured.median_s) / self.measured.median_s

    def contributors(self) -> list[tuple[str, float, float, float]]:
        """Where the error comes from: per category (op family, ``generic``,
        ``host overhead``, ``unmodelled``, ...), ``(category, predicted s, traced
        s, contribution)``, the contribution being (predicted - traced) /
        measured iteration, largest in size first. Predicted and traced seconds
        count the same tasks (:func:`traced_breakdown`); the rest of the error is
        the schedule and the trace's own distance from the measured time. Empty
        when not measured or without a traced breakdown."""
        traced = self.traced_breakdown_s
        if traced is None and self.graph is not None:
            traced = traced_breakdown(self.graph)
        measured = self.measured.median_s
        if not traced or not measured or measured != measured:
            return []
        rows = [(cat, self.breakdown_s.get(cat, 0.0), traced.get(cat, 0.0),
                 (self.breakdown_s.get(cat, 0.0) - traced.get(cat, 0.0)) / measured)
                for cat in sorted(set(traced) | set(self.breakdown_s))]
        return sorted(rows, key=lambda r: -abs(r[3]))

    def lines(self) -> list[str]:
        """What ``perfmodel predict --measure`` prints: the prediction's lines
        (:meth:`IterationPrediction.lines`) with the measured time and error."""
        m = self.measured
        return self.prediction.lines(self.workload, measured_line(
            m.median_s, m.sd_s, m.repeat, m.number, self.predicted_s))

    # -- plain data -----------------------------------------------------------------
    def to_plain(self) -> dict:
        """This result as plain data, without the prediction's timeline and walk and
        without the task graph (large, and needed by neither the summary nor the
        gate): the prediction's keys (:meth:`IterationPrediction.to_plain`) beside
        this object's fields; see :meth:`from_plain`."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name not in ("prediction", "graph")}
        plain["measured"] = asdict(self.measured)
        return {**self.prediction.to_plain(), **plain}

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> MeasuredIteration:
        """The result that ``data`` names field by field (:meth:`to_plain` output
        after a JSON round trip, or a multi-rank run's result): the prediction
        from its keys (:meth:`IterationPrediction.from_plain`), other keys
        ignored, missing fields at their defaults, lists as tuples where the
        fields hold tuples."""
        known = {f.name for f in fields(cls)} - {"prediction", "graph"}
        args = {k: v for k, v in data.items() if k in known}
        args["measured"] = IterationTiming(**data["measured"])
        args["overhead_workloads"] = tuple(args.get("overhead_workloads") or ())
        return cls(prediction=IterationPrediction.from_plain(data), **args)

    def record(self, env: dict) -> dict:
        """The store record of this result (an ``"e2e"`` record of a run file,
        docs/results-format.md); :meth:`from_record` reads it back."""
        traced = self.traced_breakdown_s
        if traced is None:
            traced = {} if self.graph is None else traced_breakdown(self.graph)
        return {"kind": "e2e", "workload": self.workload, "measured_s": self.measured.median_s,
                "measured_sd_s": self.measured.sd_s, "repeat": self.measured.repeat,
                "number": self.measured.number, "items_per_s": self.measured.items_per_s,
                "predicted_s": self.predicted_s, "error": self.error,
                "signed_error": self.signed_error,
                "predicted_own_s": self.predicted_own_s, "error_own": self.error_own,
                "breakdown_s": self.breakdown_s, "regions_s": self.regions_s,
                "traced_breakdown_s": traced,
                "unmodelled": [list(row) for row in self.unmodelled],
                "no_predictor": self.no_predictor, "n_tasks": self.n_tasks,
                "traced_s": self.traced_s,
                "overhead_workloads": list(self.overhead_workloads), "bias": self.bias,
                "traced_gaps_s": self.traced_gaps_s, "first_measured_s": self.first_measured_s,
                **({"fit_data": self.fit_data} if self.fit_data else {}),
                **({"contention": self.contention} if self.contention else {}),
                "beyond_fit": self.beyond_fit,
                **({"host_drift": self.host_drift,
                    "predicted_fit_speed_s": self.predicted_fit_speed_s}
                   if self.host_drift else {}),
                **({"host_speed_seen": self.host_speed_seen} if self.host_speed_seen else {}),
                "env": env}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MeasuredIteration:
        """The result an ``"e2e"`` store record (:meth:`record`, as a run file
        holds it) was written from, with the same figures; keys that older
        records lack take their defaults. Its :attr:`graph` is None, and its
        prediction has no timeline, walk or coverage (a record keeps none)."""
        measured = IterationTiming(record["measured_s"], record.get("measured_sd_s", 0.0),
                                   record.get("repeat", 0), record.get("number", 0),
                                   record.get("items_per_s", float("nan")))
        return cls(record["workload"], measured, IterationPrediction.from_plain(record),
                   record.get("predicted_own_s"), tuple(record.get("overhead_workloads") or ()),
                   dict(record.get("bias") or {}), record.get("traced_gaps_s"),
                   record.get("first_measured_s"), record.get("fit_data"),
                   record.get("contention"), record.get("host_drift"),
                   record.get("predicted_fit_speed_s"),
                   host_speed_seen=record.get("host_speed_seen"),
                   traced_breakdown_s=dict(record.get("traced_breakdown_s") or {}))


def traced_breakdown(graph: Graph) -> dict[str, float]:
    """Traced seconds per category of ``graph``, keyed as
    :attr:`IterationPrediction.breakdown_s` is: device time of kernels where the
    task has them, host time otherwise (profiler overhead included); an
    unmodelled node the generic model prices counts as ``generic``."""
    on_device = any(task.kernels for task in graph.tasks)
    out: dict[str, float] = {}
    for task in graph.tasks:
        key = {"overhead": "host overhead", "unmodelled": "unmodelled"}.get(task.kind, task.family)
        if task.kind == "unmodelled" and generic_priced(task, on_device):
            key = "generic"
        out[key] = out.get(key, 0.0) + traced_seconds(task)
    return dict(sorted(out.items()))
