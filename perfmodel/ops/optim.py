"""Optimizer family: one ``optimizer.step()`` of SGD, Adam and AdamW.

Each optimizer comes in three variants, the three code paths of ``torch.optim``:

- ``foreach``: multi-tensor ``aten::_foreach_*`` kernels (``foreach=True``);
- ``fused``: one ``aten::_fused_<optimizer>_`` kernel per step (``fused=True``);
- ``single``: the per-parameter loop (``_single_tensor_<optimizer>``,
  ``foreach=False``), a few small ATen ops per parameter tensor
  (``aten::mul_``, ``aten::add_``, ``aten::lerp_``, ``aten::addcmul_``,
  ``aten::sqrt``, ``aten::addcdiv_``, ...). It is what ``torch.optim`` runs by
  default (``foreach=None, fused=None``) on CPU tensors, and its time has a
  large per-tensor term, so its configs cover 1 to 512 tensors at small
  ``NUMEL`` too.

Ops are named ``<optimizer>_<variant>``: ``sgd_foreach``, ``sgd_fused``,
``sgd_single``, ``adam_foreach``, ... Params: ``NTENSORS`` parameter tensors of
``NUMEL`` elements each, gradients set once; the timed call is ``step()`` and
is the op's ``forward``. State tensors have the parameters' dtype. Work per
element (counted minimums, the ``foreach`` and ``single`` variants make more
passes over memory than this):

=========  =====  ====================================================
optimizer  FLOPs  tensors read / written per element
=========  =====  ====================================================
sgd        4      param, grad, momentum buffer / param, buffer (5)
sgd_plain  2      param, grad / param (3)
adam       11     param, grad, exp_avg, exp_avg_sq / the three (7)
adamw      12     as adam, plus the decoupled weight decay
=========  =====  ====================================================

``sgd`` uses momentum 0.9, ``sgd_plain`` none (``torch.optim.SGD``'s default),
``adamw`` weight decay 0.01. ``sgd_plain`` comes in the ``single`` variant only:
its single loop runs one op per tensor where ``sgd``'s runs three, while a
``foreach`` or ``fused`` step without momentum is read as ``sgd_*``.
"""

from __future__ import annotations

import math

from perfmodel.ops.base import DTYPE_BYTES, OpDef, check_profile, log_uniform_ints, torch_dtype
from perfmodel.ops.base import random_configs, sample_configs

_CONFIGS = {"smoke": 4, "quick": 24, "gpu": 24, "full": 1000}
#: Most parameter elements (NTENSORS × NUMEL) of one step, per profile. ``quick``
#: reaches 16M: ``dlrm_ebag``'s step updates 10.6M (eight 20k x 64 tables), and a
#: fit on configs capped below that under-priced it (see
#: docs/journal/2026-11-27-figures-from-docstrings.md).
_MAX_ELEMS = {"smoke": 1 << 16, "quick": 1 << 24, "gpu": 1 << 28, "full": 1 << 26}
_RANGES = {"NTENSORS": (1, 512), "NUMEL": (1, 1 << 24)}

#: Configs of the ``single`` variant per profile (``gpu``: plus the element cap);
#: ``smoke`` has the fewest that a fit scores (``perfmodel.fit.fitting.MIN_CONFIGS``).
_SINGLE_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16}
#: Most parameter elements of one ``single`` step: on a 2-core CPU its loop of
#: out-of-place ops costs several times a foreach step per element.
_SINGLE_MAX_ELEMS = {"smoke": 1 << 12, "quick": 1 << 21, "gpu": 1 << 28, "full": 1 << 26}
#: Largest ``NUMEL`` of every other ``single`` config: the biases and norm
#: weights that make up most of a model's tensors, where the per-tensor term rules.
_SMALL_NUMEL = 4096
#: ``NTENSORS`` bands (log-spaced over 1..512) the ``single`` configs cycle through.
_NTENSORS_BANDS = 8
#: ``full`` grid of the ``single`` variant (under ``_SINGLE_MAX_ELEMS``).
_SINGLE_GRID = {"NTENSORS": tuple(2 ** k for k in range(10)),
                "NUMEL": tuple(4 ** k for k in range(13))}

#: optimizer -> (torch class name, FLOPs per element, tensors read + written, kwargs)
_OPTIMIZERS = {
    "sgd": ("SGD", 4, 5, {"momentum": 0.9}),
    "sgd_plain": ("SGD", 2, 3, {}),
    "adam": ("Adam", 11, 7, {}),
    "adamw": ("AdamW", 12, 7, {"weight_decay": 0.01}),
}
_VARIANTS = ("foreach", "fused", "single")
#: The per-parameter loop's ops that run once per parameter tensor (its first
#: input), by optimizer: Adam's and AdamW's update, SGD's momentum decay, plain
#: SGD's update.
_LOOP_MARKERS = {"sgd": "aten::mul_", "sgd_plain": "aten::add_",
                 "adam": "aten::addcdiv_", "adamw": "aten::addcdiv_"}


class OptimizerStep(OpDef):
    """One step of ``optimizer`` in ``variant`` (``"foreach"``, ``"fused"`` or
    ``"single"``)."""

    family = "optim"
    params = ("NTENSORS", "NUMEL")
    directions = ("forward",)
    dtypes = ("float32", "bfloat16")
    #: A step runs after forward and backward have streamed the activations
    #: through the caches, so its parameters, gradients and state come from
    #: memory, and a hot benchmark under-prices it (measured:
    #: docs/journal/2026-11-23-cpu-timing.md).
    cold_on_cpu = True

    def __init__(self, optimizer: str, variant: str):
        self.optimizer, self.variant = optimizer, variant
        self.name = f"{optimizer}_{variant}"
        self._class_name, self._flops_per_elem, self._tensors, self._kwargs = \
            _OPTIMIZERS[optimizer]
        # The fused kernels have their own ATen ops; foreach steps are a run of
        # _foreach_* ops shared by every optimizer, and single steps a loop of
        # plain ATen ops, so they name no single op. In a trace, a step is the
        # ``Optimizer.step#<Class>.step`` scope; the variant shows in the ops
        # under it (``aten::_foreach_*``, ``aten::_fused_<optimizer>_`` or neither).
        self.trace_names = (f"Optimizer.step#{self._class_name}.step",)

    def configs(self, profile):
        check_profile(profile)
        if self.variant == "single":
            return self._single_configs(profile)
        ranges = _RANGES if profile != "smoke" else {"NTENSORS": (1, 64), "NUMEL": (1, 4096)}
        configs = random_configs(f"{self.name}-{profile}", self.params, ranges,
                                 _CONFIGS[profile], lambda c: c["NTENSORS"] * c["NUMEL"],
                                 _MAX_ELEMS[profile])
        if profile == "gpu":  # a draw of 24 seldom nears the cap: add the cap itself
            numel = _RANGES["NUMEL"][1]
            configs.append({"NTENSORS": _MAX_ELEMS[profile] // numel, "NUMEL": numel})
        return configs

    def _single_configs(self, profile):
        """The ``single`` variant's configs: ``quick`` and ``gpu`` cycle through
        :data:`_NTENSORS_BANDS` log-spaced bands of ``NTENSORS`` (1 to 512),
        every other config with ``NUMEL`` at most :data:`_SMALL_NUMEL` and the
        others from there up to the profile's element cap; ``full`` is the
        grid :data:`_SINGLE_GRID`."""
        cap = _SINGLE_MAX_ELEMS[profile]
        if profile == "full":
            return [{"NTENSORS": n, "NUMEL": m} for n in _SINGLE_GRID["NTENSORS"]
                    for m in _SINGLE_GRID["NUMEL"] if n * m <= cap]
        if profile == "smoke":
            return random_configs(f"{self.name}-smoke", self.params,
                                  {"NTENSORS": (1, 16), "NUMEL": (1, 1024)},
                                  _SINGLE_CONFIGS[profile], lambda c: c["NTENSORS"] * c["NUMEL"],
                                  cap)
        top = _RANGES["NTENSORS"][1]

        def draw(rng, n):
            band = (n // 2) % _NTENSORS_BANDS
            low = max(1, round(top ** (band / _NTENSORS_BANDS)))
            high = max(low, round(top ** ((band + 1) / _NTENSORS_BANDS)))
            ntensors = log_uniform_ints(rng, low, high)
            if n % 2 == 0:
                return {"NTENSORS": ntensors, "NUMEL": log_uniform_ints(rng, 1, _SMALL_NUMEL)}
            most = max(_SMALL_NUMEL, min(_RANGES["NUMEL"][1], cap // ntensors))
            return {"NTENSORS": ntensors, "NUMEL": log_uniform_ints(rng, _SMALL_NUMEL, most)}

        configs = sample_configs(f"{self.name}-{profile}", self.params, _SINGLE_CONFIGS[profile],
                                 draw, lambda c: c["NTENSORS"] * c["NUMEL"] <= cap)
        if profile == "gpu":  # as the other variants: add the cap itself
            numel = _RANGES["NUMEL"][1]
            configs.append({"NTENSORS": cap // numel, "NUMEL": numel})
        return configs

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(profile)
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases

    def make_runner(self, params, dtype, direction, device):
        """Parameters with gradients, an optimizer stepped once (state allocated),
        and ``step`` to time. Raises NotImplementedError saying "unsupported on
        this device" when torch has no such variant there."""
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        tensors = [torch.randn(params["NUMEL"], requires_grad=True, **t)
                   for _ in range(params["NTENSORS"])]
        for p in tensors:
            p.grad = torch.randn_like(p) * 1e-3
        cls = getattr(torch.optim, self._class_name)
        variant = {"foreach": False, "fused": False} if self.variant == "single" else \
            {self.variant: True}
        try:
            optimizer = cls(tensors, lr=1e-4, **self._kwargs, **variant)
            optimizer.step()
        except (RuntimeError, ValueError, TypeError) as exc:
            if "out of memory" in str(exc).lower():
                raise
            raise NotImplementedError(
                f"torch {torch.__version__} does not support {self.name} for {dtype} on "
                f"{device}: unsupported on this device ({str(exc).splitlines()[0]})") from exc
        return optimizer.step

    def flops(self, params, direction):
        """FLOPs per element × NTENSORS × NUMEL (FLOP)."""
        return float(self._flops_per_elem * params["NTENSORS"] * params["NUMEL"])

    def bytes_moved(self, params, dtype, direction):
        """Tensors read + written per element × elements × bytes (B)."""
        return float(self._tensors * DTYPE_BYTES[dtype] * params["NTENSORS"] * params["NUMEL"])

    def params_from_shapes(self, input_shapes):
        """A step's own node has no inputs; see :meth:`params_from_node`."""
        return None

    def params_from_node(self, node):
        """``NTENSORS`` and ``NUMEL`` (mean elements per tensor, rounded) from
        the largest first tensor list of the ``aten::_foreach_*`` (foreach) or
        ``aten::_fused_<optimizer>_`` (fused) ops under the step: the parameters
        or their gradients, not Adam's one-element step counters, which its
        first ``_foreach_add_`` updates (in the fused step too). ``single``: see
        :meth:`_params_from_loop`. None when the step ran another variant: a
        foreach step has no ``aten::_fused_*`` op, a fused one no
        ``aten::_foreach_*`` op on more than 0-d counters."""
        if self.variant == "single":
            return self._params_from_loop(node)
        marker = "aten::_foreach_" if self.variant == "foreach" else \
            f"aten::_fused_{self.optimizer}"
        below = list(node.walk())[1:]
        if self.variant == "foreach" and any(n.name.startswith("aten::_fused_") for n in below):
            return None
        # a fused Adam step counts its steps with a _foreach_add_ on 0-d counters
        if self.variant == "fused" and any(n.name.startswith("aten::_foreach_") and
                                           any(_first_list(n)) for n in below):
            return None
        lists = [[math.prod(s) for s in _first_list(n)] for n in below
                 if n.name.startswith(marker)]
        sizes = max(lists, key=sum, default=[])
        if not sizes:
            return None
        return {"NTENSORS": len(sizes), "NUMEL": max(1, round(sum(sizes) / len(sizes)))}

    def _params_from_loop(self, node):
        """``NTENSORS`` and ``NUMEL`` of a per-parameter loop: the ops of the
        step that run once per parameter (:data:`_LOOP_MARKERS`: Adam's
        ``aten::addcdiv_``, SGD's momentum ``aten::mul_``, plain SGD's
        ``aten::add_``), counted with the mean elements of their first input,
        leaving out one-element step counters (0-d). The ops under ATen ops are
        not looked at (a CPU foreach op may run per-tensor ops under it). None
        when any ``aten::_foreach_*`` or ``aten::_fused_*`` op ran under the
        step, and for SGD when the momentum shows (``aten::mul_``, for
        ``sgd_plain``) or does not (for ``sgd``). The first step of SGD with
        momentum copies the gradients and reads as ``sgd_plain``."""
        if any(n.name.startswith(("aten::_foreach_", "aten::_fused_")) for n in node.walk()):
            return None
        ops, stack = [], list(node.children)
        while stack:
            n = stack.pop()
            if not n.name.startswith("aten::"):
                stack.extend(n.children)
            elif n.input_shapes and isinstance(n.input_shapes[0], list) and n.input_shapes[0] \
                    and str(n.input_types[0]).startswith("Tensor("):
                ops.append((n.name, math.prod(n.input_shapes[0])))
        if self._class_name == "SGD" and \
                any(name == "aten::mul_" for name, _ in ops) != (self.optimizer == "sgd"):
            return None
        sizes = [numel for name, numel in ops if name == _LOOP_MARKERS[self.optimizer]]
        if not sizes:
            return None
        return {"NTENSORS": len(sizes), "NUMEL": max(1, round(sum(sizes) / len(sizes)))}


def _first_list(node) -> list[list[int]]:
    """Shapes of the tensors in a node's first input when it is a tensor list
    (an ``aten::_foreach_*`` or ``aten::_fused_*`` op), else []."""
    if not node.input_shapes or not str(node.input_types[0]).startswith("GenericList"):
        return []
    return [s for s in node.input_shapes[0] if isinstance(s, list)]


OPS = tuple(OptimizerStep(o, v) for o in _OPTIMIZERS for v in _VARIANTS
            if v == "single" or o != "sgd_plain")
