"""GEMM family: ``addmm``, ``linear`` (forward and backward), ``mm``, ``bmm`` and
``baddbmm``.

``torch.matmul`` / ``@`` and ``torch.einsum`` have no definition of their own:
their trace nodes (``aten::matmul``, ``aten::einsum``) hold views and one
``aten::mm`` (an N-D operand times a 2-D one, folded to rows) or ``aten::bmm``
(batched operands, expanded and reshaped to 3-D), which the graph opens them to;
the GEMM's autograd node (``MmBackward0``, ``BmmBackward0``) is its backward,
the views' nodes (``UnsafeViewBackward0``, ...) stay apart.
"""

from __future__ import annotations

import math

from perfmodel.ops.base import (DTYPE_BYTES, GRAD_INPUT_EVERY, OpDef, check_profile,
                                random_configs, torch_dtype)

#: Dimension grid of the ``full`` profile (1 and 8 for GEMV-like layers: heads, DLRM inputs).
_FULL_DIMS = (1, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)

#: Random configs per profile, and the largest FLOP count of one call.
_CONFIGS = {"smoke": 16, "quick": 40, "gpu": 40}
_MAX_FLOPS = {"smoke": 3e7, "quick": 2e9, "gpu": 1e12, "full": 4e10}
#: Configs per profile and the largest forward FLOP count of one call of ``mm`` and
#: ``baddbmm`` (``smoke``: see ``smoke_sides``). ``quick`` keeps a bfloat16 call, many
#: times slower than float32 on a CPU without bfloat16 instructions, under a second.
_OTHER_CONFIGS = {"smoke": 4, "quick": 32, "gpu": 16}
_OTHER_MAX_FLOPS = {"smoke": 3e7, "quick": 1.5e8, "gpu": 1e12, "full": 4e10}
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
    #: Random configs per profile and the largest forward FLOP count of one call.
    counts: dict[str, int] = _CONFIGS
    max_flops: dict[str, float] = _MAX_FLOPS
    #: Whether ``smoke`` runs float32 alone (a pipeline check).
    smoke_float32 = False
    #: When set, the ``smoke`` configs: every dim equal to each of these sides, as
    #: many as a fit needs (``perfmodel.fit.fitting.MIN_CONFIGS``) on a ladder from
    #: launch-bound to compute-bound that it can score (a random draw of as few tiny
    #: configs is all launch cost and noise).
    smoke_sides: tuple[int, ...] = ()
    #: Dimension params and their ranges; ``params`` may add flags after them.
    ranges: dict[str, tuple[int, int]] = {}
    #: The ``gpu`` profile's ranges (None: ``ranges``).
    gpu_ranges: dict[str, tuple[int, int]] | None = None
    #: Whether ``quick`` and ``gpu`` add the :data:`_QUICK_GRID` configs to their draw.
    quick_grid = False

    def configs(self, profile: str) -> list[dict[str, int]]:
        check_profile(profile)
        dims = tuple(self.ranges)
        if profile == "smoke" and self.smoke_sides:
            configs = [{p: side for p in dims} for side in self.smoke_sides]
        elif profile == "full":
            grid = [dict(zip(dims, values)) for values in self._full_grid()]
            configs = [c for c in grid if self.flops(self._flagged(c), "forward")
                       <= self.max_flops["full"]]
        else:
            if profile == "smoke":
                ranges = {p: (low, min(high, 512)) for p, (low, high) in self.ranges.items()}
            else:
                ranges = (self.gpu_ranges or self.ranges) if profile == "gpu" else self.ranges
            configs = random_configs(f"{self.name}-{profile}", dims, ranges,
                                     self.counts[profile],
                                     lambda c: self.flops(self._flagged(c), "forward"),
                                     self.max_flops[profile], aligned_share=_ALIGNED)
            if profile in _QUICK_GRID and self.quick_grid:
                import itertools

                drawn = {tuple(c.values()) for c in configs}
                configs += [dict(zip(dims, values))
                            for values in itertools.product(_QUICK_GRID[profile],
                                                            repeat=len(dims))
                            if values not in drawn and self.flops(
                                self._flagged(dict(zip(dims, values))), "forward")
                            <= self.max_flops[profile]]
        return [self._flagged(c, n) for n, c in enumerate(configs)]

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 alone when ``smoke_float32``."""
        cases = super().cases(profile)
        if profile == "smoke" and self.smoke_float32:
            return [c for c in cases if c.dtype == "float32"]
        return cases

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


class Mm(_Gemm):
    """``torch.mm(A, B)`` with A: M×K, B: K×N; also what ``torch.matmul`` runs for a
    2-D operand, or an N-D one folded to M rows, times a 2-D one.

    The backward is what autograd runs: grad_B = Aᵀ·grad_out and, only when
    ``GRAD_A`` is 1, grad_A = grad_out·Bᵀ. ``GRAD_A`` does not change the forward.
    """

    name = "mm"
    params = ("M", "N", "K", "GRAD_A")
    monotone_params = ("M", "N", "K")
    directions = ("forward", "backward")
    trace_names = ("aten::mm",)
    ranges = {"M": (1, 4096), "N": (1, 4096), "K": (1, 4096)}
    gpu_ranges = {"M": (1, _GPU_MAX_DIM), "N": (1, _GPU_MAX_DIM), "K": (1, _GPU_MAX_DIM)}
    counts = _OTHER_CONFIGS
    max_flops = _OTHER_MAX_FLOPS
    smoke_float32 = True
    smoke_sides = (32, 64, 128, 256)

    def _flagged(self, config, n=0):
        return {**config, "GRAD_A": int(n % GRAD_INPUT_EVERY != GRAD_INPUT_EVERY - 1)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        grad = direction == "backward"
        a = torch.randn(params["M"], params["K"], requires_grad=grad and params["GRAD_A"] == 1,
                        **t)
        b = torch.randn(params["K"], params["N"], requires_grad=grad, **t)
        if not grad:
            return lambda: torch.mm(a, b)
        out = torch.mm(a, b)
        grad_out = torch.randn_like(out)
        wrt = (a, b) if a.requires_grad else (b,)
        return lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True)

    def flops(self, params, direction):
        """FLOP: 2·M·N·K per GEMM; the backward runs 1 + ``GRAD_A`` of them."""
        m, n, k = params["M"], params["N"], params["K"]
        gemms = 1 if direction == "forward" else 1 + params["GRAD_A"]
        return 2.0 * gemms * m * n * k

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads A and B and writes the product; backward reads
        grad_out and A and writes grad_B, and with ``GRAD_A`` reads B and
        writes grad_A."""
        m, n, k = params["M"], params["N"], params["K"]
        if direction == "forward":
            elements = m * k + k * n + m * n
        else:
            elements = m * n + m * k + k * n + params["GRAD_A"] * (k * n + m * k)
        return DTYPE_BYTES[dtype] * elements

    def params_from_shapes(self, input_shapes):
        """``M``, ``N``, ``K`` from ``[A, B]`` (both 2-D); ``GRAD_A`` 1."""
        if len(input_shapes) < 2 or len(input_shapes[0]) != 2 or len(input_shapes[1]) != 2:
            return None
        (m, k), (k2, n) = input_shapes[0], input_shapes[1]
        return {"M": m, "N": n, "K": k, "GRAD_A": 1} if k == k2 else None

    def backward_params(self, params, node):
        """The config of the GEMMs autograd's ``MmBackward0`` ran: ``params``
        when it ran two; with one, the config whose grad_B alone is that GEMM,
        told by its inner dim: M for grad_B (Aᵀ·grad_out, or its transpose) is
        ``GRAD_A`` 0; N for grad_A alone (B needs no gradient: grad_out·Bᵀ, an
        M×N by N×K product) is the grad_B of M = N, N = K, K = M."""
        gemms = [n for n in node.walk() if n.name == "aten::mm"]
        if len(gemms) != 1:
            return dict(params)
        m, n, k = params["M"], params["N"], params["K"]
        shapes = gemms[0].input_shapes
        inner = shapes[0][-1] if shapes and shapes[0] else None
        if inner == n and n != m:
            return {"M": n, "N": k, "K": m, "GRAD_A": 0}
        return {**params, "GRAD_A": 0}


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


class Baddbmm(_Gemm):
    """``torch.baddbmm(C, A, B)`` = C + A·B with A: BATCH×M×K, B: BATCH×K×N and C:
    BATCH×M×N (a trace's C may broadcast to it: a mask or bias of fewer dims)."""

    name = "baddbmm"
    params = ("BATCH", "M", "N", "K")
    directions = ("forward",)
    trace_names = ("aten::baddbmm",)
    ranges = {"BATCH": (1, 256), "M": (1, 1024), "N": (1, 1024), "K": (1, 1024)}
    gpu_ranges = {"BATCH": (1, 512), "M": (1, 4096), "N": (1, 4096), "K": (1, 4096)}
    counts = _OTHER_CONFIGS
    max_flops = _OTHER_MAX_FLOPS
    smoke_float32 = True
    smoke_sides = (8, 16, 32, 64)

    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        batch, m, n, k = params["BATCH"], params["M"], params["N"], params["K"]
        c = torch.randn(batch, m, n, **t)
        a = torch.randn(batch, m, k, **t)
        b = torch.randn(batch, k, n, **t)
        return lambda: torch.baddbmm(c, a, b)

    def flops(self, params, direction):
        """FLOP: 2·BATCH·M·N·K for the product, plus one per output element for C."""
        batch, m, n, k = params["BATCH"], params["M"], params["N"], params["K"]
        return 2.0 * batch * m * n * k + batch * m * n

    def bytes_moved(self, params, dtype, direction):
        """B: reads A, B and C and writes the result."""
        batch, m, n, k = params["BATCH"], params["M"], params["N"], params["K"]
        return DTYPE_BYTES[dtype] * batch * (m * k + k * n + 2 * m * n)

    def backward_via(self, params):
        """Autograd's ``BaddbmmBackward0`` runs bmm's backward (grad_A = grad_out·Bᵀ,
        grad_B = Aᵀ·grad_out) and passes grad_out on to C."""
        return "bmm", dict(params)

    def params_from_shapes(self, input_shapes):
        """``BATCH``, ``M``, ``N``, ``K`` from ``[C, A, B, ...]``: A and B 3-D with
        equal batches and inner dims, C of at most 3 dims that broadcast to
        BATCH×M×N."""
        if len(input_shapes) < 3 or len(input_shapes[1]) != 3 or len(input_shapes[2]) != 3:
            return None
        (batch, m, k), (batch2, k2, n) = input_shapes[1], input_shapes[2]
        c = list(input_shapes[0])
        out = [batch, m, n]
        if batch != batch2 or k != k2 or len(c) > 3 or \
                any(d not in (1, o) for d, o in zip(reversed(c), reversed(out))):
            return None
        return {"BATCH": batch, "M": m, "N": n, "K": k}


OPS = (Addmm(), Linear(), Mm(), Bmm(), Baddbmm())
