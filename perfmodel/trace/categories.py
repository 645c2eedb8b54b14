"""Which kind of memory-bound work a trace node does, for nodes no op definition prices.

A node that no op definition recognises is priced by the generic model
(:mod:`perfmodel.fit.generic`) from the work of its leaf ATen nodes: each leaf
falls into one category, and its bytes are those of the distinct tensors it
reads and writes (:func:`perfmodel.trace.graph.tensor_bytes`):

- ``pointwise``: element by element, output as large as the input
  (``aten::pow``, ``aten::where``, ``aten::addcdiv_``, activation backwards);
- ``reduction``: output much smaller than the input (``aten::amax``, ``aten::var``);
- ``gather_scatter``: reads or writes through an int64 index
  (``aten::index``, ``aten::scatter_add_``, ``aten::embedding_dense_backward``);
- ``layout``: copies data into a new layout (``aten::copy_``, ``aten::cat``,
  ``aten::constant_pad_nd``, ``aten::slice_backward``).

A name in :data:`NAMED` takes its category from there; any other ATen leaf
with tensors is classed from its tensors: an int64 input of more than one
element makes it ``gather_scatter``, an output under half the largest input's
elements ``reduction``, otherwise ``pointwise``. Views, allocations
(:data:`NO_WORK`) and nodes without tensors do no memory-bound work, and
compute-bound ops (:data:`COMPUTE_BOUND`) are not priced by bytes: they have
no category, and the overhead table prices them. A node with no category that
is pure host work (:func:`host_only`: views, allocations, autograd's
bookkeeping, ``zero_grad``) is host overhead, priced per call by that table.
"""

from __future__ import annotations

import re

CATEGORIES = ("pointwise", "reduction", "gather_scatter", "layout")

_POINTWISE = """abs add add_ addcdiv addcdiv_ addcmul addcmul_ bernoulli_ bitwise_and bitwise_not
bitwise_or clamp clamp_ clamp_min clamp_min_ cos div div_ dropout elu eq erf exp exp_ expm1 fill_
ge gelu gelu_backward gt hardswish hardtanh hardtanh_backward le leaky_relu lerp lerp_ log log1p
log_sigmoid logical_and logical_not logical_or lt masked_fill masked_fill_ maximum minimum mish mul
mul_ native_dropout native_dropout_backward ne neg normal_ pow pow_ reciprocal relu relu_ rsqrt
sigmoid sigmoid_backward sign silu silu_ silu_backward sin softplus sqrt sqrt_ square sub sub_
tanh tanh_backward threshold_backward uniform_ where zero_ _foreach_add_ sgn""".split()
_REDUCTION = """all amax amin any argmax argmin linalg_vector_norm logsumexp max mean min norm prod
std sum var var_mean std_mean _softmax_backward_data _log_softmax_backward_data""".split()
_GATHER_SCATTER = """embedding embedding_dense_backward gather index index_add index_add_
index_copy index_copy_ index_fill_ index_put index_put_ index_select masked_scatter
masked_scatter_ masked_select nll_loss_forward nll_loss_backward nonzero scatter scatter_
scatter_add scatter_add_ scatter_reduce take _index_put_impl_ _embedding_bag
_embedding_bag_backward""".split()
_LAYOUT = """cat clone constant_pad_nd contiguous copy_ flip narrow_copy repeat roll
select_backward slice_backward stack tril triu _to_copy reflection_pad2d replication_pad2d
_unsafe_index""".split()

#: ATen op name -> category, for names whose tensors alone would mislead.
NAMED: dict[str, str] = {f"aten::{n}": cat for cat, names in (
    ("pointwise", _POINTWISE), ("reduction", _REDUCTION), ("gather_scatter", _GATHER_SCATTER),
    ("layout", _LAYOUT)) for n in names}

#: ATen ops that allocate or alias and move no data of their own.
NO_WORK = frozenset(f"aten::{n}" for n in """empty empty_like empty_strided new_empty
new_empty_strided resize_ as_strided set_ detach detach_ alias lift_fresh item
_local_scalar_dense result_type size stride is_nonzero record_stream to type_as""".split())

#: ATen ops whose time is compute-bound (GEMMs, convolutions, recurrent layers):
#: bytes do not price them, so they get no category.
COMPUTE_BOUND = frozenset(f"aten::{n}" for n in """mm bmm addmm baddbmm addbmm matmul linear
einsum convolution _convolution conv1d conv2d conv3d conv_transpose1d conv_transpose2d
mkldnn_convolution convolution_backward _slow_conv2d_forward _slow_conv2d_backward
slow_conv_transpose2d lstm gru rnn_tanh mkldnn_rnn_layer mkldnn_rnn_layer_backward
_scaled_dot_product_flash_attention_for_cpu scaled_dot_product_attention
_scaled_dot_product_flash_attention_for_cpu_backward""".split())

#: ATen ops that return a view of their input (or split it into views): no data
#: moves unless the node also copies, which then shows as a categorised leaf.
VIEWS = frozenset(f"aten::{n}" for n in """view view_as reshape _reshape_alias _unsafe_view
transpose transpose_ t t_ permute unsqueeze unsqueeze_ squeeze squeeze_ flatten unflatten unbind
expand expand_as select slice split split_with_sizes chunk narrow diagonal movedim swapaxes
unfold real imag numpy_T mT""".split())

#: How the trace names autograd's run of one backward function.
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "
_BACKWARD = re.compile(r"^([A-Za-z]+?)Backward\d*$")


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def host_only(name: str) -> bool:
    """Whether a trace node ``name`` with no memory-bound work (no categorised
    leaf) is pure host work: a view, an allocation (:data:`NO_WORK`), autograd's
    bookkeeping (``AccumulateGrad``, and the backward of a memory-bound op or a
    view that only passed its gradient on or returned views of it, such as
    ``AddBackward0`` or ``CatBackward0``)
    or an optimizer's ``zero_grad`` (a Python loop over the parameters). Such
    nodes cost host time per call, which the overhead table prices; a
    compute-bound node (a GEMM's backward, an RNN layer's) is not host-only."""
    if name.startswith("Optimizer.zero_grad"):
        return True
    if name in VIEWS or name in NO_WORK:
        return True
    if not name.startswith(AUTOGRAD_PREFIX):
        return False
    function = name[len(AUTOGRAD_PREFIX):]
    if function == "torch::autograd::AccumulateGrad":
        return True
    match = _BACKWARD.match(function)
    if match is None:
        return False
    forward = _snake(match.group(1))
    return any(f in VIEWS or f in NO_WORK or f in NAMED
               for f in (f"aten::{forward}", f"aten::_{forward}"))


#: Element size of an int64 tensor (B): how an index tensor shows in a trace.
_INT64_BYTES = 8


def leaf_category(name: str, is_view: bool, inputs: list[list], outputs: list[list]
                  ) -> str | None:
    """The category of one leaf ATen node ``name`` whose tensors are the ET
    values ``[id, storage, offset, numel, element size, device]`` of its inputs
    and outputs; None when it does no memory-bound work (see the module doc)."""
    if not name.startswith("aten::") or is_view or name in NO_WORK or \
            name in COMPUTE_BOUND or not (inputs or outputs):
        return None
    named = NAMED.get(name)
    if named is not None:
        return named
    if any(t[4] == _INT64_BYTES and t[3] > 1 for t in inputs) and \
            any(t[4] != _INT64_BYTES for t in inputs):
        return "gather_scatter"
    largest_in = max((t[3] for t in inputs), default=0)
    largest_out = max((t[3] for t in outputs), default=0)
    if largest_in > 1 and 2 * largest_out < largest_in:
        return "reduction"
    return "pointwise"


def add_part(parts: dict[str, list[float]], category: str, nbytes: float) -> None:
    """Count one leaf of ``category`` moving ``nbytes`` into ``parts``
    (category -> ``[leaves, bytes]``)."""
    count_bytes = parts.setdefault(category, [0, 0.0])
    count_bytes[0] += 1
    count_bytes[1] += float(nbytes)

