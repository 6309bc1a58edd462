"""The dense, single-process references of Problem 3's modules (parent side): plain PyTorch
(``nn.MultiheadAttention``, ``nn.LayerNorm``, ``nn.Linear``, ``F.embedding``,
``F.cross_entropy``) built from the same master tensors as the student's modules."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.problem3 import cases
from grader.checks.problem3.cases import DTYPE, FFN, HEADS, LR, VOCAB, H, S


def grad_of(tensor: torch.Tensor) -> torch.Tensor:
    """The gradient a dense reference's backward gave ``tensor`` (it always gives one)."""
    if tensor.grad is None:
        raise RuntimeError("the dense reference left a tensor without a gradient")
    return tensor.grad


class DenseLayer(nn.Module):
    """Plain single-process Pre-LN layer with the master tensors (names match the master; the
    sizes are the master's)."""

    def __init__(self, master: dict, eps: float = 1e-5, causal: bool = True, heads: int = HEADS):
        super().__init__()
        dtype, ffn, h = master["ln1.weight"].dtype, master["mlp.fc1.weight"].shape[0], master["ln1.weight"].shape[0]
        self.causal = causal
        self.ln1, self.ln2 = nn.LayerNorm(h, eps=eps, dtype=dtype), nn.LayerNorm(h, eps=eps, dtype=dtype)
        self.attention = nn.MultiheadAttention(h, heads, dtype=dtype)  # [s, b, h] in and out
        self.fc1, self.fc2 = nn.Linear(h, ffn, dtype=dtype), nn.Linear(ffn, h, dtype=dtype)
        a = cases.sub(master, "attention")
        with torch.no_grad():
            self.attention.in_proj_weight.copy_(torch.cat([a["q.weight"], a["k.weight"], a["v.weight"]]))
            self.attention.in_proj_bias.copy_(torch.cat([a["q.bias"], a["k.bias"], a["v.bias"]]))
            self.attention.out_proj.weight.copy_(a["out.weight"])
            self.attention.out_proj.bias.copy_(a["out.bias"])
            for module, name in ((self.ln1, "ln1"), (self.ln2, "ln2"), (self.fc1, "mlp.fc1"), (self.fc2, "mlp.fc2")):
                module.weight.copy_(master[f"{name}.weight"])
                module.bias.copy_(master[f"{name}.bias"])

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def attend(self, x, causal: bool | None = None):
        causal = self.causal if causal is None else causal
        mask = torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).triu(1) if causal else None
        return self.attention(x, x, x, attn_mask=mask, need_weights=False)[0]

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def part(self, name: str, causal: bool = True):
        return {"mlp": self.mlp, "attention": lambda v: self.attend(v, causal), "layer": self}[name]

    def expected_grads(self, t: int, rank: int) -> dict[str, torch.Tensor]:
        """Rank's expected gradients, named like the grader's own modules' parameters."""
        row, column = cases.row_block, cases.column_block
        grads = {f"{ln}.{k}": grad_of(getattr(getattr(self, ln), k)) for ln in ("ln1", "ln2") for k in ("weight", "bias")}
        a = self.attention
        qkv_weight, qkv_bias = grad_of(a.in_proj_weight).chunk(3), grad_of(a.in_proj_bias).chunk(3)
        # the fused QKV shard of rank r is cat([q_r, k_r, v_r]): whole heads
        grads["attention.qkv.weight"] = torch.cat([row(w, rank, t) for w in qkv_weight])
        grads["attention.qkv.bias"] = torch.cat([row(b_, rank, t) for b_ in qkv_bias])
        grads["attention.out.weight"] = column(grad_of(a.out_proj.weight), rank, t)
        grads["attention.out.bias"] = grad_of(a.out_proj.bias)
        grads["mlp.fc1.weight"] = row(grad_of(self.fc1.weight), rank, t)
        grads["mlp.fc1.bias"] = row(grad_of(self.fc1.bias), rank, t)
        grads["mlp.fc2.weight"] = column(grad_of(self.fc2.weight), rank, t)
        grads["mlp.fc2.bias"] = grad_of(self.fc2.bias)
        return grads


@functools.lru_cache(maxsize=8)
def dense_run(seed: int, part: str, causal: bool = True):
    """Dense forward + backward of ``part``, then one SGD step and the second call:
    (y, dx, the dense layer with the step's gradients, y2)."""
    dense = DenseLayer(cases.layer_master(seed))
    data = cases.activations(seed, 1)
    x = data["x"].clone().requires_grad_()
    run = dense.part(part, causal)
    y = run(x)
    (y * data["grad"]).sum().backward()
    grads = {name: grad_of(p).clone() for name, p in dense.named_parameters() if p.grad is not None}
    with torch.no_grad():
        for name, parameter in dense.named_parameters():
            if name in grads:
                parameter.sub_(LR * grads[name])
        y2 = run(cases.second_input(seed))
    for name, p in dense.named_parameters():  # expected_grads reads the step's gradients
        p.grad = grads.get(name)
    return y.detach(), x.grad, dense, y2


def drawn_linear(in_features: int, out_features: int, seed: int, dtype: torch.dtype, bias: bool = True) -> dict:
    """The master tensors ``master_linear(in, out, bias, seed=seed, dtype=dtype)`` draws (its
    documented rule, written here again: uniform in +-1/sqrt(in), the weight first)."""
    generator, bound = torch.Generator().manual_seed(seed), 1.0 / math.sqrt(in_features)
    draw = lambda *shape: (torch.rand(*shape, generator=generator, dtype=dtype) * 2 - 1) * bound  # noqa: E731
    master = {"weight": draw(out_features, in_features)}
    if bias:
        master["bias"] = draw(out_features)
    return master


def drawn_layer_master(seed: int, dtype: torch.dtype, ffn: int = 4 * H) -> dict:
    """A layer's master tensors as its contract draws them without ``master``: attention from
    ``seed`` (q, k, v, out from seed .. seed + 3), the MLP from ``seed + 4`` (fc1, then fc2
    from seed + 5), LayerNorms ones and zeros."""
    master = {}
    for i, name in enumerate(("q", "k", "v", "out")):
        master.update({f"attention.{name}.{k}": v for k, v in drawn_linear(H, H, seed + i, dtype).items()})
    master.update({f"mlp.fc1.{k}": v for k, v in drawn_linear(H, ffn, seed + 4, dtype).items()})
    master.update({f"mlp.fc2.{k}": v for k, v in drawn_linear(ffn, H, seed + 5, dtype).items()})
    for ln in ("ln1", "ln2"):
        master[f"{ln}.weight"], master[f"{ln}.bias"] = torch.ones(H, dtype=dtype), torch.zeros(H, dtype=dtype)
    return master


def drawn_part(part: str, seed: int, x: torch.Tensor) -> torch.Tensor:
    """``part`` built without ``master`` from ``seed`` in ``x``'s dtype, applied to ``x``
    (the MLP draws fc1 from seed and fc2 from seed + 1; attention from seed .. seed + 3)."""
    if part == "mlp":
        master = drawn_layer_master(seed - 4, x.dtype, FFN)
    elif part == "attention":
        master = drawn_layer_master(seed, x.dtype, FFN)
    else:
        master = drawn_layer_master(seed, x.dtype)
    with torch.no_grad():
        return DenseLayer(master).part(part)(x)


def float32_part(seed: int, part: str, x: torch.Tensor) -> torch.Tensor:
    """``part`` built from the layer's master tensors in float32, applied to ``x``."""
    with torch.no_grad():
        return DenseLayer({k: v.float() for k, v in cases.layer_master(seed).items()}).part(part)(x)


def layer_with(seed: int, x: torch.Tensor, **options) -> torch.Tensor:
    with torch.no_grad():
        return DenseLayer(cases.layer_master(seed), **options)(x)


@functools.lru_cache(maxsize=4)
def layer_pieces(seed: int):
    """The dense layer's gradients at the LayerNorm outputs, the attention and the MLP outputs,
    and the normalised LayerNorm inputs (what the partial sums of :func:`partial_grads` sum)."""
    dense, data = DenseLayer(cases.layer_master(seed)), cases.activations(seed, 1)
    x = data["x"]
    ln1 = dense.ln1(x)
    attention = dense.attend(ln1)
    hidden = x + attention
    ln2 = dense.ln2(hidden)
    mlp = dense.mlp(ln2)
    grads = torch.autograd.grad(((hidden + mlp) * data["grad"]).sum(), (ln1, attention, ln2, mlp))
    normalized = {"ln1": F.layer_norm(x, (H,)).detach(), "ln2": F.layer_norm(hidden, (H,)).detach()}
    return (*(g.detach() for g in grads), normalized)


def partial_grads(seed: int, t: int) -> dict[str, list[torch.Tensor]]:
    """What each rank's gradients of the replicated parameters (LayerNorms, row-parallel
    biases) are WITHOUT the sum over ranks: the contribution of its own block of the
    sequence, ``{name: [rank 0's, rank 1's, ...]}``."""
    g_ln1, g_attention, g_ln2, g_mlp, normalized = layer_pieces(seed)
    partial: dict[str, list[torch.Tensor]] = {name: [] for name in (
        "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attention.out.bias", "mlp.fc2.bias")}
    for r in range(t):
        block = slice(r * S // t, (r + 1) * S // t)
        for ln, grad in (("ln1", g_ln1), ("ln2", g_ln2)):
            partial[f"{ln}.weight"].append((grad[block] * normalized[ln][block]).sum(dim=(0, 1)))
            partial[f"{ln}.bias"].append(grad[block].sum(dim=(0, 1)))
        partial["attention.out.bias"].append(g_attention[block].sum(dim=(0, 1)))
        partial["mlp.fc2.bias"].append(g_mlp[block].sum(dim=(0, 1)))
    return partial


class DenseModel(nn.Module):
    def __init__(self, master: dict, eps: float = 1e-5):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, H, dtype=DTYPE)
        self.layers = nn.ModuleList(DenseLayer(cases.sub(master, f"layers.{i}"), eps) for i in range(cases.LAYERS))
        self.final_ln = nn.LayerNorm(H, eps=eps, dtype=DTYPE)
        self.output = nn.Linear(H, VOCAB, bias=False, dtype=DTYPE)
        with torch.no_grad():
            for name in ("embedding.weight", "final_ln.weight", "final_ln.bias", "output.weight"):
                self.get_parameter(name).copy_(master[name])

    def forward(self, ids, targets):
        x = self.embedding(ids)
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.output(self.final_ln(x)).reshape(-1, VOCAB), targets.reshape(-1))
