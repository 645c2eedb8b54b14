"""Project settings from ``[tool.perfmodel]`` in ``pyproject.toml``.

Example::

    [tool.perfmodel]
    default_gmae_threshold = 0.15   # fraction; an accuracy item fails above it
    smoke_gmae_threshold = 1.5      # the smoke profile's few tiny configs: catches a broken fit
    e2e_tolerance = 0.05            # fraction (5 percentage points) over the baseline error

    [tool.perfmodel.gmae_thresholds]
    "addmm.forward" = 0.10          # per "<op>.<direction>"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel.ops import OPS

DEFAULT_GMAE_THRESHOLD = 0.15
DEFAULT_SMOKE_GMAE_THRESHOLD = 1.5
DEFAULT_E2E_TOLERANCE = 0.05


class SettingsError(ValueError):
    """A setting that does not parse; the message names the file and key."""


@dataclass(frozen=True)
class Settings:
    """Accuracy thresholds and the E2E gate tolerance (fractions)."""

    default_gmae_threshold: float = DEFAULT_GMAE_THRESHOLD
    gmae_thresholds: dict[str, float] = field(default_factory=dict)
    smoke_gmae_threshold: float = DEFAULT_SMOKE_GMAE_THRESHOLD
    e2e_tolerance: float = DEFAULT_E2E_TOLERANCE

    def gmae_threshold(self, op: str, direction: str, profile: str = "quick") -> float:
        """Threshold of ``op.direction`` in ``profile``.

        The ``smoke`` profile fits on a handful of tiny configs, so one loose
        threshold applies there; ``quick`` and ``full`` use the per-op ones.
        """
        if profile == "smoke":
            return self.smoke_gmae_threshold
        return self.gmae_thresholds.get(f"{op}.{direction}", self.default_gmae_threshold)


def load_settings(pyproject: Path) -> Settings:
    """Settings from ``pyproject``; defaults when the file or the table is absent."""
    if not pyproject.is_file():
        return Settings()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{pyproject}: not valid TOML ({exc})") from None
    table = data.get("tool", {}).get("perfmodel", {})
    known = {"default_gmae_threshold", "gmae_thresholds", "smoke_gmae_threshold", "e2e_tolerance"}
    for key in table:
        if key not in known:
            raise SettingsError(f"{pyproject}: unknown key [tool.perfmodel] {key!r}; "
                                f"known keys: {', '.join(sorted(known))}")
    thresholds = table.get("gmae_thresholds", {})
    if not isinstance(thresholds, dict):
        raise SettingsError(f"{pyproject}: [tool.perfmodel] gmae_thresholds must be a table")
    parsed = {}
    for name, value in thresholds.items():
        op, _, direction = name.partition(".")
        if op not in OPS or direction not in OPS[op].directions:
            raise SettingsError(
                f"{pyproject}: [tool.perfmodel.gmae_thresholds] {name!r} is not a known "
                f"'<op>.<direction>'; known ops: {', '.join(sorted(OPS))}")
        parsed[name] = _fraction(pyproject, f"gmae_thresholds.{name}", value)
    return Settings(
        default_gmae_threshold=_fraction(pyproject, "default_gmae_threshold",
                                         table.get("default_gmae_threshold",
                                                   DEFAULT_GMAE_THRESHOLD)),
        gmae_thresholds=parsed,
        smoke_gmae_threshold=_fraction(pyproject, "smoke_gmae_threshold",
                                       table.get("smoke_gmae_threshold",
                                                 DEFAULT_SMOKE_GMAE_THRESHOLD)),
        e2e_tolerance=_fraction(pyproject, "e2e_tolerance",
                                table.get("e2e_tolerance", DEFAULT_E2E_TOLERANCE)),
    )


def _fraction(path: Path, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10:
        raise SettingsError(f"{path}: [tool.perfmodel] {key} = {value!r} is not a fraction "
                            f"such as 0.05 (= 5%)")
    return float(value)
