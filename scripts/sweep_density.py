"""How much of the quick sweep the fits need: refit from subsets of one stored
main-job run and score each fit on configs none of them trained on, and on the
committed replay cases (E2E).

Every variant trains on the same 75% of the run's configs (a fixed hash of op,
direction, dtype and config decides) and is scored on the other 25%:

- ``all``: both replicates of every training config (what the main job measures today);
- ``rep0``: the first replicate only;
- ``rep0-half`` and ``rep0-third``: the first replicate of 1/2 and 1/3 of the
  training configs (again by hash);
- ``quarter``: the second replicate only of the cases the profile now measures
  twice (:func:`perfmodel.measure.bench.replicates_for`);
- ``quarter-b/2``: the same, with each replicate that stopped on its sampling
  budget cut to its first half of samples (as half the budget would have taken).

For each it prints the sweep time those records took (samples plus warm-up,
from the records), the median and worst held-out GMAE over (op, direction),
and the E2E error of each single-rank replay case of the device with that fit.

Usage (from the repository root; several minutes)::

    .venv/bin/python scripts/sweep_density.py [RUN_ID] [--device KEY]

RUN_ID defaults to the device's newest run of profile ``quick`` that holds
measurements. See docs/journal/2026-11-28-main-job-time.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from perfmodel.e2e.single import shared_table
from perfmodel.fit.fitting import fit_predictors, samples_from_records, stored_spec
from perfmodel.fit.metrics import gmae
from perfmodel.replay.case import load_case
from perfmodel.replay.rerun import replay_case
from perfmodel.measure.bench import replicates_for
from perfmodel.measure.timer import stored_samples_s
from perfmodel.ops import OpCase, get_op
from perfmodel.store import paths
from perfmodel.store.results import ResultStore, read_run_file, read_run_header


def record_case(record: dict) -> OpCase:
    """The case a measurement record measured."""
    op = get_op(record["op"])
    config = op.complete_config(record["config"])
    return OpCase(op.name, record["direction"], record["dtype"],
                  tuple((p, int(config[p])) for p in op.params))


def bucket(record: dict, n: int, salt: str) -> int:
    """A stable bucket in [0, n) of a record's (op, direction, dtype, config)."""
    key = json.dumps([salt, record["op"], record["direction"], record["dtype"],
                      record["config"]], sort_keys=True)
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % n


def sweep_seconds(records: list[dict]) -> float:
    """Seconds the records' sampling and warm-up took (their timed calls)."""
    total = 0.0
    for r in records:
        m = r["measurement"]
        total += sum(stored_samples_s(m)) * m["number"] + m["warmup_n"] * m["median_s"]
    return total


def half_budget(record: dict) -> dict:
    """``record`` as half its sampling budget would have measured it: a replicate
    that stopped on the budget keeps its first half of samples (median recomputed)."""
    m = record["measurement"]
    samples = stored_samples_s(m)
    if m["stop_reason"] != "budget" or len(samples) < 10:
        return record
    kept = samples[: len(samples) // 2]
    rest = {k: v for k, v in m.items() if k != "samples_pct"}
    return {**record, "measurement": {**rest, "samples_s": kept, "n": len(kept),
                                      "median_s": float(np.median(kept))}}



def newest_quick_run(store: ResultStore) -> Path:
    for path in reversed(paths.run_files(store.dir)):
        header = read_run_header(path)
        if header.get("profile") == "quick" and path.stat().st_size > 1_000_000:
            return path
    raise SystemExit(f"no quick run with measurements under {store.dir}")


def held_out_gmae(fit, held: list[dict]) -> dict[tuple[str, str], float]:
    """Per (op, direction) the GMAE of ``fit`` on the held-out records."""
    out = {}
    for key, samples in samples_from_records(held).items():
        predictor = fit.predictors.get(key)
        if predictor is None or not samples:
            continue
        X = predictor.feature_matrix((s.dtype, dict(s.params)) for s in samples)
        pred = predictor.estimator.predict(X)
        out[key] = gmae(pred, np.array([s.seconds for s in samples]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", default=None)
    parser.add_argument("--device", default="cpu-amd-epyc-f25m1-2c")
    parser.add_argument("--variants", default=None,
                        help="comma-separated variant names (default: all)")
    args = parser.parse_args()
    store = ResultStore("results", args.device)
    if args.run:
        path = next(p for p in paths.run_files(store.dir) if paths.run_id_of(p) == args.run)
    else:
        path = newest_quick_run(store)
    records, problems = read_run_file(path, args.device)
    measurements = [r for r in records if r["kind"] == "measurement"]
    threads = measurements[0]["env"]["threads"]
    device = stored_spec(store, threads)
    print(f"run {paths.run_id_of(path)}: {len(measurements)} measurement records, "
          f"{threads} thread(s); {len(problems)} problem(s)")
    train = [r for r in measurements if bucket(r, 4, "held") != 0]
    held = [r for r in measurements if bucket(r, 4, "held") == 0 and r["replicate"] == 0]
    variants = {
        "all": train,
        "rep0": [r for r in train if r["replicate"] == 0],
        "rep0-half": [r for r in train if r["replicate"] == 0 and bucket(r, 2, "keep") == 0],
        "rep0-third": [r for r in train if r["replicate"] == 0 and bucket(r, 3, "keep") == 0],
    }
    twice = [r for r in train
             if r["replicate"] == 0 or replicates_for(record_case(r), "quick") == 2]
    variants["quarter"] = twice
    variants["quarter-b/2"] = [half_budget(r) for r in twice]
    if args.variants:
        variants = {k: variants[k] for k in args.variants.split(",")}
    cases = {w: load_case(p) for w, p in paths.replay_files(store.dir).items()
             if "@" not in w and "_tiny" not in w and "_full" not in w}
    cases = {w: c for w, c in cases.items() if c.threads == threads and not c.on_device}
    tables = {}
    print(f"held out: {len(held)} records; replay cases: {', '.join(sorted(cases))}")
    print(f"{'variant':<11}{'records':>8}{'sweep s':>9}{'fit s':>7}{'med GMAE':>9}"
          f"{'p90 GMAE':>9}{'E2E GMAE':>9}  per workload")
    for name, chosen in variants.items():
        started = time.monotonic()
        fit = fit_predictors(chosen, device)
        fit_s = time.monotonic() - started
        scores = held_out_gmae(fit, held)
        values = sorted(scores.values())
        errors = {}
        for workload, case in sorted(cases.items()):
            if case.bandwidth_Bps not in tables:
                tables[case.bandwidth_Bps] = shared_table(store.dir, case.bandwidth_Bps)[0]
            out = replay_case(case, fit, tables[case.bandwidth_Bps])
            if out.predicted_s and case.measured_s:
                errors[workload] = out.predicted_s / case.measured_s - 1
        e2e = math.exp(statistics.fmean(math.log(abs(e) + 1e-4) for e in errors.values()))
        print(f"{name:<11}{len(chosen):>8}{sweep_seconds(chosen):>9.0f}{fit_s:>7.0f}"
              f"{values[len(values) // 2]:>9.1%}{values[int(0.9 * len(values))]:>9.1%}"
              f"{e2e:>9.1%}  " + " ".join(f"{w}:{e:+.1%}" for w, e in errors.items()),
              flush=True)


if __name__ == "__main__":
    main()
