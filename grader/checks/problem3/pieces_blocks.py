"""The grader's own 3.3 MLP, attention and layer (child side), built on the student's (or the
grader's) linear layers and LayerNorm; held only by the children whose fallback needs them.
See :mod:`grader.checks.problem3.pieces`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.problem3.pieces_ops import (
    _dense_linear_master,
    _divide,
    _sub,
    _world,
)


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
