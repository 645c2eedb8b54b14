"""The compact perfmodel block of the pytest terminal summary (fits 100 columns)."""

from __future__ import annotations

from pytest_perfmodel.session import PerfmodelSession


_SHORT = {"forward": "fwd", "backward": "bwd"}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


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
                     f"{'noise':>7}  {'predictor':<10}{'configs':>7}")
        for name, acc in zip(names, pm.accuracy):
            lines.append(f"{name:<{width}}{_pct(acc.gmae):>7}{_pct(acc.gmae_extrapolation):>8}"
                         f"{_pct(acc.mape):>7}{_pct(acc.max_error):>8}"
                         f"{_pct(acc.noise_floor):>7}  {acc.chosen:<10}{acc.n_configs:>7}")
    if pm.e2e and not quiet:
        lines.append("")
        lines.append(f"{'workload':<20}{'measured':>12}{'sd':>10}{'predicted':>12}{'error':>8}")
        for r in pm.e2e:
            lines.append(f"{r.workload:<20}{r.measured.median_s * 1e3:>10.2f}ms"
                         f"{r.measured.sd_s * 1e3:>8.2f}ms{r.predicted_s * 1e3:>10.2f}ms"
                         f"{_pct(r.error):>8}")
    for problem in pm.problems:
        lines.append(f"WARNING unreadable result data skipped: {problem}")
    if pm.gate.lines:
        if not quiet:
            lines.append("")
        lines.extend(line for line in pm.gate.lines if not quiet or line.startswith("FAIL"))
    return lines
