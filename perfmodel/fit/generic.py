"""The generic model: prices a node no op definition knows, from the bytes it moves.

Each category of :mod:`perfmodel.trace.categories` gets a line
``seconds = a + b·bytes`` per leaf node, learned from the op families a fit
does measure (:data:`SOURCES`): every fitted predictor of the category's source
ops is evaluated on its op's configs that lie within its fitted range, and the
line is fitted to those (bytes moved, predicted seconds) points by least
squares on relative error, with ``a, b >= 0``. ``a`` is the per-call cost
(dispatch on a CPU, launch-bound kernel on a GPU), ``1/b`` the category's
effective bandwidth on the device. A category without any fitted source takes
the ``pointwise`` line.

Nothing here is learned from traces or workloads: a fit of microbenchmarks
alone determines the model, so it is the same for models the project was
tuned on and for those it never saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from perfmodel.ops import OPS
from perfmodel.trace.categories import CATEGORIES

#: category -> (op, direction) pairs whose predictors teach its line, when the
#: fit has them. Ops of a family whose work is memory-bound and counted in
#: bytes by their definition.
SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    "pointwise": tuple((op, d) for op in ("relu", "gelu", "sigmoid", "tanh", "silu", "add",
                                          "mul") for d in ("forward", "backward")),
    "reduction": tuple((op, "forward") for op in ("sum", "mean", "amax", "var", "norm")),
    "gather_scatter": tuple((op, d) for op in ("index_select", "gather", "scatter_add", "index",
                                               "index_add", "index_put")
                            for d in ("forward", "backward")),
    "layout": tuple((op, "forward") for op in ("copy", "cat", "transpose_contiguous",
                                               "to_dtype")),
}
#: dtype the source predictors are evaluated in.
DTYPE = "float32"
#: A config whose FLOPs or bytes exceed the largest fitted one by this factor
#: is left out (the predictor would extrapolate).
WITHIN_FIT = 1.0


@dataclass(frozen=True)
class Line:
    """``a_s + b_s_per_B · bytes`` seconds per leaf node, learned from ``sources``
    (``op.direction``) at ``points`` configs; ``gmae``: its geometric mean
    absolute error over those points (fraction)."""

    a_s: float
    b_s_per_B: float
    sources: tuple[str, ...]
    points: int
    gmae: float

    def seconds(self, leaves: float, nbytes: float) -> float:
        return leaves * self.a_s + self.b_s_per_B * nbytes


@dataclass(frozen=True)
class GenericModel:
    """One :class:`Line` per category (a category without sources borrows
    ``pointwise``'s, named in ``borrowed``)."""

    lines: dict[str, Line]
    borrowed: tuple[str, ...] = field(default=())

    def seconds(self, parts: Mapping[str, list]) -> float:
        """Predicted seconds of a task's ``parts`` (category -> [leaves, bytes])."""
        return sum(self.lines[cat].seconds(n, b) for cat, (n, b) in parts.items()
                   if cat in self.lines)

    def describe(self) -> list[str]:
        """One line per category: its per-call cost, bandwidth, sources and fit."""
        out = []
        for cat in CATEGORIES:
            line = self.lines.get(cat)
            if line is None:
                continue
            bw = f"{1 / line.b_s_per_B / 1e9:.1f} GB/s" if line.b_s_per_B > 0 else "inf"
            via = "borrowed from pointwise" if cat in self.borrowed else \
                f"{line.points} configs of {', '.join(line.sources)}"
            out.append(f"{cat}: {line.a_s * 1e6:.2f} us + bytes at {bw} "
                       f"(GMAE {line.gmae:.1%}; {via})")
        return out


def fit_line(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """``(a, b)`` >= 0 minimising the squared relative error of ``a + b·bytes``
    against ``seconds`` (all > 0)."""
    w = 1.0 / seconds
    A = np.stack([w, nbytes * w], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(seconds), rcond=None)
    if a >= 0 and b >= 0:
        return float(a), float(b)
    # the better of the two one-parameter lines on the boundary
    candidates = []
    for col in (0, 1):
        x = A[:, col]
        denom = float(x @ x)
        coef = max(0.0, float(x.sum()) / denom) if denom > 0 else 0.0
        candidates.append((float(np.sum((coef * x - 1) ** 2)), col, coef))
    _, col, coef = min(candidates)
    return (coef, 0.0) if col == 0 else (0.0, coef)


def _gmae(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(np.abs(pred - meas) / meas + 4e-4))))


def _points(fit, op_name: str, direction: str) -> tuple[list[float], list[float]]:
    """(bytes, predicted seconds) of ``op.direction`` at its configs within the fit."""
    op = OPS.get(op_name)
    if op is None or DTYPE not in op.dtypes or direction not in op.directions:
        return [], []
    try:
        predictor = fit.predictor(op_name, direction)
    except LookupError:
        return [], []
    accuracy = getattr(fit, "accuracy", {}).get((op_name, direction))
    configs, seen = [], set()
    for profile in ("smoke", "quick", "gpu"):
        for config in op.configs(profile, workloads=False):
            key = tuple(sorted(config.items()))
            if key in seen:
                continue
            seen.add(key)
            ratio = accuracy.beyond(config, DTYPE) if accuracy is not None else None
            if ratio is None and profile not in ("smoke", "quick") or \
                    ratio is not None and ratio > WITHIN_FIT:
                continue
            configs.append(config)
    if not configs:
        return [], []
    seconds = [float(s) for s in predictor.predict(DTYPE, configs)]
    nbytes = [op.bytes_moved(c, DTYPE, direction) for c in configs]
    keep = [(b, s) for b, s in zip(nbytes, seconds) if b > 0 and s > 0 and math.isfinite(s)]
    return [b for b, _ in keep], [s for _, s in keep]


def generic_from_fit(fit) -> GenericModel | None:
    """The :class:`GenericModel` that ``fit``'s predictors teach; None when the
    fit has no predictor of any ``pointwise`` source and no other category
    has one either (or ``fit`` is None or has no predictors at all)."""
    if not callable(getattr(fit, "predictor", None)):
        return None
    lines: dict[str, Line] = {}
    for cat in CATEGORIES:
        xs: list[float] = []
        ys: list[float] = []
        used = []
        for op_name, direction in SOURCES[cat]:
            b, s = _points(fit, op_name, direction)
            if b:
                xs += b
                ys += s
                used.append(f"{op_name}.{direction}")
        if len(xs) < 2:
            continue
        x, y = np.array(xs), np.array(ys)
        a, slope = fit_line(x, y)
        lines[cat] = Line(a, slope, tuple(used), len(xs), _gmae(a + slope * x, y))
    if not lines:
        return None
    fallback = lines.get("pointwise") or next(iter(lines.values()))
    borrowed = tuple(cat for cat in CATEGORIES if cat not in lines)
    for cat in borrowed:
        lines[cat] = fallback
    return GenericModel(lines, borrowed)


_CACHE: dict[int, tuple[object, GenericModel | None]] = {}
_CACHE_SIZE = 8


def generic_model(fit) -> GenericModel | None:
    """:func:`generic_from_fit` of ``fit``, computed once per fit object."""
    hit = _CACHE.get(id(fit))
    if hit is not None and hit[0] is fit:
        return hit[1]
    model = generic_from_fit(fit)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(fit)] = (fit, model)
    return model
