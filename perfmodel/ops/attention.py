"""Attention family: ``sdpa``, i.e. ``torch.nn.functional.scaled_dot_product_attention``
(forward and backward) on self-attention inputs of shape B×H×S×DH."""

from __future__ import annotations


from perfmodel.ops.base import DTYPE_BYTES, OpDef, log_uniform_ints, sample_configs, torch_dtype

#: Configs per profile and the largest forward FLOP count of one call.
_CONFIGS = {"smoke": 4, "quick": 20, "gpu": 20, "full": 2000}
_MAX_FLOPS = {"smoke": 2e7, "quick": 2e8, "gpu": 1e11, "full": 5e11}
#: (low, high) per shape param, per profile.
_RANGES = {
    "smoke": {"B": (1, 2), "H": (1, 4), "S": (8, 128), "DH": (8, 64)},
    "quick": {"B": (1, 8), "H": (1, 16), "S": (16, 1024), "DH": (16, 128)},
    "gpu": {"B": (1, 64), "H": (1, 32), "S": (16, 4096), "DH": (16, 128)},
    "full": {"B": (1, 64), "H": (1, 64), "S": (16, 16384), "DH": (16, 256)},
}
#: Head dims drawn (elements): the ones models use.
_HEAD_DIMS = (8, 16, 32, 64, 80, 96, 128, 256)
#: The grid the ``gpu`` profile adds to its random draw (under its FLOP cap): the
#: sequence lengths, head dims and batch×heads that models use, causal and not, no
#: dropout. The log-uniform draw rarely reaches a full-size model's attention, and
#: the fit extrapolated there (priced it at 2-3x its kernels with the workloads'
#: own calls held out: docs/journal/2026-11-28-gpu-campaign-h100.md).
_GPU_GRID = {"S": (512, 2048), "DH": (64, 128), "BH": ((4, 8), (32, 16))}
#: Backward FLOP over forward FLOP: the backward recomputes QKᵀ and runs four
#: more matmuls of the same size (dV, dP, dQ, dK), 5 against the forward's 2.
BACKWARD_FLOP_RATIO = 2.5
#: The dropout probability a ``DROPOUT = 1`` config runs with (models use 0.1).
DROPOUT_P = 0.1
#: S×S tensors the unfused (math) path writes and reads again per call when
#: dropout is on: scores, softmax, dropout mask, dropped probabilities.
MATH_SCORE_TENSORS = 4


class Sdpa(OpDef):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL,
    dropout_p=0.1 if DROPOUT else 0)`` with q, k, v all B×H×S×DH (no explicit
    mask). ``CAUSAL`` and ``DROPOUT`` are 0 or 1: dropout in training sends the CPU
    to the unfused math path, several times slower forward than the fused kernel
    (measured at GPT-2's attention shape: docs/journal/2026-11-23-sweep-design.md)."""

    name = "sdpa"
    family = "attention"
    params = ("B", "H", "S", "DH", "CAUSAL", "DROPOUT")
    monotone_params = ("B", "H", "S", "DH")
    param_defaults = {"DROPOUT": 0}  # measured before DROPOUT existed: no dropout
    directions = ("forward", "backward")
    dtypes = ("float32", "bfloat16")
    trace_names = ("aten::scaled_dot_product_attention",
                   "aten::_scaled_dot_product_flash_attention_for_cpu",
                   "aten::_scaled_dot_product_flash_attention",
                   "aten::_scaled_dot_product_efficient_attention",
                   "aten::_scaled_dot_product_cudnn_attention",
                   "aten::_scaled_dot_product_attention_math")

    def generate_configs(self, profile):
        """Distinct configs drawn log-uniformly (seeded), half of them causal and,
        crossed with that, half with dropout."""
        ranges = _RANGES[profile]
        dims = [d for d in _HEAD_DIMS if ranges["DH"][0] <= d <= ranges["DH"][1]]

        def draw(rng, n):
            return {"B": log_uniform_ints(rng, *ranges["B"]),
                    "H": log_uniform_ints(rng, *ranges["H"]),
                    "S": log_uniform_ints(rng, *ranges["S"], multiple=8),
                    "DH": rng.choice(dims), "CAUSAL": n % 2, "DROPOUT": n // 2 % 2}

        def within(c):
            return self.flops(c, "forward") <= _MAX_FLOPS[profile]

        configs = sample_configs(f"{self.name}-{profile}", self.params, _CONFIGS[profile], draw,
                                 within)
        if profile == "gpu":
            configs += [c for c in self._grid() if within(c) and c not in configs]
        return sorted(configs, key=lambda c: self.flops(c, "forward"))

    @staticmethod
    def _grid() -> list[dict[str, int]]:
        """The :data:`_GPU_GRID` configs."""
        return [{"B": b, "H": h, "S": s, "DH": dh, "CAUSAL": causal, "DROPOUT": 0}
                for s in _GPU_GRID["S"] for dh in _GPU_GRID["DH"] for b, h in _GPU_GRID["BH"]
                for causal in (0, 1)]

    def make_runner(self, params, dtype, direction, device):
        import torch
        import torch.nn.functional as F

        t = dict(dtype=torch_dtype(dtype), device=device)
        grad = direction == "backward"
        shape = (params["B"], params["H"], params["S"], params["DH"])
        q, k, v = (torch.randn(*shape, requires_grad=grad, **t) for _ in range(3))
        kw = dict(is_causal=bool(params["CAUSAL"]),
                  dropout_p=DROPOUT_P if params["DROPOUT"] else 0.0)
        if not grad:
            return lambda: F.scaled_dot_product_attention(q, k, v, **kw)
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        grad_out = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)

    def flops(self, params, direction):
        """FLOP of the two matmuls: 4·B·H·S²·DH forward (QKᵀ and PV), halved
        when causal (any nonzero CAUSAL); backward is ``BACKWARD_FLOP_RATIO``
        (2.5) times that. Softmax FLOPs are not counted."""
        b, h, s, dh = params["B"], params["H"], params["S"], params["DH"]
        forward = 4.0 * b * h * s * s * dh / (2.0 if params["CAUSAL"] else 1.0)
        return forward if direction == "forward" else BACKWARD_FLOP_RATIO * forward

    def bytes_moved(self, params, dtype, direction):
        """B of a fused (flash) kernel that never writes the S×S scores:
        forward reads q, k, v and writes out and the fp32 logsumexp per row;
        backward reads q, k, v, out, grad_out and the logsumexp and writes
        grad_q, grad_k and grad_v. Independent of CAUSAL. With ``DROPOUT`` the
        math path also writes and reads :data:`MATH_SCORE_TENSORS` S×S tensors."""
        b, h, s, dh = params["B"], params["H"], params["S"], params["DH"]
        tensors = 4 if direction == "forward" else 8
        scores = 2.0 * MATH_SCORE_TENSORS * b * h * s * s if params.get("DROPOUT") else 0.0
        return DTYPE_BYTES[dtype] * (tensors * b * h * s * dh + scores) + 4.0 * b * h * s

    def params_from_shapes(self, input_shapes):
        """``B``, ``H``, ``S`` and ``DH`` from ``[q, k, v, attn_mask?, ...]``.

        ``CAUSAL`` is a bool argument, absent from shapes, so it is *not* in
        the result: the caller adds it from the node's concrete arguments.
        None unless q, k and v are 4-D shapes of self-attention with no explicit
        mask: equal, or (grouped-query attention, ``enable_gqa``) k and v equal
        with fewer heads that divide q's, priced as q's heads (the FLOPs are
        q's; k and v are read once per group).
        """
        if len(input_shapes) < 3:
            return None
        q, k, v = (list(s) for s in input_shapes[:3])
        if len(q) != 4 or len(k) != 4 or k != v or min(q) < 1 or min(k) < 1:
            return None
        if q != k and not (q[0] == k[0] and q[2:] == k[2:] and q[1] % k[1] == 0):
            return None
        if len(input_shapes) > 3 and list(input_shapes[3]):
            return None
        return dict(zip(("B", "H", "S", "DH"), q))

    def params_from_node(self, node):
        """The shapes' ``B``, ``H``, ``S``, ``DH``, ``CAUSAL`` from the
        ``is_causal`` argument (the first Bool input; 0 when absent) and
        ``DROPOUT`` from ``dropout_p`` (the first Double input; 1 when > 0)."""
        params = self.params_from_shapes(node.input_shapes)
        if params is None:
            return None
        typed = list(zip(node.input_types, node.input_values))
        flags = [v for t, v in typed if t == "Bool"]
        doubles = [v for t, v in typed if t == "Double"]
        dropout = bool(doubles) and isinstance(doubles[0], (int, float)) and doubles[0] > 0
        return {**params, "CAUSAL": int(bool(flags and flags[0])), "DROPOUT": int(dropout)}


OPS = (Sdpa(),)
