"""Memory family: data movement with little or no arithmetic.

``cat``, ``transpose_contiguous``, ``dlrm_interaction``, ``index_select``,
``to_dtype`` and ``copy``. Pure copies do no arithmetic; their FLOPs count the
elements written (one per element), so the roofline's FLOP column stays positive
and grows with the problem. The ``smoke`` profile runs float32 only.
"""

from __future__ import annotations

import math

from perfmodel.ops.base import DTYPE_BYTES, OpDef, check_profile, torch_dtype
from perfmodel.ops.base import random_configs

_CONFIGS = {"smoke": 4, "quick": 12, "gpu": 12, "full": 1000}
#: Most elements moved by one call, per profile.
_MAX_ELEMS = {"smoke": 1 << 16, "quick": 1 << 22, "gpu": 1 << 26, "full": 1 << 26}
#: Bytes of an int64 index.
_INDEX_BYTES = 8


class _Memory(OpDef):
    family = "memory"
    dtypes = ("float32", "bfloat16")
    ranges: dict[str, tuple[int, int]] = {}

    def configs(self, profile):
        check_profile(profile)
        ranges = self.ranges if profile != "smoke" else \
            {p: (lo, max(lo, min(hi, 512))) for p, (lo, hi) in self.ranges.items()}
        return random_configs(f"{self.name}-{profile}", self.params, ranges, _CONFIGS[profile],
                               lambda c: self.flops(c, "forward"), _MAX_ELEMS[profile])

    def cases(self, profile):
        """As :meth:`OpDef.cases`; ``smoke`` keeps float32 only (a pipeline check)."""
        cases = super().cases(profile)
        return [c for c in cases if c.dtype == "float32"] if profile == "smoke" else cases


class Cat(_Memory):
    """``torch.cat`` of ``N`` tensors of ``ROWS×COLS`` along dim 1 (the DLRM
    pattern of joining feature blocks: strided writes), giving ``ROWS×(N·COLS)``.
    The backward is ``narrow`` views, no kernel, so forward only."""

    name = "cat"
    params = ("N", "ROWS", "COLS")
    trace_names = ("aten::cat",)
    ranges = {"N": (2, 64), "ROWS": (1, 8192), "COLS": (8, 2048)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        xs = [torch.randn(params["ROWS"], params["COLS"], **t) for _ in range(params["N"])]
        return lambda: torch.cat(xs, dim=1)

    def flops(self, params, direction):
        """Elements written (FLOP)."""
        return float(params["N"] * params["ROWS"] * params["COLS"])

    def bytes_moved(self, params, dtype, direction):
        """Every element read once and written once (B)."""
        return 2.0 * DTYPE_BYTES[dtype] * params["N"] * params["ROWS"] * params["COLS"]

    def params_from_shapes(self, input_shapes):
        """A trace lists the tensor list as one entry of 2-D shapes, all equal;
        the dim argument is not in the shapes and is taken to be 1."""
        if not input_shapes:
            return None
        tensors = input_shapes[0]
        if not tensors or not all(isinstance(s, (list, tuple)) and len(s) == 2 for s in tensors):
            return None
        if any(list(s) != list(tensors[0]) for s in tensors):
            return None
        rows, cols = tensors[0]
        return {"N": len(tensors), "ROWS": rows, "COLS": cols}


class TransposeContiguous(_Memory):
    """``x.t().contiguous()``: the input is the ``ROWS×COLS`` transposed view of a
    contiguous ``COLS×ROWS`` tensor, the output a contiguous ``ROWS×COLS`` copy.
    Its backward is the same op on the gradient, so forward only."""

    name = "transpose_contiguous"
    params = ("ROWS", "COLS")
    trace_names = ("aten::contiguous",)
    ranges = {"ROWS": (8, 8192), "COLS": (8, 8192)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        view = torch.randn(params["COLS"], params["ROWS"], dtype=torch_dtype(dtype),
                           device=device).t()
        return lambda: view.contiguous()

    def flops(self, params, direction):
        """Elements written (FLOP)."""
        return float(params["ROWS"] * params["COLS"])

    def bytes_moved(self, params, dtype, direction):
        """Every element read once and written once (B)."""
        return 2.0 * DTYPE_BYTES[dtype] * params["ROWS"] * params["COLS"]

    def params_from_shapes(self, input_shapes):
        """The view's shape; whether it is really transposed is not in the shapes."""
        if not input_shapes or len(input_shapes[0]) != 2:
            return None
        rows, cols = input_shapes[0]
        return {"ROWS": rows, "COLS": cols}


class DlrmInteraction(_Memory):
    """DLRM dot interaction of ``BATCH×F×D`` features: ``Z = bmm(x, xᵀ)`` then
    the strictly lower triangle of each ``F×F`` block gathered to
    ``BATCH×F(F-1)/2``. Backward: the gather's scatter into zeros, then the
    bmm backward (two bmms, since both operands are ``x``, and their sum)."""

    name = "dlrm_interaction"
    params = ("BATCH", "F", "D")
    directions = ("forward", "backward")
    trace_names = ()  # no single ATen op: a trace shows aten::bmm then aten::index
    ranges = {"BATCH": (1, 4096), "F": (2, 64), "D": (8, 256)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        batch, f, d = params["BATCH"], params["F"], params["D"]
        grad = direction == "backward"
        x = torch.randn(batch, f, d, dtype=torch_dtype(dtype), device=device, requires_grad=grad)
        li, lj = torch.tril_indices(f, f, offset=-1, device=device)

        def interact():
            return torch.bmm(x, x.transpose(1, 2))[:, li, lj]

        if not grad:
            return interact
        out = interact()
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (x,), grad_out, retain_graph=True)

    def flops(self, params, direction):
        """bmm (2·B·F²·D forward, twice that backward) plus the gathered pairs;
        backward also adds the two bmm gradients (FLOP)."""
        b, f, d = params["BATCH"], params["F"], params["D"]
        pairs = b * f * (f - 1) // 2
        if direction == "forward":
            return 2.0 * b * f * f * d + pairs
        return 4.0 * b * f * f * d + b * f * d + pairs

    def bytes_moved(self, params, dtype, direction):
        """Forward: read x, write Z, read and write the pairs, read the indices.
        Backward: read the pair gradient, write and read the ``F×F`` gradient,
        read x and write its gradient (B)."""
        b, f, d = params["BATCH"], params["F"], params["D"]
        pairs = b * f * (f - 1) // 2
        index = 2 * _INDEX_BYTES * (f * (f - 1) // 2)
        if direction == "forward":
            elements = b * f * d + b * f * f + 2 * pairs
        else:
            elements = pairs + 2 * b * f * f + 2 * b * f * d
        return float(DTYPE_BYTES[dtype] * elements + index)

    def params_from_shapes(self, input_shapes):
        """The ``BATCH×F×D`` feature tensor, first input."""
        if not input_shapes or len(input_shapes[0]) != 3:
            return None
        b, f, d = input_shapes[0]
        return {"BATCH": b, "F": f, "D": d}


class IndexSelect(_Memory):
    """``torch.index_select(src, 0, idx)``: ``N`` random rows of a ``ROWS×COLS``
    source. Backward: ``index_add`` into a zeroed ``ROWS×COLS`` gradient.
    ``ROWS`` sets only the index range (cache reuse) forward, so the work
    is monotone in ``COLS`` and ``N`` only."""

    name = "index_select"
    params = ("ROWS", "COLS", "N")
    directions = ("forward", "backward")
    trace_names = ("aten::index_select",)
    monotone_params = ("COLS", "N")
    ranges = {"ROWS": (1, 65536), "COLS": (8, 1024), "N": (1, 16384)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        grad = direction == "backward"
        src = torch.randn(params["ROWS"], params["COLS"], dtype=torch_dtype(dtype), device=device,
                          requires_grad=grad)
        gen = torch.Generator().manual_seed(0)
        idx = torch.randint(0, params["ROWS"], (params["N"],), generator=gen).to(device)
        if not grad:
            return lambda: torch.index_select(src, 0, idx)
        out = torch.index_select(src, 0, idx)
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (src,), grad_out, retain_graph=True)

    def flops(self, params, direction):
        """Elements gathered forward, added backward (FLOP)."""
        return float(params["N"] * params["COLS"])

    def bytes_moved(self, params, dtype, direction):
        """Forward: read and write ``N×COLS`` plus the indices. Backward also
        writes the zeroed ``ROWS×COLS`` gradient (B)."""
        rows, cols, n = params["ROWS"], params["COLS"], params["N"]
        elements = 2 * n * cols + (rows * cols if direction == "backward" else 0)
        return float(DTYPE_BYTES[dtype] * elements + _INDEX_BYTES * n)

    def params_from_shapes(self, input_shapes):
        """``(src, dim, index)`` shapes: a 2-D source and a 1-D index; dim 0 assumed."""
        shapes = [s for s in input_shapes if isinstance(s, (list, tuple)) and s]
        if len(shapes) < 2 or len(shapes[0]) != 2 or len(shapes[-1]) != 1:
            return None
        (rows, cols), (n,) = shapes[0], shapes[-1]
        return {"ROWS": rows, "COLS": cols, "N": n}


class ToDtype(_Memory):
    """``x.to(other)`` of ``ELEMS`` elements: float32 → bfloat16 when the op's
    dtype is float32, bfloat16 → float32 when it is bfloat16. Its backward is
    the reverse conversion, i.e. the other dtype's case, so forward only."""

    name = "to_dtype"
    params = ("ELEMS",)
    trace_names = ("aten::_to_copy",)
    ranges = {"ELEMS": (1, 1 << 24)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        target = torch.bfloat16 if dtype == "float32" else torch.float32
        x = torch.randn(params["ELEMS"], dtype=torch_dtype(dtype), device=device)
        return lambda: x.to(target)

    def flops(self, params, direction):
        """One conversion per element (FLOP)."""
        return float(params["ELEMS"])

    def bytes_moved(self, params, dtype, direction):
        """Read in ``dtype``, write in the other: 6 B per element either way (B)."""
        other = "bfloat16" if dtype == "float32" else "float32"
        return float((DTYPE_BYTES[dtype] + DTYPE_BYTES[other]) * params["ELEMS"])

    def params_from_shapes(self, input_shapes):
        """Elements of the first input; the dtypes are not in the shapes."""
        if not input_shapes or not isinstance(input_shapes[0], (list, tuple)):
            return None
        elems = math.prod(input_shapes[0])
        return {"ELEMS": elems} if elems >= 1 else None


class Copy(_Memory):
    """``dst.copy_(src)`` of ``ELEMS`` elements into a preallocated tensor.

    On a CPU both live in host memory (what an H2D/D2H copy is there). On a
    CUDA device the forward is host → device: a pinned host tensor
    ``.to(device, non_blocking=True)``. Device → host is not benchmarked.
    """

    name = "copy"
    params = ("ELEMS",)
    trace_names = ("aten::copy_",)
    ranges = {"ELEMS": (1, 1 << 24)}

    def make_runner(self, params, dtype, direction, device):
        import torch

        t = dict(dtype=torch_dtype(dtype))
        if str(device).startswith("cuda"):
            host = torch.randn(params["ELEMS"], **t).pin_memory()
            return lambda: host.to(device, non_blocking=True)
        src = torch.randn(params["ELEMS"], device=device, **t)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)

    def flops(self, params, direction):
        """Elements written (FLOP)."""
        return float(params["ELEMS"])

    def bytes_moved(self, params, dtype, direction):
        """Every element read once and written once (B)."""
        return 2.0 * DTYPE_BYTES[dtype] * params["ELEMS"]

    def params_from_shapes(self, input_shapes):
        """``(dst, src)`` of equal element counts."""
        if len(input_shapes) < 2 or not all(isinstance(s, (list, tuple)) for s in input_shapes[:2]):
            return None
        elems = math.prod(input_shapes[0])
        return {"ELEMS": elems} if elems >= 1 and elems == math.prod(input_shapes[1]) else None


OPS = (Cat(), TransposeContiguous(), DlrmInteraction(), IndexSelect(), ToDtype(), Copy())
