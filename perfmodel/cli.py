"""The ``perfmodel`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _devices(args: argparse.Namespace) -> int:
    from perfmodel.device import detect_device

    spec = detect_device(args.device, Path(args.results), threads=args.threads)
    print(json.dumps(spec.to_dict(), indent=2, sort_keys=True))
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from perfmodel.device import detect_device
    from perfmodel.gate import baseline_errors, save_baseline
    from perfmodel.store import ResultStore

    spec = detect_device(args.device, Path(args.results), threads=args.threads)
    store = ResultStore(Path(args.results), spec.key)
    loaded = store.load("e2e")
    for problem in loaded.problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    errors = baseline_errors(loaded.records, args.profile, args.last)
    env = max(loaded.records, key=lambda r: str(r.get("run_id")))["env"]
    path = store.baseline_path(args.profile)
    saved = save_baseline(path, spec.key, errors, env)
    for workload, entry in saved.entries.items():
        print(f"{workload:<22} mean {entry.mean:+7.2%}  spread {entry.spread:6.2%}  n {entry.n}")
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfmodel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    devices = sub.add_parser("devices", help="detect the device and print its spec as JSON",
                             description="Detect the device (measuring a CPU once and caching "
                                         "it under RESULTS/<device-key>/device.json).")
    devices.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: auto)")
    devices.add_argument("--results", default="results", help="results root (default: results)")
    devices.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    devices.set_defaults(func=_devices)
    baseline = sub.add_parser(
        "baseline", help="write the E2E gate's baseline from stored runs",
        description="Write RESULTS/<device-key>/baseline-<profile>.json from the signed E2E "
                    "errors of the newest LAST stored runs of PROFILE (runs with a planted "
                    "bias are left out): the same file --perfmodel-save-baseline writes, "
                    "built from runs you already have, e.g. a CI history.")
    baseline.add_argument("--profile", default="quick", help="profile of the runs (default: quick)")
    baseline.add_argument("--last", type=int, default=5, help="newest runs to use (default: 5)")
    baseline.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: auto)")
    baseline.add_argument("--results", default="results", help="results root (default: results)")
    baseline.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    baseline.set_defaults(func=_baseline)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"perfmodel {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
