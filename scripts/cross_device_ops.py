"""Judge the data-sheet move of :mod:`perfmodel.fit.transfer` op by op: for every
config that two devices' run files both measured, predict one device's time from
the other's measured time, once kept as it is and once moved by the bound share,
and print the GMAE of each, both ways, overall and per op family.

    python scripts/cross_device_ops.py RESULTS KEY_A RUN_A KEY_B RUN_B

Nothing is fitted: the move reads only the two devices' stored specs
(``RESULTS/<key>/device.json``). The within-run noise floor (GMAE between a
config's two replicates) is printed beside each device.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from perfmodel.fit.fitting import stored_spec
from perfmodel.fit.metrics import gmae
from perfmodel.fit.transfer import bound_s, moved_time
from perfmodel.ops import get_op
from perfmodel.store.results import ResultStore, read_run_file


def medians(root: Path, key: str, run_id: str) -> tuple[dict, float]:
    """Median seconds per (op, direction, dtype, config, cache), and the GMAE
    between each config's first two replicates."""
    records, problems = read_run_file(ResultStore(root, key).run_file(run_id), key)
    for problem in problems:
        print(f"{key}: {problem}", file=sys.stderr)
    times = defaultdict(list)
    for r in records:
        if r.get("kind") != "measurement":
            continue
        config = tuple(sorted(r["config"].items()))
        times[(r["op"], r["direction"], r["dtype"], config, r["measurement"].get("cache"))
              ].append(r["measurement"]["median_s"])
    pairs = [v[:2] for v in times.values() if len(v) >= 2]
    floor = gmae([a for a, _ in pairs], [b for _, b in pairs]) if pairs else float("nan")
    return {k: statistics.median(v) for k, v in times.items()}, floor


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    (a, floor_a), (b, floor_b) = medians(root, argv[1], argv[2]), medians(root, argv[3], argv[4])
    specs = {argv[1]: stored_spec(ResultStore(root, argv[1]), None),
             argv[3]: stored_spec(ResultStore(root, argv[3]), None)}
    print(f"noise floor (replicates): {argv[1]} {100 * floor_a:.2f}%, {argv[3]} {100 * floor_b:.2f}%")
    shared = sorted(set(a) & set(b))
    for (src_key, src), (dst_key, dst) in (((argv[1], a), (argv[3], b)), ((argv[3], b), (argv[1], a))):
        rows = defaultdict(lambda: ([], [], []))  # family -> measured, kept, moved
        for k in shared:
            op_name, direction, dtype, config, _ = k
            op = get_op(op_name)
            if op.family == "collective":
                continue
            flops, moved = op.size(op.complete_config(dict(config)), dtype, direction)
            t = src[k]
            guess = moved_time(t, bound_s(flops, moved, dtype, specs[src_key]),
                               bound_s(flops, moved, dtype, specs[dst_key]))
            for family in (op.family, "all"):
                rows[family][0].append(dst[k])
                rows[family][1].append(t)
                rows[family][2].append(guess)
        print(f"{src_key} -> {dst_key}: {len(rows['all'][0])} shared configs")
        for family, (measured, kept, moved_) in sorted(rows.items(), key=lambda kv: kv[0] != "all"):
            print(f"  {family:12s} n={len(measured):4d}  kept GMAE {100 * gmae(kept, measured):5.1f}%"
                  f"  moved GMAE {100 * gmae(moved_, measured):5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
