"""Megatron-style tensor parallelism (Problem 3): communication ops, parallel layers, vocab loss.

Every rank of the default ``torch.distributed`` process group holds 1/t of each weight matrix
(t = world size) and the ranks talk only through the communication ops of Problem 3.1. With
no process group (one plain process) t = 1, every communication op is the identity and every
layer equals its dense PyTorch counterpart.

Conventions used throughout this file
-------------------------------------
* Activations are ``[s, b, h]``: sequence first, then batch, then hidden (as in Megatron-LM).
  Token ids and targets are ``[s, b]``. Sequence parallelism splits dimension 0 (the sequence);
  tensor parallelism splits the LAST dimension of activations.
* "Master" weights are the full, unsharded tensors of the dense model, named like the
  ``state_dict`` of the dense module they stand for (``"weight"``, ``"bias"``, ``"fc1.weight"``,
  ...). Every rank builds (or is given) the SAME master tensors and keeps only its slice, so a
  sharded model is exactly the dense model built from the same master tensors. Pass
  ``master=dense.state_dict()`` to shard an existing dense module; without ``master`` the
  master tensors are drawn from ``seed`` (identically on every rank).
* Rank r's shard of a dimension of size n is the r-th of t equal contiguous blocks:
  ``[r * n // t, (r + 1) * n // t)``. Sizes that t does not divide raise ``ValueError``.
* Layers are built on the CPU; move them with ``.to(device)`` afterwards (nccl needs CUDA).
* Communicate only through ``torch.distributed`` collectives (``all_reduce``, ``all_gather``,
  ``reduce_scatter``, ...) on the default group. gloo (CPU) supports all of these.
* Inputs may be non-contiguous (a transposed or sliced tensor). No op changes its input, nor
  the gradient handed to its backward: both may still be used by the caller (collectives work
  in place, so they work on a new tensor).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from minitorch.distributed import get_rank, get_world_size


# ======================================================================================
# Given helpers
# ======================================================================================
def divide(numerator: int, denominator: int, what: str) -> int:
    """``numerator // denominator``; ValueError naming ``what`` when it does not divide."""
    if numerator % denominator != 0:
        raise ValueError(f"{what} ({numerator}) must be divisible by the tensor-parallel size "
                         f"({denominator})")
    return numerator // denominator


def master_linear(in_features: int, out_features: int, bias: bool = True, *, seed: int = 0,
                  dtype: torch.dtype | None = None) -> dict[str, Tensor]:
    """Full weights of a dense ``nn.Linear(in_features, out_features)`` drawn from ``seed``.

    Returns ``{"weight": [out, in], "bias": [out]}`` (no ``"bias"`` when ``bias=False``),
    uniform in ``±1/sqrt(in_features)`` like ``nn.Linear``; identical on every rank.
    """
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(in_features)
    dtype = dtype or torch.get_default_dtype()

    def draw(*shape):
        return (torch.rand(*shape, generator=generator, dtype=dtype) * 2 - 1) * bound

    master = {"weight": draw(out_features, in_features)}
    if bias:
        master["bias"] = draw(out_features)
    return master


def submaster(master: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """The entries of ``master`` under ``prefix.``, with the prefix removed."""
    return {k[len(prefix) + 1:]: v for k, v in master.items() if k.startswith(prefix + ".")}


def check_master(master: dict[str, Tensor], shapes: dict[str, tuple[int, ...]]) -> None:
    """ValueError unless ``master`` has exactly the keys of ``shapes``, with those shapes."""
    if set(master) != set(shapes):
        raise ValueError(f"master tensors must be {sorted(shapes)}, got {sorted(master)}")
    for name, shape in shapes.items():
        if tuple(master[name].shape) != tuple(shape):
            raise ValueError(f"master[{name!r}] must have shape {tuple(shape)}, "
                             f"got {tuple(master[name].shape)}")


# ======================================================================================
# Problem 3.1: communication primitives (plain functions, no autograd) ...
# ======================================================================================
def _reduce(x: Tensor) -> Tensor:
    """Sum ``x`` over all ranks (all-reduce); returns a new tensor, ``x`` is not modified.

    One rank: returns ``x`` itself.
    """
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _reduce")


def _split_along_last_dim(x: Tensor) -> Tensor:
    """This rank's block of ``x`` along the last dimension: ``[..., n]`` -> ``[..., n/t]``.

    No communication. Raises ValueError when t does not divide n. One rank: ``x`` itself.
    """
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _split_along_last_dim")


def _gather_along_last_dim(x: Tensor) -> Tensor:
    """Concatenate every rank's ``x`` along the last dimension, in rank order (all-gather).

    ``[..., n/t]`` -> ``[..., n]``. One rank: ``x`` itself.
    """
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _gather_along_last_dim")


def _split_along_first_dim(x: Tensor) -> Tensor:
    """This rank's block of ``x`` along the first dimension: ``[s, ...]`` -> ``[s/t, ...]``.

    No communication. Raises ValueError when t does not divide s. One rank: ``x`` itself.
    """
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _split_along_first_dim")


def _gather_along_first_dim(x: Tensor) -> Tensor:
    """Concatenate every rank's ``x`` along the first dimension, in rank order (all-gather).

    ``[s/t, ...]`` -> ``[s, ...]``. One rank: ``x`` itself.
    """
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _gather_along_first_dim")


def _reduce_scatter_along_first_dim(x: Tensor) -> Tensor:
    """Sum ``x`` over all ranks and keep this rank's block of dimension 0 (reduce-scatter).

    ``[s, ...]`` -> ``[s/t, ...]``; moves (t-1)/t of ``x`` per rank, half of an all-reduce.
    Raises ValueError when t does not divide s. One rank: ``x`` itself.
    """
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _reduce_scatter_along_first_dim")


# ======================================================================================
# Problem 3.1: ... as autograd Functions (Megatron-LM, Fig. 3 of Shoeybi et al. 2019)
# ======================================================================================
class _CopyToModelParallelRegion(torch.autograd.Function):
    """f: identity in forward, all-reduce (sum) of the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _CopyToModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _CopyToModelParallelRegion.backward")


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    """g: all-reduce (sum) in forward, identity in backward."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceFromModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceFromModelParallelRegion.backward")


class _ScatterToModelParallelRegion(torch.autograd.Function):
    """Keep this rank's last-dim block in forward; all-gather the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToModelParallelRegion.backward")


class _GatherFromModelParallelRegion(torch.autograd.Function):
    """All-gather along the last dim in forward; keep this rank's block of the gradient."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromModelParallelRegion.backward")


class _ScatterToSequenceParallelRegion(torch.autograd.Function):
    """Keep this rank's sequence block in forward; all-gather the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToSequenceParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToSequenceParallelRegion.backward")


class _GatherFromSequenceParallelRegion(torch.autograd.Function):
    """All-gather the sequence in forward; reduce-scatter the gradient in backward.

    The gathered tensor feeds a column-parallel layer, whose input gradient on each rank is
    only a partial sum (like f's): backward sums it over ranks and keeps this rank's block.
    """

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromSequenceParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromSequenceParallelRegion.backward")


class _ReduceScatterToSequenceParallelRegion(torch.autograd.Function):
    """Reduce-scatter along the sequence in forward; all-gather the gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceScatterToSequenceParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceScatterToSequenceParallelRegion.backward")


def copy_to_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """f: forward ``x`` unchanged (every rank already has all of it); backward all-reduces.

    Used where a replicated tensor enters per-rank computation: each rank's gradient with
    respect to ``x`` covers only its own shard of the weights, so the full gradient is the sum.
    """
    return _CopyToModelParallelRegion.apply(x)


def reduce_from_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """g: forward sums the ranks' partial results (all-reduce); backward is the identity."""
    return _ReduceFromModelParallelRegion.apply(x)


def scatter_to_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """``[..., n]`` -> this rank's ``[..., n/t]`` block; backward all-gathers the gradient."""
    return _ScatterToModelParallelRegion.apply(x)


def gather_from_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """``[..., n/t]`` on each rank -> ``[..., n]`` (rank order); backward keeps this rank's block."""
    return _GatherFromModelParallelRegion.apply(x)


def scatter_to_sequence_parallel_region(x: Tensor) -> Tensor:
    """``[s, ...]`` -> this rank's ``[s/t, ...]`` block; backward all-gathers the gradient."""
    return _ScatterToSequenceParallelRegion.apply(x)


def gather_from_sequence_parallel_region(x: Tensor) -> Tensor:
    """``[s/t, ...]`` on each rank -> ``[s, ...]``; backward reduce-scatters the gradient."""
    return _GatherFromSequenceParallelRegion.apply(x)


def reduce_scatter_to_sequence_parallel_region(x: Tensor) -> Tensor:
    """Partial ``[s, ...]`` on each rank -> summed ``[s/t, ...]`` block; backward all-gathers."""
    return _ReduceScatterToSequenceParallelRegion.apply(x)


# ======================================================================================
# Problem 3.2: column- and row-parallel linear layers
# ======================================================================================
class ColumnParallelLinear(nn.Module):
    """``Y = X A^T + b`` with the OUTPUT features split: rank r holds rows of ``A``.

    In the lecture's notation (``Y = X·A``) this splits ``A`` by columns; in ``nn.Linear``'s
    ``weight`` (``[out, in]``) it is a block of rows.

    Parameters on rank r: ``weight`` ``[out/t, in]`` = ``master["weight"][r-th block of rows]``,
    ``bias`` ``[out/t]`` = ``master["bias"][r-th block]`` (``None`` when ``bias=False``).

    Forward: ``[s, b, in]`` (replicated on every rank) -> ``[s, b, out/t]``, this rank's block
    of output features, or ``[s, b, out]`` on every rank when ``gather_output=True``.
    The replicated input passes through f (``copy_to_tensor_model_parallel_region``) so that
    its gradient is summed over ranks.

    ``sequence_parallel=True`` (Problem 3.5): the input is this rank's sequence block
    ``[s/t, b, in]``; it is all-gathered along the sequence
    (``gather_from_sequence_parallel_region``) instead of passing through f.

    Raises ValueError when t does not divide ``out_features``, or when ``master`` does not
    have the shapes of ``nn.Linear(in_features, out_features, bias)``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 gather_output: bool = False, *, sequence_parallel: bool = False, seed: int = 0,
                 dtype: torch.dtype | None = None, master: dict[str, Tensor] | None = None):
        super().__init__()
        if master is None:
            master = master_linear(in_features, out_features, bias, seed=seed, dtype=dtype)
        check_master(master, _linear_shapes(in_features, out_features, bias))
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel
        weight, bias_ = self.shard(master)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias_) if bias_ is not None else None

    def shard(self, master: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """This rank's ``(weight [out/t, in], bias [out/t] or None)``, copied from ``master``.

        Raises ValueError when t does not divide ``out_features``.
        """
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: ColumnParallelLinear.shard")

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, in]`` -> ``[s, b, out/t]`` (or ``[s, b, out]`` with ``gather_output``)."""
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: ColumnParallelLinear.forward")


class RowParallelLinear(nn.Module):
    """``Y = X A^T + b`` with the INPUT features split: rank r holds columns of ``weight``.

    In the lecture's notation (``Y = X·A``) this splits ``A`` by rows.

    Parameters on rank r: ``weight`` ``[out, in/t]`` = ``master["weight"][:, r-th block]``;
    ``bias`` ``[out]`` is the WHOLE master bias, replicated: it is added once, after the
    partial products are summed (adding it before would add it t times).

    Forward: ``[s, b, in/t]`` (this rank's block of input features, ``input_is_parallel=True``)
    or ``[s, b, in]`` replicated (``input_is_parallel=False``: the layer scatters it) ->
    ``[s, b, out]`` on every rank, summed with g (``reduce_from_tensor_model_parallel_region``).

    ``sequence_parallel=True`` (Problem 3.5): the partial products are reduce-scattered
    along the sequence (``reduce_scatter_to_sequence_parallel_region``) instead of all-reduced;
    the output is this rank's ``[s/t, b, out]`` block (bias still added once, after; as each
    rank adds it to its own block of the sequence only, its gradient must be summed over ranks).

    Raises ValueError when t does not divide ``in_features``, or when ``master`` does not
    have the shapes of ``nn.Linear(in_features, out_features, bias)``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 input_is_parallel: bool = True, *, sequence_parallel: bool = False,
                 seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        super().__init__()
        if master is None:
            master = master_linear(in_features, out_features, bias, seed=seed, dtype=dtype)
        check_master(master, _linear_shapes(in_features, out_features, bias))
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel, self.sequence_parallel = input_is_parallel, sequence_parallel
        weight, bias_ = self.shard(master)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias_) if bias_ is not None else None

    def shard(self, master: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """This rank's ``(weight [out, in/t], bias [out] or None)``, copied from ``master``.

        Raises ValueError when t does not divide ``in_features``.
        """
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: RowParallelLinear.shard")

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, in/t]`` (or ``[s, b, in]``) -> ``[s, b, out]`` (``[s/t, b, out]`` with SP)."""
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: RowParallelLinear.forward")


def _linear_shapes(in_features: int, out_features: int, bias: bool) -> dict[str, tuple]:
    shapes = {"weight": (out_features, in_features)}
    if bias:
        shapes["bias"] = (out_features,)
    return shapes


# ======================================================================================
# Problem 3.3: MLP, self-attention, transformer layer
# ======================================================================================
class ParallelMLP(nn.Module):
    """``Z = GeLU(X A^T + a) B^T + b``: ``fc1`` column-parallel, ``fc2`` row-parallel.

    GeLU is the exact (erf) one, ``F.gelu``; it acts on each rank's own block of hidden
    units, so the forward needs exactly ONE all-reduce (inside ``fc2``) and no other
    communication (the backward needs one, in ``fc1``'s f).

    Master tensors (the dense MLP): ``fc1.weight [ffn, h]``, ``fc1.bias [ffn]``,
    ``fc2.weight [h, ffn]``, ``fc2.bias [h]``.
    Forward: ``[s, b, h]`` -> ``[s, b, h]`` (``[s/t, b, h]`` -> ``[s/t, b, h]`` with
    ``sequence_parallel``). Raises ValueError when t does not divide ``ffn_hidden_size``.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, *, sequence_parallel: bool = False,
                 seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        super().__init__()
        master = master or {}
        self.fc1 = ColumnParallelLinear(hidden_size, ffn_hidden_size, sequence_parallel=sequence_parallel,
                                        seed=seed, dtype=dtype, master=submaster(master, "fc1") or None)
        self.fc2 = RowParallelLinear(ffn_hidden_size, hidden_size, input_is_parallel=True,
                                     sequence_parallel=sequence_parallel, seed=seed + 1, dtype=dtype,
                                     master=submaster(master, "fc2") or None)

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, h]`` -> ``[s, b, h]``."""
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelMLP.forward")


class ParallelSelfAttention(nn.Module):
    """Multi-head CAUSAL self-attention split by heads: rank r computes heads
    ``[r·n/t, (r+1)·n/t)``.

    Q, K and V are one column-parallel layer ``qkv`` whose weight on rank r is
    ``cat([Wq_r, Wk_r, Wv_r])`` of shape ``[3h/t, h]`` (``W_r`` = rows of rank r's heads; the
    bias likewise), so each rank gets whole heads and the replicated input goes through f
    once. The output projection ``out`` is row-parallel: one all-reduce in forward.

    Attention of a head: ``softmax(q k^T / sqrt(d) + causal mask) v`` with
    ``d = h / num_heads``; position i attends to positions ``<= i`` (``causal=False``: all).
    Master tensors (the dense attention): ``q.weight``, ``k.weight``, ``v.weight``,
    ``out.weight`` ``[h, h]`` and ``q.bias``, ``k.bias``, ``v.bias``, ``out.bias`` ``[h]``.
    Forward: ``[s, b, h]`` -> ``[s, b, h]`` (``[s/t, b, h]`` each way with
    ``sequence_parallel``: attention itself always sees the whole sequence).

    Raises ValueError when t does not divide ``num_heads`` or ``num_heads`` does not
    divide ``hidden_size``.
    """

    def __init__(self, hidden_size: int, num_heads: int, *, causal: bool = True,
                 sequence_parallel: bool = False, seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        super().__init__()
        if hidden_size % num_heads != 0:
            raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
        self.num_heads, self.head_dim, self.causal = num_heads, hidden_size // num_heads, causal
        self.local_heads = divide(num_heads, get_world_size(), "num_heads")
        names = ("q", "k", "v", "out")
        if not master:
            master = {f"{name}.{key}": value for i, name in enumerate(names)
                      for key, value in master_linear(hidden_size, hidden_size, seed=seed + i,
                                                      dtype=dtype).items()}
        check_master(master, {f"{name}.{key}": shape for name in names
                              for key, shape in _linear_shapes(hidden_size, hidden_size, True).items()})
        self.qkv = ColumnParallelLinear(hidden_size, 3 * hidden_size, sequence_parallel=sequence_parallel,
                                        master=_interleave_qkv(master, get_world_size()))
        self.out = RowParallelLinear(hidden_size, hidden_size, input_is_parallel=True,
                                     sequence_parallel=sequence_parallel, master=submaster(master, "out"))

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, h]`` -> ``[s, b, h]``; this rank's heads only, summed over ranks by ``out``."""
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelSelfAttention.forward")


def _interleave_qkv(master: dict[str, Tensor], world_size: int) -> dict[str, Tensor]:
    """Fused QKV master whose r-th block of rows is ``cat([q_r, k_r, v_r])`` (whole heads)."""
    fused = {}
    for key in ("weight", "bias"):
        per_rank = [torch.cat(blocks) for blocks in zip(
            *(master[f"{name}.{key}"].chunk(world_size, dim=0) for name in ("q", "k", "v")))]
        fused[key] = torch.cat(per_rank)
    return fused


class ReplicatedLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` over the last dimension, with the same γ, β on every rank.

    Master tensors: ``weight [h]``, ``bias [h]``. Without sequence parallelism every rank
    normalises the whole (replicated) activation and gets the whole gradient of γ and β.
    With ``sequence_parallel=True`` each rank normalises only its 1/t of the sequence, so
    each rank's gradient of γ and β is a partial sum: see ``sequence_parallel_parameters``.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-5, *, sequence_parallel: bool = False,
                 dtype: torch.dtype | None = None, master: dict[str, Tensor] | None = None):
        if master:
            dtype = master["weight"].dtype
        super().__init__(hidden_size, eps=eps, dtype=dtype)
        self.sequence_parallel = sequence_parallel
        if master:
            check_master(master, {"weight": (hidden_size,), "bias": (hidden_size,)})
            with torch.no_grad():
                self.weight.copy_(master["weight"])
                self.bias.copy_(master["bias"])

    def forward(self, x: Tensor) -> Tensor:
        """``[..., h]`` -> ``[..., h]``."""
        weight, bias = self.weight, self.bias
        if self.sequence_parallel:
            weight, bias = self.sequence_parallel_parameters()
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)

    def sequence_parallel_parameters(self) -> tuple[Tensor, Tensor]:
        """``(weight, bias)`` to normalise with under sequence parallelism (Problem 3.5).

        Same values as ``self.weight``, ``self.bias``, but in backward their gradients must
        be summed over the ranks (each rank saw only its block of the sequence), so that
        after ``backward()`` every rank holds the full, identical gradient of γ and β.
        """
        # TODO: Implement for Problem 3.5.
        raise NotImplementedError("Problem 3.5: ReplicatedLayerNorm.sequence_parallel_parameters")


class ParallelTransformerLayer(nn.Module):
    """Pre-LN transformer layer, tensor-parallel (Megatron-LM)::

        x = x + Attention(LN1(x))        # = x + g(Attn_r(f(LN1 x)))
        x = x + MLP(LN2(x))              # = x + g(MLP_r(f(LN2 x)))

    LayerNorms and residuals are replicated; f and g live inside the column- and
    row-parallel layers of ``attention`` and ``mlp``. No dropout (it would make runs
    incomparable); the attention is causal. Communication per layer: 2 all-reduces of
    ``[s, b, h]`` in forward, 2 in backward, whatever t is.

    ``sequence_parallel=True`` (Problem 3.5): input and output are this rank's sequence block
    ``[s/t, b, h]``; LayerNorms and residuals work on 1/t of the sequence; each all-reduce is
    replaced by a reduce-scatter + all-gather pair (same bytes moved); the γ/β gradients of
    the LayerNorms are summed over ranks.

    Master tensors: ``ln1.weight``, ``ln1.bias``, ``ln2.weight``, ``ln2.bias`` ``[h]``,
    ``attention.*`` (see ``ParallelSelfAttention``) and ``mlp.*`` (see ``ParallelMLP``).
    Forward: ``[s, b, h]`` -> ``[s, b, h]``. Raises ValueError as its parts do.
    """

    def __init__(self, hidden_size: int, num_heads: int, ffn_hidden_size: int | None = None, *,
                 causal: bool = True, sequence_parallel: bool = False, eps: float = 1e-5,
                 seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        super().__init__()
        master = master or {}
        ffn_hidden_size = ffn_hidden_size or 4 * hidden_size
        self.sequence_parallel = sequence_parallel
        self.ln1 = ReplicatedLayerNorm(hidden_size, eps, sequence_parallel=sequence_parallel,
                                       dtype=dtype, master=submaster(master, "ln1"))
        self.attention = ParallelSelfAttention(hidden_size, num_heads, causal=causal,
                                               sequence_parallel=sequence_parallel, seed=seed,
                                               dtype=dtype, master=submaster(master, "attention"))
        self.ln2 = ReplicatedLayerNorm(hidden_size, eps, sequence_parallel=sequence_parallel,
                                       dtype=dtype, master=submaster(master, "ln2"))
        self.mlp = ParallelMLP(hidden_size, ffn_hidden_size, sequence_parallel=sequence_parallel,
                               seed=seed + 4, dtype=dtype, master=submaster(master, "mlp"))

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, h]`` -> ``[s, b, h]`` (``[s/t, b, h]`` -> ``[s/t, b, h]`` with SP)."""
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelTransformerLayer.forward")


# ======================================================================================
# Problem 3.4: vocabulary-parallel embedding and cross-entropy
# ======================================================================================
class VocabParallelEmbedding(nn.Module):
    """Embedding table split by vocabulary: rank r holds rows ``[r·V/t, (r+1)·V/t)``.

    Parameter on rank r: ``weight`` ``[V/t, h]`` = ``master["weight"][r-th block of rows]``.
    Forward: ids ``[s, b]`` (int64, any shape, values in ``[0, V)``) -> ``[s, b, h]`` on every
    rank: each rank looks up the ids in its own range, writes zeros for the others, and the
    ranks' results are summed (all-reduce with g). Without the master tensor the table is
    drawn from ``seed`` (standard normal, like ``nn.Embedding``).

    Raises ValueError when t does not divide ``num_embeddings`` (real models pad V).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, seed: int = 0,
                 dtype: torch.dtype | None = None, master: dict[str, Tensor] | None = None):
        super().__init__()
        if master is None:
            generator = torch.Generator().manual_seed(seed)
            master = {"weight": torch.randn(num_embeddings, embedding_dim, generator=generator,
                                            dtype=dtype or torch.get_default_dtype())}
        check_master(master, {"weight": (num_embeddings, embedding_dim)})
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.vocab_start, self.vocab_end = vocab_range(num_embeddings, get_rank(), get_world_size())
        self.weight = nn.Parameter(master["weight"][self.vocab_start:self.vocab_end].clone())

    def forward(self, ids: Tensor) -> Tensor:
        """``[s, b]`` token ids -> ``[s, b, h]`` embeddings (identical on every rank)."""
        # TODO: Implement for Problem 3.4.
        raise NotImplementedError("Problem 3.4: VocabParallelEmbedding.forward")


def vocab_range(vocab_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, end)``: rank ``rank`` holds vocabulary entries ``start <= id < end``.

    Raises ValueError when ``world_size`` does not divide ``vocab_size``.
    """
    size = divide(vocab_size, world_size, "vocab_size")
    return rank * size, (rank + 1) * size


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross-entropy over logits split by vocabulary, without gathering the logits."""

    @staticmethod
    def forward(ctx, vocab_parallel_logits: Tensor, target: Tensor) -> Tensor:
        """``[s, b, V/t]`` logits, ``[s, b]`` targets -> ``[s, b]`` losses (every rank).

        Communication: all-reduce of the per-token max, of the per-token sum of exponentials
        and of the target logit: a few scalars per token (at most 4 per collective; the sum
        and the target logit may share one), never the logits or anything else with a
        vocabulary dimension. Save for backward what it needs (``ctx.save_for_backward``) so
        that backward does not communicate.
        """
        # TODO: Implement for Problem 3.4.
        raise NotImplementedError("Problem 3.4: _VocabParallelCrossEntropy.forward")

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        """d loss / d logits = softmax - onehot(target), restricted to this rank's block."""
        # TODO: Implement for Problem 3.4.
        raise NotImplementedError("Problem 3.4: _VocabParallelCrossEntropy.backward")


def vocab_parallel_cross_entropy(vocab_parallel_logits: Tensor, target: Tensor) -> Tensor:
    """Per-token cross-entropy of logits split by vocabulary (fused, Megatron-LM).

    Args:
        vocab_parallel_logits: ``[s, b, V/t]``, this rank's block of the vocabulary
            (entries ``[r·V/t, (r+1)·V/t)``), e.g. the output of a ``ColumnParallelLinear``
            with ``gather_output=False``.
        target: ``[s, b]`` int64 ids in ``[0, V)``, the same on every rank.

    Returns:
        ``[s, b]`` losses, identical on every rank and equal to
        ``F.cross_entropy(full_logits.reshape(-1, V), target.reshape(-1), reduction="none")``
        reshaped; differentiable with respect to the logits (no communication in backward).
    """
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target)
