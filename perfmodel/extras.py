"""Optional dependencies, each behind a pip extra, and the one line naming it.

``pip install 'perfmodel[mpi]'`` brings mpi4py and mpich (multi-rank runs);
``pip install 'perfmodel[report]'`` brings matplotlib (the report's figures).
Code that needs one asks :func:`require` for it where it is used, so importing
perfmodel never needs them.
"""

from __future__ import annotations

import sys
from types import ModuleType

#: Extra -> what needs it (the start of the line :func:`require` raises).
EXTRAS = {
    "mpi": "multi-rank runs need MPI",
    "report": "`perfmodel report` draws its figures with matplotlib",
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line naming
    the extra that brings it."""


def missing_message(extra: str) -> str:
    """``perfmodel: <what needs it>: pip install 'perfmodel[<extra>]'``."""
    return f"perfmodel: {EXTRAS[extra]}: pip install 'perfmodel[{extra}]'"


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` (dotted names allowed) and return it;
    :class:`MissingExtra` naming ``extra`` when it cannot be imported."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(sorted(EXTRAS))}")
    try:
        __import__(module)  # through builtins.__import__, as an import statement goes
        loaded = sys.modules[module]
    except ImportError as exc:
        raise MissingExtra(missing_message(extra), name=module) from exc
    if loaded is None:  # a None entry in sys.modules blocks the import
        raise MissingExtra(missing_message(extra), name=module)
    return loaded
