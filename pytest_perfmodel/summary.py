"""The compact perfmodel block of the pytest terminal summary (fits 100 columns)."""

from __future__ import annotations

from pytest_perfmodel.session import PerfmodelSession


_SHORT = {"forward": "fwd", "backward": "bwd"}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _short(node_name: str) -> str:
    """A trace node name shortened for the summary (``bwd:AddmmBackward0``)."""
    return node_name.replace("autograd::engine::evaluate_function: ", "bwd:") \
        .replace("torch::autograd::", "")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}ms"


def summary_lines(pm: PerfmodelSession, quiet: bool = False) -> list[str]:
    """Lines to print; with ``quiet`` only failures and warnings."""
    lines: list[str] = []
    if not quiet:
        lines.append(f"device {pm.device.key} ({pm.device.name}), profile {pm.options.profile}, "
                     f"results {pm.store.dir}")
    if pm.accuracy and not quiet:
        names = [f"{acc.op}.{_SHORT[acc.direction]}" for acc in pm.accuracy]
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
        lines.append("")
        lines.append(f"{'workload':<20}{'measured':>10}{'sd':>8}{'predicted':>11}{'error':>8}"
                     f"{'own-ovh':>9}{'unmodelled':>12}")
        for r in [*pm.e2e, *pm.user_models]:
            lines.append(f"{r.workload:<20}{_ms(r.measured.median_s):>10}{_ms(r.measured.sd_s):>8}"
                         f"{_ms(r.predicted_s):>11}{_pct(r.error):>8}{_pct(r.error_own):>9}"
                         f"{_pct(r.unmodelled_share):>12}")
        for r in [*pm.e2e, *pm.user_models]:
            top = ", ".join(f"{_short(name)} x{n} {_pct(share)}"
                            for name, n, share in r.unmodelled[:3])
            if top:
                lines.append(f"  {r.workload} unmodelled: {top}"[:100])
    if not quiet:
        lines.extend(pm.notes)
    for problem in pm.problems:
        lines.append(f"WARNING unreadable result data skipped: {problem}")
    if pm.gate.lines:
        if not quiet:
            lines.append("")
        lines.extend(line for line in pm.gate.lines
                     if not quiet or line.startswith(("FAIL", "WARN")))
    return lines
