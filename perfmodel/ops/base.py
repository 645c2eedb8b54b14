"""The one definition of an op: shape space, inputs, callables, work, trace mapping.

Every consumer (microbenchmarks, predictor features, trace-to-graph mapping)
reads an op through :class:`OpDef`, so they cannot drift apart.
"""

from __future__ import annotations

import functools
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

#: Suffix of the pseudo-direction under which a cold-cache op's *warm* CPU timing
#: is fitted (``"backward_warm"``): the call with its data evicted from the cores'
#: private caches but still in the last-level cache, as in a training step that
#: moves less data between two uses than that cache holds (see
#: :meth:`OpDef.cpu_warm_flush_bytes` and :func:`perfmodel.simulate.predict.llc_share`).
WARM_SUFFIX = "_warm"


def warm_direction(direction: str) -> str:
    """The pseudo-direction of ``direction``'s warm timing (:data:`WARM_SUFFIX`)."""
    return direction + WARM_SUFFIX


def base_direction(direction: str) -> str:
    """The training direction of a (possibly warm) direction: what an op's FLOPs,
    bytes and features are computed for."""
    return direction.removesuffix(WARM_SUFFIX)

#: The profile whose configs also hold the op calls that the built-in workloads
#: make at full size (:mod:`perfmodel.ops.workload_calls`; see :meth:`OpDef.configs`).
WORKLOAD_CALLS_PROFILE = "gpu"

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
    #: Params added to the op after fits were saved, each with a default in
    #: ``param_defaults``: a fit that predates them still loads and prices every
    #: config as at their defaults (its feature rows leave them out), until the
    #: next sweep measures them and refits.
    added_params: tuple[str, ...] = ()
    #: Whether a trace node of this op may have no floating-point input (a bool
    #: mask): such a node is priced in the op's first dtype.
    untyped_input: bool = False
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
        training directions, and what a family fits beside them (a cold-cache
        op's warm timings, :data:`WARM_SUFFIX`, measured on CPUs only)."""
        if self.cold_on_cpu:
            return (*self.directions, *(warm_direction(d) for d in self.directions))
        return self.directions

    def cpu_flush_bytes(self, llc_bytes: int) -> int:
        """Bytes a CPU timing of this op writes before each sample, on a CPU whose
        last-level cache holds ``llc_bytes`` (0: the op is timed hot, as it is
        wherever the cache size is unknown)."""
        return 2 * llc_bytes if self.cold_on_cpu and llc_bytes else 0

    def cpu_warm_flush_bytes(self, l2_bytes: int, llc_bytes: int, cores: int) -> int:
        """Bytes the *warm* CPU timing of a cold-cache op writes before each
        sample: twice the private L2 of each of ``cores`` cores, which evicts the
        op's data from the cores' caches and leaves most of it in a last-level
        cache of ``llc_bytes``. 0 (no warm timing) for an op timed hot, where a
        cache size is unknown, and where that flush would not leave three
        quarters of the last-level cache alone (no cache level between the two)."""
        if not (self.cold_on_cpu and l2_bytes and llc_bytes):
            return 0
        flush = 2 * l2_bytes * max(1, int(cores))
        return flush if 4 * flush <= llc_bytes else 0

    def complete_config(self, config: Mapping[str, int]) -> dict[str, int]:
        """A stored record's ``config`` with :attr:`param_defaults` filled in."""
        return {**self.param_defaults, **config}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that defines its own :meth:`configs` gets the workload calls
        added to it too (see :meth:`configs`)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("configs")
        if callable(own) and not getattr(own, "_adds_workload_calls", False):
            cls.configs = _adding_workload_calls(own)

    # -- shape space -------------------------------------------------------
    def configs(self, profile: str, workloads: bool = True) -> list[dict[str, int]]:
        """The configs of ``profile``: :meth:`generate_configs`, computed once.

        In :data:`WORKLOAD_CALLS_PROFILE` (``gpu``) they are followed by
        :meth:`workload_configs`, the op calls of the built-in workloads at full
        size that are not among them (``workloads=False``: the profile's own
        configs alone). A subclass may override this method without the
        ``workloads`` argument: its configs get the same addition
        (:meth:`__init_subclass__` wraps it)."""
        check_profile(profile)
        configs = [dict(c) for c in _cached_configs(self, profile)]
        return with_workload_calls(self, profile, configs) if workloads else configs

    def workload_configs(self) -> list[dict[str, int]]:
        """The configs of this op's calls in the built-in workloads at full size
        (:data:`perfmodel.ops.workload_calls.DATA_FILE`), in the file's order:
        those in a dtype it benchmarks, completed (:meth:`complete_config`), and
        only those that it :meth:`accepts`."""
        return [dict(c) for c in _cached_workload_configs(self)]

    def accepts(self, config: Mapping[str, int]) -> bool:
        """Whether the runner can run ``config``: exactly this op's params, each
        a non-negative int and the sizes (``monotone_params``) at least 1, the
        op's own ``valid(config)`` when it has one, and work that
        :meth:`flops` and :meth:`bytes_moved` can count (FLOPs >= 0 and bytes
        > 0 in every direction and dtype)."""
        if set(config) != set(self.params) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for v in config.values()):
            return False
        if any(config[p] < 1 for p in (self.monotone_params or self.params)):
            return False
        valid = getattr(self, "valid", None)
        try:
            if callable(valid) and not valid(config):
                return False
            return all(self.flops(config, d) >= 0 and self.bytes_moved(config, t, d) > 0
                       for d in self.directions for t in self.dtypes)
        except (ArithmeticError, KeyError, TypeError, ValueError, NotImplementedError):
            return False

    def raised_to_measured(self, params: Mapping[str, int]) -> dict[str, int]:
        """``params`` with every size (``monotone_params``) below the smallest
        value this op's ``smoke``, ``quick`` and ``gpu`` configs give it raised
        to that value. A predictor fitted on those configs has never seen a
        smaller size and may extrapolate wildly below them (a ``sum`` over a
        dim of 1 when the configs start at 8); the call's work never exceeds
        that of the raised config, so its price is an upper bound near the
        measured range."""
        floors = _smallest_sizes(self)
        return {k: max(v, floors[k]) if k in floors else v for k, v in params.items()}

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


@lru_cache(maxsize=None)
def _smallest_sizes(op: OpDef) -> dict[str, int]:
    """Per size param of ``op``, the smallest value of its smoke, quick and gpu configs."""
    sizes = op.monotone_params or op.params
    floors: dict[str, int] = {}
    for profile in ("smoke", "quick", "gpu"):
        for config in op.configs(profile, workloads=False):
            for k in sizes:
                if k in config:
                    floors[k] = min(floors.get(k, config[k]), config[k])
    return floors


@lru_cache(maxsize=None)
def _cached_workload_configs(op: OpDef) -> tuple[tuple[tuple[str, int], ...], ...]:
    from perfmodel.ops.workload_calls import params_by_op

    out = []
    for params in params_by_op(dtypes={op.name: op.dtypes}).get(op.name, ()):
        config = op.complete_config(params)
        if op.accepts(config):
            out.append(tuple((p, config[p]) for p in op.params))
    return tuple(out)


def with_workload_calls(op: OpDef, profile: str,
                        configs: list[dict[str, int]]) -> list[dict[str, int]]:
    """``configs`` of ``op`` in ``profile``, followed in :data:`WORKLOAD_CALLS_PROFILE`
    by the :meth:`~OpDef.workload_configs` that are not among them (compared on
    ``op.params``, each completed); the other profiles' configs as they are."""
    if profile != WORKLOAD_CALLS_PROFILE:
        return configs
    extra = op.workload_configs()
    if not extra:
        return configs
    seen = {tuple(op.complete_config(c).get(p) for p in op.params) for c in configs}
    out = list(configs)
    for config in extra:
        key = tuple(config[p] for p in op.params)
        if key not in seen:
            seen.add(key)
            out.append(config)
    return out


def _adding_workload_calls(configs: Callable[..., list[dict[str, int]]]
                           ) -> Callable[..., list[dict[str, int]]]:
    """An op class's own ``configs`` method, with :func:`with_workload_calls` applied."""
    @functools.wraps(configs)
    def wrapped(self: OpDef, profile: str, *args: Any, workloads: bool = True,
                **kwargs: Any) -> list[dict[str, int]]:
        own = configs(self, profile, *args, **kwargs)
        return with_workload_calls(self, profile, own) if workloads else own

    wrapped._adds_workload_calls = True  # type: ignore[attr-defined]
    return wrapped


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
