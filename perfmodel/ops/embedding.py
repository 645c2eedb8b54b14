"""Embedding family: ``embedding_bag_sum``, ``embedding_bag_mean`` (torch
``F.embedding_bag``), FBGEMM's table-batched embedding ``tbe_sgd`` and
``tbe_rowwise_adagrad`` (``SplitTableBatchedEmbeddingBagsCodegen``), and the
plain lookup ``embedding`` (``nn.Embedding``, a language model's token and
position embeddings; see :class:`Embedding`, which has params of its own).

Every bag op shares the params ``B`` (batch), ``E`` (rows per table), ``T``
(tables), ``L`` (pooling factor: indices per bag), ``D`` (embedding dim) and
``ZIPF``, the index distribution: 1 (or 0) is uniform over the E rows,
otherwise rows are drawn with probability ∝ rank^-(ZIPF/100) (105 means a Zipf
exponent of 1.05). Uniform is coded 1, not 0, because every config param is a
positive int (an exponent of 0.01 would be indistinguishable from uniform). Indices are generated deterministically per table from the config
(:func:`table_indices`), so the benchmark and the reuse-histogram features see
the same accesses. A benchmark cycles :data:`INDEX_BATCHES` such batches of
indices, one per call, as a training loop draws a fresh batch each step: with
one batch repeated, the rows it touches stay in cache and the lookups are
faster than in training (see docs/journal/2026-11-23-sweep-design.md).

Work model (fp32 rows, int64 indices and offsets; U = expected distinct rows
touched per table, :func:`expected_unique_rows`):

- forward reads B·T·L rows of D floats, the B·T·L indices and B·T+1 offsets,
  and writes B·T·D outputs; one add per gathered element (B·T·L·D FLOP, mean
  adds B·T·D divides).
- ``embedding_bag`` backward (autograd, dense gradient) reads the B·T·D output
  gradient, indices and offsets, and writes the dense T·E·D weight gradient;
  B·T·L·D accumulate FLOP.
- TBE backward with exact SGD reads the output gradient, indices and offsets,
  and read-modify-writes the U·T touched rows (B·T·L·D + 2·U·T·D FLOP).
- TBE backward with exact row-wise Adagrad also read-modify-writes one fp32
  state per touched row (B·T·L·D + U·T·(4·D + 3) FLOP).

E does not change the work of a lookup, so ``monotone_params`` is B, T, L, D.
"""

from __future__ import annotations

import itertools
import math
import random
from functools import lru_cache
from typing import Mapping

import numpy as np

from perfmodel.ops.base import DTYPE_BYTES, OpDef, check_profile, log_uniform_ints
from perfmodel.ops.base import sample_configs, torch_dtype

PARAMS = ("B", "E", "T", "L", "D", "ZIPF")
#: Distribution code of uniform indices.
UNIFORM = 1
#: Bytes of one index or offset (the runners use int64).
INDEX_BYTES = 8
#: Power-of-two bins of the reuse histogram: 1, 2-3, 4-7, ..., >= 128 accesses.
REUSE_BINS = 8
REUSE_FEATURE_NAMES = tuple(
    f"reuse_{2 ** k}_{2 ** (k + 1) - 1}" if k < REUSE_BINS - 1 else f"reuse_{2 ** k}_up"
    for k in range(REUSE_BINS))
#: Tables whose indices the reuse histogram is averaged over (tables are i.i.d.).
REUSE_TABLES = 4
#: Batches of indices a benchmark cycles through, one per call (as many as a
#: workload's ``DATA_BATCHES``).
INDEX_BATCHES = 4
#: Largest weight footprint E·T·D·4 of any config (B); keeps ``full`` under ~1 GB.
MAX_WEIGHT_BYTES = {"smoke": 4 << 20, "quick": 64 << 20, "gpu": 1 << 30, "full": 1 << 30}
#: Largest forward bytes moved of one call (B), keeping profiles inside their time.
MAX_FORWARD_BYTES = {"smoke": 4e6, "quick": 1.5e8, "gpu": 1.5e9, "full": 4e9}
_CONFIGS = {"smoke": 4, "quick": 80, "gpu": 80}
_RANGES = {
    "smoke": {"B": (8, 128), "E": (64, 4096), "T": (1, 4), "L": (1, 32), "D": (4, 64)},
    "quick": {"B": (16, 1024), "E": (256, 200_000), "T": (1, 16), "L": (1, 64), "D": (4, 256)},
    "gpu": {"B": (16, 8192), "E": (256, 1_000_000), "T": (1, 16), "L": (1, 64), "D": (4, 256)},
}
_ZIPF_CODES = {"smoke": (UNIFORM, 105), "quick": (UNIFORM, 80, 105, 120),
               "gpu": (UNIFORM, 80, 105, 120)}
_FULL_AXES = {
    "B": (64, 256, 1024, 4096, 16384),
    "E": (1_000, 10_000, 100_000, 1_000_000, 4_000_000),
    "T": (1, 4, 16, 64),
    "L": (1, 8, 32, 128),
    "D": (16, 64, 128, 256),
    "ZIPF": (UNIFORM, 105),
}


# ---------------------------------------------------------------- index generation


def zipf_alpha(code: int) -> float:
    """Zipf exponent of a distribution code (codes <= ``UNIFORM`` mean uniform: 0)."""
    return 0.0 if code <= UNIFORM else code / 100.0


@lru_cache(maxsize=16)
def _zipf_cdf(rows: int, code: int) -> np.ndarray:
    """Cumulative probability of ranks 1..rows under rank^-alpha (float64)."""
    weights = np.arange(1, rows + 1, dtype=np.float64) ** -zipf_alpha(code)
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _scatter_multiplier(rows: int) -> int:
    """A multiplier coprime with ``rows`` that spreads hot ranks over the table."""
    for candidate in (2654435761, 2246822519, 3266489917, 668265263, 374761393):
        a = candidate % rows
        if a > 1 and math.gcd(a, rows) == 1:
            return a
    return 1


def table_indices(params: Mapping[str, int], table: int, batch: int = 0) -> np.ndarray:
    """Row indices (int64, in [0, E)) of the B·L lookups into ``table``, bag-major.

    Seeded by the config, the table number and the ``batch`` number, so every op
    sees the same indices for the same batch. Zipf ranks are mapped to rows by an
    affine permutation, so hot rows are spread over the table rather than adjacent.
    """
    b, e, l, code = (int(params[p]) for p in ("B", "E", "L", "ZIPF"))
    rng = np.random.default_rng([int(params[p]) for p in PARAMS] + [table]
                                + ([batch] if batch else []))
    n = b * l
    if code <= UNIFORM or e == 1:
        return rng.integers(0, e, size=n, dtype=np.int64)
    ranks = np.searchsorted(_zipf_cdf(e, code), rng.random(n), side="right")
    ranks = np.minimum(ranks, e - 1).astype(np.int64)
    shift = int(rng.integers(0, e))
    return (ranks * _scatter_multiplier(e) + shift) % e


def all_indices(params: Mapping[str, int], batch: int = 0) -> np.ndarray:
    """Indices of every table for ``batch``, table-major (T·B·L int64, each in [0, E))."""
    return np.concatenate([table_indices(params, t, batch) for t in range(int(params["T"]))])


def index_batches(params: Mapping[str, int], device) -> list:
    """The :data:`INDEX_BATCHES` batches of :func:`all_indices` as int64 tensors on ``device``."""
    import torch

    return [torch.from_numpy(all_indices(params, k)).to(device) for k in range(INDEX_BATCHES)]


@lru_cache(maxsize=4096)
def _reuse_histogram(key: tuple[int, ...]) -> tuple[float, ...]:
    params = dict(zip(PARAMS, key))
    hist = np.zeros(REUSE_BINS)
    tables = min(int(params["T"]), REUSE_TABLES)
    for t in range(tables):
        _, counts = np.unique(table_indices(params, t), return_counts=True)
        bins = np.minimum(np.floor(np.log2(counts)).astype(np.int64), REUSE_BINS - 1)
        hist += np.bincount(bins, weights=counts, minlength=REUSE_BINS) / counts.sum()
    return tuple(float(x) for x in hist / tables)


def reuse_histogram(params: Mapping[str, int]) -> list[float]:
    """Fraction of accesses whose row is accessed 1, 2-3, 4-7, ... (≥128) times in
    its table; averaged over the first ``REUSE_TABLES`` tables; sums to 1."""
    return list(_reuse_histogram(tuple(int(params[p]) for p in PARAMS)))


@lru_cache(maxsize=4096)
def expected_unique_rows(rows: int, code: int, accesses: int) -> float:
    """Expected distinct rows touched by ``accesses`` draws over ``rows`` rows.

    Uniform: E·(1 - (1 - 1/E)^N). Zipf: Σ_r 1 - (1 - p_r)^N, with ranks
    beyond 1024 grouped into geometric buckets whose mass is integrated.
    """
    rows, accesses = max(int(rows), 1), max(int(accesses), 0)
    if accesses == 0:
        return 0.0
    if rows == 1:
        return 1.0
    if code <= UNIFORM:
        return rows * -math.expm1(accesses * math.log1p(-1.0 / rows))
    alpha = zipf_alpha(code)
    exact = min(rows, 1024)
    counts = [np.ones(exact)]
    masses = [np.arange(1, exact + 1, dtype=np.float64) ** -alpha]
    if rows > exact:
        edges = np.unique(np.geomspace(exact + 1, rows + 1, 512).astype(np.int64))
        edges[0], edges[-1] = exact + 1, rows + 1
        lo, hi = edges[:-1] - 0.5, edges[1:] - 0.5
        if abs(alpha - 1.0) < 1e-12:
            mass = np.log(hi / lo)
        else:
            mass = (hi ** (1 - alpha) - lo ** (1 - alpha)) / (1 - alpha)
        counts.append(np.diff(edges).astype(np.float64))
        masses.append(mass)
    count, mass = np.concatenate(counts), np.concatenate(masses)
    p = np.minimum(mass / mass.sum() / count, 1.0)
    with np.errstate(divide="ignore"):
        touched = -np.expm1(accesses * np.log1p(-p))
    return float(np.sum(count * touched))


# ---------------------------------------------------------------- config generation


def _dims(params: Mapping[str, int]) -> tuple[int, int, int, int, int, int]:
    return tuple(int(params[p]) for p in PARAMS)


def _weight_bytes(params: Mapping[str, int]) -> int:
    _, e, t, _, d, _ = _dims(params)
    return e * t * d * 4


def _forward_bytes(params: Mapping[str, int]) -> float:
    b, _, t, l, d, _ = _dims(params)
    return 4.0 * (b * t * l * d + b * t * d) + INDEX_BYTES * (b * t * l + b * t + 1)


def _fits(params: Mapping[str, int], profile: str) -> bool:
    return _weight_bytes(params) <= MAX_WEIGHT_BYTES[profile] and \
        _forward_bytes(params) <= MAX_FORWARD_BYTES[profile]


def embedding_configs(profile: str) -> list[dict[str, int]]:
    """The configs of ``profile`` shared by every embedding op (deterministic)."""
    check_profile(profile)
    if profile == "full":
        grid = (dict(zip(PARAMS, values)) for values in
                itertools.product(*(_FULL_AXES[p] for p in PARAMS)))
        return [c for c in grid if _fits(c, "full")]
    rng = random.Random(f"embedding-{profile}")
    seen: set[tuple[int, ...]] = set()
    out: list[dict[str, int]] = []
    for _ in range(_CONFIGS[profile] * 200):
        cfg = {p: log_uniform_ints(rng, low, high, multiple=4 if p == "D" else 1)
               for p, (low, high) in _RANGES[profile].items()}
        cfg["ZIPF"] = _ZIPF_CODES[profile][len(out) % len(_ZIPF_CODES[profile])]
        key = _dims(cfg)
        if key in seen or not _fits(cfg, profile):
            continue
        seen.add(key)
        out.append({p: cfg[p] for p in PARAMS})
        if len(out) == _CONFIGS[profile]:
            break
    return out


# ---------------------------------------------------------------- op definitions


class _Embedding(OpDef):
    family = "embedding"
    #: Timed with the CPU's last-level cache evicted before each call: in a training
    #: step the other tables, the MLPs and the optimizer run between two lookups of
    #: one table, so a hot benchmark under-prices the lookups of a step (measured:
    #: docs/journal/2026-11-23-cpu-timing.md).
    cold_on_cpu = True
    params = PARAMS
    dtypes = ("float32",)
    directions = ("forward", "backward")
    extra_feature_names = REUSE_FEATURE_NAMES
    monotone_params = ("B", "T", "L", "D")

    def configs(self, profile):
        return embedding_configs(profile)

    def extra_features(self, params, dtype, direction):
        return reuse_histogram(params)

    def analytic_model(self, direction):
        """The seed notebook's model: the forward, or the backward fused with SGD
        (also used for EmbeddingBag's backward, which writes a gradient of the
        same rows) or with row-wise Adagrad."""
        if direction == "forward":
            return "forward"
        return "backward_rowwise_adagrad" if self.name == "tbe_rowwise_adagrad" else "backward_sgd"

    def _unique_rows(self, params) -> float:
        """Expected distinct rows touched, summed over the tables."""
        b, e, t, l, _, code = _dims(params)
        return t * expected_unique_rows(e, code, b * l)

    def _index_bytes(self, params) -> float:
        b, _, t, l, _, _ = _dims(params)
        return INDEX_BYTES * (b * t * l + b * t + 1)

    def flops(self, params, direction):
        b, _, t, l, d, _ = _dims(params)
        return float(b * t * l * d)

    def bytes_moved(self, params, dtype, direction):
        return _forward_bytes(params) * DTYPE_BYTES[dtype] / 4


class _EmbeddingBag(_Embedding):
    """``F.embedding_bag`` over one (T·E)×D weight: table t's rows start at
    t·E, bag (t, b) is bag t·B + b of L indices, so the T tables are one call
    (one ``aten::embedding_bag`` node), as a DLRM-style model batches them."""

    mode = "sum"
    trace_names = ("aten::embedding_bag", "aten::_embedding_bag")

    def make_runner(self, params, dtype, direction, device):
        import torch
        import torch.nn.functional as F

        b, e, t, l, d, _ = _dims(params)
        grad = direction == "backward"
        base = (torch.arange(t, dtype=torch.int64).repeat_interleave(b * l) * e).to(device)
        batches = [local + base for local in index_batches(params, device)]
        offsets = torch.arange(0, t * b * l, l, dtype=torch.int64, device=device)
        weight = torch.randn(t * e, d, device=device, requires_grad=grad)
        if not grad:
            indices = itertools.cycle(batches).__next__
            return lambda: F.embedding_bag(indices(), weight, offsets, mode=self.mode)
        # one retained forward graph per batch, so each backward scatters other rows
        outs = itertools.cycle([F.embedding_bag(i, weight, offsets, mode=self.mode)
                                for i in batches]).__next__
        grad_out = torch.randn(t * b, d, device=device)
        return lambda: torch.autograd.grad(outs(), (weight,), grad_out, retain_graph=True)

    def flops(self, params, direction):
        b, _, t, _, d, _ = _dims(params)
        return super().flops(params, direction) + (b * t * d if self.mode == "mean" else 0)

    def bytes_moved(self, params, dtype, direction):
        if direction == "forward":
            return super().bytes_moved(params, dtype, direction)
        b, e, t, _, d, _ = _dims(params)
        size = DTYPE_BYTES[dtype]
        return size * (b * t * d + e * t * d) + self._index_bytes(params)

    def params_from_shapes(self, input_shapes):
        """(weight [rows, D], indices [N], offsets [bags], ...) → a T=1, uniform
        config (tables merged into one weight and the distribution are not
        visible in shapes)."""
        if len(input_shapes) < 3 or len(input_shapes[0]) != 2 or len(input_shapes[1]) != 1 \
                or len(input_shapes[2]) != 1:
            return None
        (rows, d), (n,), (bags,) = input_shapes[0], input_shapes[1], input_shapes[2]
        if min(rows, d, n, bags) < 1 or n % bags:
            return None
        return {"B": bags, "E": rows, "T": 1, "L": n // bags, "D": d, "ZIPF": UNIFORM}


class EmbeddingBagSum(_EmbeddingBag):
    name = "embedding_bag_sum"
    mode = "sum"


class EmbeddingBagMean(_EmbeddingBag):
    name = "embedding_bag_mean"
    mode = "mean"


class _Tbe(_Embedding):
    """``SplitTableBatchedEmbeddingBagsCodegen`` with T tables of E×D, sum pooling.

    ``forward`` times the lookup; ``backward`` times the backward pass with the
    optimizer update fused into it (FBGEMM applies the update in backward).
    Shapes of the FBGEMM nodes do not separate E from D or give B and L, so
    :meth:`params_from_shapes` returns None.
    """

    optimizer = "EXACT_SGD"

    def make_runner(self, params, dtype, direction, device):
        try:
            import torch
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                ComputeDevice, EmbeddingLocation, OptimType,
                SplitTableBatchedEmbeddingBagsCodegen)
        except Exception as exc:  # ImportError, or a broken native library
            raise RuntimeError(f"FBGEMM missing: cannot import fbgemm_gpu ({exc})") from exc

        b, e, t, l, d, _ = _dims(params)
        dev = torch.device(device)
        on_cpu = dev.type == "cpu"
        location = EmbeddingLocation.HOST if on_cpu else EmbeddingLocation.DEVICE
        compute = ComputeDevice.CPU if on_cpu else ComputeDevice.CUDA
        module = SplitTableBatchedEmbeddingBagsCodegen(
            [(e, d, location, compute)] * t, optimizer=getattr(OptimType, self.optimizer),
            learning_rate=0.01, eps=1e-8, device=dev)
        # FBGEMM zero-fills the tables; pages never written map the kernel's shared zero
        # page, and lookups into them always hit cache. Real tables hold values.
        module.init_embedding_weights_uniform(-e ** -0.5, e ** -0.5)
        batches = index_batches(params, dev)
        offsets = torch.arange(0, t * b * l + 1, l, dtype=torch.int64, device=dev)
        if direction == "forward":
            indices = itertools.cycle(batches).__next__
            return lambda: module(indices(), offsets)
        # one retained forward graph per batch, so each fused update touches other rows
        outs = itertools.cycle([module(i, offsets) for i in batches]).__next__
        grad_out = torch.randn(b, t * d, device=dev)
        return lambda: outs().backward(grad_out, retain_graph=True)

    def update_flops_per_row(self, d: int) -> float:
        """FLOPs of the fused optimizer update of one touched row of ``d`` floats."""
        raise NotImplementedError

    def row_bytes(self, size: int, d: int) -> float:
        """Bytes the fused update reads (and again writes) per touched row."""
        raise NotImplementedError

    def flops(self, params, direction):
        base = super().flops(params, direction)
        if direction == "forward":
            return base
        return base + self._unique_rows(params) * self.update_flops_per_row(int(params["D"]))

    def bytes_moved(self, params, dtype, direction):
        if direction == "forward":
            return super().bytes_moved(params, dtype, direction)
        b, _, t, _, d, _ = _dims(params)
        size = DTYPE_BYTES[dtype]
        return size * b * t * d + self._index_bytes(params) + \
            2.0 * self._unique_rows(params) * self.row_bytes(size, d)

    def params_from_shapes(self, input_shapes):
        return None

    def params_from_node(self, node):
        """``T``, ``E``, ``D``, ``B`` and ``L`` from the lookup function's
        arguments (fbgemm_gpu 1.8 ``*_function_pt2`` schema): the weights list
        (first tensor T·E·D elements), ``D_offsets`` [T+1], ``max_D`` (the
        second Int), ``indices`` [T·B·L] and ``offsets`` [T·B+1]. Tables of
        different sizes or bags of different lengths read as their means
        (``E`` and ``L`` rounded); the index distribution is not in a trace,
        so ``ZIPF`` is uniform. None for any other layout."""
        shapes, types, values = node.input_shapes, node.input_types, node.input_values
        if len(shapes) < 9 or not str(types[1]).startswith("GenericList[Tensor"):
            return None
        ints = [v for t, v in zip(types, values) if t == "Int"]
        try:
            weights, (t_plus_1,), (n,), (bags_plus_1,) = \
                shapes[1][0][0], shapes[2], shapes[7], shapes[8]
            d = int(ints[1])
        except (IndexError, TypeError, ValueError):
            return None
        t = t_plus_1 - 1
        if min(t, d, n) < 1 or (bags_plus_1 - 1) % t or weights < t * d:
            return None
        b = (bags_plus_1 - 1) // t
        if b < 1:
            return None
        return {"B": b, "E": round(weights / (t * d)), "T": t, "L": max(1, round(n / (t * b))),
                "D": d, "ZIPF": UNIFORM}


class TbeSgd(_Tbe):
    name = "tbe_sgd"
    optimizer = "EXACT_SGD"
    #: CPU names seen in torch.profiler with fbgemm_gpu 1.8 (GPU names unverified).
    trace_names = ("fbgemm::split_embedding_codegen_lookup_sgd_function_pt2",
                   "fbgemm::split_embedding_backward_codegen_sgd_cpu")

    def update_flops_per_row(self, d: int) -> float:
        return 2.0 * d

    def row_bytes(self, size: int, d: int) -> float:
        return size * d


class TbeRowwiseAdagrad(_Tbe):
    name = "tbe_rowwise_adagrad"
    optimizer = "EXACT_ROWWISE_ADAGRAD"
    trace_names = ("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function_pt2",
                   "fbgemm::split_embedding_backward_codegen_rowwise_adagrad_cpu")

    def update_flops_per_row(self, d: int) -> float:
        return 4.0 * d + 3.0

    def row_bytes(self, size: int, d: int) -> float:
        return size * d + 4  # the row and its fp32 Adagrad state


# ---------------------------------------------------------------- plain embedding

#: Params of :class:`Embedding`.
LOOKUP_PARAMS = ("ROWS", "DIM", "INDICES")
#: Configs of :class:`Embedding` per profile; ``smoke`` has the fewest that a fit
#: scores (``perfmodel.fit.fitting.MIN_CONFIGS``).
_LOOKUP_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16}
_LOOKUP_RANGES = {
    "smoke": {"ROWS": (16, 1024), "DIM": (8, 64), "INDICES": (1, 256)},
    "quick": {"ROWS": (16, 131_072), "DIM": (8, 1024), "INDICES": (1, 16_384)},
    "gpu": {"ROWS": (256, 262_144), "DIM": (64, 8192), "INDICES": (64, 131_072)},
}
#: ``full`` grid of :class:`Embedding`.
_LOOKUP_GRID = {"ROWS": (128, 1024, 8192, 50_000, 250_000), "DIM": (16, 64, 256, 1024, 4096),
                "INDICES": (16, 256, 4096, 65_536)}
#: Largest table (ROWS·DIM elements) and forward gather (INDICES·DIM elements) per
#: profile: ``quick``'s table fits 64 MB in fp32 (the backward zero-fills it), ``gpu``'s
#: 2 GB (a 128k-token vocabulary of 4096).
_LOOKUP_MAX_TABLE = {"smoke": 1 << 14, "quick": 1 << 24, "gpu": 1 << 29, "full": 1 << 28}
_LOOKUP_MAX_GATHER = {"smoke": 1 << 14, "quick": 1 << 22, "gpu": 1 << 28, "full": 1 << 28}


def lookup_indices(params: Mapping[str, int], batch: int = 0) -> np.ndarray:
    """The ``INDICES`` row indices (int64, uniform over [0, ROWS)) of batch
    ``batch`` of an :class:`Embedding` config; seeded by the config and batch."""
    rows, dim, n = (int(params[p]) for p in LOOKUP_PARAMS)
    rng = np.random.default_rng([rows, dim, n, batch])
    return rng.integers(0, rows, size=n, dtype=np.int64)


class Embedding(OpDef):
    """``F.embedding(indices, weight)`` (``nn.Embedding``, ``sparse=False``):
    ``INDICES`` rows looked up in a ``ROWS×DIM`` table.

    Indices are uniform over the rows (random tokens, as the built-in
    workloads feed; a trace does not show the distribution), one of
    :data:`INDEX_BATCHES` batches per call. The backward is autograd's dense
    one (``aten::embedding_dense_backward``): zero-fill a ``ROWS×DIM``
    gradient, then add the ``INDICES`` output-gradient rows into it.

    Work (``U`` = expected distinct rows touched, :func:`expected_unique_rows`;
    indices at :data:`INDEX_BYTES`):

    - forward: reads INDICES rows of DIM and the indices, writes INDICES×DIM
      (INDICES·DIM elements gathered, counted as FLOPs as ``index_select`` does);
    - backward: writes the ROWS×DIM gradient, reads the INDICES×DIM output
      gradient and the indices, and reads and writes the U touched rows again
      (INDICES·DIM adds).

    ``ROWS`` leaves the forward's work unchanged, so ``monotone_params`` is DIM
    and INDICES (``valid`` still needs ROWS >= 1).
    """

    name = "embedding"
    family = "embedding"
    params = LOOKUP_PARAMS
    directions = ("forward", "backward")
    dtypes = ("float32", "bfloat16")
    trace_names = ("aten::embedding",)
    monotone_params = ("DIM", "INDICES")
    #: Timed with the last-level cache evicted, as the bag ops are: in a training
    #: step the layers between two lookups stream their own data through it.
    cold_on_cpu = True

    def valid(self, params: Mapping[str, int]) -> bool:
        return int(params["ROWS"]) >= 1

    def configs(self, profile):
        check_profile(profile)
        if profile == "full":
            return [c for c in (dict(zip(LOOKUP_PARAMS, v)) for v in itertools.product(
                *(_LOOKUP_GRID[p] for p in LOOKUP_PARAMS))) if self._fits(c, profile)]
        ranges = _LOOKUP_RANGES[profile]

        def draw(rng, _):
            return {p: log_uniform_ints(rng, *ranges[p], multiple=8 if p == "DIM" else 1)
                    for p in LOOKUP_PARAMS}

        return sample_configs(f"embedding-lookup-{profile}", LOOKUP_PARAMS,
                              _LOOKUP_CONFIGS[profile], draw,
                              lambda c: self._fits(c, profile))

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(profile)
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases

    @staticmethod
    def _fits(params: Mapping[str, int], profile: str) -> bool:
        return params["ROWS"] * params["DIM"] <= _LOOKUP_MAX_TABLE[profile] and \
            params["INDICES"] * params["DIM"] <= _LOOKUP_MAX_GATHER[profile]

    def make_runner(self, params, dtype, direction, device):
        import torch
        import torch.nn.functional as F

        rows, dim, n = (int(params[p]) for p in LOOKUP_PARAMS)
        grad = direction == "backward"
        weight = torch.randn(rows, dim, dtype=torch_dtype(dtype), device=device,
                             requires_grad=grad)
        batches = [torch.from_numpy(lookup_indices(params, k)).to(device)
                   for k in range(INDEX_BATCHES)]
        if not grad:
            indices = itertools.cycle(batches).__next__
            return lambda: F.embedding(indices(), weight)
        # one retained forward graph per batch, so each backward adds other rows
        outs = itertools.cycle([F.embedding(i, weight) for i in batches]).__next__
        grad_out = torch.randn(n, dim, dtype=weight.dtype, device=device)
        return lambda: torch.autograd.grad(outs(), (weight,), grad_out, retain_graph=True)

    def flops(self, params, direction):
        """Elements gathered forward, added backward (FLOP)."""
        return float(params["INDICES"] * params["DIM"])

    def bytes_moved(self, params, dtype, direction):
        """Forward: the gathered rows read and written, and the indices. Backward:
        the zeroed table written, the output gradient read, the touched rows
        read and written, and the indices (B)."""
        rows, dim, n = (int(params[p]) for p in LOOKUP_PARAMS)
        size = DTYPE_BYTES[dtype]
        if direction == "forward":
            return float(size * 2 * n * dim + INDEX_BYTES * n)
        touched = expected_unique_rows(rows, UNIFORM, n)
        return float(size * (rows * dim + n * dim + 2.0 * touched * dim) + INDEX_BYTES * n)

    def params_from_shapes(self, input_shapes):
        """(weight [ROWS, DIM], indices [any shape], ...) → the config; INDICES is
        the indices' element count (batch × sequence)."""
        if len(input_shapes) < 2 or not isinstance(input_shapes[0], list) \
                or len(input_shapes[0]) != 2 or not isinstance(input_shapes[1], list):
            return None
        (rows, dim), indices = input_shapes[0], input_shapes[1]
        if not all(isinstance(v, int) for v in (rows, dim, *indices)):
            return None
        n = math.prod(indices)
        if min(rows, dim, n) < 1:
            return None
        return {"ROWS": rows, "DIM": dim, "INDICES": n}

    def params_from_node(self, node):
        """As :meth:`params_from_shapes`; None for a sparse embedding (its fifth
        argument, ``sparse``, true), whose backward is another op."""
        values = node.input_values
        if len(values) >= 5 and values[4] is True:
            return None
        return self.params_from_shapes(node.input_shapes)


OPS = (EmbeddingBagSum(), EmbeddingBagMean(), TbeSgd(), TbeRowwiseAdagrad(), Embedding())
