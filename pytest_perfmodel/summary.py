"""The compact perfmodel block of the pytest terminal summary (fits 100 columns)."""

from __future__ import annotations

import math
import textwrap

from perfmodel.measure.timer import WIDE_SPREAD_REL_IQR
from perfmodel.ops.base import base_direction
from perfmodel.ops.collective import HOST_CPU, LOADED
from perfmodel.session import Session
from perfmodel.simulate.predict import furthest_beyond

#: Columns the block fits in. Longer gate warnings (prose) are wrapped; a FAIL
#: line and a line naming a file stay whole, so they can be searched for.
WIDTH = 100


_SHORT = {"forward": "fwd", "backward": "bwd", HOST_CPU: "cpu", LOADED: "load"}


def _short_direction(direction: str) -> str:
    """``forward`` -> ``fwd``; a warm timing's ``backward_warm`` -> ``bwd.warm``."""
    base = base_direction(direction)
    short = _SHORT.get(base, base)
    return short if base == direction else f"{short}.warm"


#: The gate's verdict statuses as the E2E table shows them.
_VERDICT = {"ok": "ok", "regressed": "FAIL", "drifted": "FAIL drift",
            "over_ceiling": "FAIL ceiling", "new": "new",
            "missing": "FAIL missing", "invalid": "FAIL invalid"}


def _pct(value: float | None, sign: str = "") -> str:
    return "n/a" if value is None else f"{value:{sign}.1%}"


def _short(node_name: str) -> str:
    """A trace node name shortened for the summary (``bwd:AddmmBackward0``)."""
    return node_name.replace("autograd::engine::evaluate_function: ", "bwd:") \
        .replace("torch::autograd::", "")


def _short_op(key: str) -> str:
    """``linear.forward`` -> ``linear.fwd``."""
    op, _, direction = key.rpartition(".")
    return f"{op}.{_short_direction(direction)}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}ms"


def summary_lines(pm: Session, quiet: bool = False) -> list[str]:
    """Lines to print; with ``quiet`` only failures and warnings."""
    lines: list[str] = []
    if not quiet and pm.device_detected:  # replay items never detect the device
        lines.append(f"device {pm.device.key} ({pm.device.name}), profile {pm.options.profile}"
                     [:100])
        lines.append(f"results {pm.store.dir}")
    if pm.accuracy and not quiet:
        names = [f"{acc.op}.{_short_direction(acc.direction)}" for acc in pm.accuracy]
        width = max(len("op.dir"), *map(len, names)) + 1
        lines.append("")
        lines.append(f"{'op.dir':<{width}}{'GMAE':>7}{'extrap':>8}{'MAPE':>7}{'max':>8}"
                     f"{'noise':>7}{'runs':>7}  {'predictor':<10}{'configs':>7}")
        for name, acc in zip(names, pm.accuracy):
            lines.append(f"{name:<{width}}{_pct(acc.gmae):>7}{_pct(acc.gmae_extrapolation):>8}"
                         f"{_pct(acc.mape):>7}{_pct(acc.max_error):>8}"
                         f"{_pct(acc.noise_floor):>7}{_pct(acc.noise_floor_runs):>7}  "
                         f"{acc.chosen:<10}{acc.n_configs:>7}")
    if (pm.e2e or pm.user_models) and not quiet:
        verdicts = {v.workload: v for v in pm.gate.verdicts}
        lines.append("")
        lines.append(f"{'workload':<20}{'measured':>10}{'sd':>8}{'predicted':>11}{'error':>8}"
                     f"{'own-ovh':>8}{'unmod':>7}{'baseline':>9}{'floor':>7}  {'verdict'}")
        rows = [(r, verdicts.get(r.workload)) for r in pm.e2e] + \
            [(r, None) for r in pm.user_models]  # user models are not gated
        for r, v in rows:
            entry = v.entry if v is not None else None
            lines.append(f"{r.workload[:19]:<20}{_ms(r.measured.median_s):>10}"
                         f"{_ms(r.measured.sd_s):>8}{_ms(r.predicted_s):>11}"
                         f"{_pct(r.signed_error, '+'):>8}{_pct(r.error_own):>8}"
                         f"{_pct(r.unmodelled_share):>7}"
                         f"{_pct(entry.mean if entry else None, '+'):>9}"
                         f"{_pct(entry.noise_floor if entry else None):>7}  "
                         f"{_VERDICT.get(v.status, v.status) if v else '-'}")
        lines.extend(geomean_lines(pm.e2e, verdicts))
        for r in [*pm.e2e, *pm.user_models]:
            top = ", ".join(f"{_short(name)} x{n} {_pct(share)}"
                            for name, n, share in r.unmodelled[:3])
            if top:
                lines.append(f"  {r.workload} unmodelled: {top}"[:100])
            far = furthest_beyond(r.beyond_fit)
            if far:
                (key, (n, ratio)), rest = far[0], far[1:]
                lines.append(f"WARN {r.workload}: extrapolated beyond the fitted configs: "
                             f"{_short_op(key)} ({n} calls, up to {ratio:.0f}x the largest "
                             f"fitted config's FLOPs or bytes)" + "".join(
                                 f", {_short_op(k)} ({c} calls, up to {x:.0f}x)"
                                 for k, (c, x) in rest))
            if r.host_drift:
                lines.append(f"  {r.workload} host since the fit: compute "
                             f"x{r.host_drift['compute']:.2f}, memory x{r.host_drift['memory']:.2f}"
                             f" (at the fit's speed {_ms(r.model_predicted_s).strip()})")
    if pm.zoo and not quiet:
        lines.extend(zoo_lines(pm.zoo))
    if not quiet:
        lines.extend(pm.notes)
    if pm.wide_spread:
        shown = ", ".join(pm.wide_spread[:3]) + (", ..." if len(pm.wide_spread) > 3 else "")
        lines.append(f"WARN {len(pm.wide_spread)} of {pm.measured} measurements spread wide "
                     f"(IQR over {WIDE_SPREAD_REL_IQR:.0%} of the median: a noisy host?): {shown}")
    for problem in pm.problems:
        lines.append(f"WARNING unreadable result data skipped: {problem}")
    if pm.gate.lines:
        if not quiet:
            lines.append("")
        lines.extend(line for line in pm.gate.lines
                     if not quiet or line.startswith(("FAIL", "WARN")))
    decision = pm.gate.decision()
    if decision and (not quiet or decision.startswith("FAIL")):
        lines.append(decision)
    return [part for line in lines for part in (
        textwrap.wrap(line, WIDTH, subsequent_indent="     ", break_long_words=False,
                      break_on_hyphens=False) if line.startswith("WARN ") else [line])]


def zoo_lines(zoo) -> list[str]:
    """The zoo's table (half, measured, predicted, error, coverage by op
    definitions, generic model and host-only nodes, unmodelled share) and each
    half's geomean |error|."""
    lines = ["", f"{'zoo model':<24}{'half':<9}{'measured':>10}{'predicted':>11}{'error':>8}"
                 f"{'by op':>7}{'generic':>8}{'host':>7}{'unmod':>7}"]
    for half, r in sorted(zoo, key=lambda hr: (hr[0] != "tuning", hr[1].workload)):
        cover = r.prediction.coverage
        lines.append(f"{r.workload[:23]:<24}{half:<9}{_ms(r.measured.median_s):>10}"
                     f"{_ms(r.predicted_s):>11}{_pct(r.signed_error, '+'):>8}"
                     f"{_pct(cover.by_op if cover else None):>7}"
                     f"{_pct(cover.by_generic if cover else None):>8}"
                     f"{_pct(cover.by_host if cover else None):>7}"
                     f"{_pct(cover.unmodelled if cover else None):>7}")
    for half in ("tuning", "scoring"):
        errors = [r.error for h, r in zoo if h == half and r.error > 0]
        if errors:
            lines.append(f"zoo {half} half: geomean |error| {_pct(geomean(errors))}, worst "
                         f"{_pct(max(errors))} over {len(errors)} model(s)")
    return lines


def geomean_lines(results, verdicts) -> list[str]:
    """The geometric mean of the single-rank workloads' |error| (shared and own
    overheads) beside that of their baseline entries' noise floors; none for
    fewer than 2 such workloads. Multi-rank workloads (``name@ranks``) are left
    out: their targets are per workload."""
    single = [r for r in results if "@" not in r.workload and r.error > 0]
    if len(single) < 2:
        return []
    line = (f"geomean |error| of {len(single)} workloads: {_pct(geomean(r.error for r in single))}"
            f" shared, {_pct(geomean(r.error if r.error_own is None else r.error_own for r in single))}"
            f" own overheads")
    floors = [v.entry.noise_floor for r in single
              if (v := verdicts.get(r.workload)) is not None and v.entry is not None
              and v.entry.noise_floor]
    if len(floors) == len(single):
        line += f"; floor {_pct(geomean(floors))}"
    return [line]


def geomean(values) -> float:
    """Geometric mean of ``values`` (fractions), each taken as at least 1e-6."""
    values = [max(v, 1e-6) for v in values]
    return math.exp(sum(math.log(v) for v in values) / len(values))
