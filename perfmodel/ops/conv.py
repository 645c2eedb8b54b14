"""Convolution family: ``conv2d`` and ``conv1d``, and the transposed
``conv_transpose2d`` and ``conv_transpose1d`` (forward and backward).

Config params: ``N`` batch, ``C`` input channels, spatial size (``H``, ``W``
or ``L``), ``K`` output channels, ``R`` kernel size (square for 2-D),
``STRIDE``, ``PAD``, ``DIL`` (dilation), ``GROUPS`` (``GROUPS == C == K``
is a depthwise conv), ``GRAD_INPUT`` (0 when the backward computes no
input gradient, as a network's first layer does; the forward ignores it) and
``BIAS`` (1 with a bias, 0 without: CNN layers followed by a norm have none, and
on a GPU a bias can change the kernel a library picks: a 1x1 conv of 64 to 256
channels at 56x56, batch 64, took about 3x as long with one; see
docs/journal/2026-11-27-gpu-campaign-h200.md). ``BIAS`` came after fits were
saved (:attr:`~perfmodel.ops.base.OpDef.added_params`): those fits price every
conv as with a bias.
Generated configs always have ``C`` and ``K`` divisible by ``GROUPS`` and an
output size of at least 1.

The transposed convs add ``OUTPAD`` (``output_padding``); their weight is
C×(K/GROUPS)×R^d. A trace shows them as ``aten::conv_transpose<n>d`` over the
same ``aten::convolution`` node that a conv runs, with its ``transposed`` flag
set (:func:`transposed_flag`), and the same ``ConvolutionBackward0``: the convs
refuse a transposed node, and the transposed ones a plain one.
"""

from __future__ import annotations

import math
import random
from typing import Mapping

from perfmodel.ops.base import (DTYPE_BYTES, GRAD_INPUT_EVERY, OpDef, check_profile,
                                log_uniform_ints, sample_configs, torch_dtype)

#: Configs per profile (``conv2d``; ``conv1d``, which no CNN workload uses, takes
#: :data:`_CONV1D_SHARE` of them) and the largest forward FLOP count of one call.
_CONFIGS = {"smoke": 4, "quick": 120, "gpu": 120, "full": 2000}
_CONV1D_SHARE = 0.4
_MAX_FLOPS = {"smoke": 2e6, "quick": 4e8, "gpu": 2e10, "full": 2e10}
#: Largest channel count and spatial size drawn, per profile.
_MAX_CHANNELS = {"smoke": 16, "quick": 256, "gpu": 1024, "full": 2048}
_MAX_BATCH = {"smoke": 2, "quick": 16, "gpu": 64, "full": 128}
#: Smallest and largest input drawn (elements), per profile.
_MIN_INPUT_ELEMENTS = {"smoke": 64, "quick": 8192, "gpu": 8192, "full": 8192}
_MAX_INPUT_ELEMENTS = {"smoke": 4096, "quick": 1 << 21, "gpu": 1 << 26, "full": 1 << 26}
#: Kinds of conv cycled through, weighted as in ResNet- and MobileNet-style nets:
#: mostly dense (3x3 and larger) and pointwise (1x1), then depthwise and grouped.
_KINDS = ("dense", "pointwise", "depthwise", "dense", "pointwise", "grouped")
#: Share of configs whose spatial dims are all equal, as in CNNs' square images,
#: of dilated ones, and of unpadded ones (the rest keep the size: "same" padding).
_SQUARE = 0.9
_DILATED = 0.125
_UNPADDED = 0.15
#: Share of dense and depthwise configs whose channel counts are multiples of
#: :data:`_ALIGN`, as CNN widths are (16, 24, 32, 64, ...): CPU conv kernels block
#: channels by the SIMD width and take a slower path for a ragged count (measured:
#: docs/journal/2026-11-23-e2e-series.md), so the sweep needs both kinds to learn
#: the difference.
_ALIGNED = 0.5
_ALIGN = 8


#: Stem configs per profile, beside the configs above: a network's first layer,
#: on the raw input. Few channels in (an image's 3, a signal's 1), no input
#: gradient, a large input and often a kernel as wide as its stride (a ViT's
#: patches, an audio net's framing). The draws above never reach them (their
#: input channels start at 3, kernels stop at 7), so without these the fit
#: extrapolates on every CNN's first conv. Drawn from their own seed, so the
#: configs above stay as they were.
_STEM_CONFIGS = {"smoke": 0, "quick": 12, "gpu": 12, "full": 100}
#: (kernel, stride) of stems, per spatial rank: 3x3 and 7x7 stems (VGG, ResNet),
#: AlexNet's 11/4, patchify stems (ConvNeXt's 4/4, ViT's 16/16 and 8/8); in 1-D,
#: audio front ends (wav2vec 2.0's 10/5, M5's 80/16) and 1-D CNNs' 3, 7 and 11.
_STEM_WINDOWS = {2: ((3, 1), (3, 2), (7, 2), (11, 4), (4, 4), (16, 16), (8, 8), (5, 2)),
                 1: ((3, 1), (7, 2), (11, 4), (10, 5), (80, 16), (16, 8), (5, 1), (3, 2))}
#: Input channels of stems, per spatial rank: RGB images mostly, some grayscale;
#: mono signals mostly in 1-D.
_STEM_CHANNELS = {2: (3, 3, 3, 1, 1, 4), 1: (1, 1, 1, 2, 3, 4)}
#: A stem's input side reaches this multiple of the profile's largest side.
_STEM_SIDE_FACTOR = {2: 2, 1: 4}


def out_size(size: int, r: int, stride: int, pad: int, dil: int) -> int:
    """Output length of one spatial dim (elements), clamped to at least 1 so
    the work formulas accept any positive ints."""
    return max(1, (size + 2 * pad - dil * (r - 1) - 1) // stride + 1)


def pow2_alignment(value: int, cap: int = 32) -> int:
    """The largest power of two, up to ``cap``, that divides ``value`` (1 for an
    odd value): a channel count's alignment to the kernels' SIMD blocking."""
    alignment = 1
    while alignment < cap and value % (2 * alignment) == 0:
        alignment *= 2
    return alignment


def _bias(profile: str, n: int) -> int:
    """``BIAS`` of the ``n``-th accepted config: every other one has none in the
    ``gpu`` profile; the others keep the bias their configs always had (drawn
    without touching the random stream, so their shapes stay as they were)."""
    return n % 2 if profile == "gpu" else 1


#: Where the ``transposed`` flag is among the arguments of the generic conv nodes.
_TRANSPOSED_ARG = {"aten::convolution": 6, "aten::_convolution": 6,
                   "aten::convolution_backward": 7}


def transposed_flag(node) -> bool | None:
    """The ``transposed`` argument of an ``aten::convolution``, ``aten::_convolution``
    or ``aten::convolution_backward`` node; None for other nodes (their name says
    which kind they are) or when the trace lacks it."""
    index = _TRANSPOSED_ARG.get(node.name)
    values = node.input_values
    if index is None or len(values) <= index or not isinstance(values[index], bool):
        return None
    return values[index]


def _valid(cfg: Mapping[str, int], spatial: tuple[str, ...]) -> bool:
    g = cfg["GROUPS"]
    if cfg["C"] % g or cfg["K"] % g:
        return False
    return all(cfg[s] + 2 * cfg["PAD"] - cfg["DIL"] * (cfg["R"] - 1) - 1 >= 0 for s in spatial)



def _conv_call(conv, x, w, b, kw: dict, grad: bool):
    """The callable to time: ``conv(x, w, b, **kw)``, or autograd's backward of it
    (gradients of the inputs that require one) when ``grad``."""
    import torch

    if not grad:
        return lambda: conv(x, w, b, **kw)
    out = conv(x, w, b, **kw)
    grad_out = torch.randn_like(out)
    wrt = tuple(v for v in (x, w, b) if v is not None and v.requires_grad)
    return lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True)


def _draw_spatial(rng, spatial: tuple[str, ...], low: int, top: int, smallest: int
                  ) -> dict[str, int]:
    """The spatial sizes of one drawn config: a side log-uniform in [low, top], square
    with probability ``_SQUARE``, else each dim stretched by up to 2^±1.5, clamped to
    [smallest, top]."""
    side = log_uniform_ints(rng, low, top)
    square = rng.random() < _SQUARE
    out = {}
    for s in spatial:
        aspect = 1.0 if square else 2 ** rng.uniform(-1.5, 1.5)
        out[s] = max(smallest, min(top, round(side * aspect)))
    return out

class _Conv(OpDef):
    family = "conv"
    directions = ("forward", "backward")
    #: measured before GRAD_INPUT and BIAS existed: the input always needed a
    #: gradient, and every conv had a bias
    param_defaults = {"GRAD_INPUT": 1, "BIAS": 1}
    added_params = ("BIAS",)
    dtypes = ("float32", "bfloat16")
    #: Spatial param names, e.g. ``("H", "W")``.
    spatial: tuple[str, ...] = ()
    #: Largest spatial size drawn, per profile.
    max_spatial: dict[str, int] = {}

    # -- shape space -------------------------------------------------------
    def generate_configs(self, profile):
        count = _CONFIGS[profile]
        if len(self.spatial) == 1:
            count = max(4, round(count * _CONV1D_SHARE))

        def fits(c):
            return (_valid(c, self.spatial) and self.flops(c, "forward") <= _MAX_FLOPS[profile]
                    and _MIN_INPUT_ELEMENTS[profile] <= self._sizes(c)[0]
                    <= _MAX_INPUT_ELEMENTS[profile])

        configs = sample_configs(
            f"{self.name}-{profile}", self.params, count,
            lambda rng, n: {**self._draw(rng, profile, _KINDS[n % len(_KINDS)]),
                            "GRAD_INPUT": int(rng.random() >= 1 / GRAD_INPUT_EVERY),
                            "BIAS": _bias(profile, n)},
            fits)
        seen = {tuple(c[p] for p in self.params) for c in configs}
        stems = [c for c in sample_configs(f"{self.name}-{profile}-stem", self.params,
                                           _STEM_CONFIGS[profile],
                                           lambda rng, n: self._draw_stem(rng, profile, n), fits)
                 if tuple(c[p] for p in self.params) not in seen]
        return sorted(configs + stems, key=lambda c: self.flops(c, "forward"))

    def _draw_stem(self, rng: random.Random, profile: str, n: int) -> dict[str, int]:
        """The ``n``-th candidate first-layer config (see :data:`_STEM_CONFIGS`):
        few input channels, no input gradient, the stems' kernels and strides in
        turn, "same" padding for an odd kernel and none for an even one (patchify
        stems and audio front ends)."""
        rank = len(self.spatial)
        r, stride = _STEM_WINDOWS[rank][n % len(_STEM_WINDOWS[rank])]
        top = self.max_spatial[profile] * _STEM_SIDE_FACTOR[rank]
        cfg = {"N": log_uniform_ints(rng, 1, _MAX_BATCH[profile]),
               "C": rng.choice(_STEM_CHANNELS[rank]),
               "K": log_uniform_ints(rng, 8, min(_MAX_CHANNELS[profile], 512), multiple=8),
               "R": r, "STRIDE": stride, "PAD": r // 2 if r % 2 else 0, "DIL": 1,
               "GROUPS": 1, "GRAD_INPUT": 0, "BIAS": int(rng.random() < 0.5)}
        cfg.update(_draw_spatial(rng, self.spatial, max(r, 16), top, r))
        return cfg

    def _draw(self, rng: random.Random, profile: str, kind: str) -> dict[str, int]:
        """One candidate config of ``kind`` (dense, pointwise, depthwise or grouped),
        drawn as CNN layers are built: odd kernels (3x3 most often), strides 1
        and 2, "same" padding, seldom dilated."""
        top = _MAX_CHANNELS[profile]
        m = _ALIGN if rng.random() < _ALIGNED else 1
        if kind == "depthwise":
            c = k = g = log_uniform_ints(rng, max(4, m), top, multiple=m)
        elif kind == "grouped":
            g = rng.choice((2, 4, 8, 32))
            c = g * log_uniform_ints(rng, 1, max(1, top // g))
            k = g * log_uniform_ints(rng, 1, max(1, top // g))
        else:
            g = 1
            c = log_uniform_ints(rng, max(3, m), top, multiple=m)
            k = log_uniform_ints(rng, max(4, m), top, multiple=m)
        r = 1 if kind == "pointwise" else rng.choice((3, 3, 3, 5, 7) if kind == "depthwise"
                                                     else (1, 3, 3, 3, 5, 7))
        dil = 2 if r > 1 and rng.random() < _DILATED else 1
        cfg = {"N": log_uniform_ints(rng, 1, _MAX_BATCH[profile]), "C": c, "K": k, "R": r,
               "STRIDE": rng.choice((1, 1, 2)),
               "PAD": 0 if rng.random() < _UNPADDED else dil * (r // 2),
               "DIL": dil, "GROUPS": g}
        # the image side is drawn on its own, log-uniformly: the input-size limits
        # then reject wide layers on large images, so the accepted configs pair many
        # channels with small images and few with large ones, as CNN stages do
        cfg.update(_draw_spatial(rng, self.spatial, 4, self.max_spatial[profile], 2))
        return cfg

    extra_feature_names = ("depthwise", "pointwise", "output_elements", "channels_per_group",
                           "input_channel_alignment", "output_channel_alignment")

    def extra_features(self, params, dtype, direction):
        """CPU conv kernels differ by kind: depthwise (one channel per group) is
        memory-bound, 1×1 runs as a GEMM. Flags for both, the output elements,
        the input channels per group, and the alignments of ``C`` and ``K``
        (:func:`pow2_alignment`): kernels that block channels by the SIMD width
        run a ragged count on a slower path."""
        _, _, out, _ = self._sizes(params)
        return [float(params["GROUPS"] == params["C"] and params["C"] > 1),
                float(params["R"] == 1), out, params["C"] / params["GROUPS"],
                float(pow2_alignment(params["C"])), float(pow2_alignment(params["K"]))]

    # -- running -----------------------------------------------------------
    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        grad = direction == "backward"
        p = params
        x = torch.randn(p["N"], p["C"], *(p[s] for s in self.spatial),
                        requires_grad=grad and p["GRAD_INPUT"] == 1, **t)
        w = torch.randn(p["K"], p["C"] // p["GROUPS"], *(p["R"] for _ in self.spatial),
                        requires_grad=grad, **t)
        b = torch.randn(p["K"], requires_grad=grad, **t) if p.get("BIAS", 1) else None
        conv = torch.nn.functional.conv2d if len(self.spatial) == 2 else torch.nn.functional.conv1d
        kw = dict(stride=p["STRIDE"], padding=p["PAD"], dilation=p["DIL"], groups=p["GROUPS"])
        return _conv_call(conv, x, w, b, kw, grad)

    # -- analytic work -----------------------------------------------------
    def _sizes(self, p: Mapping[str, int]) -> tuple[float, float, float, float]:
        """(input, weight, output elements, multiply-accumulates) of one call.

        Channels per group are ``C / GROUPS`` as a real number, so any positive
        ints are accepted; the output size per dim is clamped to at least 1.
        """
        outs = math.prod(out_size(p[s], p["R"], p["STRIDE"], p["PAD"], p["DIL"])
                         for s in self.spatial)
        c_per_group = p["C"] / p["GROUPS"]
        kernel = p["R"] ** len(self.spatial)
        inp = float(p["N"] * p["C"] * math.prod(p[s] for s in self.spatial))
        weight = p["K"] * c_per_group * kernel
        out = float(p["N"] * p["K"] * outs)
        return inp, weight, out, out * c_per_group * kernel

    def flops(self, params, direction):
        """FLOP of one call: 2 per multiply-accumulate (forward: the conv;
        backward: grad_weight and, with ``GRAD_INPUT``, grad_input, each as
        large as the forward),
        1 per output element for the bias (its sum in backward) when ``BIAS``, and 1 per
        input element for reading/laying out the input. The last is tiny for
        real convs but keeps the count strictly growing in the spatial size
        when a large stride pins the output size."""
        inp, _, out, macs = self._sizes(params)
        convs = 1 if direction == "forward" else 1 + params["GRAD_INPUT"]
        return 2.0 * convs * macs + out * params.get("BIAS", 1) + inp

    def bytes_moved(self, params, dtype, direction):
        """Bytes of one call, each tensor touched once. Forward reads input,
        weight and bias (with ``BIAS``) and writes the output; backward reads
        grad_output, input and weight and writes grad_input (with ``GRAD_INPUT``),
        grad_weight and grad_bias (with ``BIAS``)."""
        inp, weight, out, _ = self._sizes(params)
        k = params["K"] * params.get("BIAS", 1)
        if direction == "forward":
            elements = inp + weight + k + out
        else:
            elements = out + (1 + params["GRAD_INPUT"]) * inp + 2 * weight + k
        return DTYPE_BYTES[dtype] * elements

    # -- trace mapping -----------------------------------------------------
    def params_from_shapes(self, input_shapes):
        """Params the shapes ``[input, weight, bias?, ...]`` determine: ``N``,
        ``C``, spatial sizes, ``K``, ``R``, ``GROUPS`` (``C / weight[1]``) and
        ``BIAS`` (whether the third input is a bias of ``K``; a missing bias
        shows as an empty shape).

        ``STRIDE``, ``PAD`` and ``DIL`` are scalar arguments, absent from
        shapes, so they are *not* in the result: the caller must add them from
        the node's concrete arguments. ``None`` for another rank, a
        non-square kernel or inconsistent channel counts.
        """
        rank = len(self.spatial) + 2
        if len(input_shapes) < 2:
            return None
        x, w = list(input_shapes[0]), list(input_shapes[1])
        if len(x) != rank or len(w) != rank or min(x + w) < 1:
            return None
        kernel = w[2:]
        if any(r != kernel[0] for r in kernel):
            return None
        n, c, k, c_per_group = x[0], x[1], w[0], w[1]
        if c % c_per_group:
            return None
        groups = c // c_per_group
        if k % groups:
            return None
        if len(input_shapes) > 2 and list(input_shapes[2]) not in ([], [k]):
            return None
        bias = int(len(input_shapes) > 2 and list(input_shapes[2]) == [k])
        out = {"N": n, "C": c, "K": k, "R": kernel[0], "GROUPS": groups, "GRAD_INPUT": 1,
               "BIAS": bias}
        out.update(zip(self.spatial, x[2:]))
        return out

    def params_from_node(self, node):
        """The shapes' params plus ``STRIDE``, ``PAD`` and ``DIL``: the first
        three int-list arguments (``aten::conv<n>d`` and ``aten::convolution``
        order). None when one is not the same in every spatial dim, when the
        padding is a string (``"same"``), or for a transposed convolution (the
        ``transposed`` flag of ``aten::convolution``: see :class:`ConvTranspose2d`)."""
        params = self.params_from_shapes(node.input_shapes)
        if params is None or transposed_flag(node):
            return None
        lists = [v for t, v in zip(node.input_types, node.input_values)
                 if str(t).startswith("GenericList[Int") and isinstance(v, list)]
        if len(lists) < 3:
            return None
        scalars = []
        for values in lists[:3]:
            if not values or any(not isinstance(v, int) or v != values[0] for v in values):
                return None
            scalars.append(values[0])
        return {**params, **dict(zip(("STRIDE", "PAD", "DIL"), scalars))}

    def backward_params(self, params, node):
        """``GRAD_INPUT`` from the ``output_mask`` (its last argument, three
        bools: input, weight, bias) of the node's ``aten::convolution_backward``."""
        for n in node.walk():
            if n.name == "aten::convolution_backward" and n.input_values:
                mask = n.input_values[-1]
                if isinstance(mask, list) and mask and isinstance(mask[0], bool):
                    return {**params, "GRAD_INPUT": int(mask[0])}
        return dict(params)


class Conv2d(_Conv):
    """``torch.nn.functional.conv2d`` on an N×C×H×W input with a K×(C/GROUPS)×R×R weight."""

    name = "conv2d"
    params = ("N", "C", "H", "W", "K", "R", "STRIDE", "PAD", "DIL", "GROUPS", "GRAD_INPUT",
              "BIAS")
    #: R is not monotone: with a fixed PAD a larger kernel shrinks the output.
    monotone_params = ("N", "C", "H", "W", "K")
    spatial = ("H", "W")
    max_spatial = {"smoke": 12, "quick": 112, "gpu": 224, "full": 512}
    trace_names = ("aten::conv2d", "aten::convolution", "aten::_convolution",
                   "aten::mkldnn_convolution", "aten::cudnn_convolution",
                   "aten::convolution_backward")


class Conv1d(_Conv):
    """``torch.nn.functional.conv1d`` on an N×C×L input with a K×(C/GROUPS)×R weight."""

    name = "conv1d"
    params = ("N", "C", "L", "K", "R", "STRIDE", "PAD", "DIL", "GROUPS", "GRAD_INPUT", "BIAS")
    #: R is not monotone: with a fixed PAD a larger kernel shrinks the output.
    monotone_params = ("N", "C", "L", "K")
    spatial = ("L",)
    max_spatial = {"smoke": 64, "quick": 4096, "gpu": 16384, "full": 16384}
    trace_names = ("aten::conv1d", "aten::convolution", "aten::_convolution",
                   "aten::mkldnn_convolution", "aten::cudnn_convolution",
                   "aten::convolution_backward")


#: Transposed-conv configs per profile (``smoke``: the four tiny float32 configs a
#: fit needs to score an op) and the largest forward FLOP count of one call.
_T_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16, "full": 400}
_T_MAX_FLOPS = {"smoke": 2e6, "quick": 2e8, "gpu": 2e10, "full": 2e10}
#: Output elements of one call, at most, per profile.
_T_MAX_OUTPUT_ELEMENTS = {"smoke": 8192, "quick": 1 << 22, "gpu": 1 << 27, "full": 1 << 27}
#: Every this-many-th transposed-conv config is grouped.
_T_GROUPED_EVERY = 6


def transposed_out_size(size: int, r: int, stride: int, pad: int, outpad: int, dil: int) -> int:
    """Output length of one spatial dim of a transposed conv (elements), clamped
    to at least 1 so the work formulas accept any positive ints."""
    return max(1, (size - 1) * stride - 2 * pad + dil * (r - 1) + outpad + 1)


class _ConvTranspose(_Conv):
    """A transposed conv (``nn.ConvTranspose<n>d``): an N×C×spatial input and a
    C×(K/GROUPS)×R^d weight; ``OUTPAD`` (``output_padding``) adds to one side of
    the output. Each input element scatters into K/GROUPS × R^d outputs, so it has
    the multiply-accumulates of the conv whose backward-data it is; its backward
    runs the same ``convolution_backward`` node as a conv's (``ConvolutionBackward0``),
    told apart by its ``transposed`` flag."""

    #: no fit predates these ops
    param_defaults: dict[str, int] = {}
    added_params: tuple[str, ...] = ()
    #: (R, STRIDE, PAD, OUTPAD) cycled through, as networks set them.
    windows: tuple[tuple[int, int, int, int], ...] = ()
    #: The transposed conv of ``torch.nn.functional``.
    function = ""

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(check_profile(profile))
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases

    # -- shape space -------------------------------------------------------
    def valid(self, cfg: Mapping[str, int]) -> bool:
        """PyTorch's limits: channels divisible by ``GROUPS``, ``OUTPAD`` below
        the stride or the dilation, and an output of at least one element."""
        g = cfg["GROUPS"]
        if cfg["C"] % g or cfg["K"] % g or cfg["OUTPAD"] >= max(cfg["STRIDE"], cfg["DIL"]):
            return False
        return all((cfg[s] - 1) * cfg["STRIDE"] - 2 * cfg["PAD"] + cfg["DIL"] * (cfg["R"] - 1)
                   + cfg["OUTPAD"] >= 0 for s in self.spatial)

    def generate_configs(self, profile):
        count = _T_CONFIGS[profile]
        configs = sample_configs(
            f"{self.name}-{profile}", self.params, count,
            lambda rng, n: self._draw_transposed(rng, profile, n),
            lambda c: self.valid(c) and self.flops(c, "forward") <= _T_MAX_FLOPS[profile]
            and _MIN_INPUT_ELEMENTS[profile] <= self._sizes(c)[0] <= _MAX_INPUT_ELEMENTS[profile]
            and self._sizes(c)[2] <= _T_MAX_OUTPUT_ELEMENTS[profile])
        return sorted(configs, key=lambda c: self.flops(c, "forward"))

    def _draw_transposed(self, rng: random.Random, profile: str, n: int) -> dict[str, int]:
        """One candidate config: the ``n``-th window of :attr:`windows`, dense
        (every :data:`_T_GROUPED_EVERY`-th grouped), half with a bias; the input
        side drawn log-uniformly from 1 (a generator's first layer projects a
        1×1 input)."""
        top = _MAX_CHANNELS[profile]
        m = _ALIGN if rng.random() < _ALIGNED else 1
        g = rng.choice((2, 4, 8)) if n % _T_GROUPED_EVERY == _T_GROUPED_EVERY - 1 else 1
        c = g * log_uniform_ints(rng, max(1, m // g), max(1, top // g), multiple=max(1, m // g))
        k = g * log_uniform_ints(rng, max(1, m // g), max(1, top // g), multiple=max(1, m // g))
        r, stride, pad, outpad = self.windows[n % len(self.windows)]
        cfg = {"N": log_uniform_ints(rng, 1, _MAX_BATCH[profile]), "C": c, "K": k, "R": r,
               "STRIDE": stride, "PAD": pad, "OUTPAD": outpad, "DIL": 1, "GROUPS": g,
               "GRAD_INPUT": int(rng.random() >= 1 / GRAD_INPUT_EVERY), "BIAS": n % 2}
        cfg.update(_draw_spatial(rng, self.spatial, 1, self.max_spatial[profile], 1))
        return cfg

    # -- running -----------------------------------------------------------
    def make_runner(self, params, dtype, direction, device):
        import torch

        p = params
        if not self.valid(p):
            raise ValueError(f"{self.name} cannot run {dict(p)}")
        t = dict(dtype=torch_dtype(dtype), device=device)
        grad = direction == "backward"
        x = torch.randn(p["N"], p["C"], *(p[s] for s in self.spatial),
                        requires_grad=grad and p["GRAD_INPUT"] == 1, **t)
        w = torch.randn(p["C"], p["K"] // p["GROUPS"], *(p["R"] for _ in self.spatial),
                        requires_grad=grad, **t)
        b = torch.randn(p["K"], requires_grad=grad, **t) if p["BIAS"] else None
        conv = getattr(torch.nn.functional, self.function)
        kw = dict(stride=p["STRIDE"], padding=p["PAD"], output_padding=p["OUTPAD"],
                  groups=p["GROUPS"], dilation=p["DIL"])
        return _conv_call(conv, x, w, b, kw, grad)

    # -- analytic work -----------------------------------------------------
    def _sizes(self, p):
        """(input, weight, output elements, multiply-accumulates) of one call:
        every input element meets K/GROUPS × R^d weights. Output sizes are
        clamped to at least 1 (:func:`transposed_out_size`)."""
        outs = math.prod(transposed_out_size(p[s], p["R"], p["STRIDE"], p["PAD"], p["OUTPAD"],
                                             p["DIL"]) for s in self.spatial)
        k_per_group = p["K"] / p["GROUPS"]
        kernel = p["R"] ** len(self.spatial)
        inp = float(p["N"] * p["C"] * math.prod(p[s] for s in self.spatial))
        weight = p["C"] * k_per_group * kernel
        out = float(p["N"] * p["K"] * outs)
        return inp, weight, out, inp * k_per_group * kernel

    # -- trace mapping -----------------------------------------------------
    def params_from_shapes(self, input_shapes, groups: int | None = None):
        """Params the shapes ``[input, weight, bias?, ...]`` determine: ``N``,
        ``C``, spatial sizes, ``R``, ``K`` (``GROUPS × weight[1]``) and ``BIAS``.
        ``groups`` is the node's argument; without it, the bias (of K) tells it,
        else it is taken as 1. ``STRIDE``, ``PAD``, ``OUTPAD`` and ``DIL`` are
        scalar arguments: the caller adds them. None for another rank, a
        non-square kernel or inconsistent channel counts."""
        rank = len(self.spatial) + 2
        if len(input_shapes) < 2:
            return None
        x, w = list(input_shapes[0]), list(input_shapes[1])
        if len(x) != rank or len(w) != rank or min(x + w) < 1 or x[1] != w[0]:
            return None
        kernel = w[2:]
        if any(r != kernel[0] for r in kernel):
            return None
        bias = list(input_shapes[2]) if len(input_shapes) > 2 else []
        if len(bias) > 1 or (bias and bias[0] < 1):
            return None
        if groups is None:
            groups = bias[0] // w[1] if bias and bias[0] % w[1] == 0 else 1
        k = groups * w[1]
        if groups < 1 or x[1] % groups or bias not in ([], [k]):
            return None
        out = {"N": x[0], "C": x[1], "K": k, "R": kernel[0], "GROUPS": groups, "GRAD_INPUT": 1,
               "BIAS": int(bool(bias))}
        out.update(zip(self.spatial, x[2:]))
        return out

    def params_from_node(self, node):
        """The shapes' params plus ``STRIDE``, ``PAD``, ``OUTPAD``, ``DIL`` and
        ``GROUPS`` from the arguments: of ``aten::conv_transpose<n>d`` (stride,
        padding, output_padding, groups, dilation) or of an ``aten::convolution``
        or ``aten::_convolution`` whose ``transposed`` flag is set (stride,
        padding, dilation, transposed, output_padding, groups). None when a
        list is not the same in every spatial dim."""
        values = node.input_values
        if node.name.startswith("aten::conv_transpose"):
            names, groups_at = ("STRIDE", "PAD", "OUTPAD", None, "DIL"), 6
        elif transposed_flag(node):
            names, groups_at = ("STRIDE", "PAD", "DIL", None, "OUTPAD"), 8
        else:
            return None
        if len(values) <= groups_at or not isinstance(values[groups_at], int) \
                or isinstance(values[groups_at], bool):
            return None
        params = self.params_from_shapes(node.input_shapes, groups=values[groups_at])
        if params is None:
            return None
        for name, value in zip(names, values[3:8]):
            if name is None:
                continue
            if not isinstance(value, list) or not value or any(
                    not isinstance(v, int) or isinstance(v, bool) or v != value[0]
                    for v in value):
                return None
            params[name] = value[0]
        return params if self.valid(params) else None


class ConvTranspose2d(_ConvTranspose):
    """``torch.nn.functional.conv_transpose2d`` on an N×C×H×W input with a
    C×(K/GROUPS)×R×R weight."""

    name = "conv_transpose2d"
    params = ("N", "C", "H", "W", "K", "R", "STRIDE", "PAD", "OUTPAD", "DIL", "GROUPS",
              "GRAD_INPUT", "BIAS")
    #: R, STRIDE, PAD, OUTPAD and DIL are not monotone in the config space drawn.
    monotone_params = ("N", "C", "H", "W", "K")
    spatial = ("H", "W")
    function = "conv_transpose2d"
    max_spatial = {"smoke": 8, "quick": 64, "gpu": 128, "full": 256}
    trace_names = ("aten::conv_transpose2d", "aten::convolution", "aten::_convolution")
    #: DCGAN's doubling (4, 2, 1) and its 1×1-to-4×4 projection (4, 1, 0), U-Net's
    #: (2, 2, 0), (3, 2, 1) with output padding 1, stride-1 and 1×1 layers.
    windows = ((4, 2, 1, 0), (2, 2, 0, 0), (3, 2, 1, 1), (3, 1, 1, 0), (4, 1, 0, 0),
               (1, 1, 0, 0))


class ConvTranspose1d(_ConvTranspose):
    """``torch.nn.functional.conv_transpose1d`` on an N×C×L input with a
    C×(K/GROUPS)×R weight."""

    name = "conv_transpose1d"
    params = ("N", "C", "L", "K", "R", "STRIDE", "PAD", "OUTPAD", "DIL", "GROUPS",
              "GRAD_INPUT", "BIAS")
    #: R, STRIDE, PAD, OUTPAD and DIL are not monotone in the config space drawn.
    monotone_params = ("N", "C", "L", "K")
    spatial = ("L",)
    function = "conv_transpose1d"
    max_spatial = {"smoke": 32, "quick": 2048, "gpu": 8192, "full": 8192}
    trace_names = ("aten::conv_transpose1d", "aten::convolution", "aten::_convolution")
    #: Vocoder-style upsampling (kernel twice the stride: 2, 4, 8), (2, 2, 0),
    #: stride-1 and 1×1 layers.
    windows = ((4, 2, 1, 0), (8, 4, 2, 0), (16, 8, 4, 0), (2, 2, 0, 0), (3, 1, 1, 0),
               (1, 1, 0, 0))


OPS = (Conv2d(), Conv1d(), ConvTranspose2d(), ConvTranspose1d())
