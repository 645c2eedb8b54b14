"""Gate stability: how often the E2E gate raises a false alarm on unchanged code, and
how often it catches a planted prediction error.

One *round* traces and measures every E2E workload once (what a normal
``pytest suites/test_e2e.py`` run does), then predicts each workload once per
*variant*: no bias, and each planted bias (see :func:`perfmodel.simulate.predict.parse_bias`),
all against the SAME measurement, so the variants differ only by the bias. Each
variant's signed errors are judged by the gate (:func:`perfmodel.gate.baseline.check_errors`)
against the stored baseline, as the gate judges a normal run: a workload whose error
alone fails is measured once more and the repeat decides
(:func:`perfmodel.gate.baseline.error_fails`), and the host-overhead model is checked on the
variant's predicted against the traced host overheads. Over ``n`` rounds the tally
counts, per variant, the rounds in which the gate failed: false alarms for ``none``,
detections for a bias.

The smallest shift the gate can see follows from the baseline alone: a workload
whose error sits at its baseline mean ``m`` fails once the error moves by more than
``allowed - m`` upwards or ``allowed + m`` downwards (``allowed`` =
:meth:`perfmodel.gate.baseline.GatePolicy.allowed`). All errors and shifts are fractions of
the measured iteration time (0.05 = 5%).
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from perfmodel.gate.baseline import Baseline, GatePolicy, check_errors, error_fails
from perfmodel.simulate.predict import parse_bias

#: The planted-bias variants of the experiment: none, the ``linear`` op's predictor
#: and the host-overhead model each 10% and 5% too slow.
DEFAULT_VARIANTS = ("none", "linear=1.1", "linear=1.05", "overhead=1.1", "overhead=1.05")
STABILITY_SCHEMA = 2
#: How a failed host-overhead check shows among a round's failing workloads.
OVERHEAD_MODEL = "host-overhead model"


def variant_bias(variant: str) -> dict[str, float]:
    """``"linear=1.1"`` -> ``{"linear": 1.1}``; ``"none"`` -> ``{}``."""
    return {} if variant == "none" else parse_bias(variant)


def smallest_detectable_shift(baseline: Baseline, policy: GatePolicy) -> dict[str, dict]:
    """Per workload: the baseline mean, the allowed |error|, the smallest shift of
    the error away from the mean that fails the gate, upwards (``up``), downwards
    (``down``) and either way (``smallest``, = ``allowed - |mean|``), and the allowed
    move of the prediction (``allowed_drift``, None without stored predictions)."""
    out = {}
    for name, entry in sorted(baseline.entries.items()):
        allowed = policy.allowed(entry)
        up, down = allowed - entry.mean, allowed + entry.mean
        out[name] = {"mean": entry.mean, "spread": entry.spread, "allowed": allowed,
                     "up": up, "down": down, "smallest": min(up, down),
                     "allowed_drift": policy.allowed_drift(entry)}
    return out


def variant_errors(measured_s: float, predicted_s: Mapping[str, float]) -> dict[str, float]:
    """Signed error (predicted - measured) / measured of each variant's prediction."""
    if not measured_s > 0 or not math.isfinite(measured_s):
        raise ValueError(f"measured time {measured_s!r} s is not a positive number")
    return {v: (p - measured_s) / measured_s for v, p in predicted_s.items()}


def predict_variants(graph, fit, table, on_device: bool,
                     variants: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Per variant, the predicted iteration time (s) of ``graph`` under its bias and
    the predicted host-overhead seconds within it."""
    from perfmodel.simulate.predict import predict_graph

    out = {}
    for v in variants:
        p = predict_graph(graph, fit, table, on_device, keep_timeline=False,
                          bias=variant_bias(v))
        out[v] = (p.total_s, p.breakdown_s.get("host overhead", 0.0))
    return out


@dataclass
class RoundResult:
    """One round: measured time per workload (s), and each variant's signed errors
    and the workloads the gate failed."""

    measured_s: dict[str, float]
    errors: dict[str, dict[str, float]]  # variant -> workload -> signed error
    failed: dict[str, list[str]]  # variant -> workloads (and OVERHEAD_MODEL) that failed
    remeasured_s: dict[str, float] = field(default_factory=dict)  # workload -> repeat (s)
    overhead_ratio: dict[str, float | None] = field(default_factory=dict)  # variant -> ratio

    def to_dict(self) -> dict:
        return {"measured_s": self.measured_s, "errors": self.errors, "failed": self.failed,
                "remeasured_s": self.remeasured_s, "overhead_ratio": self.overhead_ratio}


@dataclass
class StabilityTally:
    """Gate verdicts over repeated rounds, per planted-bias variant."""

    baseline: Baseline
    policy: GatePolicy
    #: training-data id of the fit the rounds predict with (the drift check needs it
    #: to equal the baseline's; see :func:`perfmodel.gate.baseline.check_errors`)
    fit_data: str | None = None
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    rounds: list[RoundResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # workload -> why not run

    def __post_init__(self) -> None:
        for v in self.variants:
            variant_bias(v)  # ValueError on a bad variant, before any round runs
        if "none" not in self.variants:
            raise ValueError("the variants must include 'none' (false alarms)")

    def add_round(self, measured_s: Mapping[str, float],
                  predicted_s: Mapping[str, Mapping[str, float]],
                  overhead_s: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
                  remeasure: Callable[[str], float] | None = None) -> RoundResult:
        """Score one round: ``predicted_s[workload][variant]`` against
        ``measured_s[workload]``, each variant judged by the gate on its own, with
        ``overhead_s[workload][variant]`` its (predicted, traced) host-overhead
        seconds. A workload whose error alone fails under some variant is measured
        again once with ``remeasure(workload)`` (-> s), and the repeat is its
        measurement for those variants, as in a normal gated run."""
        errors: dict[str, dict[str, float]] = {v: {} for v in self.variants}
        for workload, measured in measured_s.items():
            for v, e in variant_errors(measured, predicted_s[workload]).items():
                errors[v][workload] = e
        repeated: dict[str, float] = {}
        for v in self.variants if remeasure is not None else ():
            for w, e in errors[v].items():
                if error_fails(w, e, self.baseline, self.policy):
                    if w not in repeated:
                        repeated[w] = remeasure(w)
                    errors[v][w] = variant_errors(repeated[w], {v: predicted_s[w][v]})[v]
        failed, ratios = {}, {}
        for v in self.variants:
            report = check_errors(errors[v], self.baseline, self.policy,
                                  expected=measured_s.keys(),
                                  predicted_s={w: predicted_s[w][v] for w in measured_s},
                                  fit_data=self.fit_data,
                                  overhead_s={w: o[v] for w, o in (overhead_s or {}).items()})
            failed[v] = [verdict.workload for verdict in report.verdicts if verdict.failed]
            if report.overhead is not None and report.overhead.failed:
                failed[v].append(OVERHEAD_MODEL)
            ratios[v] = None if report.overhead is None else report.overhead.ratio
        result = RoundResult(dict(measured_s), errors, failed, repeated, ratios)
        self.rounds.append(result)
        return result

    # -- the tally ------------------------------------------------------------------
    def failed_rounds(self, variant: str) -> int:
        """Rounds in which the gate failed ``variant`` (any workload)."""
        return sum(1 for r in self.rounds if r.failed[variant])

    def workload_failures(self, variant: str) -> dict[str, int]:
        """Rounds in which each workload failed under ``variant``."""
        counts = {w: 0 for r in self.rounds for w in r.errors[variant]}
        for r in self.rounds:
            for w in r.failed[variant]:
                counts[w] = counts.get(w, 0) + 1
        return dict(sorted(counts.items()))

    def mean_shift(self, variant: str) -> dict[str, float]:
        """Mean over rounds of (error under ``variant`` - error without bias), per
        workload: how far the planted bias moved each workload's error."""
        shifts: dict[str, list[float]] = {}
        for r in self.rounds:
            for w, e in r.errors[variant].items():
                shifts.setdefault(w, []).append(e - r.errors["none"][w])
        return {w: sum(s) / len(s) for w, s in sorted(shifts.items())}

    def to_dict(self) -> dict:
        """JSON-safe summary plus every round's errors."""
        thresholds = smallest_detectable_shift(self.baseline, self.policy)
        n = len(self.rounds)
        return {
            "schema": STABILITY_SCHEMA, "rounds": n,
            "policy": {"k": self.policy.k, "min_margin": self.policy.min_margin},
            "baseline_device_key": self.baseline.device_key,
            "variants": {v: {"bias": variant_bias(v), "failed_rounds": self.failed_rounds(v),
                             "rate": self.failed_rounds(v) / n if n else None,
                             "workload_failures": self.workload_failures(v),
                             "mean_shift": self.mean_shift(v)} for v in self.variants},
            "smallest_detectable_shift": thresholds,
            "skipped": dict(self.skipped),
            "round_results": [r.to_dict() for r in self.rounds],
        }

    def lines(self) -> list[str]:
        """The summary table (fits 100 columns): per workload, the allowed |error|,
        the smallest detectable shift, false alarms, and per planted bias the mean
        shift it caused and how many rounds caught it."""
        n = len(self.rounds)
        thresholds = smallest_detectable_shift(self.baseline, self.policy)
        biased = [v for v in self.variants if v != "none"]
        workloads = sorted({w for r in self.rounds for w in r.errors["none"]})
        out = [f"gate stability: {n} round(s); rounds the gate failed = false alarms (none), "
               f"detections (bias)"]
        out.append(f"{'variant':<15}{'failed rounds':>14}  workloads failing (rounds)")
        for v in self.variants:
            counts = {w: c for w, c in self.workload_failures(v).items() if c}
            detail = ", ".join(f"{w} {c}" for w, c in counts.items()) or "-"
            out.append((f"{v:<15}{self.failed_rounds(v):>9}/{n:<4}  {detail}")[:100])
        out.append("")
        out.append((f"{'workload':<19}{'allowed':>8}{'min shift':>10}{'alarms':>7}"
                    + "".join(f"{v:>14}" for v in biased))[:100])
        shifts = {v: self.mean_shift(v) for v in biased}
        fails = {v: self.workload_failures(v) for v in self.variants}
        for w in workloads:
            t = thresholds.get(w)
            allowed = "n/a" if t is None else f"{t['allowed']:.1%}"
            smallest = "n/a" if t is None else f"{t['smallest']:.1%}"
            cells = "".join(f"{shifts[v].get(w, 0.0):>+8.1%} {fails[v].get(w, 0):>2}/{n:<2}"
                            for v in biased)
            out.append((f"{w:<19}{allowed:>8}{smallest:>10}{fails['none'].get(w, 0):>4}/{n:<2}"
                        + cells)[:100].rstrip())
        out.append("columns per bias: mean shift of the error it planted, rounds it was caught")
        drifts = [f"{w} ±{t['allowed_drift']:.1%}" for w, t in thresholds.items()
                  if w in workloads and t["allowed_drift"] is not None]
        if drifts:
            out.extend(textwrap.wrap("allowed prediction drift: " + ", ".join(drifts), 100))
        ratios = [f"{v} {statistics.median(r):.3f}x" for v in self.variants
                  if (r := [x.overhead_ratio.get(v) for x in self.rounds
                            if x.overhead_ratio.get(v) is not None])]
        if ratios:
            out.extend(textwrap.wrap("host-overhead model, predicted/traced (median of rounds): "
                                     + ", ".join(ratios), 100))
        repeats = sum(len(r.remeasured_s) for r in self.rounds)
        out.append(f"measured again after an error-check failure: {repeats} time(s)")
        for w, why in sorted(self.skipped.items()):
            out.append(f"WARN {w}: not run, so not scored ({why})"[:100])
        return out


def run_rounds(tally: StabilityTally, rounds: int,
               run_round: Callable[[], tuple],
               on_round: Callable[[int, RoundResult], None] | None = None) -> StabilityTally:
    """Call ``run_round()`` (-> the positional arguments of
    :meth:`StabilityTally.add_round`) ``rounds`` times and add each to ``tally``."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    for index in range(rounds):
        result = tally.add_round(*run_round())
        if on_round is not None:
            on_round(index, result)
    return tally


def workloads_to_run(baseline: Baseline, registered: Iterable[str]) -> list[str]:
    """The registered workloads the baseline gates, sorted."""
    return sorted(set(baseline.entries) & set(registered))


def measure_variants(step: Callable[[], object], items: int, graph, fit, table, device: str,
                     variants: Sequence[str], profile: str
                     ) -> tuple[float, dict[str, float], dict[str, tuple[float, float]]]:
    """Predict ``graph`` under each variant, then measure ``step`` once as a normal
    E2E item of ``profile`` does (:func:`perfmodel.e2e.single.measure_profile`). Returns the
    measured median (s), the predicted time (s) per variant, and per variant the
    (predicted, traced) host-overhead seconds."""
    from perfmodel.e2e.single import measure_profile
    from perfmodel.trace.overheads import traced_gaps_s

    predicted = predict_variants(graph, fit, table, device.startswith("cuda"), variants)
    traced = traced_gaps_s(graph)
    return (measure_profile(step, items, device, profile).median_s,
            {v: total for v, (total, _) in predicted.items()},
            {v: (gaps, traced) for v, (_, gaps) in predicted.items()})
