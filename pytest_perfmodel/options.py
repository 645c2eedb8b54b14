"""Validation of the plugin's command-line options and ``[tool.perfmodel]`` settings.

One function, :func:`check_options`, used by ``pytest_configure`` and, before it
launches ``mpiexec``, by the ``--perfmodel-ranks`` parent process (so a bad
option is reported once, not once per rank). Each problem is a
:class:`pytest.UsageError` whose message names the option and its bad value.
"""

from __future__ import annotations

import math

import pytest

from perfmodel.settings import Settings, SettingsError, load_settings


def _positive_seconds(option: str, value: float | None) -> None:
    """UsageError unless ``value`` is None or a finite number of seconds > 0 (NaN fails)."""
    if value is not None and not 0 < value < math.inf:
        raise pytest.UsageError(f"{option}: must be a positive number of seconds, got {value:g}")


def check_options(config: pytest.Config) -> tuple[dict[str, float], Settings]:
    """Check every perfmodel option of ``config`` and its ``pyproject.toml``
    settings; returns (the planted bias, the settings). Raises
    :class:`pytest.UsageError` naming the first bad option and its value."""
    opt = config.option
    if opt.perfmodel_threads is not None and opt.perfmodel_threads < 1:
        raise pytest.UsageError(f"--perfmodel-threads must be >= 1, got {opt.perfmodel_threads}")
    if opt.perfmodel_rounds < 1:
        raise pytest.UsageError(f"--perfmodel-rounds must be >= 1, got {opt.perfmodel_rounds}")
    if opt.perfmodel_ranks is not None and opt.perfmodel_ranks < 1:
        raise pytest.UsageError(f"--perfmodel-ranks must be >= 1, got {opt.perfmodel_ranks}")
    _positive_seconds("--perfmodel-budget", opt.perfmodel_budget)
    _positive_seconds("--perfmodel-collective-timeout", opt.perfmodel_collective_timeout)
    if not 0 < opt.perfmodel_target_ci < 1:  # NaN fails too
        raise pytest.UsageError(f"--perfmodel-target-ci: must be a fraction in (0, 1), "
                                f"got {opt.perfmodel_target_ci:g}")
    if opt.perfmodel_device is not None:
        from perfmodel.device.spec import parse_device

        try:
            parse_device(opt.perfmodel_device)
        except ValueError as exc:
            raise pytest.UsageError(f"--perfmodel-device: {exc}") from None
    from perfmodel.simulate.predict import parse_bias

    try:
        bias = parse_bias(opt.perfmodel_plant_bias)
    except ValueError as exc:
        raise pytest.UsageError(f"--perfmodel-plant-bias: {exc}") from None
    try:
        settings = load_settings(config.rootpath / "pyproject.toml")
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    return bias, settings
