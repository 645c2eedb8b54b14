"""GEMM family: ``addmm``, ``linear`` (forward and backward) and ``bmm``."""

from __future__ import annotations

import math

from perfmodel.ops.base import (DTYPE_BYTES, GRAD_INPUT_EVERY, OpDef, check_profile,
                                random_configs, torch_dtype)

#: Dimension grid of the ``full`` profile (1 and 8 for GEMV-like layers: heads, DLRM inputs).
_FULL_DIMS = (1, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)

#: Random configs per profile, and the largest FLOP count of one call.
_CONFIGS = {"smoke": 16, "quick": 40, "gpu": 40}
_MAX_FLOPS = {"smoke": 3e7, "quick": 2e9, "gpu": 1e12, "full": 4e10}
#: Largest dim of the ``gpu`` profile (a GPT-2 LM head has 50257 outputs).
_GPU_MAX_DIM = 32768
#: Share of random configs whose dims are all multiples of 8, as layer widths are (odd
#: dims can run slower per FLOP than their neighbours; measured:
#: docs/journal/2026-11-23-e2e-series.md). Unlike
#: the convs', the GEMM predictors are not given the alignment as a feature: on the
#: same data and folds it did not lower their held-out error.
_ALIGNED = 0.5
#: Dims of the small grid the ``quick`` (and, 4x wider, the ``gpu``) profile adds to the
#: random draw of ``addmm`` and ``linear``: networks use power-of-two widths and batches, which run faster per FLOP
#: than the random draw's neighbours, and 40 random configs in 3 dims leave the fit
#: guessing there (it over-priced such layers; see
#: docs/journal/2026-11-23-sweep-design.md).
_QUICK_GRID = {"quick": (64, 256, 1024), "gpu": (256, 1024, 4096)}


class _Gemm(OpDef):
    family = "gemm"
    dtypes = ("float32", "bfloat16")
    #: Dimension params and their ranges; ``params`` may add flags after them.
    ranges: dict[str, tuple[int, int]] = {}
    #: The ``gpu`` profile's ranges (None: ``ranges``).
    gpu_ranges: dict[str, tuple[int, int]] | None = None
    #: Whether ``quick`` and ``gpu`` add the :data:`_QUICK_GRID` configs to their draw.
    quick_grid = False

    def configs(self, profile: str) -> list[dict[str, int]]:
        check_profile(profile)
        dims = tuple(self.ranges)
        if profile == "full":
            grid = [dict(zip(dims, values)) for values in self._full_grid()]
            configs = [c for c in grid if self.flops(self._flagged(c), "forward")
                       <= _MAX_FLOPS["full"]]
        else:
            if profile == "smoke":
                ranges = {p: (low, min(high, 512)) for p, (low, high) in self.ranges.items()}
            else:
                ranges = (self.gpu_ranges or self.ranges) if profile == "gpu" else self.ranges
            configs = random_configs(f"{self.name}-{profile}", dims, ranges, _CONFIGS[profile],
                                     lambda c: self.flops(self._flagged(c), "forward"),
                                     _MAX_FLOPS[profile], aligned_share=_ALIGNED)
            if profile in _QUICK_GRID and self.quick_grid:
                import itertools

                drawn = {tuple(c.values()) for c in configs}
                configs += [dict(zip(dims, values))
                            for values in itertools.product(_QUICK_GRID[profile],
                                                            repeat=len(dims))
                            if values not in drawn and self.flops(
                                self._flagged(dict(zip(dims, values))), "forward")
                            <= _MAX_FLOPS[profile]]
        return [self._flagged(c, n) for n, c in enumerate(configs)]

    def _flagged(self, config: dict[str, int], n: int = 0) -> dict[str, int]:
        """``config`` (the ``n``-th drawn) with the op's flag params set."""
        return config

    def _full_grid(self):
        import itertools

        return itertools.product(*(self._full_axis(p) for p in self.ranges))

    def _full_axis(self, param: str) -> tuple[int, ...]:
        low, high = self.ranges[param]
        return tuple(d for d in _FULL_DIMS if low <= d <= high) or (low,)


class Addmm(_Gemm):
    """``torch.addmm(bias, A, B)`` with A: M×K, B: K×N, bias: N."""

    name = "addmm"
    params = ("M", "N", "K")
    directions = ("forward",)
    trace_names = ("aten::addmm",)
    ranges = {"M": (1, 4096), "N": (1, 4096), "K": (1, 4096)}
    gpu_ranges = {"M": (1, _GPU_MAX_DIM), "N": (1, _GPU_MAX_DIM), "K": (1, _GPU_MAX_DIM)}
    quick_grid = True

    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        bias = torch.randn(params["N"], **t)
        a = torch.randn(params["M"], params["K"], **t)
        b = torch.randn(params["K"], params["N"], **t)
        return lambda: torch.addmm(bias, a, b)

    def flops(self, params, direction):
        m, n, k = params["M"], params["N"], params["K"]
        return 2.0 * m * n * k + m * n

    def bytes_moved(self, params, dtype, direction):
        m, n, k = params["M"], params["N"], params["K"]
        return DTYPE_BYTES[dtype] * (m * k + k * n + n + m * n)

    def backward_via(self, params):
        """Autograd's backward of ``addmm(bias, A, B)`` is linear's with
        B = M, IN = K, OUT = N: two GEMMs and the bias reduction."""
        return "linear", {"B": params["M"], "IN": params["K"], "OUT": params["N"],
                          "GRAD_INPUT": 1}

    def params_from_shapes(self, input_shapes):
        if len(input_shapes) < 3 or len(input_shapes[1]) != 2 or len(input_shapes[2]) != 2:
            return None
        (m, k), (k2, n) = input_shapes[1], input_shapes[2]
        return {"M": m, "N": n, "K": k} if k == k2 else None


class Linear(_Gemm):
    """``torch.nn.functional.linear(x, W, b)`` with x: B×IN, W: OUT×IN.

    The backward is what autograd runs: grad_input = grad_out·W (only when
    ``GRAD_INPUT`` is 1: a network's first layer, whose input needs no
    gradient, skips it), grad_weight = grad_outᵀ·x, grad_bias = Σ grad_out.
    ``GRAD_INPUT`` does not change the forward.
    """

    name = "linear"
    params = ("B", "IN", "OUT", "GRAD_INPUT")
    #: measured before GRAD_INPUT existed: the input always needed a gradient
    param_defaults = {"GRAD_INPUT": 1}
    monotone_params = ("B", "IN", "OUT")
    directions = ("forward", "backward")
    trace_names = ("aten::linear",)
    ranges = {"B": (1, 4096), "IN": (1, 4096), "OUT": (1, 4096)}
    gpu_ranges = {"B": (1, _GPU_MAX_DIM), "IN": (1, _GPU_MAX_DIM), "OUT": (1, _GPU_MAX_DIM)}
    quick_grid = True

    def _flagged(self, config, n=0):
        return {**config, "GRAD_INPUT": int(n % GRAD_INPUT_EVERY != GRAD_INPUT_EVERY - 1)}

    def make_runner(self, params, dtype, direction, device):
        import torch
        import torch.nn.functional as F

        t = dict(dtype=torch_dtype(dtype), device=device)
        grad = direction == "backward"
        x = torch.randn(params["B"], params["IN"], requires_grad=grad and params["GRAD_INPUT"] == 1,
                        **t)
        w = torch.randn(params["OUT"], params["IN"], requires_grad=grad, **t)
        b = torch.randn(params["OUT"], requires_grad=grad, **t)
        if not grad:
            return lambda: F.linear(x, w, b)
        out = F.linear(x, w, b)
        grad_out = torch.randn_like(out)
        wrt = (x, w, b) if x.requires_grad else (w, b)
        return lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True)

    def flops(self, params, direction):
        b, i, o = params["B"], params["IN"], params["OUT"]
        gemms = 1 if direction == "forward" else 1 + params["GRAD_INPUT"]
        return 2.0 * gemms * b * i * o + b * o

    def bytes_moved(self, params, dtype, direction):
        b, i, o = params["B"], params["IN"], params["OUT"]
        elements = b * i + i * o + o + b * o
        if direction == "backward":
            elements += b * i * params["GRAD_INPUT"] + i * o  # grad_input, grad_weight
        return DTYPE_BYTES[dtype] * elements

    def params_from_shapes(self, input_shapes):
        if len(input_shapes) < 2 or len(input_shapes[0]) < 1 or len(input_shapes[1]) != 2:
            return None
        x, (o, i) = input_shapes[0], input_shapes[1]
        if x[-1] != i:
            return None
        return {"B": math.prod(x[:-1]), "IN": i, "OUT": o, "GRAD_INPUT": 1}

    def backward_params(self, params, node):
        """``GRAD_INPUT`` 0 when autograd's node ran one GEMM, not two: a 2-D
        input that needs no gradient (``AddmmBackward0`` with one ``aten::mm``).
        A 3-D input's backward spans several nodes and keeps ``GRAD_INPUT``."""
        gemms = sum(1 for n in node.walk() if n.name == "aten::mm")
        return {**params, "GRAD_INPUT": 0 if gemms == 1 else params["GRAD_INPUT"]}


class Bmm(_Gemm):
    """``torch.bmm(A, B)`` with A: BATCH×M×K and B: BATCH×K×N."""

    name = "bmm"
    params = ("BATCH", "M", "N", "K")
    directions = ("forward", "backward")
    trace_names = ("aten::bmm",)
    ranges = {"BATCH": (1, 256), "M": (1, 1024), "N": (1, 1024), "K": (1, 1024)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        grad = direction == "backward"
        batch, m, n, k = params["BATCH"], params["M"], params["N"], params["K"]
        a = torch.randn(batch, m, k, requires_grad=grad, **t)
        b = torch.randn(batch, k, n, requires_grad=grad, **t)
        if not grad:
            return lambda: torch.bmm(a, b)
        out = torch.bmm(a, b)
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (a, b), grad_out, retain_graph=True)

    def flops(self, params, direction):
        batch, m, n, k = params["BATCH"], params["M"], params["N"], params["K"]
        return (2.0 if direction == "forward" else 4.0) * batch * m * n * k

    def bytes_moved(self, params, dtype, direction):
        batch, m, n, k = params["BATCH"], params["M"], params["N"], params["K"]
        elements = batch * (m * k + k * n + m * n)
        if direction == "backward":
            elements += batch * (m * k + k * n)
        return DTYPE_BYTES[dtype] * elements

    def params_from_shapes(self, input_shapes):
        if len(input_shapes) < 2 or len(input_shapes[0]) != 3 or len(input_shapes[1]) != 3:
            return None
        (batch, m, k), (batch2, k2, n) = input_shapes[0], input_shapes[1]
        if batch != batch2 or k != k2:
            return None
        return {"BATCH": batch, "M": m, "N": n, "K": k}


OPS = (Addmm(), Linear(), Bmm())
