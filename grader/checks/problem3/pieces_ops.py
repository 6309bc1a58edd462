"""The grader's own 3.1 ops (child side): collectives and the autograd Functions pairing them,
written from plain ``torch.distributed``, and the helpers every piece shares (a dense linear
layer's master tensors, a submodule's master). See :mod:`grader.checks.problem3.pieces`."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _divide(n: int, what: str) -> int:
    t = _world()[1]
    if n % t:
        raise ValueError(f"{what} ({n}) must be divisible by the tensor-parallel size ({t})")
    return n // t


def _all_reduce(x):
    out = x.clone(memory_format=torch.contiguous_format)
    if _world()[1] > 1:
        dist.all_reduce(out)
    return out


def _gather(x, dim: int):
    rank, t = _world()
    if t == 1:
        return x.clone()
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(t)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=dim)


def _split(x, dim: int):
    rank, t = _world()
    size = _divide(x.shape[dim], "the split dimension")
    return x.narrow(dim, rank * size, size).clone(memory_format=torch.contiguous_format)


def _reduce_scatter(x):
    rank, t = _world()
    if t == 1:
        return x.clone()
    _divide(x.shape[0], "the first (sequence) dimension")
    blocks = [block.contiguous() for block in x.chunk(t, dim=0)]
    out = torch.empty_like(blocks[0])
    dist.reduce_scatter(out, blocks)
    return out


def _function(name: str, forward, backward):
    """An autograd Function named ``name`` with these two tensor maps."""
    def fwd(ctx, x):
        return forward(x)

    def bwd(ctx, grad):
        return backward(grad)

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


_Copy = _function("_CopyToModelParallelRegion", torch.clone, _all_reduce)
_Reduce = _function("_ReduceFromModelParallelRegion", _all_reduce, torch.clone)
_Scatter = _function("_ScatterToModelParallelRegion", lambda x: _split(x, -1), lambda g: _gather(g, -1))
_Gather = _function("_GatherFromModelParallelRegion", lambda x: _gather(x, -1), lambda g: _split(g, -1))
_ScatterSequence = _function("_ScatterToSequenceParallelRegion", lambda x: _split(x, 0), lambda g: _gather(g, 0))
_GatherSequence = _function("_GatherFromSequenceParallelRegion", lambda x: _gather(x, 0), _reduce_scatter)
_ReduceScatterSequence = _function("_ReduceScatterToSequenceParallelRegion", _reduce_scatter,
                                   lambda g: _gather(g, 0))

OPS = {
    "copy_to_tensor_model_parallel_region": _Copy.apply,
    "reduce_from_tensor_model_parallel_region": _Reduce.apply,
    "scatter_to_tensor_model_parallel_region": _Scatter.apply,
    "gather_from_tensor_model_parallel_region": _Gather.apply,
    "scatter_to_sequence_parallel_region": _ScatterSequence.apply,
    "gather_from_sequence_parallel_region": _GatherSequence.apply,
    "reduce_scatter_to_sequence_parallel_region": _ReduceScatterSequence.apply,
    "_reduce": _all_reduce, "_split_along_last_dim": lambda x: _split(x, -1),
    "_gather_along_last_dim": lambda x: _gather(x, -1), "_split_along_first_dim": lambda x: _split(x, 0),
    "_gather_along_first_dim": lambda x: _gather(x, 0), "_reduce_scatter_along_first_dim": _reduce_scatter,
}
OPS.update({cls.__name__: cls for cls in (_Copy, _Reduce, _Scatter, _Gather, _ScatterSequence, _GatherSequence,
                                          _ReduceScatterSequence)})


def _dense_linear_master(in_features, out_features, bias, seed, dtype):
    generator, bound = torch.Generator().manual_seed(seed), 1.0 / math.sqrt(in_features)
    dtype = dtype or torch.get_default_dtype()
    draw = lambda *shape: (torch.rand(*shape, generator=generator, dtype=dtype) * 2 - 1) * bound  # noqa: E731
    master = {"weight": draw(out_features, in_features)}
    if bias:
        master["bias"] = draw(out_features)
    return master


def _sub(master, prefix):
    return {k[len(prefix) + 1:]: v for k, v in (master or {}).items() if k.startswith(prefix + ".")}
