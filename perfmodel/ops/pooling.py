"""Pooling and resampling family: ``max_pool2d``, ``avg_pool2d``,
``adaptive_avg_pool2d``, ``upsample_nearest2d`` and ``upsample_bilinear2d``
(forward and backward) on N×C×H×W inputs, and ``max_pool1d`` and
``avg_pool1d`` on N×C×L inputs (``L`` the length).

Config params: ``N`` batch, ``C`` channels, ``H`` and ``W`` the input size;
the windowed pools add ``R`` (square kernel), ``STRIDE`` and ``PAD``; the
adaptive pool ``OUT``, its square output side (1 is global average pooling,
which PyTorch runs as a ``mean`` over H and W); the upsamples ``OH`` and ``OW``,
the output size (``F.interpolate(x, scale_factor=2)`` is ``OH = 2H``).

These ops are memory-bound; FLOP counts are per window (or output) element and
only roughly what a kernel executes. The ``smoke`` profile runs float32 only.
"""

from __future__ import annotations

import math
import random
from typing import Mapping

from perfmodel.ops.base import (DTYPE_BYTES, OpDef, check_profile, log_uniform_ints,
                                sample_configs, torch_dtype)
from perfmodel.ops.conv import out_size

#: Configs per profile. ``smoke`` keeps the four tiny float32 configs a fit needs
#: to score an op (:data:`perfmodel.fit.fitting.MIN_CONFIGS`).
_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16, "full": 500}
#: Smallest and largest input plus output elements of one call, per profile.
_MIN_ELEMS = {"smoke": 64, "quick": 1 << 12, "gpu": 1 << 16, "full": 1 << 12}
_MAX_ELEMS = {"smoke": 1 << 12, "quick": 1 << 21, "gpu": 1 << 27, "full": 1 << 27}
#: Largest batch, channel count and image side drawn, per profile.
_MAX_BATCH = {"smoke": 2, "quick": 32, "gpu": 256, "full": 256}
_MAX_CHANNELS = {"smoke": 8, "quick": 512, "gpu": 2048, "full": 2048}
_MAX_SIDE = {"smoke": 16, "quick": 128, "gpu": 256, "full": 512}
#: Share of configs with a square image, and of channel counts that are multiples of 8.
_SQUARE = 0.9
_ALIGNED = 0.75
#: Bytes of an int64 index (max pooling's argmax indices).
_INDEX_BYTES = 8


def _square(values) -> int | None:
    """The one int of an int-list argument that is the same in every dim
    (``[3, 3]`` or ``[3]``: 3), else None."""
    if not isinstance(values, list) or not values:
        return None
    if any(not isinstance(v, int) or isinstance(v, bool) or v != values[0] for v in values):
        return None
    return values[0]


def _int_lists(node) -> list[list]:
    """The int-list arguments of a trace node, in order (an empty list stays:
    ``max_pool2d``'s default stride is one)."""
    return [v for t, v in zip(node.input_types, node.input_values)
            if str(t).startswith(("GenericList[Int", "GenericList[]")) and isinstance(v, list)]


class _Pool(OpDef):
    family = "pooling"
    directions = ("forward", "backward")
    dtypes = ("float32", "bfloat16")
    #: Spatial params of the input, after ``N`` and ``C``.
    spatial: tuple[str, ...] = ("H", "W")

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(check_profile(profile))
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases

    # -- shape space -------------------------------------------------------
    def valid(self, params: Mapping[str, int]) -> bool:
        """Whether the op can run ``params``; all positive configs by default."""
        return True

    def _draw_window(self, rng: random.Random, profile: str, n: int) -> dict[str, int]:
        """The op's own params of the ``n``-th config (kernel, output size, ...)."""
        return {}

    def _draw(self, rng: random.Random, profile: str, n: int) -> dict[str, int]:
        """One candidate config: batch and channels drawn log-uniformly (channels
        mostly multiples of 8, as CNN widths are), the image side on its own."""
        m = 8 if rng.random() < _ALIGNED and _MAX_CHANNELS[profile] >= 16 else 1
        cfg = {"N": log_uniform_ints(rng, 1, _MAX_BATCH[profile]),
               "C": log_uniform_ints(rng, m, _MAX_CHANNELS[profile], multiple=m)}
        side = log_uniform_ints(rng, 4, _MAX_SIDE[profile])
        square = rng.random() < _SQUARE
        for s in ("H", "W"):
            aspect = 1.0 if square else 2 ** rng.uniform(-1, 1)
            cfg[s] = max(2, min(_MAX_SIDE[profile], round(side * aspect)))
        cfg.update(self._draw_window(rng, profile, n))
        return cfg

    def generate_configs(self, profile):
        """Distinct configs (seeded) whose input plus output elements lie within
        the profile's limits, smallest first."""
        configs = sample_configs(
            f"{self.name}-{profile}", self.params, _CONFIGS[profile],
            lambda rng, n: self._draw(rng, profile, n),
            lambda c: self.valid(c) and
            _MIN_ELEMS[profile] <= sum(self._sizes(c)) <= _MAX_ELEMS[profile])
        return sorted(configs, key=lambda c: sum(self._sizes(c)))

    # -- running -----------------------------------------------------------
    def _forward(self, x, params):
        """The op on input ``x``."""
        raise NotImplementedError

    #: Whether the forward runner's input requires a gradient: training's path,
    #: where a CPU kernel differs from inference's (``max_pool2d``).
    forward_needs_grad = False

    def make_runner(self, params, dtype, direction, device):
        import torch

        if not self.valid(params):
            raise ValueError(f"{self.name} cannot run {dict(params)}")
        grad = direction == "backward" or self.forward_needs_grad
        x = torch.randn(params["N"], params["C"], *(params[s] for s in self.spatial),
                        dtype=torch_dtype(dtype), device=device, requires_grad=grad)
        if direction == "forward":
            return lambda: self._forward(x, params)
        out = self._forward(x, params)
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (x,), grad_out, retain_graph=True)

    # -- analytic work -----------------------------------------------------
    def _out_hw(self, p: Mapping[str, int]) -> tuple[int, ...]:
        """Output size per spatial dim (height and width)."""
        raise NotImplementedError

    def _sizes(self, p: Mapping[str, int]) -> tuple[float, float]:
        """(input, output elements) of one call."""
        nc = p["N"] * p["C"]
        return (float(nc * math.prod(p[s] for s in self.spatial)),
                float(nc * math.prod(self._out_hw(p))))

    # -- trace mapping -----------------------------------------------------
    def params_from_shapes(self, input_shapes):
        """``N``, ``C`` and the :attr:`spatial` sizes (``H`` and ``W`` of a 4-D
        input) from ``[input, ...]``; the op's other params are scalar arguments,
        absent from shapes: the caller adds them from the node's arguments. None
        for another rank."""
        names = ("N", "C", *self.spatial)
        if not input_shapes or len(input_shapes[0]) != len(names):
            return None
        x = list(input_shapes[0])
        if not all(isinstance(v, int) and v >= 1 for v in x):
            return None
        return dict(zip(names, x))


class _WindowPool(_Pool):
    """A pool over R×R windows, ``STRIDE`` apart, on an input padded by ``PAD``."""

    #: R, STRIDE and PAD are not monotone: a larger kernel or stride shrinks the output.
    monotone_params = ("N", "C", "H", "W")
    #: (R, STRIDE, PAD) cycled through, as the networks that use the pool set them.
    windows: tuple[tuple[int, int, int], ...] = ()

    def _draw_window(self, rng, profile, n):
        r, stride, pad = self.windows[n % len(self.windows)]
        return {"R": r, "STRIDE": stride, "PAD": pad}

    def valid(self, params):
        """PyTorch's limits: padding at most half the kernel, and a window
        that fits the padded input."""
        r, pad = params["R"], params["PAD"]
        return 2 * pad <= r and all(params[s] + 2 * pad >= r for s in self.spatial)

    def _out_hw(self, p):
        return tuple(out_size(p[s], p["R"], p["STRIDE"], p["PAD"], 1) for s in self.spatial)

    def params_from_node(self, node):
        """The shapes' params plus ``R``, ``STRIDE`` (the kernel when the stride
        list is empty, PyTorch's default) and ``PAD``: the first three int-list
        arguments. None when one differs between H and W, or for a dilated
        window. ``ceil_mode`` is not read: such a pool is priced as its
        floor-mode config (at most one output row and column fewer)."""
        params = self.params_from_shapes(node.input_shapes)
        lists = _int_lists(node)
        if params is None or len(lists) < 3:
            return None
        r = _square(lists[0])
        stride = r if lists[1] == [] else _square(lists[1])
        pad = _square(lists[2])
        if len(lists) > 3 and _square(lists[3]) != 1:  # max pooling's dilation
            return None
        if r is None or stride is None or pad is None or min(r, stride) < 1 or pad < 0:
            return None
        params.update(R=r, STRIDE=stride, PAD=pad)
        return params if self.valid(params) else None


class MaxPool2d(_WindowPool):
    """``F.max_pool2d(x, R, STRIDE, PAD)`` in training: the input requires a
    gradient, so the kernel also writes the argmax indices the backward reads
    (on a CPU, inference runs another kernel, without them)."""

    name = "max_pool2d"
    params = ("N", "C", "H", "W", "R", "STRIDE", "PAD")
    trace_names = ("aten::max_pool2d", "aten::max_pool2d_with_indices")
    #: ResNet's stem, VGG and U-Net, SPP-style stride-1 pools.
    windows = ((3, 2, 1), (2, 2, 0), (3, 1, 1), (3, 2, 0), (5, 1, 2))
    forward_needs_grad = True

    def _forward(self, x, params):
        import torch.nn.functional as F

        return F.max_pool2d(x, params["R"], params["STRIDE"], params["PAD"])

    def flops(self, params, direction):
        """FLOP: forward, one comparison per window element (R² per output
        element); backward, one add per output element into grad_input. Both
        add one per input element (reading it; zero-filling grad_input), which
        keeps the count growing in the input size when the output is pinned."""
        inp, out = self._sizes(params)
        return (out * params["R"] ** 2 if direction == "forward" else out) + inp

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y and the int64 indices; backward reads
        grad_output and the indices and writes grad_input."""
        inp, out = self._sizes(params)
        return DTYPE_BYTES[dtype] * (inp + out) + _INDEX_BYTES * out


class AvgPool2d(_WindowPool):
    """``F.avg_pool2d(x, R, STRIDE, PAD)`` (padding counted in the average)."""

    name = "avg_pool2d"
    params = ("N", "C", "H", "W", "R", "STRIDE", "PAD")
    trace_names = ("aten::avg_pool2d",)
    #: DenseNet's transitions, Inception's stride-1 branches, strided downsampling.
    windows = ((2, 2, 0), (3, 1, 1), (3, 2, 1), (2, 2, 0), (3, 2, 0))

    def _forward(self, x, params):
        import torch.nn.functional as F

        return F.avg_pool2d(x, params["R"], params["STRIDE"], params["PAD"])

    def flops(self, params, direction):
        """FLOP: forward, one add per window element (R² per output element) and
        a divide per output element; backward, R² adds per grad_output element.
        Both add one per input element (reading it; zero-filling grad_input)."""
        inp, out = self._sizes(params)
        per_out = params["R"] ** 2 + (direction == "forward")
        return out * per_out + inp

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y; backward reads grad_output and
        writes grad_input."""
        inp, out = self._sizes(params)
        return DTYPE_BYTES[dtype] * (inp + out)


#: Largest signal length drawn by the 1-D pools, per profile.
_MAX_LENGTH = {"smoke": 64, "quick": 16384, "gpu": 65536, "full": 65536}


class _WindowPool1d(_WindowPool):
    """A pool over windows of ``R`` elements, ``STRIDE`` apart, on an N×C×L
    input padded by ``PAD``. A window entry of R = 0 is a global pool: R and
    STRIDE are the whole length (as ``F.avg_pool1d(x, x.shape[-1])`` is)."""

    params = ("N", "C", "L", "R", "STRIDE", "PAD")
    monotone_params = ("N", "C", "L")
    spatial = ("L",)

    def _draw(self, rng, profile, n):
        """Batch and channels as the 2-D pools draw them; the length log-uniform."""
        m = 8 if rng.random() < _ALIGNED and _MAX_CHANNELS[profile] >= 16 else 1
        cfg = {"N": log_uniform_ints(rng, 1, _MAX_BATCH[profile]),
               "C": log_uniform_ints(rng, m, _MAX_CHANNELS[profile], multiple=m),
               "L": log_uniform_ints(rng, 8, _MAX_LENGTH[profile])}
        r, stride, pad = self.windows[n % len(self.windows)]
        if r == 0:
            r = stride = cfg["L"]
        cfg.update(R=r, STRIDE=stride, PAD=pad)
        return cfg


class MaxPool1d(_WindowPool1d):
    """``F.max_pool1d(x, R, STRIDE, PAD)`` in training (the input requires a
    gradient; on a CPU it runs as the 2-D pool with indices over a 1-high
    image, and its backward is ``MaxPool2DWithIndicesBackward0``)."""

    name = "max_pool1d"
    trace_names = ("aten::max_pool1d", "aten::max_pool1d_with_indices")
    #: Audio and 1-D CNNs: M5-style /4 pools, halvings, stride-1 smoothing.
    windows = ((4, 4, 0), (2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 2, 0), (5, 1, 2))
    forward_needs_grad = True

    def _forward(self, x, params):
        import torch.nn.functional as F

        return F.max_pool1d(x, params["R"], params["STRIDE"], params["PAD"])

    flops = MaxPool2d.flops
    bytes_moved = MaxPool2d.bytes_moved


class AvgPool1d(_WindowPool1d):
    """``F.avg_pool1d(x, R, STRIDE, PAD)`` (padding counted in the average),
    global (R = L) in a third of the configs, as a 1-D CNN's head pools."""

    name = "avg_pool1d"
    trace_names = ("aten::avg_pool1d",)
    windows = ((0, 0, 0), (2, 2, 0), (3, 1, 1), (0, 0, 0), (4, 4, 0), (3, 2, 1))

    def _forward(self, x, params):
        import torch.nn.functional as F

        return F.avg_pool1d(x, params["R"], params["STRIDE"], params["PAD"])

    flops = AvgPool2d.flops
    bytes_moved = AvgPool2d.bytes_moved


class AdaptiveAvgPool2d(_Pool):
    """``F.adaptive_avg_pool2d(x, OUT)``: an OUT×OUT output, each element the
    average of its window of the input. ``OUT`` = 1 runs as ``x.mean((-2, -1))``
    (its trace node holds an ``aten::mean``, its backward is ``MeanBackward1``)."""

    name = "adaptive_avg_pool2d"
    params = ("N", "C", "H", "W", "OUT")
    trace_names = ("aten::adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d")
    #: Output sides drawn: global pooling most often, then the heads of
    #: AlexNet (6), VGG (7), PSPNet's pyramid (1, 2, 3, 6).
    outs = (1, 1, 1, 2, 3, 4, 6, 7)

    def _draw_window(self, rng, profile, n):
        return {"OUT": self.outs[n % len(self.outs)]}

    def valid(self, params):
        """Configs are drawn with an input at least as large as the output
        (the op itself also runs a larger output)."""
        return min(params["H"], params["W"]) >= params["OUT"]

    extra_feature_names = ("global",)

    def extra_features(self, params, dtype, direction):
        """Whether ``OUT`` = 1: global pooling runs as a ``mean``, another kernel."""
        return [float(params["OUT"] == 1)]

    def _forward(self, x, params):
        import torch.nn.functional as F

        return F.adaptive_avg_pool2d(x, params["OUT"])

    def _out_hw(self, p):
        return p["OUT"], p["OUT"]

    def flops(self, params, direction):
        """FLOP: one add per window element, in either direction (the windows
        along a dim each span at most H/OUT + 1 rows: at most (H + OUT)(W + OUT)
        per channel), and one divide per output element."""
        p = params
        _, out = self._sizes(p)
        return float(p["N"] * p["C"] * (p["H"] + p["OUT"]) * (p["W"] + p["OUT"])) + out

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y; backward reads grad_output and
        writes grad_input."""
        return DTYPE_BYTES[dtype] * sum(self._sizes(params))

    def params_from_node(self, node):
        """The shapes' params plus ``OUT``, the output size argument (the same
        in both dims; None otherwise)."""
        params = self.params_from_shapes(node.input_shapes)
        lists = _int_lists(node)
        if params is None or not lists:
            return None
        out = _square(lists[0])
        if out is None or out < 1:
            return None
        return {**params, "OUT": out}


class _Upsample(_Pool):
    """``F.interpolate(x, size=(OH, OW), mode=...)``."""

    params = ("N", "C", "H", "W", "OH", "OW")
    #: Interpolation mode passed to ``F.interpolate``.
    mode = ""
    #: Integer scale factors drawn (as ``scale_factor=2`` is most common), and
    #: the share of configs that draw an arbitrary output size instead.
    scales = (2, 2, 2, 4)
    _ANY_SIZE = 0.25

    def _draw(self, rng, profile, n):
        cfg = super()._draw(rng, profile, n)
        if rng.random() < self._ANY_SIZE:
            ratio = 2 ** rng.uniform(-1, 3)
            cfg["OH"], cfg["OW"] = (max(1, round(cfg[s] * ratio)) for s in ("H", "W"))
        else:
            scale = rng.choice(self.scales)
            cfg["OH"], cfg["OW"] = cfg["H"] * scale, cfg["W"] * scale
        return cfg

    def _forward(self, x, params):
        import torch.nn.functional as F

        kw = {"align_corners": False} if self.mode == "bilinear" else {}
        return F.interpolate(x, size=(params["OH"], params["OW"]), mode=self.mode, **kw)

    def _out_hw(self, p):
        return p["OH"], p["OW"]

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads x and writes y; backward reads grad_output and
        writes grad_input."""
        return DTYPE_BYTES[dtype] * sum(self._sizes(params))

    def params_from_node(self, node):
        """The shapes' params plus ``OH`` and ``OW``: the node's output shape,
        or its ``output_size`` argument, or its input size times its scale
        factors (floored, as PyTorch does). Both overloads of the op (with
        ``output_size`` or ``scale_factors``) have the same name in a trace."""
        params = self.params_from_shapes(node.input_shapes)
        if params is None:
            return None
        shapes = node.outputs.get("shapes", [])
        out = list(shapes[0]) if shapes and isinstance(shapes[0], list) else []
        if len(out) == 4 and out[:2] == [params["N"], params["C"]]:
            size = out[2:]
        else:
            values = node.input_values[1:3]
            size = next((v for v in values if isinstance(v, list) and len(v) == 2
                         and all(isinstance(i, int) for i in v)), None)
            scales = next((v for v in values if isinstance(v, list) and len(v) == 2
                           and all(isinstance(s, float) for s in v)), None)
            if size is None and scales is not None:
                size = [math.floor(params[s] * f) for s, f in zip(("H", "W"), scales)]
        if not size or min(size) < 1:
            return None
        return {**params, "OH": int(size[0]), "OW": int(size[1])}


class UpsampleNearest2d(_Upsample):
    """``F.interpolate(x, size=(OH, OW), mode="nearest")``."""

    name = "upsample_nearest2d"
    trace_names = ("aten::upsample_nearest2d",)
    mode = "nearest"

    def flops(self, params, direction):
        """FLOP: none forward (a gather); backward, one add per grad_output
        element into grad_input and one per input element (zero-filling
        grad_input first)."""
        if direction == "forward":
            return 0.0
        return sum(self._sizes(params))


class UpsampleBilinear2d(_Upsample):
    """``F.interpolate(x, size=(OH, OW), mode="bilinear", align_corners=False)``."""

    name = "upsample_bilinear2d"
    trace_names = ("aten::upsample_bilinear2d",)
    mode = "bilinear"

    def flops(self, params, direction):
        """FLOP: 4 multiply-adds per output element (the 2×2 neighbours; in the
        backward, scattered into grad_input), plus one per input element (read;
        zero-filled in the backward), which keeps the count growing in the
        input size when the output size is pinned."""
        inp, out = self._sizes(params)
        return 8.0 * out + inp


OPS = (MaxPool2d(), AvgPool2d(), MaxPool1d(), AvgPool1d(), AdaptiveAvgPool2d(), UpsampleNearest2d(),
       UpsampleBilinear2d())
