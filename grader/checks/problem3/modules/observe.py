"""3.3-mlp, 3.3-attention, 3.3-layer, child side: ranks run the student's parallel MLP,
attention or transformer layer (see :mod:`grader.checks.problem3.blocks`) on the grader's
master tensors and inputs, with the student's own 3.1 ops and 3.2 linear layers (and, for the
layer, MLP and attention) first, the grader's in the fallback's second run."""
from __future__ import annotations

# pieces_*: the grader's pieces this check's fallback binds, and only those, loaded before the
# student's code runs (a child cannot import grader modules after that).
from grader.checks.problem3 import blocks, cases, pieces, pieces_blocks, pieces_linear, pieces_norm, pieces_ops, ranks, recorder  # noqa: F401


def rank_module(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    # the layer composes the MLP and the attention (and, with sequence_parallel, 3.5's LayerNorm):
    # the fallback's second run binds the grader's
    layer = params["part"] == "layer"
    with pieces.bound(tp, params, ops=True, linear=True, norm=layer, parts=layer):
        result = blocks.run_block(tp, rank, t, seed, params["part"], sp=False)
        result.update(blocks.run_options(tp, rank, t, seed, params["part"]))
    return result


def observe_mlp(seed: int, params: dict):
    """Launches ranks that run the student's ParallelMLP."""
    return ranks.observe(rank_module, seed, {**params, "part": "mlp"}, cases.ALL_SIZES)


def observe_attention(seed: int, params: dict):
    """Launches ranks that run the student's ParallelSelfAttention."""
    return ranks.observe(rank_module, seed, {**params, "part": "attention"}, cases.ALL_SIZES)


def observe_layer(seed: int, params: dict):
    """Launches ranks that run the student's ParallelTransformerLayer."""
    return ranks.observe(rank_module, seed, {**params, "part": "layer"}, cases.ALL_SIZES)
