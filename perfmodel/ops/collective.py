"""Collective family: torch.distributed collectives across the ranks of one world.

``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` (even splits),
``all_to_all_uneven`` (a fixed uneven split pattern) and ``broadcast``, in float32.
A config is ``world_size`` (ranks) and ``bytes`` (each rank's input message, B).
Each op states here, once, the bytes its algorithm bandwidth divides by
(:meth:`Collective.algo_bytes`, as nccl-tests and PARAM count them) and its bus
factor (:meth:`Collective.bus_factor`): busbw = algbw x factor, comparable across
world sizes. Runners need an initialised process group
(:func:`perfmodel.world.init_distributed`) of exactly ``world_size`` ranks.
"""

from __future__ import annotations

from perfmodel.ops.base import DTYPE_BYTES, OpDef, check_profile, torch_dtype

#: World sizes of each profile; ``smoke`` includes a world of one so that a plain
#: (single-process) CI run covers the whole collective pipeline too.
WORLD_SIZES = {"smoke": (1, 2), "quick": (2, 4), "gpu": (2, 4, 8), "full": (2, 4, 8)}
#: Message sizes of each profile: exponents of 2 (B). ``quick``'s are 4x apart up to
#: 512 KiB and 2x apart from 1 MiB, where the caches and the host allocator bend the
#: curve: gloo's time per byte can step up between two sizes, and with sizes 4x
#: apart a held-out fold cannot place the step (see
#: docs/journal/2026-11-26-collective-sizes.md).
SIZE_EXPONENTS = {"smoke": (6, 12, 16, 20),
                  "quick": tuple(range(3, 20, 2)) + tuple(range(20, 27)),
                  "gpu": tuple(range(3, 30, 2)),
                  "full": tuple(range(3, 29))}
#: c10d's wrapper node that records a collective's parameters (NCCL traces).
RECORD_PARAM_COMMS = "record_param_comms"
#: The direction under which a collective's host CPU time per call is fitted:
#: each rank's process CPU seconds (its own thread and the backend's workers)
#: over the timed calls, mean over ranks (``rank_cpu_s`` of the microbench
#: record). Not a training direction: no microbench item runs it.
HOST_CPU = "host_cpu"
#: The direction under which a collective's *loaded* time is fitted: its wall
#: time from issue to completion while every rank's own thread keeps computing
#: (``loaded_s`` of the microbench record, the mean over calls of the slowest
#: rank's). Gloo's worker threads then wait for the cores, and a collective takes
#: several times its idle time, far more where the ranks' threads outnumber the
#: cores (see docs/journal/2026-11-25-collectives.md). Measured on CPU devices
#: only (NCCL runs on the GPU). Not a training direction: no microbench item runs it.
LOADED = "loaded"


class Collective(OpDef):
    """One collective. Subclasses set ``name``, ``trace_names``, ``_factor`` (the
    bus factor's numerator kind) and override :meth:`call`."""

    family = "collective"
    params = ("world_size", "bytes")
    #: More ranks do not always mean more bytes per rank (broadcast), so only
    #: the message size is monotone.
    monotone_params = ("bytes",)
    dtypes = ("float32",)
    directions = ("forward",)
    #: Bus factor: "allreduce" 2(n-1)/n, "ring" (n-1)/n, "one" 1.
    _factor = "ring"
    #: Index of the input tensor among a c10d node's inputs.
    _trace_input = 1
    #: Whether each rank's element count must divide by the world size.
    _divisible = False
    #: Whether a reduction runs (one add per reduced element and step).
    _reduces = False

    @property
    def predicted(self) -> tuple[str, ...]:
        """Its time, its host CPU time (:data:`HOST_CPU`) and its time under
        compute load (:data:`LOADED`)."""
        return (*self.directions, HOST_CPU, LOADED)

    # -- facts ---------------------------------------------------------------------
    def bus_factor(self, world_size: int) -> float:
        """busbw / algbw (dimensionless): 2(n-1)/n all_reduce, (n-1)/n
        all_gather, reduce_scatter and all_to_all, 1 broadcast."""
        n = world_size
        return {"allreduce": 2.0 * (n - 1) / n, "ring": (n - 1) / n, "one": 1.0}[self._factor]

    def algo_bytes(self, params) -> float:
        """Bytes the algorithm bandwidth divides by (B): the larger of one rank's
        input and output buffer (``bytes``; ``world_size x bytes`` for all_gather)."""
        return float(params["bytes"])

    def bus_bytes(self, params) -> float:
        """Bytes each rank moves over the bus (B): algo bytes x bus factor."""
        return self.algo_bytes(params) * self.bus_factor(params["world_size"])

    def flops(self, params, direction):
        """Reduction adds of one rank (FLOP): (n-1)/n x elements for the reducing
        collectives, none otherwise."""
        if not self._reduces:
            return 0.0
        n = params["world_size"]
        return params["bytes"] / DTYPE_BYTES["float32"] * (n - 1) / n

    def bytes_moved(self, params, dtype, direction):
        """The algorithm bytes (B)."""
        return self.algo_bytes(params)

    # -- shape space ----------------------------------------------------------------
    def valid(self, world_size: int, nbytes: int) -> bool:
        """Whether ``nbytes`` of float32 splits into this collective's chunks."""
        elements, rest = divmod(nbytes, DTYPE_BYTES["float32"])
        return rest == 0 and elements >= 1 and not (self._divisible and elements % world_size)

    def generate_configs(self, profile):
        check_profile(profile)
        return [{"world_size": n, "bytes": 1 << e} for n in WORLD_SIZES[profile]
                for e in SIZE_EXPONENTS[profile] if self.valid(n, 1 << e)]

    # -- running --------------------------------------------------------------------
    def make_runner(self, params, dtype, direction, device):
        """A callable that runs the collective once on every rank and waits for it
        (up to the world's per-collective timeout)."""
        from perfmodel.world import current_world

        issue, world = self.make_issue(params, dtype, device), current_world()
        return lambda: world.wait(issue(), self.name, params)

    def make_issue(self, params, dtype, device):
        """A callable that issues the collective once (async) on this rank and
        returns its work handle; the caller waits for it."""
        import torch

        from perfmodel.world import current_world

        world = current_world()
        if world.size != params["world_size"]:
            raise ValueError(f"{self.name} needs world_size={params['world_size']}, "
                             f"this world has {world.size}")
        elements = params["bytes"] // DTYPE_BYTES[dtype]
        x = torch.ones(elements, dtype=torch_dtype(dtype), device=device)
        return self.call(x, world.rank, world.size)

    def call(self, x, rank: int, world_size: int):
        """A zero-argument function issuing the collective (async) on input ``x``
        and returning its work handle."""
        raise NotImplementedError

    # -- trace mapping --------------------------------------------------------------
    #: Collective names a ``record_param_comms`` node gives this op.
    _comms_names: tuple[str, ...] = ()

    def _is_instance(self, node, comms) -> bool:
        """Whether a node of one of ``trace_names`` is this op (not a sibling op
        sharing the name); ``comms`` is its ``record_param_comms`` node."""
        return any(v in self._comms_names for v in comms.input_values if isinstance(v, str))

    def params_from_node(self, node):
        """``bytes`` from the node's input tensor; ``world_size`` from a
        ``record_param_comms`` node (itself or a descendant), which NCCL traces
        carry (its last integer argument). None when either is missing."""
        comms = next((n for n in node.walk() if n.name == RECORD_PARAM_COMMS), None)
        if comms is None or not self._is_instance(node, comms):
            return None
        ints = [v for v in comms.input_values if isinstance(v, int) and not isinstance(v, bool)]
        tensors = node.tensors("inputs")
        if not ints or not tensors:
            return None
        index = min(self._trace_input, len(tensors) - 1) if node.name != RECORD_PARAM_COMMS else 0
        _, _, _, numel, elem_size, _ = tensors[index]
        return {"world_size": int(ints[-1]), "bytes": int(numel * elem_size)}

    #: all_to_all only: whether the op has split-size lists (None: not an all_to_all).
    _uneven: bool | None = None

    def params_from_c10d(self, node, world_size: int):
        """The config of a c10d node in a trace without ``record_param_comms``
        (gloo on CPU): ``bytes`` from its input tensor, ``world_size`` given (the
        trace's process group). None when the node is not an instance of this op."""
        tensors = node.tensors("inputs")
        if node.name == RECORD_PARAM_COMMS or not tensors or \
                (self._uneven is not None and self._uneven != _has_splits(node)):
            return None
        _, _, _, numel, elem_size, _ = tensors[min(self._trace_input, len(tensors) - 1)]
        return {"world_size": int(world_size), "bytes": int(numel * elem_size)}


class AllReduce(Collective):
    name = "all_reduce"
    trace_names = ("c10d::allreduce_", RECORD_PARAM_COMMS)
    _factor = "allreduce"
    _trace_input = 0
    _reduces = True
    _comms_names = ("allreduce", "all_reduce")

    def call(self, x, rank, world_size):
        import torch.distributed as dist

        return lambda: dist.all_reduce(x, async_op=True)


class AllGather(Collective):
    name = "all_gather"
    trace_names = ("c10d::allgather_", "c10d::_allgather_base_", RECORD_PARAM_COMMS)
    _comms_names = ("allgather", "all_gather", "_allgather_base", "all_gather_into_tensor")

    def algo_bytes(self, params):
        """The gathered output (B): ``world_size x bytes``."""
        return float(params["world_size"] * params["bytes"])

    def call(self, x, rank, world_size):
        import torch
        import torch.distributed as dist

        out = torch.empty(world_size * x.numel(), dtype=x.dtype, device=x.device)
        # torch 2.11 has only the older name
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, x, async_op=True)


class ReduceScatter(Collective):
    name = "reduce_scatter"
    trace_names = ("c10d::reduce_scatter_", "c10d::_reduce_scatter_base_", RECORD_PARAM_COMMS)
    _divisible = True
    _reduces = True
    _comms_names = ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor")

    def call(self, x, rank, world_size):
        import torch
        import torch.distributed as dist

        out = torch.empty(x.numel() // world_size, dtype=x.dtype, device=x.device)
        # torch 2.11 has only the older name
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, x, async_op=True)


class AllToAll(Collective):
    name = "all_to_all"
    trace_names = ("c10d::alltoall_base_", RECORD_PARAM_COMMS)
    _divisible = True
    _uneven = False
    _comms_names = ("all_to_all", "all_to_allv", "alltoall", "alltoall_base")

    def _is_instance(self, node, comms):
        """Even splits: the split-size lists are empty."""
        return super()._is_instance(node, comms) and not _has_splits(comms)

    def call(self, x, rank, world_size):
        import torch
        import torch.distributed as dist

        out = torch.empty_like(x)
        return lambda: dist.all_to_all_single(out, x, async_op=True)


def _has_splits(node) -> bool:
    """Whether a comms node lists split sizes (a non-empty list argument)."""
    return any(isinstance(v, list) and v and all(isinstance(i, int) for i in v)
               for v in node.input_values)


def uneven_splits(elements: int, world_size: int, sender: int) -> list[int]:
    """Elements ``sender`` sends to each rank in ``all_to_all_uneven``: shares
    proportional to 1, 2, ..., n, rotated by the sender, the remainder to the
    last; deterministic, and summing to ``elements``."""
    weights = [1 + (sender + peer) % world_size for peer in range(world_size)]
    splits = [elements * w // sum(weights) for w in weights]
    splits[-1] += elements - sum(splits)
    return splits


class AllToAllUneven(Collective):
    name = "all_to_all_uneven"
    trace_names = ("c10d::alltoall_base_", RECORD_PARAM_COMMS)
    _uneven = True
    _comms_names = AllToAll._comms_names

    def _is_instance(self, node, comms):
        """Uneven splits: a split-size list is given."""
        return super()._is_instance(node, comms) and _has_splits(comms)

    def call(self, x, rank, world_size):
        import torch
        import torch.distributed as dist

        send = uneven_splits(x.numel(), world_size, rank)
        receive = [uneven_splits(x.numel(), world_size, peer)[rank] for peer in range(world_size)]
        out = torch.empty(sum(receive), dtype=x.dtype, device=x.device)
        return lambda: dist.all_to_all_single(out, x, receive, send, async_op=True)


class Broadcast(Collective):
    name = "broadcast"
    trace_names = ("c10d::broadcast_", RECORD_PARAM_COMMS)
    _factor = "one"
    _trace_input = 0
    _comms_names = ("broadcast",)

    def call(self, x, rank, world_size):
        import torch.distributed as dist

        return lambda: dist.broadcast(x, src=0, async_op=True)


OPS = (AllReduce(), AllGather(), ReduceScatter(), AllToAll(), AllToAllUneven(), Broadcast())
