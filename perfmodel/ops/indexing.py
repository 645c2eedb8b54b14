"""Indexing family: gather/scatter, advanced indexing, sort/topk and data-dependent selection.

``gather``, ``scatter_add``, ``scatter``, ``index``, ``index_add``, ``index_put``,
``topk``, ``sort``, ``nonzero`` and ``masked_select``. ``index_select`` is in
:mod:`perfmodel.ops.memory`. Index tensors are int64 (8 B per index), drawn
uniformly at random with a fixed seed; ``nonzero`` and ``masked_select`` run on
a bool mask with exactly half its elements true (their output size depends on
the data: a trace's other densities are priced at one half).

Data movement counts its elements written as FLOPs (as :mod:`perfmodel.ops.memory`
does), additions as one FLOP each, a sort of ``n`` keys ``n·(1 + log2 n)``.
The ``smoke`` profile runs float32 only.
"""

from __future__ import annotations

import math
from typing import Mapping

from perfmodel.ops.base import DTYPE_BYTES, OpDef, log_uniform_ints, sample_configs, torch_dtype

#: Configs per profile (``smoke``: the fewest that a fit can score, see
#: :data:`perfmodel.fit.fitting.MIN_CONFIGS`), and the most elements of the largest
#: tensor one call touches.
_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16, "full": 1000}
_MAX_ELEMS = {"smoke": 1 << 12, "quick": 1 << 21, "gpu": 1 << 27, "full": 1 << 25}
#: Bytes of an int64 index.
_INDEX_BYTES = 8
#: Share of a mask's elements that are true (``nonzero``, ``masked_select``).
_DENSITY = 0.5
#: Seed of the index and mask draws.
_SEED = 0


def _generator():
    import torch

    return torch.Generator().manual_seed(_SEED)


def _randint(high: int, shape, device):
    """int64 indices uniform in [0, high), drawn on the CPU (seeded) and moved."""
    import torch

    return torch.randint(0, high, tuple(shape), generator=_generator()).to(device)


def _half_mask(rows: int, cols: int, device):
    """A ``rows×cols`` bool mask with exactly ``rows·cols // 2`` true elements."""
    import torch

    n = rows * cols
    return (torch.randperm(n, generator=_generator()) < n // 2).reshape(rows, cols).to(device)


def _grad_runner(fn, wrt):
    """Autograd's backward of ``fn()`` with respect to ``wrt``, graph retained."""
    import torch

    out = fn()
    grad_out = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True)


def _is_int_list(value) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(d, int) and not isinstance(d, bool) for d in value)


def _last_dim(dim, ndim: int) -> bool:
    """Whether a trace's ``dim`` argument names the last of ``ndim`` dims."""
    return isinstance(dim, int) and not isinstance(dim, bool) and ndim >= 1 and \
        dim % ndim == ndim - 1


def _index_type_ok(typ) -> bool:
    """An ET type of an integer index tensor (or a one-element list of one), not a bool mask."""
    typ = str(typ)
    return "Tensor(" in typ and ("long" in typ or "int" in typ) and "bool" not in typ


class _Indexing(OpDef):
    family = "indexing"
    directions = ("forward", "backward")
    dtypes = ("float32", "bfloat16")
    #: Per-param (low, high) ranges; ``draw`` may fix some of them per config.
    ranges: dict[str, tuple[int, int]] = {}
    #: The profile's ``_MAX_ELEMS`` is divided by ``2**cap_shift`` for this op.
    cap_shift = 1

    def valid(self, params: Mapping[str, int]) -> bool:
        """Every param at least 1."""
        return all(params[p] >= 1 for p in self.params)

    def elements(self, params: Mapping[str, int]) -> int:
        """Elements of the largest tensor one call (either direction) touches."""
        raise NotImplementedError

    def draw(self, rng, n: int) -> dict[str, int]:
        """One config, each param log-uniform in its range."""
        return {p: log_uniform_ints(rng, *self.ranges[p]) for p in self.params}

    def fits(self, params: Mapping[str, int], profile: str) -> bool:
        """Whether a drawn config is small enough for ``profile``."""
        return self.elements(params) <= _MAX_ELEMS[profile] >> self.cap_shift

    def generate_configs(self, profile):
        """Distinct configs (seeded draws), valid and small enough (:meth:`fits`)."""
        configs = sample_configs(f"{self.name}-{profile}", self.params, _CONFIGS[profile],
                                 self.draw, lambda c: self.valid(c) and self.fits(c, profile))
        return sorted(configs, key=self.elements)

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(profile)
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases


# -- gather / scatter -------------------------------------------------------------------------

class _GatherScatter(_Indexing):
    """Along one dim of a tensor viewed as ``OUTER×SIZE×INNER`` (the dims before,
    at and after it; ``INNER`` = 1 along the last dim, ``OUTER`` = 1 along the
    first), with an index of ``OUTER×INDICES×INNER``: ``INDICES`` random
    positions in ``[0, SIZE)`` per outer slice, the same along ``INNER`` (an
    expanded ``OUTER×INDICES×1`` index, as a row gather in a graph network
    makes). ``SIZE`` sets only the index range forward (cache reuse), so the
    work is monotone in ``OUTER``, ``INDICES`` and ``INNER``."""

    params = ("OUTER", "SIZE", "INDICES", "INNER")
    monotone_params = ("OUTER", "INDICES", "INNER")
    ranges = {"OUTER": (1, 16384), "SIZE": (1, 65536), "INDICES": (1, 65536),
              "INNER": (1, 1024)}

    def draw(self, rng, n):
        """Half the configs index the last dim (``INNER`` = 1), a quarter the
        first (``OUTER`` = 1), a quarter a middle dim."""
        config = super().draw(rng, n)
        if n % 2 == 0:
            config["INNER"] = 1
        elif n % 4 == 1:
            config["OUTER"] = 1
        return config

    def elements(self, params):
        return params["OUTER"] * max(params["SIZE"], params["INDICES"]) * params["INNER"]

    @staticmethod
    def _picked(params) -> int:
        """Elements of the index (and of the gathered output or scattered source)."""
        return params["OUTER"] * params["INDICES"] * params["INNER"]

    def _tensors(self, params, dtype, device, grad: bool):
        """The ``OUTER×SIZE×INNER`` self, the expanded index and an index-shaped source."""
        import torch

        o, s, i, n = (params[p] for p in self.params)
        t = dict(dtype=torch_dtype(dtype), device=device)
        index = _randint(s, (o, i, 1), device).expand(o, i, n)
        base = torch.randn(o, s, n, requires_grad=grad, **t)
        src = torch.randn(o, i, n, requires_grad=grad, **t)
        return base, index, src

    def _index_bytes(self, params) -> int:
        return _INDEX_BYTES * params["OUTER"] * params["INDICES"]

    def params_from_node(self, node):
        """``(self, dim, index[, src])``: an index (and ``src``) equal to self in
        every dim but ``dim``; any rank, any dim. None for other forms (a
        smaller index, a scalar ``src``, a ``reduce`` argument)."""
        shapes, values = node.input_shapes, node.input_values
        if len(shapes) < 3 or len(values) < 3 or not _is_int_list(shapes[0]) \
                or not _is_int_list(shapes[2]) or not isinstance(values[1], int) \
                or isinstance(values[1], bool):
            return None
        x, index = list(shapes[0]), list(shapes[2])
        if not x or len(index) != len(x):
            return None
        d = values[1] % len(x)
        if any(index[k] != x[k] for k in range(len(x)) if k != d):
            return None
        if not self._src_ok(shapes, values, index):
            return None
        config = {"OUTER": math.prod(x[:d]), "SIZE": x[d], "INDICES": index[d],
                  "INNER": math.prod(x[d + 1:])}
        return config if self.valid(config) else None

    def _src_ok(self, shapes, values, index) -> bool:
        return True


class Gather(_GatherScatter):
    """``torch.gather(x, dim, index)``. Backward: ``scatter_add_`` of the
    gradient into a zeroed ``OUTER×SIZE×INNER`` gradient of ``x``."""

    name = "gather"
    trace_names = ("aten::gather",)

    def make_runner(self, params, dtype, direction, device):
        import torch

        grad = direction == "backward"
        x, index, _ = self._tensors(params, dtype, device, grad)
        fn = lambda: torch.gather(x, 1, index)  # noqa: E731
        return _grad_runner(fn, (x,)) if grad else fn

    def flops(self, params, direction):
        """Elements gathered forward; zeros written and elements added backward (FLOP)."""
        picked = self._picked(params)
        if direction == "forward":
            return float(picked)
        return float(params["OUTER"] * params["SIZE"] * params["INNER"] + picked)

    def bytes_moved(self, params, dtype, direction):
        """Forward: read the picked elements and the index, write the output.
        Backward: write the zeroed gradient of ``x``, read the output gradient
        and the index, read and write the picked gradient elements (B)."""
        picked, size = self._picked(params), DTYPE_BYTES[dtype]
        if direction == "forward":
            return float(size * 2 * picked + self._index_bytes(params))
        zeros = params["OUTER"] * params["SIZE"] * params["INNER"]
        return float(size * (zeros + 3 * picked) + self._index_bytes(params))


class ScatterAdd(_GatherScatter):
    """``x.scatter_add_(dim, index, src)``: ``src`` (index-shaped) added into
    ``x`` at the index. Forward times the in-place kernel: an out-of-place
    ``scatter_add`` node also copies ``x``, which is not counted. Backward
    (``src``'s gradient; ``x``'s passes through): a gather of the output
    gradient at the index."""

    name = "scatter_add"
    trace_names = ("aten::scatter_add_", "aten::scatter_add")
    accumulate = True

    def make_runner(self, params, dtype, direction, device):
        import torch

        x, index, src = self._tensors(params, dtype, device, False)
        if direction == "forward":
            op = x.scatter_add_ if self.accumulate else x.scatter_
            return lambda: op(1, index, src)
        src.requires_grad_(True)
        fn = torch.scatter_add if self.accumulate else torch.scatter
        return _grad_runner(lambda: fn(x, 1, index, src), (src,))

    def flops(self, params, direction):
        """Elements added (or written) forward, gathered backward (FLOP)."""
        return float(self._picked(params))

    def bytes_moved(self, params, dtype, direction):
        """Forward: read ``src`` and the index, read and write the picked
        elements of ``x``. Backward: read the picked output gradient and the
        index, write ``src``'s gradient (B)."""
        reads_writes = 3 if direction == "forward" and self.accumulate else 2
        return float(DTYPE_BYTES[dtype] * reads_writes * self._picked(params) +
                     self._index_bytes(params))

    def _src_ok(self, shapes, values, index):
        """A tensor ``src`` shaped as the index, and no ``reduce`` argument."""
        return len(shapes) >= 4 and _is_int_list(shapes[3]) and list(shapes[3]) == index and \
            all(v in (None, "<None>") for v in values[4:5])


class Scatter(ScatterAdd):
    """``x.scatter_(dim, index, src)``: ``src`` written into ``x`` at the index
    (the tensor-``src`` form). Forward times the in-place kernel (an
    out-of-place ``scatter`` also copies ``x``, not counted). Backward: both
    gradients, ``x``'s (the output gradient with zeros scattered at the index:
    a copy and a scatter) and ``src``'s (a gather)."""

    name = "scatter"
    trace_names = ("aten::scatter_", "aten::scatter")
    accumulate = False

    def make_runner(self, params, dtype, direction, device):
        import torch

        if direction == "forward":
            return super().make_runner(params, dtype, direction, device)
        x, index, src = self._tensors(params, dtype, device, True)
        return _grad_runner(lambda: torch.scatter(x, 1, index, src), (x, src))

    def flops(self, params, direction):
        """Elements written forward; backward the copied gradient of ``x``,
        its zeroed elements and the gathered ones (FLOP)."""
        picked = self._picked(params)
        if direction == "forward":
            return float(picked)
        return float(params["OUTER"] * params["SIZE"] * params["INNER"] + 2 * picked)

    def bytes_moved(self, params, dtype, direction):
        """Forward: read ``src`` and the index, write the picked elements of
        ``x``. Backward: read and write the whole gradient of ``x``, write its
        picked elements, read them for ``src``'s gradient and write it, read
        the index twice (B)."""
        if direction == "forward":
            return super().bytes_moved(params, dtype, direction)
        whole = params["OUTER"] * params["SIZE"] * params["INNER"]
        return float(DTYPE_BYTES[dtype] * (2 * whole + 3 * self._picked(params)) +
                     2 * self._index_bytes(params))


# -- advanced indexing along dim 0 -------------------------------------------------------------

class _Rows(_Indexing):
    """Rows of a ``ROWS×COLS`` tensor (``COLS``: the product of its trailing
    dims) picked by ``INDICES`` int64 indices along dim 0. ``ROWS`` sets only
    the index range forward, so the work is monotone in ``COLS`` and ``INDICES``."""

    params = ("ROWS", "COLS", "INDICES")
    monotone_params = ("COLS", "INDICES")
    ranges = {"ROWS": (1, 1 << 20), "COLS": (1, 2048), "INDICES": (1, 1 << 20)}

    def elements(self, params):
        return max(params["ROWS"], params["INDICES"]) * params["COLS"]

    def _picked(self, params) -> int:
        return params["INDICES"] * params["COLS"]

    def _tensors(self, params, dtype, device, grad: bool):
        """The ``ROWS×COLS`` tensor, the indices and an ``INDICES×COLS`` source."""
        import torch

        rows, cols, n = params["ROWS"], params["COLS"], params["INDICES"]
        t = dict(dtype=torch_dtype(dtype), device=device)
        return (torch.randn(rows, cols, requires_grad=grad, **t), _randint(rows, (n,), device),
                torch.randn(n, cols, requires_grad=grad, **t))

    def _config(self, x, n) -> dict[str, int] | None:
        if not _is_int_list(x) or not x or not isinstance(n, int):
            return None
        config = {"ROWS": x[0], "COLS": math.prod(x[1:]), "INDICES": n}
        return config if self.valid(config) else None


def _one_index(shapes, types) -> int | None:
    """Length of the single 1-D integer index tensor of an ``indices`` list
    argument (``x[idx]``), or None (several, a bool mask, a ``None`` slot)."""
    if len(shapes) < 2 or len(types) < 2 or not isinstance(shapes[1], (list, tuple)) \
            or len(shapes[1]) != 1 or not _is_int_list(shapes[1][0]) \
            or len(shapes[1][0]) != 1 or not _index_type_ok(types[1]) or "None" in str(types[1]):
        return None
    return shapes[1][0][0]


class Index(_Rows):
    """``x[idx]``: ``aten::index`` with one int64 index tensor along dim 0.
    Backward: ``index_put_`` with accumulate into a zeroed ``ROWS×COLS``
    gradient."""

    name = "index"
    trace_names = ("aten::index",)

    def make_runner(self, params, dtype, direction, device):
        grad = direction == "backward"
        x, idx, _ = self._tensors(params, dtype, device, grad)
        fn = lambda: x[idx]  # noqa: E731
        return _grad_runner(fn, (x,)) if grad else fn

    def flops(self, params, direction):
        """Elements gathered forward; zeros written and elements added backward (FLOP)."""
        if direction == "forward":
            return float(self._picked(params))
        return float(params["ROWS"] * params["COLS"] + self._picked(params))

    def bytes_moved(self, params, dtype, direction):
        """Forward: read and write ``INDICES×COLS`` and the indices. Backward:
        write the zeroed ``ROWS×COLS`` gradient, read the output gradient, read
        and write the indexed rows, read the indices (B)."""
        size, picked = DTYPE_BYTES[dtype], self._picked(params)
        index = _INDEX_BYTES * params["INDICES"]
        if direction == "forward":
            return float(size * 2 * picked + index)
        return float(size * (params["ROWS"] * params["COLS"] + 3 * picked) + index)

    def params_from_node(self, node):
        """``(x, [idx])``: a tensor of rank >= 1 and one 1-D integer index."""
        n = _one_index(node.input_shapes, node.input_types)
        return None if n is None else self._config(node.input_shapes[0], n)


class IndexAdd(_Rows):
    """``x.index_add_(0, idx, src)``: ``INDICES`` rows of ``src`` added into
    ``x``'s rows at ``idx`` (a graph network summing messages into nodes).
    Forward times the in-place kernel (an out-of-place ``index_add`` node also
    copies ``x``, not counted). Backward (``src``'s gradient; ``x``'s passes
    through): ``index_select`` of the output gradient."""

    name = "index_add"
    trace_names = ("aten::index_add_", "aten::index_add")

    def fits(self, params, profile):
        """As :meth:`_Indexing.fits`, and at most ``_MAX_ELEMS / 128`` indices:
        a CPU adds row by row (an add per index)."""
        return super().fits(params, profile) and params["INDICES"] <= _MAX_ELEMS[profile] >> 7

    def make_runner(self, params, dtype, direction, device):
        import torch

        x, idx, src = self._tensors(params, dtype, device, False)
        if direction == "forward":
            return lambda: x.index_add_(0, idx, src)
        src.requires_grad_(True)
        return _grad_runner(lambda: torch.index_add(x, 0, idx, src), (src,))

    def flops(self, params, direction):
        """Elements added forward, gathered backward (FLOP)."""
        return float(self._picked(params))

    def bytes_moved(self, params, dtype, direction):
        """Forward: read ``src``, read and write the indexed rows of ``x``.
        Backward: read the indexed rows of the gradient, write ``src``'s. Both
        read the indices (B)."""
        elements = (3 if direction == "forward" else 2) * self._picked(params)
        return float(DTYPE_BYTES[dtype] * elements + _INDEX_BYTES * params["INDICES"])

    def params_from_node(self, node):
        """``(x, dim, idx, src, alpha)`` with dim 0 and ``src`` of ``INDICES`` rows of ``x``'s."""
        shapes, values = node.input_shapes, node.input_values
        if len(shapes) < 4 or len(values) < 2 or values[1] not in (0,) or \
                isinstance(values[1], bool) or not _is_int_list(shapes[2]) or \
                len(shapes[2]) != 1 or not _is_int_list(shapes[0]) or \
                list(shapes[3]) != [shapes[2][0], *shapes[0][1:]]:
            return None
        return self._config(shapes[0], shapes[2][0])


class IndexPut(_Rows):
    """``x[idx] = v``: ``index_put_`` of ``INDICES×COLS`` values at one int64
    index along dim 0, without accumulate. Backward: both gradients, ``x``'s
    (the output gradient with zeros put at ``idx``: a copy and a put) and
    ``v``'s (the gradient's rows at ``idx``)."""

    name = "index_put"
    trace_names = ("aten::index_put_", "aten::index_put")

    def make_runner(self, params, dtype, direction, device):
        import torch

        grad = direction == "backward"
        x, idx, v = self._tensors(params, dtype, device, grad)
        if not grad:
            return lambda: x.index_put_((idx,), v)
        return _grad_runner(lambda: torch.index_put(x, (idx,), v), (x, v))

    def flops(self, params, direction):
        """Elements written forward; backward the copied gradient, the zeroed
        and the gathered rows (FLOP)."""
        if direction == "forward":
            return float(self._picked(params))
        return float(params["ROWS"] * params["COLS"] + 2 * self._picked(params))

    def bytes_moved(self, params, dtype, direction):
        """Forward: read the values and the indices, write the indexed rows.
        Backward: read and write the whole gradient, write zeros to the indexed
        rows (a zeros tensor written and read), read those rows of the gradient
        and write ``v``'s gradient; the indices read twice (B)."""
        size, picked = DTYPE_BYTES[dtype], self._picked(params)
        index = _INDEX_BYTES * params["INDICES"]
        if direction == "forward":
            return float(size * 2 * picked + index)
        return float(size * (2 * params["ROWS"] * params["COLS"] + 5 * picked) + 2 * index)

    def params_from_node(self, node):
        """``(x, [idx], values, accumulate)``: one 1-D integer index, values of
        ``INDICES`` rows of ``x``'s, accumulate false."""
        shapes, values = node.input_shapes, node.input_values
        n = _one_index(shapes, node.input_types)
        if n is None or len(shapes) < 3 or not _is_int_list(shapes[0]) or not shapes[0] or \
                list(shapes[2]) != [n, *shapes[0][1:]] or \
                (len(values) > 3 and values[3] is not False):
            return None
        return self._config(shapes[0], n)


# -- sort and top-k along the last dim ---------------------------------------------------------

class _LastDim(_Indexing):
    """Along the last dim of a ``ROWS×COLS`` input (``ROWS``: the product of
    its leading dims)."""

    def elements(self, params):
        return params["ROWS"] * params["COLS"]

    def _input(self, params, dtype, device, grad: bool):
        import torch

        return torch.randn(params["ROWS"], params["COLS"], dtype=torch_dtype(dtype),
                           device=device, requires_grad=grad)

    @staticmethod
    def _rows_cols(x) -> tuple[int, int] | None:
        if not _is_int_list(x) or not x:
            return None
        return math.prod(x[:-1]), x[-1]


class TopK(_LastDim):
    """``torch.topk(x, K, dim=-1)`` (largest, sorted): values and int64
    indices. Backward: the gradient scattered into a zeroed ``ROWS×COLS``
    gradient at the indices."""

    name = "topk"
    params = ("ROWS", "COLS", "K")
    trace_names = ("aten::topk",)
    ranges = {"ROWS": (1, 65536), "COLS": (2, 65536), "K": (1, 1024)}

    def valid(self, params):
        """``K`` at most ``COLS``."""
        return super().valid(params) and params["K"] <= params["COLS"]

    def make_runner(self, params, dtype, direction, device):
        import torch

        grad = direction == "backward"
        x = self._input(params, dtype, device, grad)
        if not grad:
            return lambda: torch.topk(x, params["K"], dim=-1)
        return _grad_runner(lambda: torch.topk(x, params["K"], dim=-1)[0], (x,))

    def flops(self, params, direction):
        """Forward: a comparison per element and a sort of the ``K`` kept,
        ``ROWS·(COLS + K·log2(2K))``. Backward: zeros written and ``K``
        elements per row scattered (FLOP)."""
        r, c, k = params["ROWS"], params["COLS"], params["K"]
        if direction == "forward":
            return float(r * (c + k * math.log2(2 * k)))
        return float(r * (c + k))

    def bytes_moved(self, params, dtype, direction):
        """Forward: read the input, write ``K`` values and indices per row.
        Backward: write the zeroed gradient, read the ``K`` gradients and
        indices per row and write them into it (B)."""
        r, c, k = params["ROWS"], params["COLS"], params["K"]
        size = DTYPE_BYTES[dtype]
        if direction == "forward":
            return float(size * r * (c + k) + _INDEX_BYTES * r * k)
        return float(size * r * (c + 2 * k) + _INDEX_BYTES * r * k)

    def params_from_node(self, node):
        """``(x, k, dim, largest, sorted)`` along the last dim."""
        shapes, values = node.input_shapes, node.input_values
        rc = self._rows_cols(shapes[0]) if shapes else None
        if rc is None or len(values) < 3 or not _last_dim(values[2], len(shapes[0])) or \
                not isinstance(values[1], int) or isinstance(values[1], bool):
            return None
        config = {"ROWS": rc[0], "COLS": rc[1], "K": values[1]}
        return config if self.valid(config) else None


class Sort(_LastDim):
    """``torch.sort(x, dim=-1)``: values and int64 indices. Backward: the
    gradient scattered into a zeroed ``ROWS×COLS`` gradient at the indices."""

    name = "sort"
    params = ("ROWS", "COLS")
    trace_names = ("aten::sort",)
    cap_shift = 3
    ranges = {"ROWS": (1, 65536), "COLS": (2, 65536)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        grad = direction == "backward"
        x = self._input(params, dtype, device, grad)
        if not grad:
            return lambda: torch.sort(x, dim=-1)
        return _grad_runner(lambda: torch.sort(x, dim=-1)[0], (x,))

    def flops(self, params, direction):
        """Forward: ``ROWS·COLS·(1 + log2 COLS)`` comparisons. Backward: zeros
        written and every element scattered (FLOP)."""
        r, c = params["ROWS"], params["COLS"]
        if direction == "forward":
            return float(r * c * (1 + math.log2(c)))
        return float(2 * r * c)

    def bytes_moved(self, params, dtype, direction):
        """Forward: read the input, write the values and the indices. Backward:
        write the zeroed gradient, read the gradient and the indices, write
        the gradient into it (B)."""
        n, size = params["ROWS"] * params["COLS"], DTYPE_BYTES[dtype]
        return float(size * n * (2 if direction == "forward" else 3) + _INDEX_BYTES * n)

    def params_from_node(self, node):
        """``(x, dim, descending)`` or ``(x, stable, dim, descending)``: the
        first int argument is the dim; along the last dim only."""
        shapes, types, values = node.input_shapes, node.input_types, node.input_values
        rc = self._rows_cols(shapes[0]) if shapes else None
        dims = [v for t, v in zip(types[1:], values[1:]) if str(t) == "Int"]
        if rc is None or not dims or not _last_dim(dims[0], len(shapes[0])):
            return None
        config = {"ROWS": rc[0], "COLS": rc[1]}
        return config if self.valid(config) else None


# -- data-dependent selection ------------------------------------------------------------------

class _Masked(_LastDim):
    params = ("ROWS", "COLS")
    ranges = {"ROWS": (1, 65536), "COLS": (1, 65536)}

    def _selected(self, params) -> float:
        return _DENSITY * params["ROWS"] * params["COLS"]


class Nonzero(_Masked):
    """``torch.nonzero(mask)`` of a ``ROWS×COLS`` bool mask, half of it true:
    an ``n×2`` int64 output. The mask is bool whatever the dtype (float32
    only, a label). On a GPU the host waits for the count. No gradient."""

    name = "nonzero"
    directions = ("forward",)
    dtypes = ("float32",)
    untyped_input = True
    trace_names = ("aten::nonzero",)

    def make_runner(self, params, dtype, direction, device):
        import torch

        mask = _half_mask(params["ROWS"], params["COLS"], device)
        return lambda: torch.nonzero(mask)

    def flops(self, params, direction):
        """One test per element (FLOP)."""
        return float(params["ROWS"] * params["COLS"])

    def bytes_moved(self, params, dtype, direction):
        """Read the 1 B mask, write two int64 coordinates per true element (B)."""
        return float(params["ROWS"] * params["COLS"] + 2 * _INDEX_BYTES * self._selected(params))

    def params_from_node(self, node):
        """The input's shape (rank >= 1); its true elements are not in the trace."""
        rc = self._rows_cols(node.input_shapes[0]) if node.input_shapes else None
        return None if rc is None else {"ROWS": rc[0], "COLS": rc[1]}


class MaskedSelect(_Masked):
    """``torch.masked_select(x, mask)`` of a ``ROWS×COLS`` input and a bool
    mask of its shape, half true. Backward: ``masked_scatter_`` of the
    gradient into a zeroed ``ROWS×COLS`` gradient."""

    name = "masked_select"
    trace_names = ("aten::masked_select",)

    def make_runner(self, params, dtype, direction, device):
        import torch

        grad = direction == "backward"
        x = self._input(params, dtype, device, grad)
        mask = _half_mask(params["ROWS"], params["COLS"], device)
        fn = lambda: torch.masked_select(x, mask)  # noqa: E731
        return _grad_runner(fn, (x,)) if grad else fn

    def flops(self, params, direction):
        """A test per element and the selected elements written; backward also
        the zeros written (FLOP)."""
        n = params["ROWS"] * params["COLS"]
        return float((1 if direction == "forward" else 2) * n + self._selected(params))

    def bytes_moved(self, params, dtype, direction):
        """Forward: read the input and the 1 B mask, write the selected
        elements. Backward: write the zeroed gradient, read the mask and the
        selected gradient, write it into place (B)."""
        n, size = params["ROWS"] * params["COLS"], DTYPE_BYTES[dtype]
        selected = self._selected(params)
        if direction == "forward":
            return float(size * (n + selected) + n)
        return float(size * (n + 2 * selected) + n)

    def params_from_node(self, node):
        """``(x, mask)`` of one shape (no broadcasting); its density is not in the trace."""
        shapes = node.input_shapes
        if len(shapes) < 2 or list(shapes[1]) != list(shapes[0]):
            return None
        rc = self._rows_cols(shapes[0])
        return None if rc is None else {"ROWS": rc[0], "COLS": rc[1]}


OPS = (Gather(), ScatterAdd(), Scatter(), Index(), IndexAdd(), IndexPut(), TopK(), Sort(),
       Nonzero(), MaskedSelect())
