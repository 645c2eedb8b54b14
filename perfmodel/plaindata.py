"""Plain-data helpers shared by everything that persists: atomic writes and
strict dataclass reconstruction. Only JSON and numeric arrays are ever written."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def is_number(value: object) -> bool:
    """Whether ``value`` loaded from a file (or a trace) is a finite number (a
    bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def is_seconds(value: object) -> bool:
    """Whether ``value`` loaded from a file is a finite number of seconds >= 0
    (a bool is not)."""
    return is_number(value) and value >= 0


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync it, then rename it into place,
    so a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: object) -> None:
    """Write ``obj`` as indented JSON (no NaN/Infinity) with :func:`write_bytes_atomic`."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


def dataclass_from_dict(cls: type[T], d: Any) -> T:
    """``cls(**d)`` after checking that ``d`` is a dict with exactly ``cls``'s fields;
    ValueError naming the missing or unknown fields otherwise."""
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__}.from_dict expects a dict, got {type(d).__name__}")
    names = [f.name for f in fields(cls)]
    missing = [name for name in names if name not in d]
    if missing:
        raise ValueError(f"{cls.__name__} field(s) missing: {', '.join(missing)}")
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    return cls(**{name: d[name] for name in names})
