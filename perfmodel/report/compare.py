"""Two runs, two baselines or two devices side by side.

- runs (run ids or ``.jsonl``/``.jsonl.gz`` paths): per workload the measured time of each,
  their ratio and each signed E2E error; per (op, direction) the geometric
  mean, min and max over the shared configs of the ratio of medians B / A.
- baselines (``baseline-<profile>.json`` paths): per workload the mean signed
  error and spread of each, and the change of the mean.
- device keys (folders under the results root): as for runs, over every stored
  run of ``profile`` (per item, the median over runs).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Mapping, Sequence

from perfmodel.report.stats import values_by_run
from perfmodel.store import paths


def resolve(arg: str, results_root: Path, device_key: str | None) -> tuple[str, Path | str]:
    """``("run", path)``, ``("baseline", path)`` or ``("device", key)`` for
    ``arg``; ValueError saying what was tried when it is none of them."""
    path = Path(arg)
    if paths.is_run_file(path) and path.is_file():
        return "run", path
    if path.suffix == ".json" and path.is_file():
        return "baseline", path
    if "/" not in arg and arg not in (".", "..") \
            and paths.runs_dir(paths.device_dir(results_root, arg)).is_dir():
        return "device", arg
    runs = paths.runs_dir(paths.device_dir(results_root, device_key)) if device_key else None
    if device_key is not None and "/" not in arg and arg not in (".", ".."):
        folder = paths.device_dir(results_root, device_key)
        for run in (paths.run_file(folder, arg), paths.compact_run_file(folder, arg)):
            if run.is_file():
                return "run", run
    where = f" or a run id under {runs}" if device_key else ""
    raise ValueError(f"{arg!r} is not a run file (.jsonl, .jsonl.gz), a baseline file (.json), a device "
                     f"key under {results_root}{where}")


def compare(a: str, b: str, results_root: Path, device_key: str | None = None,
            profile: str = "quick") -> list[str]:
    """The comparison of ``a`` and ``b`` (both of one kind) as table lines."""
    (kind_a, ref_a), (kind_b, ref_b) = (resolve(x, results_root, device_key) for x in (a, b))
    if kind_a != kind_b:
        raise ValueError(f"cannot compare a {kind_a} ({a}) with a {kind_b} ({b})")
    if kind_a == "baseline":
        return compare_baselines(ref_a, ref_b)
    if kind_a == "run":
        recs_a, recs_b = _run_records(ref_a), _run_records(ref_b)
    else:
        recs_a, recs_b = (_device_records(results_root, key, profile) for key in (ref_a, ref_b))
    lines = [f"A = {ref_a}", f"B = {ref_b}"]
    lines += e2e_table(recs_a, recs_b)
    lines += ops_table(recs_a, recs_b)
    if len(lines) == 2:
        raise ValueError(f"{a} and {b} share no workload and no op config")
    return lines


def _run_records(path: Path) -> list[dict]:
    from perfmodel.store.results import read_run_file, read_run_header

    key = read_run_header(path).get("device_key")
    if not isinstance(key, str):
        raise ValueError(f"{path}: not a perfmodel run file (no device key in its header)")
    records, problems = read_run_file(path, key)
    if problems and not records:
        raise ValueError(problems[0])
    return records


def _device_records(results_root: Path, key: str, profile: str) -> list[dict]:
    from perfmodel.store.results import ResultStore

    records = [r for r in ResultStore(results_root, key).load().records
               if r.get("profile") == profile]
    if not records:
        raise ValueError(f"no records of profile {profile} under "
                         f"{paths.runs_dir(paths.device_dir(results_root, key))}")
    return records


def _medians(records: Sequence[Mapping], kind: str, metric: str) -> dict[str, float]:
    """Per item, the median over runs of each run's value."""
    return {item: statistics.median(runs.values())
            for item, runs in values_by_run(records, kind, metric).items()}


def e2e_table(a: Sequence[Mapping], b: Sequence[Mapping]) -> list[str]:
    """Per workload in both: measured A, B, B / A, and signed errors A, B."""
    time_a, time_b = _medians(a, "e2e", "measured_s"), _medians(b, "e2e", "measured_s")
    err_a, err_b = _medians(a, "e2e", "error"), _medians(b, "e2e", "error")
    shared = sorted(set(time_a) & set(time_b))
    if not shared:
        return []
    lines = ["", f"{'workload':<20}{'measured A':>12}{'measured B':>12}{'B/A':>7}"
                 f"{'error A':>10}{'error B':>10}"]
    for w in shared:
        lines.append(f"{w:<20}{time_a[w] * 1e3:>10.2f}ms{time_b[w] * 1e3:>10.2f}ms"
                     f"{time_b[w] / time_a[w]:>7.3f}{err_a[w]:>+10.2%}{err_b[w]:>+10.2%}")
    return lines


def ops_table(a: Sequence[Mapping], b: Sequence[Mapping]) -> list[str]:
    """Per (op, direction): shared configs and the geomean, min and max of the
    ratio of medians B / A."""
    med_a = _medians(a, "measurement", "median_s")
    med_b = _medians(b, "measurement", "median_s")
    groups: dict[str, list[float]] = {}
    for item in sorted(set(med_a) & set(med_b)):
        if med_a[item] > 0 and med_b[item] > 0:
            groups.setdefault(item.split(" ", 1)[0], []).append(med_b[item] / med_a[item])
    if not groups:
        return []
    lines = ["", f"{'op.dir':<38}{'configs':>8}{'geomean B/A':>12}{'min':>8}{'max':>8}"]
    for name, ratios in sorted(groups.items()):
        geo = math.exp(statistics.fmean(map(math.log, ratios)))
        short = name.replace(".forward", ".fwd").replace(".backward", ".bwd")
        lines.append(f"{short[:37]:<38}{len(ratios):>8}{geo:>12.3f}{min(ratios):>8.3f}"
                     f"{max(ratios):>8.3f}")
    return lines


def compare_baselines(path_a: Path, path_b: Path) -> list[str]:
    """Per workload: mean ± spread of the signed error in each baseline."""
    from perfmodel.gate.baseline import load_baseline

    a, b = load_baseline(path_a), load_baseline(path_b)
    shared = sorted(set(a.entries) & set(b.entries))
    if not shared:
        raise ValueError(f"{path_a} and {path_b} share no workload")
    lines = [f"A = {path_a} ({a.device_key})", f"B = {path_b} ({b.device_key})", "",
             f"{'workload':<20}{'mean A':>9}{'spread A':>10}{'mean B':>9}{'spread B':>10}"
             f"{'B - A':>9}"]
    for w in shared:
        ea, eb = a.entries[w], b.entries[w]
        lines.append(f"{w:<20}{ea.mean:>+9.2%}{ea.spread:>10.2%}{eb.mean:>+9.2%}"
                     f"{eb.spread:>10.2%}{eb.mean - ea.mean:>+9.2%}")
    return lines

