"""Elementwise family: activations, softmax, binary ops, last-dim reductions and scans, losses.

Every op is one :class:`Elementwise` built from a row of ``_TABLE``: its torch
function, FLOPs per element and tensors read/written per element (forward and
backward). Work is counted per element of the ``ROWS×COLS`` input (``BATCH×CLASSES``
for ``cross_entropy``); scalar outputs and other per-row terms are added on top.

The ``smoke`` profile runs float32 only: it checks the pipeline on a 2-core CI
machine; ``quick`` and ``full`` run every dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from perfmodel.ops.base import DTYPE_BYTES, OpDef, check_profile, torch_dtype
from perfmodel.ops.base import random_configs

#: Random configs per profile, and the most input elements of one call.
_CONFIGS = {"smoke": 4, "quick": 12, "gpu": 12, "full": 1000}
_MAX_ELEMS = {"smoke": 1 << 16, "quick": 1 << 22, "gpu": 1 << 28, "full": 1 << 26}
#: Largest dim of the ``gpu`` profile (a GPT-2 loss has 50257 classes); its largest
#: config is (cap / this) x this.
_GPU_MAX_DIM = 1 << 16
#: Bytes of an int64 class index (``cross_entropy`` targets).
_INDEX_BYTES = 8


@dataclass(frozen=True)
class _Kind:
    """Work of one op; ``fwd``/``bwd`` are (FLOPs, tensors read, tensors written)
    per input element, ``per_row`` (FLOPs, tensors) per row, in both directions
    (e.g. a reduction's output row, a cross-entropy target). ``bwd`` is ``None``
    when autograd runs no kernel for the backward: ``add`` passes the gradient
    through and ``sum``'s gradient is an ``expand`` view.
    ``build`` says how inputs are made (see :meth:`Elementwise.make_runner`).
    ``dim_arg``: the position of a reduction's or scan's dim among a trace
    node's arguments (see :meth:`Elementwise.params_from_node`); None for ops
    without one (and for ``sum`` and ``mean``, which take any dim).
    """

    build: str
    fwd: tuple[int, int, int]
    bwd: tuple[int, int, int] | None
    per_row: tuple[int, int] = (0, 0)
    trace_names: tuple[str, ...] = ()
    dim_arg: int | None = None


#: The family. Unary backward reads grad_out and x (or y), writes grad_in.
_TABLE = {
    "relu": _Kind("unary", (1, 1, 1), (1, 2, 1), trace_names=("aten::relu", "aten::relu_")),
    "gelu": _Kind("unary", (8, 1, 1), (12, 2, 1), trace_names=("aten::gelu",)),
    "sigmoid": _Kind("unary", (4, 1, 1), (3, 2, 1), trace_names=("aten::sigmoid",)),
    "tanh": _Kind("unary", (4, 1, 1), (3, 2, 1), trace_names=("aten::tanh",)),
    # x * sigmoid(x); backward g * s * (1 + x * (1 - s)).
    "silu": _Kind("unary", (5, 1, 1), (8, 2, 1), trace_names=("aten::silu", "aten::silu_")),
    # max, subtract, exp, sum, divide; backward y * (g - sum(g * y)).
    "softmax": _Kind("unary", (5, 1, 1), (4, 2, 1),
                     trace_names=("aten::softmax", "aten::_softmax", "aten::_safe_softmax")),
    "add": _Kind("binary", (1, 2, 1), None, trace_names=("aten::add", "aten::add_")),
    # backward: grad_a = g * b, grad_b = g * a.
    "mul": _Kind("binary", (1, 2, 1), (2, 3, 2), trace_names=("aten::mul",)),
    "sum": _Kind("unary", (1, 1, 0), None, (0, 1), trace_names=("aten::sum",)),
    # backward: grad.expand(...) / COLS, materialised.
    "mean": _Kind("unary", (1, 1, 0), (1, 0, 1), (1, 1), trace_names=("aten::mean",)),
    # backward: a mask of the elements equal to the row's max, its count per
    # row, and g * mask / count (the mask counted at the dtype's width).
    "amax": _Kind("unary", (1, 1, 0), (3, 2, 2), (0, 1), trace_names=("aten::amax",),
                  dim_arg=1),
    # one pass (Welford) forward; backward 2 (x - mean(x)) g / (COLS - 1): a
    # mean, a subtraction and a product, each a pass.
    "var": _Kind("unary", (3, 1, 0), (3, 3, 2), (2, 1), trace_names=("aten::var",), dim_arg=1),
    # as var, and a square root (forward) and a division (backward) per row.
    "std": _Kind("unary", (3, 1, 0), (3, 3, 2), (3, 1), trace_names=("aten::std",), dim_arg=1),
    # 2-norm: x * x summed, a square root per row; backward g * x / norm with
    # the zero norms masked: a division, a masked fill and a product.
    "norm": _Kind("unary", (2, 1, 0), (2, 3, 3), (1, 1),
                  trace_names=("aten::linalg_vector_norm",), dim_arg=2),
    # an inclusive scan; backward flips the gradient, scans it and flips back.
    "cumsum": _Kind("unary", (1, 1, 1), (1, 3, 3), trace_names=("aten::cumsum",), dim_arg=1),
    # (x - t)^2 averaged to a scalar; backward 2 (x - t) g / n.
    "mse_loss": _Kind("loss", (3, 2, 0), (3, 2, 1), trace_names=("aten::mse_loss",)),
    # input must lie in (0, 1): made with a sigmoid.
    "binary_cross_entropy": _Kind("prob_loss", (7, 2, 0), (6, 2, 1),
                                  trace_names=("aten::binary_cross_entropy",)),
    "binary_cross_entropy_with_logits": _Kind(
        "loss", (8, 2, 0), (6, 2, 1), trace_names=("aten::binary_cross_entropy_with_logits",)),
    # log_softmax (writes its output) then an nll gather per row of an int64
    # target; backward: nll scatter plus the log_softmax backward.
    "cross_entropy": _Kind("class_loss", (5, 1, 1), (4, 2, 1), (1, 1),
                           trace_names=("aten::cross_entropy_loss",)),
}


def _function(name: str) -> Callable:
    """The torch callable of op ``name``; reductions and softmax over the last dim."""
    import torch
    import torch.nn.functional as F

    return {
        "relu": torch.relu, "gelu": F.gelu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
        "silu": F.silu, "amax": lambda x: torch.amax(x, dim=-1),
        "var": lambda x: torch.var(x, dim=-1), "std": lambda x: torch.std(x, dim=-1),
        "norm": lambda x: torch.linalg.vector_norm(x, dim=-1),
        "cumsum": lambda x: torch.cumsum(x, dim=-1),
        "softmax": lambda x: torch.softmax(x, dim=-1), "add": torch.add, "mul": torch.mul,
        "sum": lambda x: torch.sum(x, dim=-1), "mean": lambda x: torch.mean(x, dim=-1),
        "mse_loss": F.mse_loss, "binary_cross_entropy": F.binary_cross_entropy,
        "binary_cross_entropy_with_logits": F.binary_cross_entropy_with_logits,
        "cross_entropy": F.cross_entropy,
    }[name]


class Elementwise(OpDef):
    """One op of ``_TABLE`` over a ``ROWS×COLS`` input (``BATCH×CLASSES`` for
    ``cross_entropy``); reductions, scans, softmax and losses work along the last dim,
    losses with ``reduction="mean"``."""

    family = "elementwise"
    dtypes = ("float32", "bfloat16")

    def __init__(self, name: str):
        self.name = name
        self.kind = _TABLE[name]
        self.params = ("BATCH", "CLASSES") if name == "cross_entropy" else ("ROWS", "COLS")
        self.directions = ("forward",) if self.kind.bwd is None else ("forward", "backward")
        self.trace_names = self.kind.trace_names
        self._ranges = {self.params[0]: (1, 16384), self.params[1]: (8, 16384)}

    def _rows_cols(self, params) -> tuple[int, int]:
        return int(params[self.params[0]]), int(params[self.params[1]])

    # -- shape space -------------------------------------------------------
    def configs(self, profile):
        check_profile(profile)
        ranges = {p: (lo, min(hi, 1024) if profile == "smoke" else
                      max(hi, _GPU_MAX_DIM) if profile == "gpu" else hi)
                  for p, (lo, hi) in self._ranges.items()}
        configs = random_configs(f"{self.name}-{profile}", self.params, ranges,
                                 _CONFIGS[profile], lambda c: math.prod(self._rows_cols(c)),
                                 _MAX_ELEMS[profile])
        if profile == "gpu":  # a draw of 12 seldom nears the cap: add the cap itself
            configs.append({self.params[0]: _MAX_ELEMS[profile] // _GPU_MAX_DIM,
                            self.params[1]: _GPU_MAX_DIM})
        return configs

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(profile)
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases

    # -- running -----------------------------------------------------------
    def make_runner(self, params, dtype, direction, device):
        import torch

        fn = _function(self.name)
        t = dict(dtype=torch_dtype(dtype), device=device)
        rows, cols = self._rows_cols(params)
        grad = direction == "backward"
        x = torch.randn(rows, cols, **t)
        if self.kind.build == "prob_loss":
            x = torch.sigmoid(x)
        x.requires_grad_(grad)
        if self.kind.build == "binary":
            inputs = (x, torch.randn(rows, cols, requires_grad=grad, **t))
        elif self.kind.build in ("loss", "prob_loss"):
            inputs = (x, torch.rand(rows, cols, **t))  # targets in [0, 1), no grad
        elif self.kind.build == "class_loss":
            inputs = (x, torch.randint(0, cols, (rows,), device=device))
        else:
            inputs = (x,)
        if not grad:
            return lambda: fn(*inputs)
        wrt = tuple(i for i in inputs if i.requires_grad)
        out = fn(*inputs)
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True)

    # -- analytic work -----------------------------------------------------
    def _work(self, direction) -> tuple[int, int, int]:
        work = self.kind.fwd if direction == "forward" else self.kind.bwd
        if work is None:
            raise ValueError(f"{self.name} has no {direction} kernel")
        return work

    def flops(self, params, direction):
        """FLOPs per element × elements, plus per-row FLOPs (FLOP)."""
        rows, cols = self._rows_cols(params)
        return float(self._work(direction)[0] * rows * cols + self.kind.per_row[0] * rows)

    def bytes_moved(self, params, dtype, direction):
        """(Tensors read + written) × elements, per-row tensors and a scalar
        output, in ``dtype``; int64 class targets at 8 B each (B)."""
        _, reads, writes = self._work(direction)
        rows, cols = self._rows_cols(params)
        elements = (reads + writes) * rows * cols + self.kind.per_row[1] * rows + 1
        targets = _INDEX_BYTES * rows if self.kind.build == "class_loss" else 0
        return float(DTYPE_BYTES[dtype] * elements + targets)

    # -- trace mapping -----------------------------------------------------
    def params_from_shapes(self, input_shapes):
        """Rows are the product of the first input's leading dims, columns its
        last dim. Binary ops and losses need a second input of the same shape
        (no broadcasting), ``cross_entropy`` a 2-D input and a 1-D target."""
        shapes = [list(s) for s in input_shapes if isinstance(s, (list, tuple))]
        if not shapes or not shapes[0] or not all(isinstance(d, int) for d in shapes[0]):
            return None
        first = shapes[0]
        rows, cols = math.prod(first[:-1]), first[-1]
        build = self.kind.build
        if build in ("binary", "loss", "prob_loss") and (len(shapes) < 2 or shapes[1] != first):
            return None
        if build == "class_loss" and (len(first) != 2 or len(shapes) < 2 or shapes[1] != [rows]):
            return None
        if rows < 1 or cols < 1:
            return None
        return {self.params[0]: rows, self.params[1]: cols}

    def params_from_node(self, node):
        """As :meth:`params_from_shapes`; an op with a ``dim_arg`` also reads its
        dims: the trailing dims (``-1``, ``[-1]``, ``[-2, -1]``, ...) read as
        above, every dim (``None``, ``[]``, or absent or a bool, as in
        ``var(x, unbiased)``) as one row of all the elements, any other as not
        this op. ``norm`` is the 2-norm only."""
        params = self.params_from_shapes(node.input_shapes)
        position = self.kind.dim_arg
        if params is None or position is None:
            return params
        values = node.input_values
        if self.name == "norm" and (len(values) < 2 or values[1] not in (2, 2.0)
                                    or isinstance(values[1], bool)):
            return None
        ndim = len(node.input_shapes[0])
        dims = values[position] if len(values) > position else None
        if dims in (None, "<None>", []) or isinstance(dims, bool):
            return None if self.name == "cumsum" else \
                {self.params[0]: 1, self.params[1]: params[self.params[0]] * params[self.params[1]]}
        dims = [dims] if isinstance(dims, int) else dims
        if not isinstance(dims, list) or not dims or \
                not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            return None
        trailing = sorted(d % ndim for d in dims)
        if trailing != list(range(ndim - len(dims), ndim)):
            return None
        shape = node.input_shapes[0]
        return {self.params[0]: math.prod(shape[:ndim - len(dims)]),
                self.params[1]: math.prod(shape[ndim - len(dims):])}


OPS = tuple(Elementwise(name) for name in _TABLE)
