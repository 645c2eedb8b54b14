"""Named registries that other packages extend without editing this one.

A :class:`Registry` maps names to definitions (op definitions in
:data:`perfmodel.ops.OPS`, workload configs in :data:`perfmodel.workloads.WORKLOADS`).
It fills itself on the first lookup: first the built-in definitions, then every
entry point of its group (``perfmodel.ops``, ``perfmodel.workloads``) of the
installed distributions, read through :mod:`importlib.metadata`. A user's package
declares one in its ``pyproject.toml``::

    [project.entry-points."perfmodel.ops"]
    fused_bias_gelu = "mylib.perf:FusedBiasGelu"

or calls ``perfmodel.register_op(...)`` / ``perfmodel.register_workload(...)``,
e.g. in the ``conftest.py`` of the rootdir (read before ``[tool.perfmodel]`` is
checked). Nothing is imported before the first lookup, so ``import perfmodel``
stays cheap, and an installed package's broken entry point only troubles the
sessions that use perfmodel.

A name can be registered once; ``replace=True`` swaps a definition (built-in or
not) for another. An entry point that does not load, gives the wrong type or
repeats a name raises :class:`RegistryError` naming the entry point and its
package. This module imports only the standard library.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Source of a definition that ships with perfmodel.
BUILTIN = "built in"
#: Source of a definition added by a ``register_*`` call.
REGISTERED = "registered by a call"


class RegistryError(ValueError):
    """A definition that cannot be registered (wrong type, name taken) or an
    entry point that does not load; the message names the definition, or the
    entry point and its package."""


def entry_point_label(ep: metadata.EntryPoint) -> str:
    """``group entry point 'name = value' (package dist version)`` for messages."""
    dist = getattr(ep, "dist", None)
    package = f"{dist.name} {dist.version}" if dist is not None else "unknown package"
    return f"{ep.group} entry point '{ep.name} = {ep.value}' (package {package})"


class Registry(Mapping[str, T], Generic[T]):
    """Definitions by name, filled lazily (built-ins, then entry points).

    ``kind`` names one definition in messages (``"op"``); ``group`` is the entry
    point group; ``builtins()`` returns the built-in definitions; ``check(obj)``
    returns the definitions ``obj`` stands for (an entry point may load a
    definition, a class of one, or an iterable of them) or raises TypeError
    saying what was expected; ``name_of(definition)`` is its registered name.
    """

    def __init__(self, kind: str, group: str, builtins: Callable[[], Iterable[T]],
                 check: Callable[[Any], list[T]], name_of: Callable[[T], str]):
        self.kind, self.group = kind, group
        self._builtins, self._check, self._name_of = builtins, check, name_of
        self._data: dict[str, T] | None = None
        self._ready = False
        self._sources: dict[str, str] = {}
        self._version = 0
        self._lock = threading.RLock()

    # -- filling ---------------------------------------------------------------------
    def _loaded(self) -> dict[str, T]:
        if self._ready:
            return self._data  # type: ignore[return-value]
        with self._lock:  # other threads wait here until loading is done
            if self._data is None:
                # Set before loading so that an entry point module which calls
                # register_* at import time (this thread, re-entering) finds the
                # built-ins already in.
                self._data, self._sources = {}, {}
                try:
                    for item in self._builtins():
                        self._add(item, BUILTIN, replace=False)
                    self._discover()
                except BaseException:
                    self._data, self._sources = None, {}  # the next lookup retries
                    raise
                self._version += 1
                self._ready = True
            return self._data

    def _discover(self) -> None:
        for ep in metadata.entry_points(group=self.group):
            label = entry_point_label(ep)
            try:
                loaded = ep.load()
            except Exception as exc:
                raise RegistryError(f"{label} failed to load: {type(exc).__name__}: {exc}") \
                    from exc
            try:
                items = self._check(loaded)
            except (TypeError, ValueError) as exc:
                raise RegistryError(f"{label}: {exc}") from exc
            for item in items:
                try:
                    self._add(item, label, replace=False)
                except RegistryError as exc:
                    raise RegistryError(f"{label}: {exc}") from None

    def _add(self, item: T, source: str, replace: bool) -> None:
        name = self._name_of(item)
        assert self._data is not None
        if name in self._data and not replace:
            if self._data[name] is item:
                return  # the same definition again: nothing to do
            raise RegistryError(
                f"{self.kind} {name!r} is already registered ({self._sources[name]}); "
                f"give yours another name, or pass replace=True to replace it")
        self._data[name] = item
        self._sources[name] = source

    # -- changing --------------------------------------------------------------------
    def register(self, obj: Any, *, replace: bool = False) -> list[T]:
        """Add the definitions ``obj`` stands for; returns them. RegistryError
        (a ValueError) when one is of the wrong type or its name is taken."""
        try:
            items = self._check(obj)
        except (TypeError, ValueError) as exc:
            raise RegistryError(str(exc)) from None
        with self._lock:
            data = self._loaded()
            if not replace:  # all or nothing: every name is free (or holds that same item)
                for item in items:
                    if data.get(self._name_of(item), item) is not item:
                        self._add(item, REGISTERED, replace=False)  # raises, naming it
            for item in items:
                self._add(item, REGISTERED, replace)
            self._version += 1
        return items

    def unregister(self, name: str) -> T:
        """Remove ``name`` (a built-in too) and return its definition; KeyError
        when it is not registered. For tests and interactive use."""
        with self._lock:
            data = self._loaded()
            item = data.pop(name)
            self._sources.pop(name, None)
            self._version += 1
        return item

    # -- reading ---------------------------------------------------------------------
    @property
    def version(self) -> int:
        """A number that changes whenever the registry does (for caches)."""
        self._loaded()
        return self._version

    def source(self, name: str) -> str:
        """Where ``name`` came from: :data:`BUILTIN`, :data:`REGISTERED` or an
        entry point's label."""
        self._loaded()
        return self._sources[name]

    def lookup(self, name: str) -> T:
        """The definition ``name``; ValueError listing the known names otherwise."""
        return _lookup(self, name, self.kind)

    def __getitem__(self, name: str) -> T:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._loaded()))

    def __len__(self) -> int:
        return len(self._loaded())

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def __repr__(self) -> str:
        if self._data is None:
            return f"<{self.kind} registry, not loaded yet>"
        return f"<{self.kind} registry: {', '.join(self._data)}>"


class RegistryView(Mapping[str, T], Generic[T]):
    """The definitions of ``registry`` that ``keep`` selects, read-only and live
    (e.g. the single-rank and the multi-rank workloads of one registry)."""

    def __init__(self, registry: Registry[T], keep: Callable[[T], bool], kind: str):
        self.registry, self._keep, self.kind = registry, keep, kind

    @property
    def version(self) -> int:
        return self.registry.version

    def lookup(self, name: str) -> T:
        """The definition ``name``; ValueError listing the known names otherwise."""
        return _lookup(self, name, self.kind)

    def __getitem__(self, name: str) -> T:
        item = self.registry[name]
        if not self._keep(item):
            raise KeyError(name)
        return item

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, item in self.registry.items() if self._keep(item)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name in self.registry and self._keep(self.registry[name])

    def __repr__(self) -> str:
        return f"<{self.kind} registry: {', '.join(self)}>"


def _lookup(registry: Mapping[str, T], name: str, kind: str) -> T:
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}: known {kind}s are "
                         f"{', '.join(sorted(registry))}") from None


def expand(obj: Any, single: Callable[[Any], T | None], expected: str) -> list[T]:
    """The definitions ``obj`` stands for: ``single(obj)`` when it is one (a
    definition or a class of one; None otherwise), else the items of an iterable
    of them. TypeError saying ``expected`` for anything else."""
    one = single(obj)
    if one is not None:
        return [one]
    if isinstance(obj, (str, bytes, Mapping)) or not isinstance(obj, Iterable):
        raise TypeError(f"got {_describe(obj)}; expected {expected}")
    out = []
    for item in obj:
        one = single(item)
        if one is None:
            raise TypeError(f"got an iterable holding {_describe(item)}; expected {expected}")
        out.append(one)
    return out


def _describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    text = repr(obj)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(obj).__name__})"
