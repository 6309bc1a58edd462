"""The grader's own tensor-parallel pieces (child side), written here from plain
``torch.distributed`` (never the answer key), so that a criterion judges only the code of its
own sub-problem.

A criterion that needs a piece from another sub-problem (3.2's layers need 3.1's f and g, the
3.6 model needs 3.3's layers and 3.4's loss, ...) first runs the student's own pieces
everywhere (``params["pieces"] == "own"``, the default); only when that fails does the grader
run it again with these pieces bound in the student's module in place of the other
sub-problems' (``"grader"``, see ``fallback`` in grader/grading.py, and :func:`bound`): a
mistake in 3.1 then costs 3.1's criteria, not 3.2's as well, and a student's own helpers
never cost points. The pieces keep the student file's public names and signatures (the
contracts of ``tensor_parallel.py``), and name their parameters like the dense modules'
``state_dict`` (``qkv``/``out``, ``fc1``/``fc2``, ``ln1``/``ln2``) so that judges can read
gradients by name. Their collectives go through ``torch.distributed``'s module attributes, so
the recorder sees them like the student's.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


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


def _linear_master(master, in_features, out_features, bias, seed, dtype):
    """The dense linear layer's tensors: drawn from ``seed`` without a master; a master as the
    linear layers' contract admits it (exactly ``weight``, and ``bias`` when ``bias``, of the
    dense shapes: an empty dict is a master with neither), else ValueError, as the student's
    must. A lenient piece would let a model that hands its output layer ``{}`` pass."""
    if master is None:
        return _dense_linear_master(in_features, out_features, bias, seed, dtype)
    shapes = {"weight": (out_features, in_features), **({"bias": (out_features,)} if bias else {})}
    if set(master) != set(shapes):
        raise ValueError(f"master tensors must be {sorted(shapes)}, got {sorted(master)}")
    for name, shape in shapes.items():
        if tuple(master[name].shape) != shape:
            raise ValueError(f"master[{name!r}] must have shape {shape}, got {tuple(master[name].shape)}")
    return master


def _sub(master, prefix):
    return {k[len(prefix) + 1:]: v for k, v in (master or {}).items() if k.startswith(prefix + ".")}


class ColumnParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, gather_output=False, *, sequence_parallel=False,
                 seed=0, dtype=None, master=None):
        super().__init__()
        master = _linear_master(master, in_features, out_features, bias, seed, dtype)
        rank, size = _world()[0], _divide(out_features, "out_features")
        rows = slice(rank * size, (rank + 1) * size)
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel
        self.weight = nn.Parameter(master["weight"][rows].clone())
        self.bias = nn.Parameter(master["bias"][rows].clone()) if "bias" in master else None

    def forward(self, x):
        x = _GatherSequence.apply(x) if self.sequence_parallel else _Copy.apply(x)
        y = F.linear(x, self.weight, self.bias)
        return _Gather.apply(y) if self.gather_output else y


class RowParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, input_is_parallel=True, *, sequence_parallel=False,
                 seed=0, dtype=None, master=None):
        super().__init__()
        master = _linear_master(master, in_features, out_features, bias, seed, dtype)
        rank, size = _world()[0], _divide(in_features, "in_features")
        self.input_is_parallel, self.sequence_parallel = input_is_parallel, sequence_parallel
        self.weight = nn.Parameter(master["weight"][:, rank * size:(rank + 1) * size].clone())
        self.bias = nn.Parameter(master["bias"].clone()) if "bias" in master else None

    def forward(self, x):
        if not self.input_is_parallel:
            x = _Scatter.apply(x)
        partial = F.linear(x, self.weight)
        if not self.sequence_parallel:
            y = _Reduce.apply(partial)
            return y if self.bias is None else y + self.bias
        y = _ReduceScatterSequence.apply(partial)
        return y if self.bias is None else y + _Copy.apply(self.bias)


class ReplicatedLayerNorm(nn.LayerNorm):
    def __init__(self, hidden_size, eps=1e-5, *, sequence_parallel=False, dtype=None, master=None):
        super().__init__(hidden_size, eps=eps, dtype=master["weight"].dtype if master else dtype)
        self.sequence_parallel = sequence_parallel
        if master:
            with torch.no_grad():
                self.weight.copy_(master["weight"])
                self.bias.copy_(master["bias"])

    def forward(self, x):
        weight, bias = self.weight, self.bias
        if self.sequence_parallel:  # each rank saw its block of the sequence: sum the gradients
            weight, bias = _Copy.apply(weight), _Copy.apply(bias)
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


def layer_classes(student):
    """The grader's MLP, attention and layer, built on ``student``'s (or the grader's)
    ``ColumnParallelLinear``, ``RowParallelLinear`` and ``ReplicatedLayerNorm``, looked up
    when a module is built."""

    class ParallelMLP(nn.Module):
        def __init__(self, hidden_size, ffn_hidden_size, *, sequence_parallel=False, seed=0, dtype=None,
                     master=None):
            super().__init__()
            self.fc1 = student.ColumnParallelLinear(hidden_size, ffn_hidden_size, sequence_parallel=sequence_parallel,
                                                    seed=seed, dtype=dtype, master=_sub(master, "fc1") or None)
            self.fc2 = student.RowParallelLinear(ffn_hidden_size, hidden_size, sequence_parallel=sequence_parallel,
                                                 seed=seed + 1, dtype=dtype, master=_sub(master, "fc2") or None)

        def forward(self, x):
            return self.fc2(F.gelu(self.fc1(x)))

    class ParallelSelfAttention(nn.Module):
        def __init__(self, hidden_size, num_heads, *, causal=True, sequence_parallel=False, seed=0, dtype=None,
                     master=None):
            super().__init__()
            if hidden_size % num_heads:
                raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
            self.local_heads, self.head_dim = _divide(num_heads, "num_heads"), hidden_size // num_heads
            self.causal, t = causal, _world()[1]
            names = ("q", "k", "v", "out")
            master = master or {f"{n}.{k}": v for i, n in enumerate(names)
                                for k, v in _dense_linear_master(hidden_size, hidden_size, True, seed + i,
                                                                 dtype).items()}
            fused = {key: torch.cat([torch.cat(blocks) for blocks in zip(
                *(master[f"{n}.{key}"].chunk(t) for n in ("q", "k", "v")))]) for key in ("weight", "bias")}
            self.qkv = student.ColumnParallelLinear(hidden_size, 3 * hidden_size,
                                                    sequence_parallel=sequence_parallel, master=fused)
            self.out = student.RowParallelLinear(hidden_size, hidden_size, sequence_parallel=sequence_parallel,
                                                 master=_sub(master, "out"))

        def forward(self, x):
            qkv = self.qkv(x)
            s, b = qkv.shape[0], qkv.shape[1]
            q, k, v = (part.reshape(s, b, self.local_heads, self.head_dim).permute(1, 2, 0, 3)
                       for part in qkv.chunk(3, dim=-1))
            context = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            return self.out(context.permute(2, 0, 1, 3).reshape(s, b, self.local_heads * self.head_dim))

    class ParallelTransformerLayer(nn.Module):
        def __init__(self, hidden_size, num_heads, ffn_hidden_size=None, *, causal=True, sequence_parallel=False,
                     eps=1e-5, seed=0, dtype=None, master=None):
            super().__init__()
            master, sp = master or {}, sequence_parallel
            self.ln1 = student.ReplicatedLayerNorm(hidden_size, eps, sequence_parallel=sp, dtype=dtype,
                                                   master=_sub(master, "ln1"))
            self.ln2 = student.ReplicatedLayerNorm(hidden_size, eps, sequence_parallel=sp, dtype=dtype,
                                                   master=_sub(master, "ln2"))
            self.attention = ParallelSelfAttention(hidden_size, num_heads, causal=causal, sequence_parallel=sp,
                                                   seed=seed, dtype=dtype, master=_sub(master, "attention"))
            self.mlp = ParallelMLP(hidden_size, ffn_hidden_size or 4 * hidden_size, sequence_parallel=sp,
                                   seed=seed + 4, dtype=dtype, master=_sub(master, "mlp"))

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    return {"ParallelMLP": ParallelMLP, "ParallelSelfAttention": ParallelSelfAttention,
            "ParallelTransformerLayer": ParallelTransformerLayer}


class VocabParallelEmbedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, *, seed=0, dtype=None, master=None):
        super().__init__()
        if master is None:
            generator = torch.Generator().manual_seed(seed)
            master = {"weight": torch.randn(num_embeddings, embedding_dim, generator=generator,
                                            dtype=dtype or torch.get_default_dtype())}
        rank, size = _world()[0], _divide(num_embeddings, "vocab_size")
        self.start, self.end = rank * size, (rank + 1) * size
        self.weight = nn.Parameter(master["weight"][self.start:self.end].clone())

    def forward(self, ids):
        outside = (ids < self.start) | (ids >= self.end)
        local = F.embedding((ids - self.start).masked_fill(outside, 0), self.weight)
        return _Reduce.apply(local.masked_fill(outside.unsqueeze(-1), 0.0))


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target):
        rank, t = _world()
        local_vocab = logits.shape[-1]
        start = rank * local_vocab
        top = logits.max(dim=-1).values
        if t > 1:
            dist.all_reduce(top, op=dist.ReduceOp.MAX)
        shifted = logits - top.unsqueeze(-1)
        outside = (target < start) | (target >= start + local_vocab)
        local = (target - start).masked_fill(outside, 0)
        picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        exp = shifted.exp()
        sums = torch.stack([exp.sum(dim=-1), picked])
        if t > 1:
            dist.all_reduce(sums)
        ctx.save_for_backward(exp / sums[0].unsqueeze(-1), local, outside)
        return sums[0].log() - sums[1]

    @staticmethod
    def backward(ctx, grad):
        softmax, local, outside = ctx.saved_tensors
        onehot = torch.zeros_like(softmax).scatter_(-1, local.unsqueeze(-1), 1.0)
        onehot = onehot * (~outside).unsqueeze(-1).to(softmax.dtype)
        return (softmax - onehot) * grad.unsqueeze(-1), None


def substitute(student, *, ops=False, linear=False, norm=False, parts=False, blocks=False, vocab=False) -> None:
    """Bind the grader's pieces in ``student`` (the imported ``tensor_parallel`` module): the
    3.1 ops, the 3.2 linear layers, the LayerNorm (its 3.5 part), the 3.3 MLP and attention
    (``parts``) or all three 3.3 modules (``blocks``; built on whatever linear layers and
    LayerNorm ``student`` then holds) and the 3.4 embedding and loss."""
    names = {}
    if ops:
        names.update(OPS)
    if linear:
        names.update(ColumnParallelLinear=ColumnParallelLinear, RowParallelLinear=RowParallelLinear)
    if norm:
        names.update(ReplicatedLayerNorm=ReplicatedLayerNorm)
    if vocab:
        names.update(VocabParallelEmbedding=VocabParallelEmbedding, vocab_parallel_cross_entropy=_CrossEntropy.apply,
                     _VocabParallelCrossEntropy=_CrossEntropy)
    for name, value in names.items():
        setattr(student, name, value)
    if blocks or parts:
        for name, value in layer_classes(student).items():
            if blocks or name != "ParallelTransformerLayer":
                setattr(student, name, value)


def uses_grader_pieces(params: dict) -> bool:
    """Whether this run binds the grader's pieces (the fallback's second run)."""
    return params.get("pieces", "own") == "grader"


@contextlib.contextmanager
def bound(student, params: dict, **pieces):
    """``with bound(tp, params, ops=True, ...)``: for the fallback's second run, the grader's
    pieces bound in the student's module for the block (:func:`substitute`), restored
    afterwards (t = 1 runs in the observing process); the student's own pieces otherwise."""
    if not uses_grader_pieces(params):
        yield
        return
    saved = dict(vars(student))
    substitute(student, **pieces)
    try:
        yield
    finally:
        for name in set(vars(student)) - set(saved):
            delattr(student, name)
        for name, value in saved.items():
            if vars(student).get(name) is not value:
                setattr(student, name, value)
