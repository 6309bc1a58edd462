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
  ``[r * n // t, (r + 1) * n // t)``. Sizes that t does not divide raise ``ValueError``, on
  every rank, before any communication.
* Sizes (features, heads, vocabulary, layers) are Python ``int`` s.
* Layers are built on the CPU; move them with ``.to(device)`` afterwards (nccl needs CUDA).
* Communicate only through ``torch.distributed`` collectives (``all_reduce``, ``all_gather``,
  ``reduce_scatter``, ...) on the default group. gloo (CPU) supports all of these.
* Inputs may be non-contiguous (a transposed or sliced tensor), float32 or float64, of any
  number of dimensions the function's contract allows; outputs have the input's dtype.
* An output requires grad exactly when the dense computation's would: when it depends on a
  tensor or parameter that requires grad, and never under ``torch.no_grad()``.
* Gradients accumulate as PyTorch's do: a second forward and backward without zeroing adds
  the same gradients again to every ``.grad``.
* The caller's objects are the caller's: no function or layer changes (in place) a tensor it is
  given (inputs, targets, logits, master tensors) nor the dict that holds them, nor the gradient
  handed to its backward, and no parameter is a view of a master tensor (at t = 1 neither).
* A backward leaves what its forward saved as it was: a second backward through the same graph
  (``retain_graph=True``) gives the same gradients.
* Module state that depends on t or the rank is computed when an object is built or called,
  never when this file is imported: the file may be imported before the process group exists.
* Nothing is kept between calls: calling again, with other sizes, works.
* Tolerance: in float64 every result (outputs, input gradients, parameter gradients) equals the
  dense single-process computation within 1e-10 relative to its largest entry; sharding only
  reorders sums.

Common to the communication ops (Problem 3.1)
---------------------------------------------
* ``x`` may have any number of dimensions (at least one).
* The gradient passed back is the exact gradient of the dense computation the op stands for.
* With no process group (t = 1) an op is the identity in both directions and issues no
  collective.

Common to the parallel modules (Problem 3.3)
--------------------------------------------
* Every rank calls the constructor with the same arguments.
* ``master`` holds the DENSE module's tensors under the names listed for it (the names of the
  dense module's ``state_dict``); without ``master`` they are drawn from ``seed`` and ``dtype``
  (each ``nn.Linear`` with ``master_linear``, LayerNorms as ones and zeros), identically on
  every rank, so the module equals the dense module built from those tensors.
* How the weights are split over the ranks is yours, with one budget: each rank holds at most
  1/t of the elements of every dense weight MATRIX (vectors, such as biases and LayerNorm
  weights, may be replicated).
* Parameters are ``nn.Parameter`` s reachable from ``parameters()``.
* Forward accepts ``[s, b, h]`` activations (s, b >= 1, any sizes between calls), float32 or
  float64 (the dtype of the parameters), the same on every rank; with ``sequence_parallel=True``
  rank r's block ``[s/t, b, h]`` of the sequence instead. It returns the dense module's output
  (rank r's sequence block with ``sequence_parallel``).
* After ``backward``, the input gradient is the dense one (its block), and every parameter's
  ``.grad`` is the gradient of the dense loss with respect to that parameter: one SGD step
  ``p -= lr * p.grad`` on every rank leaves the module equal to the dense module after the
  same step.
* Communication: the budget given per module, for the forward; the backward may spend more to
  save memory.
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
    """Suggested helper (only the public ops below are graded): the sum of ``x`` over all
    ranks (all-reduce), as a new tensor; one rank: ``x`` itself."""
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _reduce")


def _split_along_last_dim(x: Tensor) -> Tensor:
    """Suggested helper (only the public ops below are graded): this rank's block of ``x``
    along the last dimension, ``[..., n]`` -> ``[..., n/t]``, without communication."""
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _split_along_last_dim")


def _gather_along_last_dim(x: Tensor) -> Tensor:
    """Suggested helper (only the public ops below are graded): every rank's ``x``
    concatenated along the last dimension in rank order (all-gather), ``[..., n/t]`` ->
    ``[..., n]``."""
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _gather_along_last_dim")


def _split_along_first_dim(x: Tensor) -> Tensor:
    """Suggested helper (only the public ops below are graded): this rank's block of ``x``
    along the first dimension, ``[s, ...]`` -> ``[s/t, ...]``, without communication."""
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _split_along_first_dim")


def _gather_along_first_dim(x: Tensor) -> Tensor:
    """Suggested helper (only the public ops below are graded): every rank's ``x``
    concatenated along the first dimension in rank order (all-gather), ``[s/t, ...]`` ->
    ``[s, ...]``."""
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _gather_along_first_dim")


def _reduce_scatter_along_first_dim(x: Tensor) -> Tensor:
    """Suggested helper (only the public ops below are graded): the sum of ``x`` over all
    ranks, this rank's block of dimension 0 kept (reduce-scatter), ``[s, ...]`` -> ``[s/t, ...]``;
    it moves (t-1)/t of ``x`` per rank, half of an all-reduce."""
    # TODO: Implement for Problem 3.1.
    raise NotImplementedError("Problem 3.1: _reduce_scatter_along_first_dim")


# ======================================================================================
# Problem 3.1: ... as autograd Functions (Megatron-LM, Fig. 3 of Shoeybi et al. 2019)
# ======================================================================================
class _CopyToModelParallelRegion(torch.autograd.Function):
    """``copy_to_tensor_model_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _CopyToModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _CopyToModelParallelRegion.backward")


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    """``reduce_from_tensor_model_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceFromModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceFromModelParallelRegion.backward")


class _ScatterToModelParallelRegion(torch.autograd.Function):
    """``scatter_to_tensor_model_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToModelParallelRegion.backward")


class _GatherFromModelParallelRegion(torch.autograd.Function):
    """``gather_from_tensor_model_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromModelParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromModelParallelRegion.backward")


class _ScatterToSequenceParallelRegion(torch.autograd.Function):
    """``scatter_to_sequence_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToSequenceParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ScatterToSequenceParallelRegion.backward")


class _GatherFromSequenceParallelRegion(torch.autograd.Function):
    """``gather_from_sequence_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromSequenceParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _GatherFromSequenceParallelRegion.backward")


class _ReduceScatterToSequenceParallelRegion(torch.autograd.Function):
    """``reduce_scatter_to_sequence_parallel_region`` (see its contract)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceScatterToSequenceParallelRegion.forward")

    @staticmethod
    def backward(ctx, grad_output):
        # TODO: Implement for Problem 3.1.
        raise NotImplementedError("Problem 3.1: _ReduceScatterToSequenceParallelRegion.backward")


def copy_to_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """f (Megatron-LM): marks where a tensor that every rank holds whole enters per-rank work.

    Forward: returns ``x`` unchanged in value. Backward: the gradient passed back equals the
    SUM over ranks of the gradients the ranks' outputs received.
    Communication: forward none; backward at most one all-reduce of ``x.numel()`` elements.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _CopyToModelParallelRegion.apply(x)


def reduce_from_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """g (Megatron-LM): the conjugate of f.

    Forward: returns the sum over ranks of their ``x`` (same shape, on every rank). Backward:
    the gradient passed back equals the gradient this rank's output received.
    Communication: forward at most one all-reduce of ``x.numel()`` elements; backward none.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _ReduceFromModelParallelRegion.apply(x)


def scatter_to_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """``[..., n]`` (the same on every rank) -> this rank's block ``[..., n/t]`` of the last dim.

    Block r is ``x[..., r*n/t:(r+1)*n/t]``. Backward: the gradient of the whole ``[..., n]``
    (each rank's output gradient in its own block). Forward communicates nothing.
    Raises ValueError when t does not divide n.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _ScatterToModelParallelRegion.apply(x)


def gather_from_tensor_model_parallel_region(x: Tensor) -> Tensor:
    """Rank r's ``[..., n/t]`` block -> ``[..., n]`` on every rank, blocks in rank order.

    Backward: this rank's block of the output gradient. At most one collective each way,
    moving at most the output's elements.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _GatherFromModelParallelRegion.apply(x)


def scatter_to_sequence_parallel_region(x: Tensor) -> Tensor:
    """``[s, ...]`` (the same on every rank) -> this rank's block ``[s/t, ...]`` of dim 0.

    Backward: the gradient of the whole ``[s, ...]``. Forward communicates nothing.
    Raises ValueError when t does not divide s.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _ScatterToSequenceParallelRegion.apply(x)


def gather_from_sequence_parallel_region(x: Tensor) -> Tensor:
    """Rank r's ``[s/t, ...]`` block -> ``[s, ...]`` on every rank, blocks in rank order.

    The gathered tensor feeds per-rank work (like f's output does): the gradient passed back to
    rank r is block r of the SUM over ranks of the output gradients. At most one collective
    each way, moving at most ``s * ...`` elements.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _GatherFromSequenceParallelRegion.apply(x)


def reduce_scatter_to_sequence_parallel_region(x: Tensor) -> Tensor:
    """Partial sums ``[s, ...]`` on every rank -> block r ``[s/t, ...]`` of their sum.

    Backward: the gradient of the whole ``[s, ...]`` (this rank's output gradient in block r,
    every rank's in its own block). Forward moves at most what one all-reduce of ``x`` moves,
    half of it with the right collective. Raises ValueError when t does not divide s.
    The contract common to the communication ops (the top of this file) holds too.
    """
    return _ReduceScatterToSequenceParallelRegion.apply(x)


# ======================================================================================
# Problem 3.2: column- and row-parallel linear layers
# ======================================================================================
class ColumnParallelLinear(nn.Module):
    """The lecture's ``Y = X·A + b`` with ``A`` split by COLUMNS (output features) over the ranks.

    ``nn.Linear`` stores ``A`` transposed: ``master["weight"]`` is ``[out, in]`` and the dense
    layer is ``F.linear(X, weight, bias)``. The constructor (provided) builds it from the dense
    layer's master tensors (``{"weight": [out, in], "bias": [out]}``, no ``"bias"`` when
    ``bias=False``) or, without ``master``, from ``master_linear(in, out, bias, seed=seed,
    dtype=dtype)``, and keeps what ``shard`` returns.

    Parameters on rank r (the grader reads them): ``weight`` ``[out/t, in]``, block r of the
    master weight's rows, and ``bias`` ``[out/t]``, block r of the master bias (``None`` when
    ``bias=False``); copies, not views, of the master tensors.

    Accepts ``x`` ``[..., in]`` (at least 1-D; the same on every rank), float32 or float64,
    contiguous or not. Returns ``[..., out/t]``: block r of the dense layer's output features,
    or the whole ``[..., out]`` on every rank with ``gather_output=True``. Guarantees: equal to
    the dense layer (tolerance: see the top of this file), and so are the gradients of ``x``
    (the whole dense gradient, on every rank) and of this rank's parameters (block r of the
    dense gradients). Communication budget of the forward: none (``gather_output=True``: one
    gather of the output).

    ``sequence_parallel=True`` (Problem 3.5): ``x`` is this rank's sequence block
    ``[s/t, b, in]`` of the whole ``[s, b, in]``; the output is block r of the features of the
    whole sequence, ``[s, b, out/t]``; the forward may move the input once (``(t-1)/t·s·b·in``
    elements per rank).

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
        """This rank's ``(weight [out/t, in], bias [out/t] or None)``, new tensors with the
        values of its blocks of ``master`` (``master`` is left as it was).

        Raises ValueError when t does not divide ``out_features``.
        """
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: ColumnParallelLinear.shard")

    def forward(self, x: Tensor) -> Tensor:
        """``[..., in]`` -> ``[..., out/t]`` (or ``[..., out]`` with ``gather_output``)."""
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: ColumnParallelLinear.forward")


class RowParallelLinear(nn.Module):
    """The lecture's ``Y = X·A + b`` with ``A`` split by ROWS (input features) over the ranks.

    Built like ``ColumnParallelLinear`` (same master tensors, same ``seed`` rule, the
    constructor provided). Parameters on rank r (the grader reads them): ``weight`` ``[out, in/t]``, block r of the
    master weight's columns; ``bias`` ``[out]``, the whole master bias on every rank (``None``
    when ``bias=False``); copies, not views, of the master tensors.

    Accepts ``x`` ``[..., in/t]``, block r of the input features (``input_is_parallel=True``),
    or the whole ``[..., in]``, the same on every rank (``input_is_parallel=False``); at least
    1-D, float32 or float64, contiguous or not. Returns the dense layer's whole output
    ``[..., out]`` on every rank. Guarantees: equal to the dense layer, and so are the
    gradients of ``x`` (its block, or the whole gradient with ``input_is_parallel=False``) and
    of the parameters (block r of the weight's gradient; the whole bias gradient, identical on
    every rank). Communication budget of the forward: one all-reduce of the output.

    ``sequence_parallel=True`` (Problem 3.5): the output is this rank's sequence block
    ``[s/t, b, out]`` of the dense output; the forward may move at most what one
    reduce-scatter of the output moves; the bias gradient is still the whole, identical one.

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
        """This rank's ``(weight [out, in/t], bias [out] or None)``, new tensors with the
        values of its block of ``master`` (``master`` is left as it was).

        Raises ValueError when t does not divide ``in_features``.
        """
        # TODO: Implement for Problem 3.2.
        raise NotImplementedError("Problem 3.2: RowParallelLinear.shard")

    def forward(self, x: Tensor) -> Tensor:
        """``[..., in/t]`` (or ``[..., in]``) -> ``[..., out]`` (``[s/t, b, out]`` with SP)."""
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
    """The dense MLP ``Z = GeLU(X·A + a)·B + b`` (exact erf GeLU, ``F.gelu``), tensor-parallel.

    Master tensors: ``fc1.weight [ffn, h]``, ``fc1.bias [ffn]``, ``fc2.weight [h, ffn]``,
    ``fc2.bias [h]`` (``fc1`` and ``fc2`` are ``nn.Linear(h, ffn)`` and ``nn.Linear(ffn, h)``;
    without ``master``: ``fc1`` from ``seed``, ``fc2`` from ``seed + 1``).
    Forward communication budget: the elements of ONE all-reduce of the output ``[s, b, h]``
    (with ``sequence_parallel``: one reduce-scatter and one all-gather of ``[s, b, h]``).
    Raises ValueError when t does not divide ``ffn_hidden_size``.
    The contract common to the parallel modules (the top of this file) holds too.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, *, sequence_parallel: bool = False,
                 seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelMLP.__init__")

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, h]`` -> ``[s, b, h]``."""
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelMLP.forward")


class ParallelSelfAttention(nn.Module):
    """Multi-head CAUSAL self-attention (``causal=False``: every position attends to all),
    tensor-parallel.

    The dense module: ``q = X·Aq + aq``, likewise ``k``, ``v``; head i of ``d = h/num_heads``
    features is ``softmax(q_i·k_iᵀ/√d + mask)·v_i`` where position j attends to positions
    ``<= j``; the heads, concatenated, go through ``out``. This equals
    ``nn.MultiheadAttention(h, num_heads)`` with ``in_proj_weight = cat([q.weight, k.weight,
    v.weight])``. Every projection has a bias.
    Master tensors: ``q.weight``, ``k.weight``, ``v.weight``, ``out.weight`` ``[h, h]`` and
    ``q.bias``, ``k.bias``, ``v.bias``, ``out.bias`` ``[h]`` (without ``master``: q, k, v, out
    from ``seed``, ``seed + 1``, ``seed + 2``, ``seed + 3``).
    Forward communication budget: ONE all-reduce of the output ``[s, b, h]`` (with
    ``sequence_parallel``: one reduce-scatter and one all-gather of ``[s, b, h]``); attention
    itself always sees the whole sequence.
    Raises ValueError when t does not divide ``num_heads`` or ``num_heads`` does not divide
    ``hidden_size``.
    The contract common to the parallel modules (the top of this file) holds too.
    """

    def __init__(self, hidden_size: int, num_heads: int, *, causal: bool = True,
                 sequence_parallel: bool = False, seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelSelfAttention.__init__")

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, h]`` -> ``[s, b, h]``."""
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelSelfAttention.forward")


class ReplicatedLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` over the last dimension, with the same γ, β on every rank (provided).

    Master tensors: ``weight [h]``, ``bias [h]``. With ``sequence_parallel=True`` it normalises
    rank r's block of the sequence with ``sequence_parallel_parameters()`` (Problem 3.5).
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
        """``(weight, bias)`` to normalise rank r's block of the sequence with (Problem 3.5).

        Returns tensors equal to ``self.weight`` and ``self.bias``, differentiable with respect
        to them, such that after ``backward()`` ``self.weight.grad`` and ``self.bias.grad`` on
        every rank are the gradients of the dense loss over the WHOLE sequence (identical on
        every rank). Communication: none in forward; at most one all-reduce of ``h`` elements
        per tensor in backward.
        """
        # TODO: Implement for Problem 3.5.
        raise NotImplementedError("Problem 3.5: ReplicatedLayerNorm.sequence_parallel_parameters")


class ParallelTransformerLayer(nn.Module):
    """The dense Pre-LN transformer layer (Megatron-LM), tensor-parallel::

        x = x + Attention(LN1(x))
        x = x + MLP(LN2(x))

    ``LN1``, ``LN2`` are ``nn.LayerNorm(h, eps)``, Attention is ``ParallelSelfAttention``'s
    dense module (with this ``causal``), MLP is ``ParallelMLP``'s. No dropout (it would make runs incomparable).
    Master tensors: ``ln1.weight``, ``ln1.bias``, ``ln2.weight``, ``ln2.bias`` ``[h]``,
    ``attention.*`` and ``mlp.*`` (the names of those modules); without ``master``: attention
    from ``seed``, the MLP from ``seed + 4``, LayerNorms ones and zeros. ``ffn_hidden_size``
    defaults to ``4 * hidden_size``.

    Forward communication budget: the elements of TWO all-reduces of ``[s, b, h]``, whatever
    t is. ``sequence_parallel=True`` (Problem 3.5): input and output are rank r's sequence
    block ``[s/t, b, h]``; the same number of elements moved, and no all-reduce of activations.
    Raises ValueError as its parts do.
    The contract common to the parallel modules (the top of this file) holds too.
    """

    def __init__(self, hidden_size: int, num_heads: int, ffn_hidden_size: int | None = None, *,
                 causal: bool = True, sequence_parallel: bool = False, eps: float = 1e-5,
                 seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelTransformerLayer.__init__")

    def forward(self, x: Tensor) -> Tensor:
        """``[s, b, h]`` -> ``[s, b, h]`` (``[s/t, b, h]`` -> ``[s/t, b, h]`` with SP)."""
        # TODO: Implement for Problem 3.3.
        raise NotImplementedError("Problem 3.3: ParallelTransformerLayer.forward")


# ======================================================================================
# Problem 3.4: vocabulary-parallel embedding and cross-entropy
# ======================================================================================
class VocabParallelEmbedding(nn.Module):
    """``nn.Embedding(V, h)`` with the table split by vocabulary over the ranks.

    Parameter on rank r (the grader reads it): ``weight`` ``[V/t, h]``, rows
    ``vocab_range(V, r, t)`` of the master table ``master["weight"]`` ``[V, h]`` (a copy);
    without ``master`` the table is drawn from ``seed`` (standard normal, like
    ``nn.Embedding``). The constructor is provided.

    Forward accepts int64 ids of any shape (``[s, b]`` in the models, a single sequence
    ``[s, 1]``, 1-D, contiguous or not), values in ``[0, V)``, the same on every rank. Returns
    ``[*ids.shape, h]`` on every rank, equal to ``F.embedding(ids, master_table)``; after
    ``backward`` ``weight.grad`` is rows ``vocab_range(V, r, t)`` of the dense table's gradient.
    The ids are not changed. Forward communication budget: one all-reduce of the output;
    backward: none.

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
        """See ``vocab_parallel_cross_entropy``."""
        # TODO: Implement for Problem 3.4.
        raise NotImplementedError("Problem 3.4: _VocabParallelCrossEntropy.forward")

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        """See ``vocab_parallel_cross_entropy``: no communication here."""
        # TODO: Implement for Problem 3.4.
        raise NotImplementedError("Problem 3.4: _VocabParallelCrossEntropy.backward")


def vocab_parallel_cross_entropy(vocab_parallel_logits: Tensor, target: Tensor) -> Tensor:
    """Per-token cross-entropy of logits split by vocabulary, without gathering them (fused,
    Megatron-LM).

    Args:
        vocab_parallel_logits: ``[..., V/t]`` (``[s, b, V/t]`` in the models; at least 1-D),
            rank r's block ``vocab_range(V, r, t)`` of the vocabulary, float32 or float64,
            contiguous or not, e.g. the output of a ``ColumnParallelLinear`` with
            ``gather_output=False``. Any values, large ones included (no overflow).
        target: int64 ids of shape ``vocab_parallel_logits.shape[:-1]``, in ``[0, V)``, the
            same on every rank.

    Returns:
        Losses of shape ``target.shape``, identical on every rank and equal to
        ``F.cross_entropy(full_logits.reshape(-1, V), target.reshape(-1), reduction="none")``
        reshaped; differentiable with respect to the logits: their gradient is rank r's block
        of the dense gradient. The logits and the targets are not changed.

    Communication budget: the forward issues at most 4 collectives, each of at most 4 scalars
    per token (never the logits, nor anything else with a vocabulary dimension); the backward
    none. Calling it again with other shapes works (nothing is kept between calls).
    """
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target)


# ======================================================================================
# Problem 3.6: a tensor-parallel language model, trained
# ======================================================================================
class ParallelLanguageModel(nn.Module):
    """A small GPT-style language model, tensor-parallel, and its mean cross-entropy.

    The dense model (causal, no dropout, no position embedding)::

        x = embedding(ids)                          # nn.Embedding(V, h), [s, b] -> [s, b, h]
        for layer in layers: x = layer(x)           # ParallelTransformerLayer's dense module
        logits = output(final_ln(x))                # nn.LayerNorm(h, eps), nn.Linear(h, V, bias=False)
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))   # the mean

    Master tensors: ``embedding.weight [V, h]``, ``layers.<i>.*`` for i = 0 .. num_layers-1
    (the names of ``ParallelTransformerLayer``), ``final_ln.weight``, ``final_ln.bias [h]``,
    ``output.weight [V, h]``. Without ``master``: the embedding from ``seed``, layer i from
    ``seed + 10 * (i + 1)``, the output layer ``master_linear(h, V, False, seed=seed + 1)``, the
    final LayerNorm ones and zeros. ``ffn_hidden_size`` defaults to ``4 * hidden_size``.

    ``forward(ids, targets)``: int64 ``[s, b]`` (s, b >= 1; the same on every rank, with or
    without ``sequence_parallel``; other sizes on later calls) -> the mean loss, a 0-d tensor
    equal on every rank to the dense model's. After ``backward()`` every parameter's ``.grad``
    is the dense gradient of its share, so one SGD step on every rank equals the dense step.

    Budgets: each rank holds at most 1/t of the elements of every dense weight matrix (the
    embedding and output tables included; vectors may be replicated), and no tensor with the
    whole vocabulary dimension ``[..., V]`` is ever built (the logits stay split). The caller's
    ids, targets and master tensors are not changed. ``sequence_parallel=True``: the layers and
    the final LayerNorm work on rank r's block of the sequence; the loss is the same.
    Raises ValueError when t does not divide ``vocab_size`` or what the layers need divided.
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_heads: int, num_layers: int,
                 ffn_hidden_size: int | None = None, *, sequence_parallel: bool = False,
                 eps: float = 1e-5, seed: int = 0, dtype: torch.dtype | None = None,
                 master: dict[str, Tensor] | None = None):
        # TODO: Implement for Problem 3.6.
        raise NotImplementedError("Problem 3.6: ParallelLanguageModel.__init__")

    def forward(self, ids: Tensor, targets: Tensor) -> Tensor:
        """``[s, b]`` ids and targets -> the mean loss (0-d), the same on every rank."""
        # TODO: Implement for Problem 3.6.
        raise NotImplementedError("Problem 3.6: ParallelLanguageModel.forward")


def train_language_model(model: nn.Module, batches, lr: float) -> list[float]:
    """Train ``model`` (a ``ParallelLanguageModel``, on every rank) with plain SGD.

    ``batches``: any iterable of ``(ids, targets)`` pairs (a list, a generator, ...), the same
    on every rank, gone through once. For each pair, one step ``p -= lr * p.grad`` on every
    parameter of the mean loss of that batch, gradients starting from zero at each step.
    Returns a list of the losses, as Python floats, each computed BEFORE its step: they equal
    the dense model's trained the same way (float64: within 1e-10 relative), and so does the
    model after the last step. Leaves no ``.grad`` behind: every parameter's ``.grad`` is
    ``None`` afterwards. Calling it again trains on from where the last call left the model.
    """
    # TODO: Implement for Problem 3.6.
    raise NotImplementedError("Problem 3.6: train_language_model")
