"""Replay a results folder's multi-rank cases with each op's own drift and with
the two reference ops alone, side by side.

    python scripts/op_drift_replay.py RESULTS DEVICE_KEY

A case saved before ``op_drift`` existed gets the factors
:func:`perfmodel.e2e.ranks.sweep_op_drift` computes from RESULTS now, so run it
on the results of the session that measured the cases (a fresh clone's main
job). Prints one line per variant: each case's error and the GMAE.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from perfmodel.e2e.ranks import sweep_op_drift
from perfmodel.fit.fitting import load_latest_fit
from perfmodel.measure.drift import OpDrift
from perfmodel.replay import rerun
from perfmodel.replay.case import load_case
from perfmodel.store import paths
from perfmodel.store.results import ResultStore


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, key = Path(argv[0]), argv[1]
    store = ResultStore(root, key)
    ranks = sorted(w for w, p in paths.replay_files(store.dir).items()
                   if load_case(p).ranks is not None)
    if not ranks:
        print(f"no multi-rank replay cases under {paths.replay_dir(store.dir)}", file=sys.stderr)
        return 2
    fit, _ = load_latest_fit(store, threads=1)
    factors, note = sweep_op_drift(store, fit, 2)
    print(note)
    base = rerun._host_model

    def variant(mode):
        def host(case, fit):
            model = base(case, fit)
            drift = model.drift.fallback if isinstance(model.drift, OpDrift) else model.drift
            if mode == "reference ops":
                return replace(model, drift=drift)
            if isinstance(model.drift, OpDrift):
                return model
            return replace(model, drift=OpDrift(factors, drift))
        return host

    for mode in ("reference ops", "op drift"):
        rerun._host_model = variant(mode)
        try:
            done = rerun.replay_device(root, key, None, ranks)
        finally:
            rerun._host_model = base
        cells = " ".join(f"{c.workload} {100 * c.error:+.1f}%" for c in done.cases
                         if c.error is not None)
        print(f"{mode:14s} {cells}  GMAE {100 * done.gmae:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
