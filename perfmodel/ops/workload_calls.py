"""The op calls that the built-in single-rank workloads make at full size, read
from their CPU traces ahead of time (``scripts/workload_calls.py`` writes them).

The ``gpu`` profile adds them to each op's configs (see
:meth:`perfmodel.ops.base.OpDef.configs`): random configs in up to 11 dimensions
are sparse around the layers that real networks run (ResNet's convs, GPT-2's
head), and a fit on them alone extrapolates far to reach those calls.

The data file, :data:`DATA_FILE` (``perfmodel/ops/workload_calls.json``), is plain
JSON, read with :func:`json.loads` only (nothing in it is executed). Fields:

``format``
    ``"perfmodel-workload-calls"`` (:data:`FORMAT`).
``schema``
    ``1`` (:data:`SCHEMA`): the version of this layout.
``generated_by``, ``torch``, ``size``
    The script that wrote it, the torch version that traced, and the workload
    size traced (``"full"``: each workload's ``full_size()``).
``workloads``
    Per traced workload (registered name): ``config``, its config at ``size`` as
    plain data; and ``stand_in``, when some shape was not traced as is (see
    the script), what was done instead.
``skipped``
    Per workload not traced: why (e.g. FBGEMM missing).
``calls``
    The distinct calls, sorted by op, direction, dtype and param values, each an
    object: ``op`` (an op name, :data:`perfmodel.ops.OPS`), ``direction``
    (``forward`` or ``backward``), ``dtype`` (``float32``, ...), ``params`` (the
    op's config, in the op's param order: param name to a non-negative int, as
    the trace graph's :class:`~perfmodel.trace.graph.Task` carries it), ``count`` (op tasks with
    this call in one traced iteration, summed over workloads) and ``workloads``
    (registered workload name to its count; the counts sum to ``count``).

Every problem in the file raises :class:`WorkloadCallsError` (a ValueError)
naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: The committed file the ``gpu`` profile reads.
DATA_FILE = Path(__file__).with_name("workload_calls.json")
FORMAT = "perfmodel-workload-calls"
SCHEMA = 1
#: Directions a call may have (those of :data:`perfmodel.ops.base.DIRECTIONS`).
CALL_DIRECTIONS = ("forward", "backward")


class WorkloadCallsError(ValueError):
    """A workload-calls file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class WorkloadCall:
    """One distinct call: an op in a direction and dtype with a config, made
    ``count`` times per iteration by the ``workloads`` (name, count)."""

    op: str
    direction: str
    dtype: str
    params: tuple[tuple[str, int], ...]
    count: int
    workloads: tuple[tuple[str, int], ...]

    @property
    def config(self) -> dict[str, int]:
        return dict(self.params)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _name(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def check_data(data: Any, path: Path | str) -> None:
    """WorkloadCallsError naming ``path`` and the field unless ``data`` (a
    parsed file) has the documented layout."""
    def fail(where: str, problem: str) -> None:
        raise WorkloadCallsError(f"{path}: {where}: {problem} (a workload-calls file, see "
                                 f"perfmodel/ops/workload_calls.py; regenerate it with "
                                 f"scripts/workload_calls.py)")

    if not isinstance(data, dict):
        fail("top level", f"expected an object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        fail("format", f"expected {FORMAT!r}, got {data.get('format')!r}")
    if not _is_int(data.get("schema")) or data["schema"] != SCHEMA:
        fail("schema", f"expected {SCHEMA}, got {data.get('schema')!r}")
    for key in ("workloads", "skipped"):
        if not isinstance(data.get(key, {}), dict):
            fail(key, f"expected an object, got {type(data[key]).__name__}")
    calls = data.get("calls")
    if not isinstance(calls, list):
        fail("calls", f"expected a list, got {type(calls).__name__}")
    seen: set[tuple] = set()
    for i, call in enumerate(calls):
        where = f"calls[{i}]"
        if not isinstance(call, dict):
            fail(where, f"expected an object, got {type(call).__name__}")
        missing = [k for k in ("op", "direction", "dtype", "params", "count", "workloads")
                   if k not in call]
        if missing:
            fail(where, f"missing {', '.join(missing)}")
        for key in ("op", "dtype"):
            if not _name(call[key]):
                fail(f"{where}.{key}", f"expected a non-empty string, got {call[key]!r}")
        if call["direction"] not in CALL_DIRECTIONS:
            fail(f"{where}.direction", f"expected one of {CALL_DIRECTIONS}, "
                 f"got {call['direction']!r}")
        params = call["params"]
        if not isinstance(params, dict) or not params:
            fail(f"{where}.params", f"expected a non-empty object, got {params!r}")
        for key, value in params.items():
            if not _is_int(value) or value < 0:
                fail(f"{where}.params.{key}", f"expected a non-negative int, got {value!r}")
        count, workloads = call["count"], call["workloads"]
        if not _is_int(count) or count < 1:
            fail(f"{where}.count", f"expected a positive int, got {count!r}")
        if not isinstance(workloads, dict) or not workloads or not all(
                _name(k) and _is_int(v) and v >= 1 for k, v in workloads.items()):
            fail(f"{where}.workloads", f"expected an object of workload names to positive "
                 f"counts, got {workloads!r}")
        if sum(workloads.values()) != count:
            fail(f"{where}.workloads", f"counts sum to {sum(workloads.values())}, not to "
                 f"count {count}")
        key = (call["op"], call["direction"], call["dtype"], tuple(sorted(params.items())))
        if key in seen:
            fail(where, f"repeats the call {call['op']} {call['direction']} {call['dtype']} "
                 f"{params}")
        seen.add(key)


def read_data(path: Path | str = DATA_FILE) -> dict:
    """The checked content of a workload-calls file (see :func:`check_data`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadCallsError(f"{path}: cannot read the workload-calls file ({exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:  # json.JSONDecodeError
        raise WorkloadCallsError(f"{path}: not valid JSON ({exc})") from None
    check_data(data, path)
    return data


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> tuple[WorkloadCall, ...]:
    data = read_data(path)
    return tuple(WorkloadCall(c["op"], c["direction"], c["dtype"],
                              tuple((str(k), int(v)) for k, v in c["params"].items()),
                              c["count"], tuple(c["workloads"].items()))
                 for c in data["calls"])


def load_calls(path: Path | str = DATA_FILE) -> tuple[WorkloadCall, ...]:
    """Every call of the file, in its order (read once per file version)."""
    path = Path(path)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise WorkloadCallsError(f"{path}: cannot read the workload-calls file ({exc})") from None
    return _load(str(path), mtime)


def params_by_op(path: Path | str = DATA_FILE,
                 dtypes: Mapping[str, Iterable[str]] | None = None) -> dict[str, list[dict]]:
    """Per op name, the distinct configs of its calls, in file order, directions
    merged (an op's cases cross each config with its directions and dtypes).
    With ``dtypes`` (op name to the dtypes it benchmarks), a call in another
    dtype is left out, and so is an op that ``dtypes`` does not name."""
    out: dict[str, list[dict]] = {}
    seen: set[tuple] = set()
    for call in load_calls(path):
        if dtypes is not None and call.dtype not in tuple(dtypes.get(call.op, ())):
            continue
        key = (call.op, tuple(sorted(call.params)))
        if key in seen:
            continue
        seen.add(key)
        out.setdefault(call.op, []).append(call.config)
    return out


def dump_data(data: Mapping[str, Any]) -> str:
    """``data`` as the file's text: JSON, one workload and one call per line."""
    def block(key: str, opening: str, closing: str, rows: list[str]) -> str:
        inner = ",\n".join(f"    {row}" for row in rows)
        return f"  {json.dumps(key)}: {opening}\n{inner}\n  {closing}" if rows else \
            f"  {json.dumps(key)}: {opening}{closing}"

    parts = []
    for key, value in data.items():
        if key in ("workloads", "skipped") and isinstance(value, dict):
            parts.append(block(key, "{", "}", [f"{json.dumps(k)}: {json.dumps(v)}"
                                               for k, v in value.items()]))
        elif key == "calls" and isinstance(value, list):
            parts.append(block(key, "[", "]", [json.dumps(c) for c in value]))
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"
