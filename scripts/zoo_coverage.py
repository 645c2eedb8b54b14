"""How much of each zoo model's traced iteration the op definitions cover.

For every model of :data:`perfmodel.workloads.zoo.ZOO_CONFIGS` (registered
size, or ``--tiny``), build it on the CPU, capture one trace with
:func:`perfmodel.e2e.single.capture_graph` and print the traced iteration
time, the share of it in op tasks (forward and backward, including the
later nodes of a backward that an op task covers), in unmodelled nodes
(:meth:`perfmodel.trace.graph.Graph.unmodelled`) and in host gaps, then the
top unmodelled node names with their count and share. A last table pools the
unmodelled names over the zoo. Run from the repository root::

    .venv/bin/python scripts/zoo_coverage.py                   # every model, registered size
    .venv/bin/python scripts/zoo_coverage.py --tiny --top 5
    .venv/bin/python scripts/zoo_coverage.py --models zoo_vgg zoo_unet --keep /tmp/zoo-traces

The figures are of one CPU trace on a possibly busy machine: read the
shares, not the milliseconds. Tune on the tuning half only (docs/zoo.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from perfmodel.e2e.single import capture_graph
from perfmodel.trace.graph import Graph
from perfmodel.workloads.zoo import ZOO_CONFIGS, zoo_half


def shares(graph: Graph) -> dict[str, float]:
    """Shares of the traced iteration time in ``op``, ``unmodelled``,
    ``overhead`` (host gaps) and ``other`` tasks (collectives)."""
    total = graph.measured_s or 0.0
    out = {"op": 0.0, "unmodelled": 0.0, "overhead": 0.0, "other": 0.0}
    if total <= 0:
        return out
    for task in graph.tasks:
        key = {"op": "op", "covered": "op", "unmodelled": "unmodelled",
               "overhead": "overhead"}.get(task.kind, "other")
        out[key] += (task.measured_s or 0.0) / total
    return out


def report(name: str, graph: Graph, top: int) -> list[tuple[str, int, float | None]]:
    """Print one model's lines; returns its unmodelled rows."""
    s = shares(graph)
    ms = (graph.measured_s or 0.0) * 1e3
    n_ops = len(graph.op_tasks())
    print(f"{name} [{zoo_half(name)}]: traced {ms:.2f} ms; op tasks {s['op']:.1%} "
          f"({n_ops} tasks), unmodelled {s['unmodelled']:.1%}, host gaps {s['overhead']:.1%}"
          + (f", other {s['other']:.1%}" if s["other"] else ""))
    rows = graph.unmodelled()
    for node, count, share in rows[:top]:
        print(f"    {share or 0.0:6.1%}  x{count:<4d} {node}")
    if len(rows) > top:
        rest = sum(r[2] or 0.0 for r in rows[top:])
        print(f"    {rest:6.1%}  ({len(rows) - top} more names)")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="trace the tiny variants")
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help="only these zoo models (registered names)")
    parser.add_argument("--top", type=int, default=8, help="unmodelled names per model")
    parser.add_argument("--keep", type=Path, help="write the traces here (default: a temp dir)")
    args = parser.parse_args(argv)
    configs = [cfg for cfg in ZOO_CONFIGS if not args.models or cfg.name in args.models]
    unknown = set(args.models or ()) - {cfg.name for cfg in ZOO_CONFIGS}
    if unknown:
        parser.error(f"not zoo models: {', '.join(sorted(unknown))}")
    pooled: dict[str, list[float]] = defaultdict(list)
    op_shares = []
    with tempfile.TemporaryDirectory(prefix="zoo-coverage-") as tmp:
        out_dir = args.keep or Path(tmp)
        for cfg in configs:
            built = (cfg.tiny() if args.tiny else cfg).build("cpu")
            graph = capture_graph(built.step, out_dir, built.name, "cpu")
            rows = report(cfg.name, graph, args.top)
            op_shares.append(shares(graph)["op"])
            for node, _, share in rows:
                pooled[node].append(share or 0.0)
    if len(configs) > 1:
        n = len(configs)
        print(f"\nzoo: {n} models, mean op-task share {sum(op_shares) / n:.1%}; "
              f"unmodelled names by mean share over the zoo (models with it):")
        ranked = sorted(pooled.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
        for node, values in ranked[:2 * args.top]:
            print(f"    {sum(values) / n:6.1%}  ({len(values):2d}) {node}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
