"""The grader's own 3.4 embedding and cross-entropy (child side); held only by the children whose
fallback needs them. See :mod:`grader.checks.problem3.pieces`."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.checks.problem3.pieces_ops import (
    _divide,
    _Reduce,
    _world,
)


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
