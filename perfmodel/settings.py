"""Project settings from ``[tool.perfmodel]`` in ``pyproject.toml``.

Example::

    [tool.perfmodel]
    default_gmae_threshold = 0.15   # fraction; an accuracy item fails above it
    smoke_gmae_threshold = 5.0      # the smoke profile's few tiny configs: catches a broken fit
    e2e_spread_k = 4.0              # gate: allowed = |baseline mean| + max(k * spread * b(n), min margin)
    e2e_spread_confidence = 0.95    # b(n): the spread of n runs at this upper bound (0: as measured)
    e2e_min_margin = 0.01           # fraction (1 percentage point): the least allowed growth
    baseline_runs = 5               # runs of each E2E workload --perfmodel-save-baseline records
    replay_tolerance = 0.005        # replay gate: allowed change of a replayed error (0.5 pp)
    replay_fail_on_improvement = true   # replay gate: a prediction that moves either way fails
    accuracy_tolerance = 0.01       # accuracy gate: allowed rise of a committed fit's GMAE (1 pp)
    fresh_gmae_slack = 0.30         # a fresh sweep's GMAE may exceed the previous fit's by this

    [tool.perfmodel.gmae_thresholds]
    "addmm.forward" = 0.10          # per "<op>.<direction>"

    [tool.perfmodel.e2e_ceilings]
    "mlp_small" = 0.40              # fraction; fails above it, baseline or not
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel.gate.baseline import (DEFAULT_MIN_MARGIN, DEFAULT_SPREAD_CONFIDENCE,
                                     DEFAULT_SPREAD_K, GatePolicy)
from perfmodel.ops import OPS

DEFAULT_GMAE_THRESHOLD = 0.15
DEFAULT_SMOKE_GMAE_THRESHOLD = 1.5
DEFAULT_E2E_SPREAD_K = DEFAULT_SPREAD_K
DEFAULT_E2E_MIN_MARGIN = DEFAULT_MIN_MARGIN
DEFAULT_E2E_SPREAD_CONFIDENCE = DEFAULT_SPREAD_CONFIDENCE
DEFAULT_BASELINE_RUNS = 5
#: The replay gate's tolerance: absolute change of a replayed error (fraction: 0.5 pp).
DEFAULT_REPLAY_TOLERANCE = 0.005
#: The accuracy gate's tolerance: rise of a re-scored GMAE (fraction: 1 pp).
DEFAULT_ACCURACY_TOLERANCE = 0.01
#: How far a fresh sweep's held-out GMAE may rise over the previous fit's (fraction: 30 pp).
DEFAULT_FRESH_GMAE_SLACK = 0.30

_KNOWN_KEYS = ("default_gmae_threshold", "gmae_thresholds", "smoke_gmae_threshold",
               "e2e_spread_k", "e2e_min_margin", "baseline_runs", "e2e_ceilings",
               "replay_tolerance", "replay_fail_on_improvement", "accuracy_tolerance",
               "fresh_gmae_slack", "e2e_spread_confidence")
#: Keys that used to exist, and what to do instead.
_RETIRED_KEYS = {
    "e2e_tolerance": "the gate now allows baseline mean + max(e2e_spread_k * spread, "
                     "e2e_min_margin); set those (and [tool.perfmodel.e2e_ceilings] for an "
                     "absolute cap) instead",
}


class SettingsError(ValueError):
    """A setting that does not parse; the message names the file and key."""


@dataclass(frozen=True)
class Settings:
    """Accuracy thresholds and the E2E gate's policy (fractions unless said otherwise).

    ``e2e_spread_k`` multiplies the baseline spread, taken at its upper one-sided
    ``e2e_spread_confidence`` bound for its number of runs
    (:func:`perfmodel.gate.baseline.spread_bound`); ``e2e_min_margin`` is the least
    growth the gate allows; ``baseline_runs`` is how many times saving a baseline
    repeats each E2E workload; ``e2e_ceilings`` caps a workload's error absolutely.
    ``replay_tolerance`` is how far a replayed error may grow (and, with
    ``replay_fail_on_improvement``, move either way) from the replay baseline's
    (:mod:`perfmodel.gate.replay`); ``accuracy_tolerance`` how far a committed
    fit's re-scored GMAE may rise (:mod:`perfmodel.gate.accuracy`);
    ``fresh_gmae_slack`` how far a fresh sweep's GMAE may rise over the previous
    fit's of the same configs (:meth:`fresh_threshold`).
    """

    default_gmae_threshold: float = DEFAULT_GMAE_THRESHOLD
    gmae_thresholds: dict[str, float] = field(default_factory=dict)
    smoke_gmae_threshold: float = DEFAULT_SMOKE_GMAE_THRESHOLD
    e2e_spread_k: float = DEFAULT_E2E_SPREAD_K
    e2e_min_margin: float = DEFAULT_E2E_MIN_MARGIN
    e2e_spread_confidence: float = DEFAULT_E2E_SPREAD_CONFIDENCE
    baseline_runs: int = DEFAULT_BASELINE_RUNS
    e2e_ceilings: dict[str, float] = field(default_factory=dict)
    replay_tolerance: float = DEFAULT_REPLAY_TOLERANCE
    replay_fail_on_improvement: bool = True
    accuracy_tolerance: float = DEFAULT_ACCURACY_TOLERANCE
    fresh_gmae_slack: float = DEFAULT_FRESH_GMAE_SLACK

    def gmae_threshold(self, op: str, direction: str, profile: str = "quick") -> float:
        """Threshold of ``op.direction`` in ``profile``.

        The ``smoke`` profile fits on a handful of tiny configs, so one loose
        threshold applies there; ``quick`` and ``full`` use the per-op ones.
        """
        if profile == "smoke":
            return self.smoke_gmae_threshold
        return self.gmae_thresholds.get(f"{op}.{direction}", self.default_gmae_threshold)

    def fresh_threshold(self, op: str, direction: str, profile: str,
                        previous: tuple[float, int] | None, n_configs: int) -> float:
        """Threshold of a fresh sweep's ``op.direction`` fitted on ``n_configs``
        configs: :meth:`gmae_threshold`, or lower, the GMAE the previous fit of
        this device recorded (``previous``: GMAE, configs) plus
        ``fresh_gmae_slack``, when that fit scored the same number of configs
        (the same grid) and the profile is not ``smoke``."""
        threshold = self.gmae_threshold(op, direction, profile)
        if profile == "smoke" or previous is None or previous[1] != n_configs:
            return threshold
        return min(threshold, previous[0] + self.fresh_gmae_slack)

    def gate_policy(self) -> GatePolicy:
        """The E2E gate's policy from these settings."""
        return GatePolicy(k=self.e2e_spread_k, min_margin=self.e2e_min_margin,
                          ceilings=dict(self.e2e_ceilings),
                          spread_confidence=self.e2e_spread_confidence)


def load_settings(pyproject: Path) -> Settings:
    """Settings from ``pyproject``; defaults when the file or the table is absent."""
    if not pyproject.is_file():
        return Settings()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{pyproject}: not valid TOML ({exc})") from None
    tool = data.get("tool", {})
    table = tool.get("perfmodel", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise SettingsError(f"{pyproject}: [tool.perfmodel] must be a table, got {table!r}")
    for key in table:
        if key in _RETIRED_KEYS:
            raise SettingsError(f"{pyproject}: [tool.perfmodel] {key} = {table[key]!r} is no "
                                f"longer supported: {_RETIRED_KEYS[key]}")
        if key not in _KNOWN_KEYS:
            raise SettingsError(f"{pyproject}: unknown key [tool.perfmodel] {key!r}; "
                                f"known keys: {', '.join(sorted(_KNOWN_KEYS))}")
    return Settings(
        default_gmae_threshold=_fraction(pyproject, "default_gmae_threshold",
                                         table.get("default_gmae_threshold",
                                                   DEFAULT_GMAE_THRESHOLD)),
        gmae_thresholds=_gmae_thresholds(pyproject, table.get("gmae_thresholds", {})),
        smoke_gmae_threshold=_fraction(pyproject, "smoke_gmae_threshold",
                                       table.get("smoke_gmae_threshold",
                                                 DEFAULT_SMOKE_GMAE_THRESHOLD)),
        e2e_spread_k=_spread_k(pyproject, table.get("e2e_spread_k", DEFAULT_E2E_SPREAD_K)),
        e2e_min_margin=_margin(pyproject, table.get("e2e_min_margin", DEFAULT_E2E_MIN_MARGIN)),
        e2e_spread_confidence=_confidence(pyproject, table.get("e2e_spread_confidence",
                                                               DEFAULT_E2E_SPREAD_CONFIDENCE)),
        baseline_runs=_runs(pyproject, table.get("baseline_runs", DEFAULT_BASELINE_RUNS)),
        e2e_ceilings=_ceilings(pyproject, table.get("e2e_ceilings", {})),
        replay_tolerance=_tolerance(pyproject, "replay_tolerance",
                                    table.get("replay_tolerance", DEFAULT_REPLAY_TOLERANCE)),
        accuracy_tolerance=_tolerance(pyproject, "accuracy_tolerance",
                                      table.get("accuracy_tolerance",
                                                DEFAULT_ACCURACY_TOLERANCE)),
        fresh_gmae_slack=_tolerance(pyproject, "fresh_gmae_slack",
                                    table.get("fresh_gmae_slack", DEFAULT_FRESH_GMAE_SLACK)),
        replay_fail_on_improvement=_flag(pyproject, "replay_fail_on_improvement",
                                         table.get("replay_fail_on_improvement", True)),
    )


def _gmae_thresholds(path: Path, thresholds: object) -> dict[str, float]:
    if not isinstance(thresholds, dict):
        raise SettingsError(f"{path}: [tool.perfmodel] gmae_thresholds must be a table")
    parsed = {}
    for name, value in thresholds.items():
        op, _, direction = name.partition(".")
        if op not in OPS or direction not in OPS[op].predicted:
            raise SettingsError(
                f"{path}: [tool.perfmodel.gmae_thresholds] {name!r} is not a known "
                f"'<op>.<direction>'; known ops: {', '.join(sorted(OPS))}")
        parsed[name] = _fraction(path, f"gmae_thresholds.{name}", value)
    return parsed


def _ceilings(path: Path, ceilings: object) -> dict[str, float]:
    """Per-workload E2E error ceilings (fractions); names must be registered workloads."""
    if not isinstance(ceilings, dict):
        raise SettingsError(f"{path}: [tool.perfmodel] e2e_ceilings = {ceilings!r} must be a "
                            f"table of workload name = fraction")
    from perfmodel.workloads import WORKLOADS  # lazily: the registry may import heavy code

    parsed = {}
    for name, value in ceilings.items():
        if name not in WORKLOADS:
            raise SettingsError(
                f"{path}: [tool.perfmodel.e2e_ceilings] {name!r} is not a known workload; "
                f"known workloads: {', '.join(sorted(WORKLOADS))}")
        parsed[name] = _fraction(path, f"e2e_ceilings.{name}", value)
    return parsed


def _fraction(path: Path, key: str, value: object) -> float:
    if not _is_number(value) or not 0 < value < 10:
        raise SettingsError(f"{path}: [tool.perfmodel] {key} = {value!r} is not a fraction "
                            f"such as 0.05 (= 5%)")
    return float(value)


def _margin(path: Path, value: object) -> float:
    if not _is_number(value) or not 0 <= value < 10:
        raise SettingsError(f"{path}: [tool.perfmodel] e2e_min_margin = {value!r} is not a "
                            f"fraction such as 0.01 (= 1 percentage point), or 0")
    return float(value)


def _spread_k(path: Path, value: object) -> float:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{path}: [tool.perfmodel] e2e_spread_k = {value!r} is not a "
                            f"positive number such as 3.0 (times the baseline spread)")
    return float(value)


def _confidence(path: Path, value: object) -> float:
    if not _is_number(value) or not 0 <= value < 1:
        raise SettingsError(f"{path}: [tool.perfmodel] e2e_spread_confidence = {value!r} is "
                            f"not a fraction in [0, 1) such as 0.95 (0: the spread as measured)")
    return float(value)


def _runs(path: Path, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise SettingsError(f"{path}: [tool.perfmodel] baseline_runs = {value!r} is not a "
                            f"whole number of runs >= 2 (a spread needs two runs)")
    return value


def _tolerance(path: Path, key: str, value: object) -> float:
    if not _is_number(value) or not 0 <= value < 1:
        raise SettingsError(f"{path}: [tool.perfmodel] {key} = {value!r} is not a "
                            f"fraction such as 0.005 (= 0.5 percentage point), or 0")
    return float(value)


def _flag(path: Path, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"{path}: [tool.perfmodel] {key} = {value!r} is not true or false")
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
