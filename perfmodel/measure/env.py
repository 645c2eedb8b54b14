"""The environment every record carries: device, threads, library versions, commit."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path


def package_version(name: str) -> str | None:
    """Installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def fbgemm_version() -> str | None:
    """Version of whichever FBGEMM build is installed (CPU or CUDA), or None."""
    return package_version("fbgemm-gpu-cpu") or package_version("fbgemm-gpu")


def git_commit(cwd: Path | None = None) -> str | None:
    """Commit hash of the checkout at ``cwd`` (``+dirty`` when modified), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def environment(device_key: str, threads: int | None, cwd: Path | None = None) -> dict:
    """JSON-safe environment of a run on ``device_key``, including the host
    allocator policy in effect (:func:`perfmodel.measure.allocator.allocator_policy`)."""
    from perfmodel.measure.allocator import allocator_policy

    return {
        "device_key": device_key,
        "threads": threads,
        "cpu_allocator": allocator_policy(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "fbgemm": fbgemm_version(),
        "perfmodel": package_version("perfmodel"),
        "commit": git_commit(cwd),
    }
