"""Optimizer family: one ``optimizer.step()`` of SGD, Adam and AdamW.

Each optimizer comes in a ``foreach`` (multi-tensor kernels) and a ``fused``
(one kernel per step) variant: ``sgd_foreach``, ``sgd_fused``, ``adam_foreach``, ...
Params: ``NTENSORS`` parameter tensors of ``NUMEL`` elements each, gradients set
once; the timed call is ``step()`` and is the op's ``forward``. State tensors
have the parameters' dtype. Work per element (counted minimums, the foreach
variants make more passes over memory than this):

========  =====  ====================================================
optimizer FLOPs  tensors read / written per element
========  =====  ====================================================
sgd       4      param, grad, momentum buffer / param, buffer (5)
adam      11     param, grad, exp_avg, exp_avg_sq / the three (7)
adamw     12     as adam, plus the decoupled weight decay
========  =====  ====================================================

``sgd`` uses momentum 0.9, ``adamw`` weight decay 0.01.
"""

from __future__ import annotations

import math

from perfmodel.ops.base import DTYPE_BYTES, OpDef, check_profile, torch_dtype
from perfmodel.ops.base import random_configs

_CONFIGS = {"smoke": 4, "quick": 24, "gpu": 24, "full": 1000}
#: Most parameter elements (NTENSORS × NUMEL) of one step, per profile. ``quick``
#: reaches 16M: ``dlrm_ebag``'s step updates 10.6M (eight 20k x 64 tables), and a
#: fit on configs capped below that under-priced it (see
#: docs/journal/2026-11-27-figures-from-docstrings.md).
_MAX_ELEMS = {"smoke": 1 << 16, "quick": 1 << 24, "gpu": 1 << 28, "full": 1 << 26}
_RANGES = {"NTENSORS": (1, 512), "NUMEL": (1, 1 << 24)}

#: optimizer -> (torch class name, FLOPs per element, tensors read + written, kwargs)
_OPTIMIZERS = {
    "sgd": ("SGD", 4, 5, {"momentum": 0.9}),
    "adam": ("Adam", 11, 7, {}),
    "adamw": ("AdamW", 12, 7, {"weight_decay": 0.01}),
}
_VARIANTS = ("foreach", "fused")


class OptimizerStep(OpDef):
    """One step of ``optimizer`` in ``variant`` (``"foreach"`` or ``"fused"``)."""

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
        # _foreach_* ops shared by every optimizer, so they name no single op.
        # In a trace, a step is the ``Optimizer.step#<Class>.step`` scope; the
        # variant shows in the ops under it (``aten::_foreach_*`` or
        # ``aten::_fused_<optimizer>_``).
        self.trace_names = (f"Optimizer.step#{self._class_name}.step",)

    def configs(self, profile):
        check_profile(profile)
        ranges = _RANGES if profile != "smoke" else {"NTENSORS": (1, 64), "NUMEL": (1, 4096)}
        configs = random_configs(f"{self.name}-{profile}", self.params, ranges,
                                 _CONFIGS[profile], lambda c: c["NTENSORS"] * c["NUMEL"],
                                 _MAX_ELEMS[profile])
        if profile == "gpu":  # a draw of 24 seldom nears the cap: add the cap itself
            numel = _RANGES["NUMEL"][1]
            configs.append({"NTENSORS": _MAX_ELEMS[profile] // numel, "NUMEL": numel})
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
        try:
            optimizer = cls(tensors, lr=1e-4, **self._kwargs, **{self.variant: True})
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
        first ``_foreach_add_`` updates. None when the step ran the other
        variant or the per-tensor loop."""
        marker = "aten::_foreach_" if self.variant == "foreach" else \
            f"aten::_fused_{self.optimizer}"
        other = "aten::_fused_" if self.variant == "foreach" else "aten::_foreach_"
        below = list(node.walk())[1:]
        if any(n.name.startswith(other) for n in below):
            return None
        lists = [[math.prod(s) for s in n.input_shapes[0] if isinstance(s, list)]
                 for n in below if n.name.startswith(marker) and n.input_shapes
                 and str(n.input_types[0]).startswith("GenericList")]
        sizes = max(lists, key=sum, default=[])
        if not sizes:
            return None
        return {"NTENSORS": len(sizes), "NUMEL": max(1, round(sum(sizes) / len(sizes)))}


OPS = tuple(OptimizerStep(o, v) for o in _OPTIMIZERS for v in _VARIANTS)
