"""Registry of op definitions: one :class:`~perfmodel.ops.base.OpDef` per op.

:data:`OPS` holds the built-in families (the modules named in
:data:`FAMILY_MODULES`, each exporting ``OPS``, a tuple of op definitions), the
ops of ``perfmodel.ops`` entry points and those added with :func:`register_op`.
It fills itself on the first lookup (see :mod:`perfmodel.registry`); every
consumer (suites, fitting, trace mapping, prediction) reads it there, so a
registered op is seen everywhere.
"""

from __future__ import annotations

from typing import Any, TypeVar

from perfmodel.ops.base import DIRECTIONS, DTYPE_BYTES, PROFILES, OpCase, OpDef, check_profile
from perfmodel.registry import BUILTIN, Registry, expand

#: Modules under ``perfmodel/ops/`` that define the built-in ops, imported on the
#: registry's first lookup.
FAMILY_MODULES = ("gemm", "embedding", "conv", "norm", "elementwise", "memory", "attention",
                  "optim", "collective", "indexing", "pooling", "rnn")

#: What a ``perfmodel.ops`` entry point may load.
ENTRY_POINT_EXPECTS = "an OpDef instance, an OpDef subclass, or an iterable of them"

_O = TypeVar("_O")


def _builtin_ops() -> list[OpDef]:
    import importlib

    return [op for name in FAMILY_MODULES
            for op in importlib.import_module(f"perfmodel.ops.{name}").OPS]


def _one_op(obj: Any) -> OpDef | None:
    """``obj`` as a checked op definition (a class is instantiated), or None
    when it is neither an OpDef nor a subclass of one."""
    if isinstance(obj, type) and issubclass(obj, OpDef):
        try:
            obj = obj()
        except TypeError as exc:
            raise TypeError(f"the OpDef subclass {obj.__module__}.{obj.__qualname__} cannot be "
                            f"made without arguments ({exc}); give an instance") from None
    if not isinstance(obj, OpDef):
        return None
    check_opdef(obj)
    return obj


def _is_names(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(isinstance(v, str) and v for v in value)


def check_opdef(op: OpDef) -> None:
    """ValueError naming ``op`` when its declared attributes cannot work: a
    name (no dots or spaces: items are named ``<op>.<direction>``), a family,
    ``params`` and ``trace_names`` as tuples of strings, ``directions`` among
    :data:`DIRECTIONS`, ``dtypes`` among ``DTYPE_BYTES``, hashable, and
    ``make_runner`` and ``generate_configs`` (or ``configs``) defined."""
    name = op.name
    if not isinstance(name, str) or not name or any(c in name for c in ". \t\n"):
        raise ValueError(f"{type(op).__qualname__} has name {name!r}; an op needs a non-empty "
                         f"name without dots or spaces")
    problems = []
    if not isinstance(op.family, str) or not op.family:
        problems.append(f"family {op.family!r} is not a non-empty string")
    for attr in ("params", "trace_names"):
        if not _is_names(getattr(op, attr)):
            problems.append(f"{attr} {getattr(op, attr)!r} is not a tuple of strings")
    if not op.directions or not _is_names(op.directions) or \
            not set(op.directions) <= set(DIRECTIONS):
        problems.append(f"directions {op.directions!r} are not among {DIRECTIONS}")
    if not op.dtypes or not _is_names(op.dtypes) or not set(op.dtypes) <= set(DTYPE_BYTES):
        problems.append(f"dtypes {op.dtypes!r} are not among {tuple(DTYPE_BYTES)}")
    cls = type(op)
    try:
        hash(op)  # configs are cached per op
    except TypeError:
        problems.append("it is not hashable (a dataclass op needs frozen=True or eq=False)")
    if cls.make_runner is OpDef.make_runner:
        problems.append("make_runner is not defined")
    if cls.generate_configs is OpDef.generate_configs and cls.configs is OpDef.configs:
        problems.append("generate_configs is not defined")
    if problems:
        raise ValueError(f"op {name!r} ({cls.__module__}.{cls.__qualname__}): "
                         + "; ".join(problems))


def _op_definitions(obj: Any) -> list[OpDef]:
    return expand(obj, _one_op, ENTRY_POINT_EXPECTS)


#: Every op definition by name; a read-only mapping, filled on the first lookup.
OPS: Registry[OpDef] = Registry("op", "perfmodel.ops", _builtin_ops, _op_definitions,
                                lambda op: op.name)


def register_op(opdef: _O, *, replace: bool = False) -> _O:
    """Register an op definition (an :class:`OpDef` instance, or a subclass made
    without arguments) under its ``name``, for every consumer: suites
    (``pytest.mark.perfmodel_ops(name)``), fitting, trace mapping and prediction.

    ValueError naming the op when its name is taken (``replace=True`` replaces
    that definition) or it is not an OpDef. Returns ``opdef``, so it also works
    as a class decorator.
    """
    if not isinstance(opdef, OpDef) and not (isinstance(opdef, type)
                                              and issubclass(opdef, OpDef)):
        raise ValueError(f"register_op needs an OpDef instance (or subclass), got "
                         f"{opdef!r} ({type(opdef).__name__})")
    OPS.register(opdef, replace=replace)
    return opdef


def get_op(name: str) -> OpDef:
    """The op called ``name``; ValueError listing the known ops otherwise."""
    return OPS.lookup(name)


def external_ops() -> tuple[str, ...]:
    """Names of the registered ops that perfmodel does not define (entry points,
    :func:`register_op` calls), in registration order; a built-in op replaced by
    another definition is not one (its family's suite measures it)."""
    builtin = {op.name for op in _builtin_ops()}
    return tuple(name for name in OPS if OPS.source(name) != BUILTIN and name not in builtin)


def cases_for(names, profile: str) -> list[OpCase]:
    """All microbenchmark cases of the ops ``names`` in ``profile``."""
    check_profile(profile)
    return [case for name in names for case in get_op(name).cases(profile)]


__all__ = ["DIRECTIONS", "FAMILY_MODULES", "OPS", "PROFILES", "OpCase", "OpDef", "cases_for",
           "check_opdef", "external_ops", "get_op", "register_op"]
