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
