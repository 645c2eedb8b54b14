"""Copy one device's results with the measurements of the workloads' own op calls
left out, so that a fit of the copy is scored on held-out configs.

    python scripts/without_workload_calls.py RESULTS KEY OUT
    perfmodel refit --results OUT --device KEY
    perfmodel replay --results OUT --device KEY

The `gpu` profile adds the exact op calls of the built-in workloads
(``perfmodel/ops/workload_calls.json``) to each op's configs, so a replay of
those workloads with that fit is scored on calls the fit was trained on. This
copies ``RESULTS/KEY`` to ``OUT/KEY`` without its fits, and rewrites every run
file without the measurement records whose (op, direction, dtype, config)
is one of those calls. Prints how many records each run lost.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

from perfmodel.ops import get_op
from perfmodel.ops.workload_calls import load_calls
from perfmodel.store import paths
from perfmodel.store.results import read_run_text


def call_keys() -> set[tuple]:
    keys = set()
    for call in load_calls():
        op = get_op(call.op)
        keys.add((call.op, call.direction, call.dtype,
                  tuple(sorted(op.complete_config(dict(call.params)).items()))))
    return keys


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, key, out = Path(argv[0]), argv[1], Path(argv[2])
    source, target = paths.device_dir(root, key), paths.device_dir(out, key)
    if target.exists():
        print(f"{target} exists: give an empty OUT", file=sys.stderr)
        return 2
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("predictors", "traces"))
    keys = call_keys()
    for run in paths.run_files(target):
        lines = [line for line in read_run_text(run).split("\n") if line.strip()]
        kept = []
        for line in lines:
            r = json.loads(line)
            if r.get("kind") == "measurement":
                op = get_op(r["op"])
                k = (r["op"], r["direction"], r["dtype"],
                     tuple(sorted(op.complete_config(r["config"]).items())))
                if k in keys:
                    continue
            kept.append(r)
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
        if run.suffix == ".gz":
            with gzip.open(run, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            run.write_text(text, encoding="utf-8")
        print(f"{run.name}: {len(lines) - len(kept)} of {len(lines)} records left out")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
