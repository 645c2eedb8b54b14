"""The CI gate: compare each workload's E2E prediction error with the stored baseline.

Errors are fractions (0.05 = 5%); the tolerance is in the same unit, so a
tolerance of 0.05 allows the error to grow by five percentage points.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from perfmodel.plaindata import write_json_atomic

BASELINE_SCHEMA = 1


@dataclass(frozen=True)
class Baseline:
    """Per-workload E2E errors recorded on one device (fractions)."""

    device_key: str
    errors: dict[str, float]
    env: dict


@dataclass(frozen=True)
class Verdict:
    """The gate's decision for one workload."""

    workload: str
    status: str  # "ok" | "regressed" | "new"
    new_error: float
    baseline_error: float | None
    tolerance: float

    @property
    def failed(self) -> bool:
        return self.status == "regressed"

    def line(self) -> str:
        """One human-readable line; failing ones start with ``FAIL``."""
        if self.status == "new":
            return (f"NEW  {self.workload}: E2E error {self.new_error:.2%} "
                    f"(no baseline entry; save one with --perfmodel-save-baseline)")
        verb = "FAIL" if self.failed else "ok  "
        relation = "exceeds" if self.failed else "within"
        return (f"{verb} {self.workload}: E2E error {self.new_error:.2%} {relation} baseline "
                f"{self.baseline_error:.2%} + tolerance {self.tolerance:.2%}")


def load_baseline(path: Path) -> Baseline | None:
    """The baseline at ``path``, None when there is none; ValueError naming the file if bad."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: baseline is not readable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        raise ValueError(f"{path}: not a perfmodel baseline of schema {BASELINE_SCHEMA}")
    errors = data.get("errors")
    if not isinstance(errors, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in errors.values()):
        raise ValueError(f"{path}: 'errors' must map workload names to non-negative fractions")
    return Baseline(str(data.get("device_key")), {k: float(v) for k, v in errors.items()},
                    data.get("env") if isinstance(data.get("env"), dict) else {})


def save_baseline(path: Path, device_key: str, errors: Mapping[str, float], env: dict) -> None:
    """Write the current per-workload errors as the new baseline."""
    write_json_atomic(path, {"schema": BASELINE_SCHEMA, "device_key": device_key,
                             "created_unix_s": time.time(), "env": env,
                             "errors": dict(sorted(errors.items()))})


def check_errors(errors: Mapping[str, float], baseline: Baseline,
                 tolerance: float) -> list[Verdict]:
    """A verdict per measured workload: regressed when error > baseline + tolerance."""
    verdicts = []
    for workload, error in sorted(errors.items()):
        base = baseline.errors.get(workload)
        if base is None:
            verdicts.append(Verdict(workload, "new", error, None, tolerance))
        else:
            status = "regressed" if error > base + tolerance else "ok"
            verdicts.append(Verdict(workload, status, error, base, tolerance))
    return verdicts
