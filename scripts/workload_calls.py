"""Regenerate ``perfmodel/ops/workload_calls.json``: the op calls that the built-in
single-rank workloads make at full size (``full_size()``, the size a GPU runs), which
the ``gpu`` profile adds to each op's configs (see :mod:`perfmodel.ops.workload_calls`).

Run from the repository root (about 15 minutes on 2 cores, up to 13 GB of memory)::

    .venv/bin/python scripts/workload_calls.py                 # every built-in workload
    .venv/bin/python scripts/workload_calls.py --workloads mlp_small cnn_resnet --out /tmp/x.json
    .venv/bin/python scripts/workload_calls.py --size registered --out /tmp/x.json  # CPU sizes

Each workload is built on the CPU and traced in a child process of its own (its
memory goes back when it ends; one that fails does not stop the others), whose
address space is capped below the host's available memory, so that a workload
too large for the host fails an allocation rather than waking the OOM killer.

The trace: :func:`perfmodel.trace.parse.capture_trace` with no warm-up and one
Kineto iteration (the fewest it allows), then ``build_graph(load_trace(et))`` as
:func:`perfmodel.e2e.single.capture_graph` does. Only the execution-trace step
runs the workload: the Kineto step is a no-op, since it would only time the
step and a call's shapes are all in the execution trace (the graph is built
untimed). On the registered sizes this gives the same calls, with the same
counts, as a capture with a warm-up step and a timed Kineto step. Every ``op``
task of the graph gives one call: (op, direction, dtype, params) as the
:class:`~perfmodel.trace.graph.Task` carries them. Calls depend only on shapes,
so the CPU trace gives the calls a GPU step makes.

Two stand-ins keep the shapes exact where a full-size step does not fit this
machine's memory, each recorded as the workload's ``stand_in`` in the file:

- Tables: a TBE DLRM whose tables exceed :data:`HOST_TABLE_BUDGET_BYTES` is traced
  with its tables capped at two small row counts, every other shape as at full
  size. The calls other than the TBE lookup must be the same at both caps (they
  do not depend on the rows), and the lookup's ``E`` (mean rows per table, as
  :meth:`perfmodel.ops.embedding._Tbe.params_from_node` reads it) must be
  ``round(sum(rows) / T)`` at both; the lookup is written with the full tables' ``E``.
- Depth: a layer-stacked workload (``layers`` or ``n_layer``) that runs out of
  memory, or is named with ``--depth-stand-in``, is traced at depths
  :data:`STAND_IN_DEPTHS`, every other shape as at full size. Each call's count
  must be affine in the depth at those three and is extrapolated to the full
  depth; the optimizer step's config (``NTENSORS``, ``NUMEL``), checked against
  the model's parameters at each depth, is taken from the full model's
  parameters (built, not stepped). On the registered sizes at depth 5 this gives
  the same calls and counts as a direct trace.

A workload whose library is missing (FBGEMM, transformers) is skipped, with its
reason, in the file's ``skipped``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.ops.workload_calls import (
    DATA_FILE,
    FORMAT,
    SCHEMA,
    check_data,
    dump_data,
)

#: Warm-up steps before the traced one (the calls of a step do not change after
#: the first: the same on every registered workload with 0 and 1) and Kineto
#: iterations (the fewest :func:`~perfmodel.trace.parse.capture_trace` allows).
WARMUP, ITERATIONS = 0, 1
#: fp32 embedding bytes a workload's tables may hold when traced on this machine.
HOST_TABLE_BUDGET_BYTES = 4e9
#: The two row caps a too-large TBE DLRM is traced at (see the module docstring).
STAND_IN_CAPS = (1000, 3000)
#: Ops whose calls hold a DLRM's table rows.
TBE_OPS = ("tbe_sgd", "tbe_rowwise_adagrad")
#: Config fields that give a layer-stacked workload's depth, and the depths a
#: workload too large for this host's memory is traced at (see the module docstring).
DEPTH_FIELDS = ("layers", "n_layer")
STAND_IN_DEPTHS = (1, 2, 3)
#: Exit status of a child whose workload ran out of memory.
OUT_OF_MEMORY = 3


def builtin_workloads() -> list[str]:
    """Names of the built-in single-rank workloads, in registration order."""
    from perfmodel.registry import BUILTIN
    from perfmodel.workloads import ALL_WORKLOADS, WORKLOADS

    return [name for name in WORKLOADS if ALL_WORKLOADS.source(name) == BUILTIN]


def sized(name: str, size: str):
    from perfmodel.workloads import get_workload

    cfg = get_workload(name)
    return cfg.tiny() if size == "tiny" else cfg.full_size() if size == "full" else cfg


# -- the child: one workload, one trace ---------------------------------------------------

def limit_memory(headroom_bytes: float = 2 * 2**30) -> int:
    """Cap this process's address space at what it maps now plus the host's
    available memory less ``headroom_bytes``, so that a workload too large for
    the host fails its allocation here instead of waking the kernel's OOM killer
    on a shared machine. Returns the limit (B)."""
    def kib(path: str, key: str) -> int:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {key} in {path}")

    limit = int(kib("/proc/self/status", "VmSize") + kib("/proc/meminfo", "MemAvailable")
                - headroom_bytes)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return limit


def real_steps(step, n: int):
    """``step`` for its first ``n`` calls, a no-op after them."""
    left = [n]

    def wrapped():
        if left[0] <= 0:
            return None
        left[0] -= 1
        return step()

    return wrapped


def trace_calls(cfg, warmup: int = WARMUP) -> tuple[Counter, dict]:
    """Build ``cfg`` on the CPU, trace it and count its op tasks' calls; and
    the seconds each part took, the graph's size, its unmodelled nodes and the
    element counts of the model's trainable parameters.

    :func:`~perfmodel.trace.parse.capture_trace` runs the warm-up steps, the
    execution-trace step and at least one Kineto step; only the first
    ``warmup + 1`` run the workload (the Kineto steps would only time it, and a
    call's shapes are in the execution trace), so the trace is loaded untimed."""
    import torch

    from perfmodel.trace.graph import build_graph
    from perfmodel.trace.parse import capture_trace, load_trace

    start = time.perf_counter()
    step = cfg.build("cpu", seed=0)
    built = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="workload-calls-") as tmp:
        files = capture_trace(real_steps(step.step, warmup + 1), Path(tmp), cfg.name,
                              ITERATIONS, warmup, "cpu")
        traced = time.perf_counter()
        graph = build_graph(load_trace(files.et))
    done = time.perf_counter()
    calls: Counter = Counter()
    for task in graph.op_tasks():
        calls[(task.op, task.direction, task.dtype,
               tuple(sorted(task.params.items())))] += 1
    info = {"build_s": built - start, "trace_s": traced - built, "graph_s": done - traced,
            "tasks": len(graph.tasks), "op_tasks": len(graph.op_tasks()),
            "unmodelled": [[n, c] for n, c, _ in graph.unmodelled()],
            "threads": torch.get_num_threads(),
            "param_numels": [p.numel() for p in step.model.parameters() if p.requires_grad]}
    return calls, info


def _merge_info(infos: list[dict], stand_in: str) -> dict:
    info = {k: sum(i[k] for i in infos) for k in ("build_s", "trace_s", "graph_s")}
    info.update({k: infos[-1][k] for k in ("tasks", "op_tasks", "unmodelled", "threads")})
    info["stand_in"] = stand_in
    return info


def _tbe_stand_in(cfg, warmup: int) -> tuple[Counter, dict]:
    """The calls of TBE DLRM ``cfg`` from two traces with its tables capped
    (see the module docstring); AssertionError when the calls contradict the
    rewrite's assumptions."""
    full_e = round(sum(cfg.rows) / len(cfg.rows))
    traced, infos, others = [], [], []
    for cap in STAND_IN_CAPS:
        small = dataclasses.replace(cfg, max_rows=cap)
        calls, info = trace_calls(small, warmup)
        expect = round(sum(small.rows) / len(small.rows))
        tbe = [k for k in calls if k[0] in TBE_OPS]
        assert tbe, f"{cfg.name}: no TBE call in the trace at {cap} rows"
        for key in tbe:
            params = dict(key[3])
            assert params["E"] == expect and params["T"] == len(cfg.rows), \
                f"{cfg.name} at {cap} rows: TBE call {params}, expected E={expect}"
        others.append({k: n for k, n in calls.items() if k[0] not in TBE_OPS})
        traced.append(calls)
        infos.append(info)
    assert others[0] == others[1], f"{cfg.name}: the non-TBE calls depend on the table rows"
    out: Counter = Counter()
    for key, n in traced[0].items():
        if key[0] in TBE_OPS:
            params = {**dict(key[3]), "E": full_e}
            key = (key[0], key[1], key[2], tuple(sorted(params.items())))
        out[key] += n
    return out, _merge_info(infos, (
        f"tables capped at {STAND_IN_CAPS[0]} and {STAND_IN_CAPS[1]} rows (full size: "
        f"{cfg.embedding_bytes / 1e9:.1f} GB); the other calls are the same at both; TBE's E "
        f"(round(sum(rows)/T) at both caps) set to the full tables' {full_e}"))


def optimizer_call(numels: list[int]) -> dict[str, int]:
    """An optimizer step's config over parameters of ``numels`` elements, as
    :meth:`perfmodel.ops.optim.OptimizerStep.params_from_node` reads it."""
    return {"NTENSORS": len(numels), "NUMEL": max(1, round(sum(numels) / len(numels)))}


def _depth_stand_in(cfg, warmup: int) -> tuple[Counter, dict]:
    """The calls of layer-stacked ``cfg`` (its ``layers`` or ``n_layer``) from
    traces at depths :data:`STAND_IN_DEPTHS`, every other shape as at full size:
    each call's count must be affine in the depth (checked on the three
    depths), and is extrapolated to the full depth; the optimizer step's config,
    checked against the parameters at each depth, is taken from the full model's
    parameters (built, not stepped)."""
    from perfmodel.ops import OPS

    field = next(f for f in DEPTH_FIELDS if hasattr(cfg, f))
    depth = getattr(cfg, field)
    optim = {name for name, op in OPS.items() if op.family == "optim"}
    runs = [trace_calls(dataclasses.replace(cfg, **{field: d}), warmup) for d in STAND_IN_DEPTHS]
    rest = [{k: n for k, n in calls.items() if k[0] not in optim} for calls, _ in runs]
    out: Counter = Counter()
    for key in sorted(set().union(*rest)):
        counts = [r.get(key, 0) for r in rest]
        slope = counts[1] - counts[0]
        assert all(c == counts[0] + slope * (d - STAND_IN_DEPTHS[0])
                   for c, d in zip(counts, STAND_IN_DEPTHS)), \
            f"{cfg.name}: {key} occurs {counts} times at depths {STAND_IN_DEPTHS}: not affine"
        full = counts[0] + slope * (depth - STAND_IN_DEPTHS[0])
        assert full > 0, f"{cfg.name}: {key} extrapolates to {full} calls"
        out[key] = full
    steps = [{k: n for k, n in calls.items() if k[0] in optim} for calls, _ in runs]
    for (calls, info), step_calls, d in zip(runs, steps, STAND_IN_DEPTHS):
        expect = optimizer_call(info["param_numels"])
        assert step_calls and all(dict(k[3]) == expect for k in step_calls), \
            f"{cfg.name} at depth {d}: optimizer calls {list(step_calls)}, expected {expect}"
    assert len({tuple(sorted((k[:3], n) for k, n in s.items())) for s in steps}) == 1, \
        f"{cfg.name}: the optimizer calls differ between depths: {steps}"
    model = cfg.build("cpu", seed=0).model
    full_step = optimizer_call([p.numel() for p in model.parameters() if p.requires_grad])
    del model
    for key, n in steps[0].items():
        out[(key[0], key[1], key[2], tuple(sorted(full_step.items())))] += n
    return out, _merge_info([info for _, info in runs], (
        f"traced at {field} = {', '.join(map(str, STAND_IN_DEPTHS))} instead of {depth} (a "
        f"full-size step does not fit this host's memory), every other shape as at full size; each call's count is "
        f"affine in {field} at those depths and extrapolated to {depth}; the optimizer step's "
        f"config from the full model's parameters"))


def child(name: str, size: str, warmup: int, out: Path, stand_in: str | None) -> None:
    limit_memory()
    cfg = sized(name, size)
    try:
        if stand_in == "depth":
            calls, info = _depth_stand_in(cfg, warmup)
        elif cfg.kind == "dlrm" and cfg.embedding_bytes > HOST_TABLE_BUDGET_BYTES:
            if cfg.backend != "tbe":
                raise SystemExit(f"{cfg.embedding_bytes / 1e9:.1f} GB of tables do not fit "
                                 f"this host's budget ({HOST_TABLE_BUDGET_BYTES / 1e9:.0f} GB)")
            calls, info = _tbe_stand_in(cfg, warmup)
        else:
            calls, info = trace_calls(cfg, warmup)
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, MemoryError) or "alloc" in str(exc).lower():
            print(f"out of memory: {str(exc).splitlines()[0] if str(exc) else 'MemoryError'}",
                  file=sys.stderr)
            sys.exit(OUT_OF_MEMORY)
        raise
    info["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    info.pop("param_numels", None)
    out.write_text(json.dumps({
        "calls": [[op, d, dt, dict(p), n] for (op, d, dt, p), n in calls.items()],
        "info": info}))


def fbgemm_problem() -> str | None:
    """Why FBGEMM's TBE cannot run here, or None."""
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: F401
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except Exception as exc:  # noqa: BLE001  (ImportError, or a broken native library)
        return f"fbgemm_gpu does not import ({type(exc).__name__}: {exc})"
    return None


def needs_fbgemm(cfg) -> bool:
    return getattr(cfg, "backend", None) == "tbe"


def needs_transformers(cfg) -> bool:
    return cfg.kind == "hf"


# -- the parent ---------------------------------------------------------------------------

def run_one(name: str, size: str, warmup: int, timeout_s: float,
            stand_in: str | None = None) -> tuple[dict | None, str, int]:
    """Trace ``name`` in a child; (its result, "", 0) or (None, why it failed,
    the child's exit status)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "calls.json"
        cmd = [sys.executable, __file__, "--child", name, "--size", size,
               "--warmup", str(warmup), "--child-out", str(out)]
        if stand_in:
            cmd += ["--stand-in", stand_in]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return None, f"took more than {timeout_s:.0f} s", -1
        if proc.returncode != 0 or not out.is_file():
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            why = lines[-1] if lines else f"exit status {proc.returncode}"
            if proc.returncode < 0:
                why = f"killed by signal {-proc.returncode}; {why}"
            return None, why, proc.returncode
        return json.loads(out.read_text()), "", 0


def call_order(op: str, params: dict) -> list[str]:
    """``params``' names in op ``op``'s order (sorted when it names others)."""
    from perfmodel.ops import OPS

    names = list(OPS[op].params) if op in OPS else []
    return names if sorted(names) == sorted(params) else sorted(params)


def build_data(results: dict[str, dict], skipped: dict[str, str], size: str) -> dict:
    """The file's content from each traced workload's calls: the distinct calls
    sorted by op, direction, dtype and param values (in the op's order)."""
    import torch

    from perfmodel.e2e.single import workload_config

    merged: dict[tuple, dict] = {}
    for name in sorted(results):
        for op, direction, dtype, params, n in results[name]["calls"]:
            order = call_order(op, params)
            key = (op, direction, dtype, tuple(order), tuple(params[p] for p in order))
            entry = merged.setdefault(key, {"op": op, "direction": direction, "dtype": dtype,
                                            "params": {p: params[p] for p in order},
                                            "count": 0, "workloads": {}})
            entry["count"] += n
            entry["workloads"][name] = entry["workloads"].get(name, 0) + n
    calls = [merged[k] for k in sorted(merged)]
    return {
        "format": FORMAT,
        "schema": SCHEMA,
        "generated_by": "scripts/workload_calls.py",
        "torch": torch.__version__.split("+")[0],
        "size": size,
        "workloads": {name: {"config": workload_config(name, size),
                             **({"stand_in": results[name]["info"]["stand_in"]}
                                if "stand_in" in results[name]["info"] else {})}
                      for name in sorted(results)},
        "skipped": dict(sorted(skipped.items())),
        "calls": calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", help="workload names (default: every "
                        "built-in single-rank workload)")
    parser.add_argument("--size", default="full", choices=("tiny", "registered", "full"))
    parser.add_argument("--warmup", type=int, default=WARMUP,
                        help="warm-up steps before the traced one (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DATA_FILE)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one workload's child may run")
    parser.add_argument("--depth-stand-in", nargs="+", default=[], metavar="NAME",
                        help="trace these layer-stacked workloads at a few depths and "
                        "extrapolate (what is done after one runs out of memory)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stand-in", choices=("depth",), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.size, args.warmup, args.child_out, args.stand_in)
        return 0
    if (args.workloads or args.size != "full") and args.out.resolve() == DATA_FILE.resolve():
        parser.error(f"--workloads and --size write a partial or resized file: give --out "
                     f"(not {DATA_FILE.relative_to(ROOT)}, which the gpu profile reads)")

    names = args.workloads or builtin_workloads()
    fbgemm = fbgemm_problem()
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    failed = []
    print(f"tracing {len(names)} workloads at size {args.size!r} on the CPU "
          f"({os.cpu_count()} cores), warm-up {args.warmup}, one traced step")
    for name in names:
        cfg = sized(name, args.size)
        why = ""
        if needs_fbgemm(cfg) and fbgemm:
            why = fbgemm
        elif needs_transformers(cfg):
            try:
                import transformers  # noqa: F401
            except ImportError as exc:
                why = f"transformers does not import ({exc})"
        if not why:
            failed.append(name)  # until it succeeds
            start = time.perf_counter()
            result, why, status = run_one(name, args.size, args.warmup, args.timeout,
                                          "depth" if name in args.depth_stand_in else None)
            if status == OUT_OF_MEMORY and any(hasattr(cfg, f) for f in DEPTH_FIELDS):
                print(f"  {name:22s} {why} after {time.perf_counter() - start:.0f} s: "
                      f"tracing it at depths {STAND_IN_DEPTHS}", flush=True)
                start = time.perf_counter()
                result, why, status = run_one(name, args.size, args.warmup, args.timeout,
                                              "depth")
            wall = time.perf_counter() - start
        if why:
            skipped[name] = why
            print(f"  {name:22s} skipped: {why}", flush=True)
            continue
        failed.remove(name)
        info = result["info"]
        results[name] = result
        distinct = len(result["calls"])
        total = sum(n for *_, n in result["calls"])
        print(f"  {name:22s} build {info['build_s']:6.1f} s  trace {info['trace_s']:6.1f} s  "
              f"graph {info['graph_s']:5.1f} s  (child {wall:6.1f} s, peak RSS "
              f"{info['rss_gb']:.1f} GB, {info['threads']} threads): {total} op tasks, "
              f"{distinct} distinct calls", flush=True)
        if "stand_in" in info:
            print(f"  {'':22s} stand-in: {info['stand_in']}")
        if info["unmodelled"]:
            top = ", ".join(f"{n} x{c}" for n, c in info["unmodelled"][:8])
            print(f"  {'':22s} unmodelled nodes: {top}")
    data = build_data(results, skipped, args.size)
    check_data(data, args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump_data(data))
    per_op = Counter(c["op"] for c in data["calls"])
    print(f"wrote {len(data['calls'])} distinct calls of {len(per_op)} ops to {args.out}")
    for op, n in sorted(per_op.items()):
        print(f"  {op:34s} {n}")
    if failed:
        print(f"FAILED (left out of the file): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
