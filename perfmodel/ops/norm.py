"""Normalisation and regularisation family: ``batch_norm``, ``layer_norm`` and
``dropout``, all in training mode (forward and backward).

These ops are memory- (dropout: RNG-) bound; FLOP counts are per element
and only roughly what a kernel executes.
"""

from __future__ import annotations

import math
from typing import Mapping

from perfmodel.ops.base import DTYPE_BYTES, OpDef, log_uniform_ints, sample_configs, torch_dtype

#: Configs per profile and the largest element count of one call's input.
_CONFIGS = {"smoke": 4, "quick": 20, "gpu": 20, "full": 2000}
_MAX_ELEMS = {"smoke": 1 << 15, "quick": 1 << 21, "gpu": 1 << 27, "full": 1 << 27}
#: FLOP per element: mean, variance, normalise and affine forward; backward
#: adds the two reductions and the grad_input formula.
_NORM_FWD_FLOP_PER_ELEM = 7.0
_NORM_BWD_FLOP_PER_ELEM = 11.0


class _Norm(OpDef):
    family = "norm"
    directions = ("forward", "backward")
    dtypes = ("float32", "bfloat16")
    #: Per-param (low, high) ranges of the ``full`` profile; smaller profiles
    #: keep the lows and cap the element count.
    ranges: dict[str, tuple[int, int]] = {}

    def elements(self, params: Mapping[str, int]) -> int:
        """Elements of the input tensor."""
        return math.prod(params[p] for p in self.params)

    def valid(self, params: Mapping[str, int]) -> bool:
        """Whether the op can run ``params``; all positive configs by default."""
        return True

    def generate_configs(self, profile):
        """Distinct configs drawn log-uniformly (seeded), under ``_MAX_ELEMS``."""
        configs = sample_configs(
            f"{self.name}-{profile}", self.params, _CONFIGS[profile],
            lambda rng, n: {p: log_uniform_ints(rng, *self.ranges[p]) for p in self.params},
            lambda c: self.valid(c) and self.elements(c) <= _MAX_ELEMS[profile])
        return sorted(configs, key=self.elements)

    def _input(self, params, dtype, direction, device, shape):
        import torch

        return torch.randn(*shape, dtype=torch_dtype(dtype), device=device,
                           requires_grad=direction == "backward")

    @staticmethod
    def _runner(fn, inputs, direction):
        """``fn`` itself (forward), or autograd's backward of its output wrt ``inputs``."""
        import torch

        if direction == "forward":
            return fn
        out = fn()
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)


class BatchNorm(_Norm):
    """``F.batch_norm`` in training mode on an N×C×HW input, with affine weight
    and bias and running statistics (updated in place every call)."""

    name = "batch_norm"
    params = ("N", "C", "HW")
    trace_names = ("aten::batch_norm", "aten::_batch_norm_impl_index",
                   "aten::native_batch_norm", "aten::_native_batch_norm_legit",
                   "aten::native_batch_norm_backward")
    ranges = {"N": (1, 256), "C": (1, 1024), "HW": (1, 16384)}

    def valid(self, params):
        """Training mode needs more than one value per channel (N·HW > 1)."""
        return params["N"] * params["HW"] > 1

    def make_runner(self, params, dtype, direction, device):
        import torch
        import torch.nn.functional as F

        n, c, hw = params["N"], params["C"], params["HW"]
        if not self.valid(params):
            raise ValueError(f"batch_norm needs N*HW > 1, got N={n}, HW={hw}")
        x = self._input(params, dtype, direction, device, (n, c, hw))
        w = self._input(params, dtype, direction, device, (c,))
        b = self._input(params, dtype, direction, device, (c,))
        t = dict(dtype=torch_dtype(dtype), device=device)
        mean, var = torch.zeros(c, **t), torch.ones(c, **t)
        return self._runner(lambda: F.batch_norm(x, mean, var, w, b, training=True),
                            (x, w, b), direction)

    def flops(self, params, direction):
        """FLOP: 7 per element forward, 11 backward, plus 8 per channel for the
        statistics and running-average update."""
        per = _NORM_FWD_FLOP_PER_ELEM if direction == "forward" else _NORM_BWD_FLOP_PER_ELEM
        return per * self.elements(params) + 8.0 * params["C"]

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y (2 per element) and touches weight,
        bias, running mean and variance (read and written) and the saved mean
        and inverse std (8 per channel); backward reads x and grad_output and
        writes grad_input (3 per element), reads weight and the saved
        statistics and writes grad_weight and grad_bias (5 per channel)."""
        per_elem, per_channel = (2, 8) if direction == "forward" else (3, 5)
        return DTYPE_BYTES[dtype] * (per_elem * self.elements(params) +
                                     per_channel * params["C"])

    def params_from_shapes(self, input_shapes):
        """``N``, ``C`` and ``HW`` (product of the spatial dims, 1 for a 2-D
        input) from ``[input, weight?, ...]``; None for rank < 2 or a weight
        that is not ``[C]``."""
        if not input_shapes or len(input_shapes[0]) < 2 or min(input_shapes[0]) < 1:
            return None
        x = list(input_shapes[0])
        if len(input_shapes) > 1 and list(input_shapes[1]) not in ([], [x[1]]):
            return None
        return {"N": x[0], "C": x[1], "HW": math.prod(x[2:])}


class LayerNorm(_Norm):
    """``F.layer_norm`` over the last dim of a ROWS×COLS input, with weight and bias."""

    name = "layer_norm"
    params = ("ROWS", "COLS")
    trace_names = ("aten::layer_norm", "aten::native_layer_norm",
                   "aten::native_layer_norm_backward")
    ranges = {"ROWS": (1, 65536), "COLS": (16, 16384)}

    def make_runner(self, params, dtype, direction, device):
        import torch.nn.functional as F

        rows, cols = params["ROWS"], params["COLS"]
        x = self._input(params, dtype, direction, device, (rows, cols))
        w = self._input(params, dtype, direction, device, (cols,))
        b = self._input(params, dtype, direction, device, (cols,))
        return self._runner(lambda: F.layer_norm(x, (cols,), w, b), (x, w, b), direction)

    def flops(self, params, direction):
        """FLOP: 7 per element forward, 11 backward."""
        per = _NORM_FWD_FLOP_PER_ELEM if direction == "forward" else _NORM_BWD_FLOP_PER_ELEM
        return per * self.elements(params)

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x, writes y, reads weight and bias and writes the
        saved mean and rstd per row; backward reads x, grad_output, weight and
        the saved statistics and writes grad_input, grad_weight and grad_bias."""
        rows, cols = params["ROWS"], params["COLS"]
        if direction == "forward":
            elements = 2 * rows * cols + 2 * cols + 2 * rows
        else:
            elements = 3 * rows * cols + 3 * cols + 2 * rows
        return DTYPE_BYTES[dtype] * elements

    def params_from_shapes(self, input_shapes):
        """``ROWS`` (product of the leading dims) and ``COLS`` (product of the
        normalised dims) from ``[input, normalized_shape?, weight?, ...]``.

        The normalised dims are read from the first later shape that is a
        non-empty suffix of the input's (the weight); without one (no affine
        weight, and a trace that drops int lists) they are ambiguous: None.
        """
        if not input_shapes or not input_shapes[0] or min(input_shapes[0]) < 1:
            return None
        x = list(input_shapes[0])
        for shape in input_shapes[1:]:
            shape = list(shape)
            if shape and len(shape) <= len(x) and x[len(x) - len(shape):] == shape:
                return {"ROWS": math.prod(x[:len(x) - len(shape)]), "COLS": math.prod(shape)}
        return None


class Dropout(_Norm):
    """``F.dropout(x, p=0.5, training=True)`` on a tensor of ELEMS elements."""

    name = "dropout"
    params = ("ELEMS",)
    trace_names = ("aten::dropout", "aten::native_dropout", "aten::native_dropout_backward")
    ranges = {"ELEMS": (256, 1 << 27)}
    #: Drop probability.
    p = 0.5

    def make_runner(self, params, dtype, direction, device):
        import torch.nn.functional as F

        x = self._input(params, dtype, direction, device, (params["ELEMS"],))
        return self._runner(lambda: F.dropout(x, self.p, training=True), (x,), direction)

    def flops(self, params, direction):
        """FLOP: 2 per element (compare a random draw to p, scale), both
        directions; the random-number generation itself is not counted."""
        return 2.0 * params["ELEMS"]

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x, writes y and a 1-byte mask; backward reads
        grad_output and the mask and writes grad_input."""
        return (2 * DTYPE_BYTES[dtype] + 1) * params["ELEMS"]

    def params_from_shapes(self, input_shapes):
        """``ELEMS`` = elements of the input (first shape); None if empty."""
        if not input_shapes or not input_shapes[0] or min(input_shapes[0]) < 1:
            return None
        return {"ELEMS": math.prod(input_shapes[0])}


OPS = (BatchNorm(), LayerNorm(), Dropout())
