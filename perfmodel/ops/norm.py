"""Normalisation and regularisation family: ``batch_norm``, ``layer_norm``,
``group_norm``, ``instance_norm`` and ``dropout``, all in training mode
(forward and backward).

These ops are memory- (dropout: RNG-) bound; FLOP counts are per element
and only roughly what a kernel executes.
"""

from __future__ import annotations

import math
from typing import Mapping

from perfmodel.ops.base import (DTYPE_BYTES, OpDef, check_profile, log_uniform_ints,
                                sample_configs, torch_dtype)
from perfmodel.plaindata import is_number

#: Configs per profile and the largest element count of one call's input.
_CONFIGS = {"smoke": 4, "quick": 20, "gpu": 20, "full": 2000}
_MAX_ELEMS = {"smoke": 1 << 15, "quick": 1 << 21, "gpu": 1 << 27, "full": 1 << 27}
#: FLOP per element: mean, variance, normalise and affine forward; backward
#: adds the two reductions and the grad_input formula.
_NORM_FWD_FLOP_PER_ELEM = 7.0
_NORM_BWD_FLOP_PER_ELEM = 11.0
#: Configs per profile of ``group_norm`` and ``instance_norm``: ``smoke`` keeps the
#: four tiny float32 configs a fit needs to score an op
#: (:data:`perfmodel.fit.fitting.MIN_CONFIGS`).
_SMALL_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16, "full": 500}


class _Norm(OpDef):
    family = "norm"
    directions = ("forward", "backward")
    dtypes = ("float32", "bfloat16")
    #: Per-param (low, high) ranges of the ``full`` profile; smaller profiles
    #: keep the lows and cap the element count.
    ranges: dict[str, tuple[int, int]] = {}
    #: Configs per profile.
    config_counts: dict[str, int] = _CONFIGS

    def elements(self, params: Mapping[str, int]) -> int:
        """Elements of the input tensor."""
        return math.prod(params[p] for p in self.params)

    def valid(self, params: Mapping[str, int]) -> bool:
        """Whether the op can run ``params``; all positive configs by default."""
        return True

    def generate_configs(self, profile):
        """Distinct configs drawn log-uniformly (seeded), under ``_MAX_ELEMS``."""
        configs = sample_configs(
            f"{self.name}-{profile}", self.params, self.config_counts[profile],
            lambda rng, n: self._draw(rng, profile, n),
            lambda c: self.valid(c) and self.elements(c) <= _MAX_ELEMS[profile])
        return sorted(configs, key=self.elements)

    def _draw(self, rng, profile: str, n: int) -> dict[str, int]:
        """One candidate config: every param log-uniform in its range."""
        return {p: log_uniform_ints(rng, *self.ranges[p]) for p in self.params}

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


class _SmokeFloat32(_Norm):
    """A norm whose ``smoke`` profile runs float32 only (a pipeline check) on
    :data:`_SMALL_CONFIGS`."""

    config_counts = _SMALL_CONFIGS

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only."""
        cases = super().cases(check_profile(profile))
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases


class GroupNorm(_SmokeFloat32):
    """``F.group_norm`` (``nn.GroupNorm``) on an N×C×HW input in ``GROUPS``
    groups of C/GROUPS channels, with affine weight and bias. An input with
    several spatial dims runs the same kernel as its flattened N×C×HW view."""

    name = "group_norm"
    params = ("N", "C", "HW", "GROUPS")
    trace_names = ("aten::group_norm", "aten::native_group_norm")
    ranges = {"N": (1, 256), "C": (1, 1024), "HW": (1, 16384)}
    #: Group counts drawn: 32 (the paper's default) most often; GROUPS = C
    #: (instance-norm-like) and 1 (layer-norm-like) at the ends.
    group_choices = (32, 32, 16, 8, 4, 1, 0)  # 0: one group per channel

    def valid(self, params):
        """Channels divide into the groups, and each group has more than one value."""
        return params["C"] % params["GROUPS"] == 0 and \
            params["C"] // params["GROUPS"] * params["HW"] > 1

    def _draw(self, rng, profile, n):
        """``C`` a multiple of the group count drawn, the rest log-uniform."""
        cfg = {p: log_uniform_ints(rng, *self.ranges[p]) for p in ("N", "HW")}
        g = rng.choice(self.group_choices)
        top = self.ranges["C"][1]
        if g:
            cfg["C"], cfg["GROUPS"] = g * log_uniform_ints(rng, 1, top // g), g
        else:
            cfg["C"] = cfg["GROUPS"] = log_uniform_ints(rng, 1, top)
        return cfg

    def elements(self, params):
        return params["N"] * params["C"] * params["HW"]

    def make_runner(self, params, dtype, direction, device):
        import torch.nn.functional as F

        n, c, hw, g = params["N"], params["C"], params["HW"], params["GROUPS"]
        if not self.valid(params):
            raise ValueError(f"group_norm needs C % GROUPS == 0 and more than one value per "
                             f"group, got {dict(params)}")
        x = self._input(params, dtype, direction, device, (n, c, hw))
        w = self._input(params, dtype, direction, device, (c,))
        b = self._input(params, dtype, direction, device, (c,))
        return self._runner(lambda: F.group_norm(x, g, w, b), (x, w, b), direction)

    def flops(self, params, direction):
        """FLOP: 7 per element forward, 11 backward, plus 8 per group of each
        sample for the statistics."""
        per = _NORM_FWD_FLOP_PER_ELEM if direction == "forward" else _NORM_BWD_FLOP_PER_ELEM
        return per * self.elements(params) + 8.0 * params["N"] * params["GROUPS"]

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y (2 per element), reads weight and bias
        (2 per channel) and writes the saved mean and rstd (2 per group of each
        sample); backward reads x and grad_output and writes grad_input (3 per
        element), reads weight and writes grad_weight and grad_bias (3 per
        channel) and reads the saved statistics."""
        per_elem, per_channel = (2, 2) if direction == "forward" else (3, 3)
        return DTYPE_BYTES[dtype] * (per_elem * self.elements(params)
                                     + per_channel * params["C"]
                                     + 2 * params["N"] * params["GROUPS"])

    def params_from_shapes(self, input_shapes):
        """``N``, ``C`` and ``HW`` (product of the spatial dims) from ``[input,
        ...]``; ``GROUPS`` is an int argument, absent from shapes: the caller
        adds it. None for rank < 2."""
        if not input_shapes or len(input_shapes[0]) < 2 or min(input_shapes[0]) < 1:
            return None
        x = list(input_shapes[0])
        return {"N": x[0], "C": x[1], "HW": math.prod(x[2:])}

    def params_from_node(self, node):
        """The shapes' params plus ``GROUPS``: the second argument of
        ``aten::group_norm``, the seventh of ``aten::native_group_norm``. A
        group norm without affine weight is priced as one with. None when the
        weight is not ``[C]`` (or absent) or the groups do not divide C."""
        params = self.params_from_shapes(node.input_shapes)
        at, weight_at = (1, 2) if node.name == "aten::group_norm" else (6, 1)
        values, shapes = node.input_values, node.input_shapes
        if params is None or len(values) <= at or len(shapes) <= weight_at:
            return None
        groups = values[at]
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            return None
        if list(shapes[weight_at]) not in ([], [params["C"]]):
            return None
        params["GROUPS"] = groups
        return params if self.valid(params) else None


class InstanceNorm(_SmokeFloat32):
    """``F.instance_norm`` (``nn.InstanceNorm2d(C, affine=True)``) in training on
    an N×C×HW input: statistics per sample and channel. PyTorch runs it as a
    batch norm of the 1×(N·C)×HW view, with the weight and bias repeated N
    times; the trace's ``aten::instance_norm`` node holds those steps (and its
    backward ``NativeBatchNormBackward0`` and ``RepeatBackward0``), so it is
    recognised whole rather than as a batch norm of another shape."""

    name = "instance_norm"
    params = ("N", "C", "HW")
    trace_names = ("aten::instance_norm",)
    ranges = {"N": (1, 256), "C": (1, 1024), "HW": (2, 16384)}

    def valid(self, params):
        """Training needs more than one value per sample and channel (HW > 1)."""
        return params["HW"] > 1

    def make_runner(self, params, dtype, direction, device):
        import torch.nn.functional as F

        n, c, hw = params["N"], params["C"], params["HW"]
        if not self.valid(params):
            raise ValueError(f"instance_norm needs HW > 1, got HW={hw}")
        x = self._input(params, dtype, direction, device, (n, c, hw))
        w = self._input(params, dtype, direction, device, (c,))
        b = self._input(params, dtype, direction, device, (c,))
        return self._runner(lambda: F.instance_norm(x, weight=w, bias=b, use_input_stats=True),
                            (x, w, b), direction)

    def flops(self, params, direction):
        """FLOP: 7 per element forward, 11 backward, plus 8 per (sample, channel)
        for the statistics."""
        per = _NORM_FWD_FLOP_PER_ELEM if direction == "forward" else _NORM_BWD_FLOP_PER_ELEM
        return per * self.elements(params) + 8.0 * params["N"] * params["C"]

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y (2 per element), reads weight and bias
        (2 per channel), writes and reads their N-fold repeats and writes the
        saved mean and inverse std (6 per (sample, channel)); backward reads x
        and grad_output and writes grad_input (3 per element), reads the
        repeated weight and the saved statistics, writes the repeats' gradients
        (5 per (sample, channel)) and sums them into grad_weight and grad_bias
        (2 per channel)."""
        n, c = params["N"], params["C"]
        per_elem, per_nc = (2, 6) if direction == "forward" else (3, 5)
        return DTYPE_BYTES[dtype] * (per_elem * self.elements(params) + per_nc * n * c + 2 * c)

    def params_from_shapes(self, input_shapes):
        """``N``, ``C`` and ``HW`` (product of the spatial dims) from ``[input,
        weight?, ...]``; None for rank < 3 or a weight that is not ``[C]`` (an
        instance norm without affine weight, ``[]``, is priced as one with)."""
        if not input_shapes or len(input_shapes[0]) < 3 or min(input_shapes[0]) < 1:
            return None
        x = list(input_shapes[0])
        if len(input_shapes) > 1 and list(input_shapes[1]) not in ([], [x[1]]):
            return None
        return {"N": x[0], "C": x[1], "HW": math.prod(x[2:])}

    def params_from_node(self, node):
        """The shapes' params, for a node that normalises with the input's own
        statistics (``use_input_stats``, its sixth argument, true; false is an
        affine map with the running statistics, not this op)."""
        values = node.input_values
        if len(values) > 5 and values[5] is False:
            return None
        params = self.params_from_shapes(node.input_shapes)
        return params if params is not None and self.valid(params) else None


class Dropout(_Norm):
    """``F.dropout(x, p=P/100, training=True)`` on a tensor of ELEMS elements.

    ``P``, the drop probability in percent, changes the work: a CPU draws the
    mask at a cost that grows with p up to 0.5 (0.79 ms at p = 0.1 and 1.6 ms
    at 0.5 for 131072 elements on one 2-core VM; see
    docs/journal/2026-12-07-warm-cache.md). Records stored before it timed 50."""

    name = "dropout"
    params = ("ELEMS", "P")
    trace_names = ("aten::dropout", "aten::native_dropout", "aten::native_dropout_backward")
    ranges = {"ELEMS": (256, 1 << 27)}
    #: Drop probabilities (percent) the sweeps draw: those models use (0.1 in
    #: transformers, 0.5 in classic MLPs) and a few between.
    P_VALUES = (5, 10, 20, 30, 50)
    added_params = ("P",)
    param_defaults = {"P": 50}
    monotone_params = ("ELEMS",)
    #: More configs than the other norms: P is a dimension of its own.
    config_counts = {"smoke": 4, "quick": 32, "gpu": 32, "full": 2000}

    def elements(self, params: Mapping[str, int]) -> int:
        return int(params["ELEMS"])

    def valid(self, params: Mapping[str, int]) -> bool:
        return 0 < int(params["P"]) < 100

    def _draw(self, rng, profile: str, n: int) -> dict[str, int]:
        return {"ELEMS": log_uniform_ints(rng, *self.ranges["ELEMS"]),
                "P": rng.choice(self.P_VALUES)}

    def make_runner(self, params, dtype, direction, device):
        import torch.nn.functional as F

        p = int(self.complete_config(params)["P"]) / 100
        x = self._input(params, dtype, direction, device, (params["ELEMS"],))
        return self._runner(lambda: F.dropout(x, p, training=True), (x,), direction)

    def flops(self, params, direction):
        """FLOP: 2 per element (compare a random draw to p, scale), both
        directions; the random-number generation itself is not counted."""
        return 2.0 * params["ELEMS"]

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x, writes y and a 1-byte mask; backward reads
        grad_output and the mask and writes grad_input."""
        return (2 * DTYPE_BYTES[dtype] + 1) * params["ELEMS"]

    def params_from_shapes(self, input_shapes):
        """``ELEMS`` = elements of the input (first shape), ``P`` at its default
        (the shapes do not hold it); None if empty."""
        if not input_shapes or not input_shapes[0] or min(input_shapes[0]) < 1:
            return None
        return {"ELEMS": math.prod(input_shapes[0]), "P": self.param_defaults["P"]}

    def params_from_node(self, node):
        """The shapes' params with ``P`` from the node's arguments: ``p`` of
        ``aten::dropout`` and ``aten::native_dropout`` (input, p, train), ``1 -
        1/scale`` of ``aten::native_dropout_backward`` (grad, mask, scale); the
        default where the trace holds no such value. None for p outside (0, 1)
        (p = 0 copies nothing and draws nothing)."""
        params = self.params_from_shapes(node.input_shapes)
        if params is None:
            return None
        values = node.input_values
        if node.name == "aten::native_dropout_backward":
            scale = values[2] if len(values) > 2 else None
            p = 1.0 - 1.0 / scale if is_number(scale) and scale > 0 else None
        else:
            p = values[1] if len(values) > 1 and is_number(values[1]) else None
        if p is None:
            return params
        if not 0.0 < p < 1.0:
            return None
        return {**params, "P": max(1, min(99, int(round(100 * p))))}


OPS = (BatchNorm(), LayerNorm(), GroupNorm(), InstanceNorm(), Dropout())
