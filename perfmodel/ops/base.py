"""The one definition of an op: shape space, inputs, callables, work, trace mapping.

Every consumer (microbenchmarks, predictor features, trace-to-graph mapping)
reads an op through :class:`OpDef`, so they cannot drift apart.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

#: ``smoke`` checks the pipeline on a CI machine; ``quick`` is the main job on a
#: CPU; ``gpu`` is ``quick``'s config counts sized for a GPU, whose largest
#: configs reach the op calls of the full-size workloads (``quick``'s CPU-sized
#: configs are launch-bound on a data-centre GPU, and a fit on them extrapolates
#: far beyond its data; see docs/journal/2026-11-26-nvidia-h200.md); ``full`` is
#: the dense grid.
PROFILES = ("smoke", "quick", "gpu", "full")
DIRECTIONS = ("forward", "backward")

#: Bytes per element of the dtypes the ops are benchmarked in.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: One in this many drawn ``linear`` and conv configs has ``GRAD_INPUT`` = 0 (the
#: backward of a first layer, whose input needs no gradient).
GRAD_INPUT_EVERY = 4


@dataclass(frozen=True)
class OpCase:
    """One microbenchmark point: an op, a direction, a dtype and a config."""

    op: str
    direction: str
    dtype: str
    config: tuple[tuple[str, int], ...]

    @property
    def params(self) -> dict[str, int]:
        return dict(self.config)

    @property
    def id(self) -> str:
        """Readable, stable pytest id, e.g. ``addmm-forward-float32-M64-N128-K32``."""
        shape = "-".join(f"{k}{v}" for k, v in self.config)
        return f"{self.op}-{self.direction}-{self.dtype}-{shape}"


class OpDef:
    """Base class of an op definition. Subclasses fill in the class attributes
    and override :meth:`configs`, :meth:`make_runner`, :meth:`flops` and
    :meth:`bytes_moved`.

    Attributes:
        name: unique op name (``"addmm"``).
        family: op family (``"gemm"``).
        params: config parameter names, in feature order.
        directions: the directions training runs (subset of ``DIRECTIONS``);
            an optimizer step is its op's ``forward``.
        dtypes: dtypes benchmarked.
        trace_names: ATen op names that this op appears as in a trace.
    """

    name: str = ""
    family: str = ""
    params: tuple[str, ...] = ()
    directions: tuple[str, ...] = ("forward",)
    dtypes: tuple[str, ...] = ("float32",)
    trace_names: tuple[str, ...] = ()
    #: Names of :meth:`extra_features`, appended to the shape features.
    extra_feature_names: tuple[str, ...] = ()
    #: Params along which FLOPs and bytes never shrink (all of them unless a
    #: subclass says otherwise, e.g. a conv's stride).
    monotone_params: tuple[str, ...] | None = None
    #: Whether a CPU timing evicts the last-level cache before each sample (one call
    #: per sample): for ops whose data a training step has evicted by the time it
    #: runs them again (embedding tables, see :mod:`perfmodel.ops.embedding`, and
    #: optimizer steps). See :meth:`cpu_flush_bytes`.
    cold_on_cpu: bool = False
    #: Values of params added after measurements were stored: what the stored
    #: records, which lack them, measured (see :meth:`complete_config`).
    param_defaults: dict[str, int] = {}

    @property
    def predicted(self) -> tuple[str, ...]:
        """The directions a fit predicts and ``pytest -m accuracy`` scores: the
        training directions, and what a family fits beside them."""
        return self.directions

    def cpu_flush_bytes(self, llc_bytes: int) -> int:
        """Bytes a CPU timing of this op writes before each sample, on a CPU whose
        last-level cache holds ``llc_bytes`` (0: the op is timed hot, as it is
        wherever the cache size is unknown)."""
        return 2 * llc_bytes if self.cold_on_cpu and llc_bytes else 0

    def complete_config(self, config: Mapping[str, int]) -> dict[str, int]:
        """A stored record's ``config`` with :attr:`param_defaults` filled in."""
        return {**self.param_defaults, **config}

    # -- shape space -------------------------------------------------------
    def configs(self, profile: str) -> list[dict[str, int]]:
        """The configs of ``profile``: :meth:`generate_configs`, computed once."""
        check_profile(profile)
        return [dict(c) for c in _cached_configs(self, profile)]

    def generate_configs(self, profile: str) -> list[dict[str, int]]:
        """The configs of ``profile``; deterministic for a given profile."""
        raise NotImplementedError

    def cases(self, profile: str) -> list[OpCase]:
        """Every (direction, dtype, config) of ``profile`` as :class:`OpCase`."""
        check_profile(profile)
        return [
            OpCase(self.name, direction, dtype, tuple((p, int(c[p])) for p in self.params))
            for c in self.configs(profile)
            for dtype in self.dtypes
            for direction in self.directions
        ]

    # -- running -----------------------------------------------------------
    def make_runner(self, params: Mapping[str, int], dtype: str, direction: str,
                    device: str) -> Callable[[], Any]:
        """Build inputs on ``device`` and return a zero-argument callable to time."""
        raise NotImplementedError

    # -- analytic work -----------------------------------------------------
    def flops(self, params: Mapping[str, int], direction: str) -> float:
        """Floating-point operations of one call (FLOP)."""
        raise NotImplementedError

    def bytes_moved(self, params: Mapping[str, int], dtype: str, direction: str) -> float:
        """Minimum bytes read and written by one call (B)."""
        raise NotImplementedError

    def size(self, params: Mapping[str, int], dtype: str, direction: str
             ) -> tuple[float, float]:
        """(FLOPs, bytes moved) of one call, 0 for either the op does not define."""
        try:
            flops = float(self.flops(params, direction))
        except NotImplementedError:
            flops = 0.0
        try:
            moved = float(self.bytes_moved(params, dtype, direction))
        except NotImplementedError:
            moved = 0.0
        return flops, moved

    def extra_features(self, params: Mapping[str, int], dtype: str,
                       direction: str) -> list[float]:
        """Features beyond the shape parameters (e.g. an index-reuse histogram),
        one per name in ``extra_feature_names``; none by default."""
        return []

    def analytic_model(self, direction: str) -> str | None:
        """Kind of :mod:`perfmodel.fit.embedding_model` model that describes this op
        in ``direction`` (a key of its ``MODELS``), or None."""
        return None

    # -- trace mapping -----------------------------------------------------
    def params_from_shapes(self, input_shapes: Sequence[Sequence[int]]) -> dict[str, int] | None:
        """Read this op's config from the input shapes of a trace node, or
        ``None`` when the node is not an instance of this op."""
        raise NotImplementedError

    def backward_via(self, params: Mapping[str, int]) -> tuple[str, dict[str, int]] | None:
        """For an op without a ``backward`` direction of its own: the op (name)
        and config whose backward is the same work, or None."""
        return None

    def backward_params(self, params: Mapping[str, int], node) -> dict[str, int]:
        """The config of the backward an autograd ``evaluate_function`` ``node``
        ran for forward config ``params``: by default the same. Ops whose
        backward skips work when the input needs no gradient (the first layer
        of a network) read that from the node's descendants."""
        return dict(params)

    def params_from_node(self, node) -> dict[str, int] | None:
        """This op's config from a :class:`~perfmodel.trace.parse.TraceNode` (whose
        name is one of ``trace_names``), or None when the node is not an
        instance of this op. Reads the input shapes unless an op needs more of
        the node (scalar arguments, descendants)."""
        return self.params_from_shapes(node.input_shapes)


@lru_cache(maxsize=None)
def _cached_configs(op: OpDef, profile: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    return tuple(tuple(c.items()) for c in op.generate_configs(profile))


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: expected one of {', '.join(PROFILES)}")
    return profile


def log_uniform_ints(rng: random.Random, low: int, high: int, multiple: int = 1) -> int:
    """An integer drawn log-uniformly from [low, high], rounded to ``multiple``."""
    value = math.exp(rng.uniform(math.log(low), math.log(high)))
    return max(low, min(high, int(round(value / multiple)) * multiple))


def sample_configs(seed: str, params: Sequence[str], count: int,
                   draw: Callable[[random.Random, int], dict[str, int]],
                   accept: Callable[[dict[str, int]], bool] = lambda cfg: True,
                   attempts_per_config: int = 200) -> list[dict[str, int]]:
    """Up to ``count`` distinct configs, deterministic for ``seed``.

    ``draw(rng, n_accepted)`` proposes a config (it may vary with how many were
    accepted so far, e.g. to alternate kinds); ``accept`` filters invalid or
    too-large ones. Two configs are the same when their ``params`` values are.
    """
    rng = random.Random(seed)
    seen: set[tuple[int, ...]] = set()
    out: list[dict[str, int]] = []
    for _ in range(count * attempts_per_config):
        cfg = draw(rng, len(out))
        key = tuple(cfg[p] for p in params)
        if key in seen or not accept(cfg):
            continue
        seen.add(key)
        out.append(cfg)
        if len(out) == count:
            break
    return out


def random_configs(seed: str, params: Sequence[str], ranges: Mapping[str, tuple[int, int]],
                   count: int, flops_of, max_flops: float,
                   aligned_share: float = 0.0) -> list[dict[str, int]]:
    """``count`` distinct configs drawn log-uniformly (seeded), each under ``max_flops``.
    A dim whose range starts at 8 or more is a multiple of 8; with probability
    ``aligned_share`` a config has every dim that reaches 8 a multiple of 8 (as
    layer widths are), the others draw any integer in their range."""
    def dim(rng: random.Random, low: int, high: int, aligned: bool) -> int:
        if low >= 8 or (aligned and high >= 8):
            return log_uniform_ints(rng, max(low, 8), high, multiple=8)
        return log_uniform_ints(rng, low, high)

    def draw(rng: random.Random, _: int) -> dict[str, int]:
        aligned = aligned_share > 0 and rng.random() < aligned_share
        return {p: dim(rng, *ranges[p], aligned) for p in params}

    return sample_configs(seed, params, count, draw, lambda c: flops_of(c) <= max_flops)


def torch_dtype(dtype: str):
    import torch

    try:
        return getattr(torch, dtype)
    except AttributeError:
        raise ValueError(f"unknown dtype {dtype!r}") from None
