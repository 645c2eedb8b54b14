"""The ``perfmodel`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def _devices(args: argparse.Namespace) -> int:
    from perfmodel.device.probe import detect_device

    spec = detect_device(args.device, Path(args.results), threads=args.threads)
    print(json.dumps(spec.to_dict(), indent=2, sort_keys=True))
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from perfmodel.device.probe import detect_device
    from perfmodel.gate.baseline import (baseline_errors, built_from_sessions, overhead_ratios,
                                         save_baseline)
    from perfmodel.settings import load_settings
    from perfmodel.store.results import ResultStore

    policy = load_settings(Path("pyproject.toml")).gate_policy()
    if args.check is not None:
        return _check_baseline(Path(args.check), policy)

    spec = detect_device(args.device, Path(args.results), threads=args.threads)
    store = ResultStore(Path(args.results), spec.key)
    loaded = store.load("e2e")
    for problem in loaded.problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    chosen = baseline_errors(loaded.records, args.profile, args.last)
    for workload in chosen.left_out:
        print(f"left out {workload}: fewer than {args.last} runs", file=sys.stderr)
    fit_data = {w: _baseline_fit_data(w, fits, store, spec.threads)
                for w, fits in chosen.fits.items()}
    path = store.baseline_path(args.profile)
    saved = save_baseline(path, spec.key, chosen.errors, chosen.env,
                          predicted_by_workload=chosen.predicted_s, fit_data=fit_data,
                          overhead_by_workload=chosen.overhead_s,
                          built=built_from_sessions(chosen.run_ids))
    for workload, entry in saved.entries.items():
        print(_entry_line(workload, entry))
    with_overhead = [w for w, e in saved.entries.items() if e.overhead_s]
    ratios = overhead_ratios(saved, with_overhead)
    if ratios:
        print(f"host-overhead model: predicted/traced "
              f"{', '.join(f'{r:.3f}x' for r in ratios)} over {len(ratios)} run(s) of "
              f"{len(with_overhead)} workload(s)")
    _print_held_out(saved, chosen.workload_run_ids, policy)
    note = saved.floor_note()
    print(note or f"{len(chosen.run_ids)} sessions over "
                  f"{saved.built['span_s'] / 3600:.1f} h: the allowance covers the floor "
                  f"between sessions")
    print(f"wrote {path}")
    return 0


def _entry_line(workload: str, entry, extra: str = "") -> str:
    """One baseline entry's line: mean, spread, runs, ``extra``, E2E floor."""
    floor = "" if entry.noise_floor is None else f"  floor {entry.noise_floor:6.2%}"
    return (f"{workload:<22} mean {entry.mean:+7.2%}  spread {entry.spread:6.2%}  n {entry.n}"
            f"{extra}{floor}")


def _check_baseline(path: Path, policy) -> int:
    """Print the baseline file at ``path`` and its leave-one-run-out check under
    ``policy``, writing nothing (``perfmodel baseline --check``)."""
    from perfmodel.gate.baseline import load_baseline

    saved = load_baseline(path)
    if saved is None:
        raise ValueError(f"{path}: no such baseline file")
    for workload, entry in saved.entries.items():
        print(_entry_line(workload, entry, f"  allowed {policy.allowed(entry):6.2%}"))
    runs = [str(r) for r in (saved.built or {}).get("runs", [])]
    # a session baseline lists its runs sorted, as each workload's errors are
    run_ids = {w: runs for w, e in saved.entries.items() if len(runs) == e.n}
    _print_held_out(saved, run_ids, policy)
    return 0


def _print_held_out(saved, run_ids: dict, policy) -> None:
    """Print the leave-one-run-out check of ``saved`` (a
    :class:`~perfmodel.gate.baseline.Baseline`) under ``policy``: per workload,
    the runs the gate fails against the other runs and the tightest error; then
    the runs with any workload failed."""
    from perfmodel.gate.baseline import held_out_runs

    checks = [check for workload, entry in saved.entries.items()
              if (check := held_out_runs(workload, entry, policy,
                                         run_ids.get(workload, ()))) is not None]
    if not checks:
        return
    bound = (f"at its upper {policy.spread_confidence:.0%} bound" if policy.spread_confidence
             else "as measured")
    print(f"leave one run out: each run judged against the other runs "
          f"(k {policy.k:g}, spread {bound}):")
    outside: set[str] = set()
    for check in checks:
        worst = check.tightest
        outside |= {check.run_ids[i] for i in check.outside}
        drifted = sum(check.statuses[i] == "drifted" for i in check.outside)
        how = f" ({drifted} by the drift check)" if drifted else ""
        print(f"  {check.workload:<22} {len(check.outside)} of {len(check.errors)} failed{how}; "
              f"tightest error {check.run_ids[worst]}: {check.errors[worst]:+.2%} against "
              f"{check.allowed[worst]:.2%}")
    every = {run for check in checks for run in check.run_ids}
    named = f" ({', '.join(sorted(outside))})" if outside else ""
    print(f"runs failed by the others: {len(outside)} of {len(every)}{named}")


def _baseline_fit_data(workload: str, fits: set, store, threads: int | None) -> str | None:
    """The training-data id ``workload``'s baseline runs predicted with: theirs when
    they all carry the same one; for runs stored before records carried it, the
    newest stored fit's (said on stderr); None (no drift check) when they differ."""
    from perfmodel.fit.fitting import load_latest_fit

    known = fits - {None}
    if len(known) > 1:
        print(f"note: {workload}'s runs used different fits; its baseline checks errors only",
              file=sys.stderr)
        return None
    if known:
        return known.pop()
    fit, _ = load_latest_fit(store, threads=threads)
    if fit is None or not fit.data_id:
        return None
    print(f"note: {workload}'s runs carry no fit id; assuming they predicted with the "
          f"newest stored fit ({fit.data_id})", file=sys.stderr)
    return fit.data_id


def this_machine_keys() -> list[str]:
    """The device keys of this machine, without measuring anything: each visible
    CUDA device's (when torch sees one), then the CPU's."""
    from perfmodel.device.probe import cpu_device_key

    keys = []
    try:
        import torch

        if torch.cuda.is_available():
            from perfmodel.device.probe import cuda_spec_from_properties

            keys += [cuda_spec_from_properties(torch.cuda.get_device_properties(i), i).key
                     for i in range(torch.cuda.device_count())]
    except (ImportError, RuntimeError):  # no torch, or a broken CUDA setup: the CPU only
        pass
    return list(dict.fromkeys(keys + [cpu_device_key()]))


def pick_report_device(root: Path, machine_keys: list[str]) -> str:
    """The device key ``perfmodel report`` reports without ``--device``: the first of
    ``machine_keys`` that has results under ``root``; ValueError naming the keys
    that do otherwise."""
    from perfmodel.store import paths

    if not root.is_dir():
        raise ValueError(f"no results folder at {root}")
    stored = paths.device_keys(root)
    for key in machine_keys:
        if key in stored:
            return key
    raise ValueError(f"no results for this machine ({' or '.join(machine_keys) or 'unknown'}) "
                     f"under {root}; devices with results: {', '.join(stored) or 'none'}; "
                     f"pick one with --device")


def _report(args: argparse.Namespace) -> int:
    from perfmodel.report import build_report
    from perfmodel.settings import load_settings

    device = args.device
    if device is None:
        device = pick_report_device(Path(args.results), this_machine_keys())
    path = build_report(Path(args.results), device, args.profile, args.out,
                        load_settings(Path("pyproject.toml")),
                        progress=lambda line: print(f"perfmodel report: {line}", file=sys.stderr))
    print(f"wrote {path}")
    return 0


def _device_key(args: argparse.Namespace) -> str:
    from perfmodel.report.data import resolve_device_key

    return resolve_device_key(Path(args.results), args.device)


def _compare(args: argparse.Namespace) -> int:
    from perfmodel.report.compare import compare

    root = Path(args.results)
    files = Path(args.a).is_file() and Path(args.b).is_file()  # need no device to find them
    key = _device_key(args) if args.device or (root.is_dir() and not files) else None
    print("\n".join(compare(args.a, args.b, root, key, args.profile)))
    return 0


def _predict(args: argparse.Namespace) -> int:
    """Print the IterationPrediction of a saved trace, or the MeasuredIteration of
    a workload (measured with --measure)."""
    from perfmodel.e2e.forecast import forecast_trace, forecast_workload, trace_name

    if (args.workload is None) == (args.trace is None):
        raise ValueError("give a workload name or --trace ET_FILE, not both or neither")
    if args.trace is not None:
        if args.measure:
            raise ValueError("--measure needs a workload: a saved trace cannot be run")
        prediction = forecast_trace(Path(args.trace), args.kineto and Path(args.kineto),
                                    args.calibration and Path(args.calibration),
                                    Path(args.results), args.device, args.threads)
        lines = prediction.lines(trace_name(Path(args.trace)))
    else:
        try:
            result = forecast_workload(args.workload, Path(args.results), args.device,
                                       args.size, args.seed, args.measure, args.threads)
        except ImportError as exc:
            raise ValueError(f"workload {args.workload} needs a missing package ({exc})") from None
        lines = result.lines()
    print("\n".join(lines))
    return 0


def _drift(args: argparse.Namespace) -> int:
    import torch

    from perfmodel.measure.allocator import keep_freed_memory
    from perfmodel.device.probe import detect_device
    from perfmodel.measure.drift import drift_record, probe, summarise
    from perfmodel.measure.env import environment
    from perfmodel.plaindata import write_json_atomic
    from perfmodel.store.results import ResultStore, new_run_id

    spec = detect_device(args.device, Path(args.results), threads=args.threads)
    if spec.kind != "cpu":
        raise ValueError(f"drift probes a CPU host; {spec.key} is not a CPU")
    torch.set_num_threads(spec.threads or 1)
    keep_freed_memory()
    step = max(1, round(10 / max(args.interval, 0.05)))

    def progress(sample) -> None:
        if sample.t_s > 0 and len(samples_seen) % step == 0:
            print(f"perfmodel drift: {sample.t_s:5.1f} s "
                  + "  ".join(f"{k} {v * 1e6:.0f} us" for k, v in sample.seconds.items()),
                  file=sys.stderr)
        samples_seen.append(sample)

    samples_seen: list = []
    samples = probe(args.seconds, args.interval, args.calls, progress=progress)
    print(f"{'op':<8}{'samples':>8}{'min':>11}{'median':>11}{'max':>11}{'max/min':>9}"
          f"{'GMAE':>8}")
    for row in summarise(samples):
        print(f"{row.op:<8}{row.n:>8}{row.min_s * 1e6:>9.0f}us{row.median_s * 1e6:>9.0f}us"
              f"{row.max_s * 1e6:>9.0f}us{row.ratio:>8.2f}x{row.gmae:>8.1%}")
    path = ResultStore(Path(args.results), spec.key).drift_file(new_run_id())
    write_json_atomic(path, drift_record(samples, spec.key,
                                         environment(spec.key, spec.threads),
                                         args.interval, args.calls))
    print(f"wrote {path}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from perfmodel.store.prune import human_bytes, prune

    plans = prune(Path(args.results), [args.device] if args.device else None, args.keep,
                  dry_run=args.dry_run, keep_fit_runs=not args.drop_fit_runs)
    for plan in plans:
        print("\n".join(plan.lines(args.dry_run)))
    freed = sum(plan.bytes_freed for plan in plans)
    if args.compress_fits and not args.dry_run:
        freed += _compress_kept_fits(plans)
    if args.compact_runs:
        freed += _compact_runs(args)
    print(f"total: {'would free' if args.dry_run else 'freed'} {human_bytes(freed)} "
          f"({freed} bytes) over {len(plans)} device(s)")
    return 0


def _compress_kept_fits(plans) -> int:
    """Compress the arrays of every kept fit saved uncompressed; the bytes freed."""
    from perfmodel.fit.fitting import compress_fit
    from perfmodel.store.prune import human_bytes

    freed = 0
    for plan in plans:
        for entry in plan.keep:
            if entry.kind == "fit":
                before, after = compress_fit(entry.path)
                if after < before:
                    print(f"{plan.device_key}: compressed {entry.path.name}: arrays "
                          f"{human_bytes(before)} -> {human_bytes(after)}")
                freed += before - after
    return freed


def _compact_runs(args: argparse.Namespace) -> int:
    """Compact the plain run files left by runs that died or by an older perfmodel;
    the bytes freed (0 on a dry run, which lists them)."""
    from perfmodel.store.prune import compact_runs, human_bytes

    done = compact_runs(Path(args.results), [args.device] if args.device else None,
                        dry_run=args.dry_run)
    for path, before, after in done:
        print(f"  would compact {path} ({human_bytes(before)})" if args.dry_run else
              f"  compacted    {path}: {human_bytes(before)} -> {human_bytes(after)}")
    return 0 if args.dry_run else sum(before - after for _, before, after in done)


def _stats(args: argparse.Namespace) -> int:
    from perfmodel.report.stats import format_stats, load_stats

    report, problems = load_stats(Path(args.results), _device_key(args), args.profile,
                                  args.reference, args.last, args.min_runs, args.quantile)
    for problem in problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    print("\n".join(format_stats(report)))
    return 1 if report.failed else 0


def _refit(args: argparse.Namespace) -> int:
    """Refit one device's predictors from its stored runs and print the new
    fit's id, size and per-op GMAE summary."""
    import time

    from perfmodel.fit.fitting import gmae_summary, refit
    from perfmodel.store.prune import human_bytes
    from perfmodel.store.results import ResultStore

    root = Path(args.results)
    key = (pick_report_device(root, this_machine_keys()) if args.device is None
           else _device_key(args))
    started = time.monotonic()
    fit, folder, problems = refit(ResultStore(root, key), key, args.threads,
                                  device=_this_machine_cuda_spec(key), allocator=args.allocator,
                                  same_runs=args.same_runs)
    seconds = time.monotonic() - started
    for problem in problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    threads = "" if fit.threads is None else f", {fit.threads} thread(s)"
    print(f"refit {key}{threads}: {len(fit.data_runs)} run(s), {seconds:.0f} s")
    print(f"fit {folder.name}: {human_bytes(size)} ({size} bytes) in {folder}")
    print(gmae_summary(fit))
    return 0


def _this_machine_cuda_spec(key: str):
    """The spec of this machine's CUDA device ``key`` (what a session on it
    fits for), or None: a CPU key, no torch or no such device here."""
    if not key.startswith("cuda"):
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        from perfmodel.device.probe import cuda_spec_from_properties

        for index in range(torch.cuda.device_count()):
            spec = cuda_spec_from_properties(torch.cuda.get_device_properties(index), index)
            if spec.key == key:
                return spec
    except (ImportError, RuntimeError):
        return None
    return None


def _replay(args: argparse.Namespace) -> int:
    from perfmodel.replay.rerun import format_json, format_text, replay_device, replay_devices

    root = Path(args.results)
    if args.device is not None:
        keys = [args.device]
        if args.device not in replay_devices(root):
            raise ValueError(f"no replay cases for {args.device} under {root}; devices with "
                             f"cases: {', '.join(replay_devices(root)) or 'none'} (the e2e "
                             f"items save them: pytest suites/test_e2e.py -m e2e)")
        if args.retrace:
            from perfmodel.replay.retrace import retrace_device
            from perfmodel.store.paths import device_dir

            for workload, done in retrace_device(device_dir(root, args.device)):
                print(f"{workload}: {done}", file=sys.stderr)
    elif args.retrace:
        raise ValueError("--retrace needs --device KEY (it rewrites that device's cases)")
    else:
        keys = replay_devices(root)
        if not keys:
            raise ValueError(f"no replay cases under {root}; the e2e items save them "
                             f"(pytest suites/test_e2e.py -m e2e)")
    devices = [replay_device(root, key, args.fit and Path(args.fit), args.workload,
                             args.attribute) for key in keys]
    if args.json:
        print(format_json(devices, args.attribute))
    else:
        print("\n".join(format_text(devices, args.attribute)))
    return 0


def _add_replay_command(sub) -> None:
    replay = sub.add_parser(
        "replay", help="predict the stored replay cases again with the current code",
        description="Predict every stored E2E capture (RESULTS/<device-key>/replay/*.json.gz) "
                    "again with the current code, a stored fit (default: the newest of the "
                    "case's thread count) and the device's shared overhead table, and print "
                    "per workload the predicted and measured time, the error and the GMAE. "
                    "Needs neither torch's device nor the workloads: any machine replays any "
                    "device. The output is deterministic.")
    _results(replay)
    replay.add_argument("--device", default=None,
                        help="device key, a folder under RESULTS (default: every device with "
                             "replay cases)")
    replay.add_argument("--fit", default=None, metavar="PATH",
                        help="a predictors folder (RESULTS/<key>/predictors/<run-id>), or a "
                             "device key for that device's newest fit, to predict with; "
                             "another device's fit is moved to this one by the two data "
                             "sheets (perfmodel.fit.transfer) and prices host overheads "
                             "with that device's table")
    replay.add_argument("--workload", nargs="+", default=None, metavar="NAME",
                        help="only these workloads")
    replay.add_argument("--attribute", action="store_true",
                        help="per op family and for the worst ops: predicted against traced "
                             "time and the contribution to the E2E error")
    replay.add_argument("--json", action="store_true", help="machine-readable output")
    replay.add_argument("--retrace", action="store_true",
                        help="first rebuild each single-rank case (and its overhead samples) "
                             "from its raw traces under RESULTS/<key>/traces/, with today's "
                             "trace parser; needs --device")
    replay.set_defaults(func=_replay)


def _add_refit_command(sub) -> None:
    refit = sub.add_parser(
        "refit", help="fit a device's predictors again from its stored runs (a stale fit)",
        description="Fit the predictors of one device and thread count again from the "
                    "measurement runs stored under RESULTS/<device-key>/runs/, as the next "
                    "session would (the runs of that thread count, under the allocator "
                    "policy of the newest of them), and save the fit, compressed, as a new "
                    "RESULTS/<device-key>/predictors/<run-id>/: the newest, so the one the "
                    "code predicts with. Deterministic: the same runs give the same "
                    "predictions. Older fits are kept. Prints the new fit's id, size and a "
                    "per-op GMAE summary. Use it when a stored fit is stale for today's code.")
    _results(refit)
    refit.add_argument("--device", default=None,
                       help="device key, a folder under RESULTS (default: this machine's "
                            "device when RESULTS holds its results)")
    refit.add_argument("--threads", type=int, default=None,
                       help="torch threads of the runs to fit (default: the thread count of "
                            "the device's stored spec, device.json)")
    refit.add_argument("--allocator", default=None,
                       choices=("glibc-keep-freed", "default"),
                       help="fit the CPU runs measured under this host allocator policy "
                            "(default: the newest run's, as a session on that host would)")
    refit.add_argument("--same-runs", action="store_true",
                       help="train on exactly the runs the newest fit of that thread count "
                            "was trained on (every one must be stored), so that only the "
                            "code changes: what the accuracy gate's FAIL lines ask for")
    refit.set_defaults(func=_refit)


def _detecting(parser: argparse.ArgumentParser) -> None:
    """--results, --device and --threads of a command that detects this machine's device."""
    _results(parser)
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")


def _stored(parser: argparse.ArgumentParser,
            default_device: str = "the only device under RESULTS") -> None:
    """--results and --device of a command that reads stored results only."""
    _results(parser)
    parser.add_argument("--device", default=None,
                        help="device key (a folder under RESULTS), cpu, cuda or cuda:N "
                             f"(default: {default_device})")


def _results(parser: argparse.ArgumentParser) -> None:
    from perfmodel.store.paths import DEFAULT_ROOT

    parser.add_argument("--results", default=DEFAULT_ROOT,
                        help=f"results root (default: {DEFAULT_ROOT})")


def _add_analysis_commands(sub) -> None:
    """``compare``, ``predict`` and ``stats``: read stored results (predict also
    traces, and with --measure runs, the workload)."""
    compare = sub.add_parser(
        "compare", help="two runs, baselines or devices side by side",
        description="Compare A with B, both run ids (of --device) or run files (.jsonl or .jsonl.gz), both "
                    "baseline files (.json), or both device keys under RESULTS: per workload "
                    "the measured times and E2E errors, per op and direction the geometric "
                    "mean, min and max of the per-config median ratio B/A.")
    compare.add_argument("a", help="run id, run file, baseline file or device key")
    compare.add_argument("b", help="of the same kind as A")
    compare.add_argument("--profile", default="quick",
                         help="profile of the runs compared across devices (default: quick)")
    _stored(compare)
    compare.set_defaults(func=_compare)
    predict = sub.add_parser(
        "predict", help="predict a workload's or a saved trace's training iteration",
        description="Predict one training iteration on this device with its stored fit and "
                    "shared overhead table: a registered workload (traced here) or a saved "
                    "trace. Prints the predicted time and its breakdown; --measure also "
                    "measures the workload. Exit 2 when no fit is stored.")
    predict.add_argument("workload", nargs="?", default=None, help="registered workload name")
    predict.add_argument("--size", default="registered", choices=("tiny", "registered", "full"),
                         help="workload size (default: registered)")
    predict.add_argument("--seed", type=int, default=0, help="workload seed (default: 0)")
    predict.add_argument("--measure", action="store_true", help="also measure the iteration")
    predict.add_argument("--trace", default=None, metavar="ET_FILE",
                         help="a saved execution trace (<name>.et.json) instead of a workload")
    predict.add_argument("--kineto", default=None, metavar="FILE",
                         help="its Kineto trace, for traced timings")
    predict.add_argument("--calibration", default=None, metavar="FILE",
                         help="its profiler calibration file")
    _detecting(predict)
    predict.set_defaults(func=_predict)
    stats = sub.add_parser(
        "stats", help="mean, sd and diff of every item over several stored runs",
        description="Over the stored runs of PROFILE (at least --min-runs): per E2E workload "
                    "and per op config the mean, sd and sd%% over runs, and the diff against "
                    "baseline-<profile>.json (E2E errors) or against --reference RUN (every "
                    "item). An item fails when |diff| leaves the --quantile prediction interval "
                    "of one more run (Student's t x sd x sqrt(1 + 1/N)); exit 1 when any item "
                    "fails.")
    stats.add_argument("--profile", default="quick", help="profile of the runs (default: quick)")
    stats.add_argument("--last", type=int, default=None, help="newest runs to use (default: all)")
    stats.add_argument("--reference", default=None, metavar="RUN",
                       help="run id or run file to diff against (left out of the runs)")
    stats.add_argument("--quantile", type=float, default=0.95,
                       help="coverage of the prediction interval (default 0.95)")
    stats.add_argument("--min-runs", type=int, default=3, help="fewest runs (default: 3)")
    _stored(stats)
    stats.set_defaults(func=_stats)


def _add_prune_command(sub) -> None:
    from perfmodel.store.prune import DEFAULT_KEEP

    prune = sub.add_parser(
        "prune", help="remove old run files and fits, keeping what the code and the gate use",
        description="Per device (and per profile), keep the newest KEEP run files, the run "
                    "files the baselines were computed from, the newest fit of each thread "
                    "count (the one the code picks), every fit a baseline names, and the run "
                    "files the kept fits were trained on; remove the other run files and "
                    "fits. Prints what it keeps and removes and the bytes freed. Spec, "
                    "baselines, overheads, traces and reports are left alone. A run "
                    "compacts its own file (gzip, .jsonl.gz) when it closes.")
    _results(prune)
    prune.add_argument("--device", default=None,
                       help="device key, a folder under RESULTS (default: every device)")
    prune.add_argument("--keep", type=int, default=DEFAULT_KEEP,
                       help=f"newest run files kept per device and profile "
                            f"(default: {DEFAULT_KEEP})")
    prune.add_argument("--dry-run", action="store_true",
                       help="print what would be removed; change nothing")
    prune.add_argument("--drop-fit-runs", action="store_true",
                       help="do not keep the run files the kept fits were trained on (beyond "
                            "the newest KEEP): the next session that needs a fit refits on "
                            "the runs left, and baselines naming the old fit stop matching")
    prune.add_argument("--compress-fits", action="store_true",
                       help="also rewrite the kept fits saved uncompressed (by an older "
                            "perfmodel) with compressed arrays; predictions are unchanged")
    prune.add_argument("--compact-runs", action="store_true",
                       help="also gzip the plain run files (.jsonl) not written to for an "
                            "hour: runs that died before they closed, and runs of an older "
                            "perfmodel. Readers take both forms; records are unchanged")
    prune.set_defaults(func=_prune)


def _campaign(args: argparse.Namespace) -> int:
    from perfmodel.campaign import run_campaign

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    results = args.results
    if results is None:  # a dry run leaves this machine's own results alone
        from perfmodel.store.paths import DEFAULT_ROOT

        results = tempfile.mkdtemp(prefix="perfmodel-dry-run-") if args.dry_run else DEFAULT_ROOT
        if args.dry_run:
            print(f"[campaign] dry run: results under {results}")
    log = run_campaign(Path(args.out), Path(args.repo), Path(results).resolve(),
                       dry_run=args.dry_run, parts=parts, budget_s=args.budget_s,
                       e2e_reserve_s=args.e2e_reserve_s, workloads=args.workload or (),
                       select=args.k)
    print(f"[campaign] {log.device_key or 'no device'}: {len(log.packed)} file(s) in {args.out} "
          f"after {log.wall_s:.0f} s; parts: "
          + ", ".join(f"{p.name} {p.wall_s:.0f} s (exit {p.returncode})" for p in log.parts))
    failed = [p for p in log.parts if p.returncode not in (0, None) and not p.stopped_at_deadline]
    return 1 if failed or not log.packed else 0


def _unpack(args: argparse.Namespace) -> int:
    from perfmodel.campaign import unpack

    written = unpack(Path(args.folder), Path(args.results), args.logs and Path(args.logs))
    for path in written:
        print(path)
    print(f"unpacked {len(written)} file(s)", file=sys.stderr)
    return 0


def _add_campaign_commands(sub) -> None:
    from perfmodel.campaign import E2E_RESERVE_S, PARTS

    campaign = sub.add_parser(
        "campaign", help="on a lent GPU machine: the gpu sweep and the full-size E2E "
                         "captures in one command, packed to bring back",
        description="Run, against one deadline, the device check, the gpu-profile "
                    "microbenchmark sweep (stopped at its share of the deadline; what it "
                    "measured is kept) and the full-size E2E workloads saved as replay "
                    "cases with their traces, and pack what they wrote under "
                    "RESULTS/<device-key>/ into OUT after each part: at most 8 files of at "
                    "most 16 MiB. Run it from the repository root (it runs suites/ and "
                    "tests/); docs/gpu.md has the whole procedure.")
    campaign.add_argument("out", help="empty folder to pack into")
    campaign.add_argument("--results", default=None,
                          help="results root (default: results; with --dry-run a new "
                               "temporary folder, so this machine's results stay as they are)")
    campaign.add_argument("--dry-run", action="store_true",
                          help="run the same parts on the CPU at the smoke profile (to time "
                               "them and check the packing)")
    campaign.add_argument("--parts", default=",".join(PARTS),
                          help=f"comma-separated parts to run (default: {','.join(PARTS)})")
    campaign.add_argument("--budget-s", type=float, default=540.0,
                          help="seconds for the whole campaign, packing included (default: 540)")
    campaign.add_argument("--e2e-reserve-s", type=float, default=E2E_RESERVE_S,
                          help=f"seconds held for the E2E part while the sweep runs "
                               f"(default: {E2E_RESERVE_S:.0f})")
    campaign.add_argument("--workload", nargs="+", default=None, metavar="NAME",
                          help="only these E2E workloads")
    campaign.add_argument("-k", default=None, metavar="EXPR",
                          help="a pytest -k expression selecting the sweep's items")
    campaign.add_argument("--repo", default=".", help="the repository root (default: .)")
    campaign.set_defaults(func=_campaign)
    unpack = sub.add_parser(
        "unpack", help="put the files a campaign brought back under RESULTS",
        description="Extract a campaign's <key>-core.tar.gz and <key>-fits.tar.gz under "
                    "RESULTS, join and extract its <key>-traces.tar.part<N> pieces "
                    "(decompressing each trace beside its .xz), and its logs archive under "
                    "LOGS. Refuses any member that is not a plain file under <key>/.")
    unpack.add_argument("folder", help="the folder the campaign packed into")
    _results(unpack)
    unpack.add_argument("--logs", default=None,
                        help="where the campaign's logs go (default: FOLDER)")
    unpack.set_defaults(func=_unpack)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfmodel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    devices = sub.add_parser("devices", help="detect the device and print its spec as JSON",
                             description="Detect the device (measuring a CPU once and caching "
                                         "it under RESULTS/<device-key>/device.json).")
    _detecting(devices)
    devices.set_defaults(func=_devices)
    baseline = sub.add_parser(
        "baseline", help="write the E2E gate's baseline from stored runs",
        description="Write RESULTS/<device-key>/baseline-<profile>.json from the signed E2E "
                    "errors of the newest LAST stored runs of PROFILE (runs with a planted "
                    "bias are left out): the same file --perfmodel-save-baseline writes, "
                    "built from runs you already have, e.g. a CI history.")
    baseline.add_argument("--profile", default="quick", help="profile of the runs (default: quick)")
    baseline.add_argument("--last", type=int, default=5, help="newest runs to use (default: 5)")
    baseline.add_argument("--check", metavar="FILE",
                          help="write nothing: print the baseline FILE's workloads and judge "
                               "each of its runs against the others under this project's "
                               "settings")
    _detecting(baseline)
    baseline.set_defaults(func=_baseline)
    drift = sub.add_parser(
        "drift", help="how far this host's speed moves over time (the floor under accuracy)",
        description="Time two reference ops (a 512^3 fp32 addmm and a 16M-element fp32 copy) every "
                    "INTERVAL seconds for SECONDS, each sample the median of CALLS calls; print "
                    "per op the min, median and max sample, max/min and the GMAE of the samples "
                    "against their median, and write them to "
                    "RESULTS/<device-key>/drift/<run-id>.json.")
    drift.add_argument("--seconds", type=float, default=60.0,
                       help="how long to probe (default: 60)")
    drift.add_argument("--interval", type=float, default=0.5,
                       help="pause between samples, seconds (default: 0.5)")
    drift.add_argument("--calls", type=int, default=20,
                       help="calls per op and sample (default: 20)")
    _detecting(drift)
    drift.set_defaults(func=_drift)
    report = sub.add_parser(
        "report", help="write the HTML report (plots, accuracy and E2E tables) from stored results",
        description="Write one self-contained HTML file (figures embedded, no external URL) "
                    "from what is stored under RESULTS/<device-key>/: per-op accuracy, "
                    "predicted vs measured, error CDFs, E2E table and breakdown, iteration "
                    "timelines, collective bandwidth. The figures are also written as PNG "
                    "beside it. Nothing is measured.")
    _stored(report, default_device="this machine's device when RESULTS holds its results")
    report.add_argument("--profile", default=None,
                        help="profile of the E2E records and baseline (default: the newest "
                             "run's)")
    report.add_argument("--out", default=None,
                        help="HTML file to write (default: RESULTS/<device-key>/report/index.html)")
    report.set_defaults(func=_report)
    _add_prune_command(sub)
    _add_analysis_commands(sub)
    _add_replay_command(sub)
    _add_refit_command(sub)
    _add_campaign_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from perfmodel.extras import MissingExtra

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MissingExtra as exc:  # its message is the whole line
        print(str(exc), file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as exc:
        fitting = sys.modules.get("perfmodel.fit.fitting")  # loaded when one was raised
        if fitting is not None and isinstance(exc, fitting.StaleFit):
            print(str(exc), file=sys.stderr)  # one line with the command that refits
        else:
            print(f"perfmodel {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
