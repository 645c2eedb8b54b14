"""RNN family: ``lstm`` and ``gru``, i.e. a whole ``nn.LSTM`` / ``nn.GRU`` layer stack
(unidirectional) in training mode, forward and backward. The microbenchmark runs a
batch_first stack with biases and no dropout; a traced stack without biases, with
dropout or sequence-first is priced as that.

A trace shows the stack as one ``aten::lstm`` / ``aten::gru`` node. Below it a CPU
runs one ``aten::mkldnn_rnn_layer`` per LSTM layer (backward: one
``MkldnnRnnLayerBackward0`` per layer) but a GRU step by step (``aten::linear``,
``aten::sigmoid_``, ... per time step, and as many autograd nodes); a GPU runs one
cuDNN call. The op task is the whole node, its backward every autograd node of
its subtree. Bidirectional stacks, LSTM projections and packed sequences are not
recognised (the graph opens their node).
"""

from __future__ import annotations

from typing import Mapping

from perfmodel.ops.base import DTYPE_BYTES, OpDef, log_uniform_ints, sample_configs, torch_dtype

#: Configs per profile (``smoke``: the fewest a fit can score, see
#: ``perfmodel.fit.fitting.MIN_CONFIGS``) and the largest forward FLOP count of one call.
_CONFIGS = {"smoke": 4, "quick": 16, "gpu": 16, "full": 400}
_MAX_FLOPS = {"smoke": 2e5, "quick": 5e7, "gpu": 5e11, "full": 5e11}
#: The most sequential cell steps (SEQ·LAYERS) of one call: a CPU's GRU runs some
#: ten ATen ops per step, forward and backward, so its time grows with the steps
#: whatever their size.
_MAX_STEPS = {"smoke": 8, "quick": 64, "gpu": 2048, "full": 2048}
#: (low, high) per param, per profile.
_RANGES = {
    "smoke": {"BATCH": (1, 4), "SEQ": (2, 4), "INPUT": (4, 16), "HIDDEN": (4, 16),
              "LAYERS": (1, 2)},
    "quick": {"BATCH": (1, 64), "SEQ": (1, 64), "INPUT": (8, 512), "HIDDEN": (8, 512),
              "LAYERS": (1, 3)},
    "gpu": {"BATCH": (1, 256), "SEQ": (1, 512), "INPUT": (16, 2048), "HIDDEN": (16, 2048),
            "LAYERS": (1, 4)},
    "full": {"BATCH": (1, 256), "SEQ": (1, 1024), "INPUT": (8, 4096), "HIDDEN": (8, 4096),
             "LAYERS": (1, 6)},
}
#: A config the ``gpu`` profile adds to its draw (which seldom nears the cap): a
#: two-layer stack of 1024 units over 128 steps of a batch of 64.
_GPU_LARGE = {"BATCH": 64, "SEQ": 128, "INPUT": 1024, "HIDDEN": 1024, "LAYERS": 2}
#: Elementwise FLOP per hidden unit per step: the two bias adds per gate, the gate
#: nonlinearities and the cell (LSTM) or interpolation (GRU) update.
_ELEMENTWISE_FLOP_PER_HIDDEN = 17.0
#: Backward FLOP over forward FLOP: gradients of the input and of the weights,
#: each a GEMM as large as the forward's.
BACKWARD_FLOP_RATIO = 2.0
#: ATen scalar arguments after ``params`` in ``aten::lstm`` / ``aten::gru``:
#: has_biases, num_layers, dropout, train, bidirectional, batch_first.
_FLAG_TYPES = ["Bool", "Int", "Double", "Bool", "Bool", "Bool"]


class _Rnn(OpDef):
    """A stack of ``LAYERS`` recurrent layers over a BATCH×SEQ×INPUT input with
    HIDDEN units each; ``gates`` gate blocks per layer, ``states`` state tensors
    (h, and c for an LSTM)."""

    family = "rnn"
    params = ("BATCH", "SEQ", "INPUT", "HIDDEN", "LAYERS")
    directions = ("forward", "backward")
    dtypes = ("float32",)
    gates = 0
    states = 1
    module = ""

    def generate_configs(self, profile):
        """Distinct configs drawn log-uniformly (seeded); INPUT and HIDDEN
        multiples of 8 in every other config; under the profile's FLOP and step
        caps (``gpu`` adds :data:`_GPU_LARGE`)."""
        ranges = _RANGES[profile]

        def draw(rng, n):
            width = 8 if n % 2 == 0 and ranges["HIDDEN"][0] >= 8 else 1
            return {"BATCH": log_uniform_ints(rng, *ranges["BATCH"]),
                    "SEQ": log_uniform_ints(rng, *ranges["SEQ"]),
                    "INPUT": log_uniform_ints(rng, *ranges["INPUT"], multiple=width),
                    "HIDDEN": log_uniform_ints(rng, *ranges["HIDDEN"], multiple=width),
                    "LAYERS": rng.randint(*ranges["LAYERS"])}

        configs = sample_configs(f"{self.name}-{profile}", self.params, _CONFIGS[profile], draw,
                                 lambda c: self.flops(c, "forward") <= _MAX_FLOPS[profile]
                                 and c["SEQ"] * c["LAYERS"] <= _MAX_STEPS[profile])
        if profile == "gpu" and _GPU_LARGE not in configs:
            configs.append(dict(_GPU_LARGE))
        return sorted(configs, key=lambda c: self.flops(c, "forward"))

    def make_runner(self, params, dtype, direction, device):
        """``nn.LSTM`` / ``nn.GRU`` in training mode, its parameters requiring
        gradients (as in a training step), called on x and zero initial states;
        the backward takes the gradients of x and of every parameter."""
        import torch

        t = dict(dtype=torch_dtype(dtype), device=device)
        batch, seq, hidden, layers = params["BATCH"], params["SEQ"], params["HIDDEN"], \
            params["LAYERS"]
        rnn = getattr(torch.nn, self.module)(params["INPUT"], hidden, num_layers=layers,
                                             batch_first=True).to(**t)
        grad = direction == "backward"
        x = torch.randn(batch, seq, params["INPUT"], requires_grad=grad, **t)
        zeros = [torch.zeros(layers, batch, hidden, **t) for _ in range(self.states)]
        hx = tuple(zeros) if self.states > 1 else zeros[0]
        if not grad:
            return lambda: rnn(x, hx)
        out, _ = rnn(x, hx)
        grad_out = torch.randn_like(out)
        wrt = (x, *rnn.parameters())
        return lambda: torch.autograd.grad(out, wrt, grad_out, retain_graph=True)

    def _layer_inputs(self, params: Mapping[str, int]) -> list[int]:
        """Input width of each layer: INPUT, then HIDDEN."""
        return [params["INPUT"]] + [params["HIDDEN"]] * (params["LAYERS"] - 1)

    def flops(self, params, direction):
        """FLOP: per step, sample and layer 2·gates·(in + HIDDEN)·HIDDEN for the
        two GEMMs (in: the layer's input width) and
        :data:`_ELEMENTWISE_FLOP_PER_HIDDEN`·HIDDEN elementwise; backward
        :data:`BACKWARD_FLOP_RATIO` times the forward."""
        h = params["HIDDEN"]
        per_step = sum(2.0 * self.gates * (i + h) * h + _ELEMENTWISE_FLOP_PER_HIDDEN * h
                       for i in self._layer_inputs(params))
        forward = params["BATCH"] * params["SEQ"] * per_step
        return forward if direction == "forward" else BACKWARD_FLOP_RATIO * forward

    def bytes_moved(self, params, dtype, direction):
        """B: forward reads each layer's weights and biases, its input sequence
        and initial states, and writes its output sequence, the gate activations
        it keeps for the backward, and its final states; backward reads all of
        that and grad_out and writes the gradients of the weights and of each
        layer's input."""
        b, s, h = params["BATCH"], params["SEQ"], params["HIDDEN"]
        weights = sum(self.gates * h * (i + h) + 2 * self.gates * h
                      for i in self._layer_inputs(params))
        inputs = sum(b * s * i for i in self._layer_inputs(params))
        layers = params["LAYERS"]
        elements = (weights + inputs + layers * b * s * (h + self.gates * h)
                    + 2 * self.states * layers * b * h)
        if direction == "backward":
            elements += weights + inputs + b * s * h  # grad weights, grad inputs, grad_out
        return DTYPE_BYTES[dtype] * elements

    def params_from_node(self, node):
        """The config of an ``aten::lstm`` / ``aten::gru`` node (input, hx,
        params, has_biases, num_layers, dropout, train, bidirectional,
        batch_first): BATCH and SEQ from the 3-D input as ``batch_first`` says,
        INPUT and HIDDEN from the first layer's weights, LAYERS from
        ``num_layers``. None for a bidirectional stack, an LSTM with
        projections, or a packed sequence (other arguments)."""
        shapes, types, values = node.input_shapes, node.input_types, node.input_values
        if len(shapes) != 9 or len(types) != 9 or len(values) != 9 or \
                list(types[3:]) != _FLAG_TYPES:
            return None
        has_biases, layers, _, _, bidirectional, batch_first = values[3:]
        x, weights = list(shapes[0]), shapes[2]
        if bidirectional or not isinstance(layers, int) or layers < 1 or len(x) != 3 or \
                not isinstance(weights, list) or \
                len(weights) != layers * (4 if has_biases else 2) or \
                any(not isinstance(w, list) for w in weights[:2]) or \
                len(weights[0]) != 2 or len(weights[1]) != 2:
            return None
        (rows, inp), (rows_hh, hidden) = weights[0], weights[1]
        if rows != self.gates * hidden or rows_hh != rows or inp != x[2]:
            return None
        batch, seq = (x[0], x[1]) if batch_first else (x[1], x[0])
        config = {"BATCH": batch, "SEQ": seq, "INPUT": inp, "HIDDEN": hidden, "LAYERS": layers}
        return config if min(config.values()) >= 1 else None

    def params_from_shapes(self, input_shapes):
        """Shapes alone leave num_layers and batch_first unknown: see
        :meth:`params_from_node`."""
        return None


class Lstm(_Rnn):
    """``nn.LSTM``: 4 gates (input, forget, cell, output), states h and c."""

    name = "lstm"
    trace_names = ("aten::lstm",)
    gates = 4
    states = 2
    module = "LSTM"


class Gru(_Rnn):
    """``nn.GRU``: 3 gates (reset, update, new), state h."""

    name = "gru"
    trace_names = ("aten::gru",)
    gates = 3
    states = 1
    module = "GRU"


OPS = (Lstm(), Gru())
