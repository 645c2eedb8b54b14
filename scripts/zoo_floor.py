"""The zoo's noise floor and errors over every stored zoo run of a device.

    python scripts/zoo_floor.py RESULTS DEVICE_KEY

Reads the ``zoo`` records of every run file under ``RESULTS/DEVICE_KEY/runs/`` and
prints, per model, its measured time in each run, its floor and each run's
signed error; then per half (tuning, scoring), per run, the geomean and worst
|error| beside the geomean and worst floor. A model's floor is the error of a
constant prediction at the median of its measured times:
``mean(|measured - median| / measured)`` over the runs that measured it (the
E2E floor of docs/gate.md#the-e2e-floor).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from perfmodel.store import paths
from perfmodel.store.results import read_run_file


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(max(v, 1e-6)) for v in values)) if values else math.nan


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, key = Path(argv[0]), argv[1]
    runs: dict[str, dict[str, dict]] = {}  # run id -> model -> record
    for path in paths.run_files(paths.device_dir(root, key)):
        records, problems = read_run_file(path, key)
        for problem in problems:
            print(problem, file=sys.stderr)
        zoo = {r["workload"]: r for r in records if r.get("kind") == "zoo"}
        if zoo:
            runs[paths.run_id_of(path)] = zoo
    if not runs:
        print(f"no zoo runs under {paths.device_dir(root, key)}", file=sys.stderr)
        return 1
    ids = sorted(runs)
    models = sorted({m for zoo in runs.values() for m in zoo})
    half = {m: next(zoo[m]["half"] for zoo in runs.values() if m in zoo) for m in models}
    floor = {}
    print(f"{len(ids)} zoo runs: " + ", ".join(ids))
    print(f"{'model':26s} {'half':8s} {'floor':>6s}  measured ms per run | signed error per run")
    for m in models:
        measured = [runs[r][m]["measured_s"] for r in ids if m in runs[r]]
        median = statistics.median(measured)
        floor[m] = statistics.fmean(abs(t - median) / t for t in measured)
        times = " ".join(f"{1e3 * runs[r][m]['measured_s']:6.2f}" if m in runs[r] else "     -"
                         for r in ids)
        errors = " ".join(f"{100 * runs[r][m]['signed_error']:+6.1f}%" if m in runs[r] else
                          "      -" for r in ids)
        print(f"{m:26s} {half[m]:8s} {100 * floor[m]:5.1f}%  {times} | {errors}")
    for h in ("tuning", "scoring"):
        names = [m for m in models if half[m] == h]
        floors = [floor[m] for m in names]
        print(f"{h}: floor geomean {100 * geomean(floors):.1f}%, worst {100 * max(floors):.1f}% "
              f"over {len(names)} models")
        for r in ids:
            errors = [abs(runs[r][m]["signed_error"]) for m in names if m in runs[r]]
            if errors:
                print(f"  {r}: |error| geomean {100 * geomean(errors):.1f}%, worst "
                      f"{100 * max(errors):.1f}% over {len(errors)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
