"""Problem 3's cases, shared by the child (which feeds them to the student's code) and the
parent (which computes the expected values from them): sizes, and every tensor drawn from the
run's ``seed``. Nothing here is an expected value, a threshold or a message.

Sizes are divisible by 4, so every world size the checks use (1, 2, 4) splits them. The
deterministic edge cases (the first and last id of every rank's vocabulary range, a logit too
large for ``exp``, one far above the others of its token, a tie between two ranks' largest
logits, a batch of one sequence, the smallest sequence block) are built in, on every seed; the
seed draws the values around them.
"""
from __future__ import annotations

import torch

S, B, H, HEADS, FFN, VOCAB = 8, 2, 16, 4, 32, 48  # all divisible by 4
N = S * B * H  # elements of one [s, b, h] activation
DTYPE = torch.float64
WORLD_SIZES = (2, 4)  # the 3.1 ops with a process group; their t = 1 is 3.1-single-process
ALL_SIZES = (1, 2, 4)  # 3.2-3.6: t = 1 runs in the observing process, with no process group
CONVENTION_SIZES = (1, 2)  # the 3.0 conventions
LR = 0.1  # the SGD step that checks parameter gradients without knowing the student's parameter names
IN, OUT = 12, 16  # the linear layers' sizes
ROWS2 = 5  # a second call of a linear layer: a 2-D input of 5 rows
S2, B2 = 4, 1  # the second call of a module: another sequence length and a batch of one sequence
IDS2 = 7  # a second call of the embedding: 1-D ids
TOKENS = S * B
LAYERS = 1
MODEL_LR = 0.5


def rand(generator: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=dtype) * scale


def column_block(tensor: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """Rank's block of the LAST dimension."""
    return tensor.chunk(t, dim=-1)[rank]


def row_block(tensor: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """Rank's block of the FIRST dimension."""
    return tensor.chunk(t, dim=0)[rank]


def sub(master: dict, prefix: str) -> dict:
    return {k[len(prefix) + 1:]: v for k, v in master.items() if k.startswith(prefix + ".")}


def layer_master(seed: int, hidden: int = H, ffn: int = FFN) -> dict[str, torch.Tensor]:
    """Master tensors of one dense transformer layer, named as the student modules expect."""
    g = torch.Generator().manual_seed(seed)
    m = {}
    for name in ("q", "k", "v", "out"):
        m[f"attention.{name}.weight"] = rand(g, hidden, hidden, scale=hidden ** -0.5)
        m[f"attention.{name}.bias"] = rand(g, hidden, scale=0.1)
    m["mlp.fc1.weight"], m["mlp.fc1.bias"] = rand(g, ffn, hidden, scale=hidden ** -0.5), rand(g, ffn, scale=0.1)
    m["mlp.fc2.weight"], m["mlp.fc2.bias"] = rand(g, hidden, ffn, scale=ffn ** -0.5), rand(g, hidden, scale=0.1)
    for ln in ("ln1", "ln2"):
        m[f"{ln}.weight"], m[f"{ln}.bias"] = 1 + rand(g, hidden, scale=0.2), rand(g, hidden, scale=0.2)
    return m


def tiny_sizes(part: str, t: int) -> tuple[int, int, int] | None:
    """``(hidden, heads, ffn)`` of 3.3's sizes-of-one case at world size t: the MLP with one
    hidden feature and t inner ones (one at t = 1); attention and the layer with one head of one
    feature, which only t = 1 divides (None elsewhere)."""
    if part == "mlp":
        return 1, 1, t
    return (1, 1, 1) if t == 1 else None


def tiny_input(seed: int) -> torch.Tensor:
    """The sizes-of-one case's input: ``[3, 2, 1]``."""
    return rand(torch.Generator().manual_seed(seed + 17), 3, 2, 1)


def activations(seed: int, t: int) -> dict:
    """Inputs and upstream gradients; ``*_r`` entries are per rank (a list of t tensors). ``x``
    and ``grad`` do not depend on t, so that a judge runs each dense reference once."""
    replicated, g = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1000 * t)
    return {
        "x": rand(replicated, S, B, H), "grad": rand(replicated, S, B, H),
        "x_r": [rand(g, S, B, H) for _ in range(t)], "grad_r": [rand(g, S, B, H) for _ in range(t)],
    }


def sequence_parallel_data(seed: int) -> dict[str, torch.Tensor]:
    """Inputs and output gradients of the sequence-parallel linear layers and LayerNorm: ``x``
    ``[S, B, H]`` with its gradient ``grad``, and a hidden ``[S, B, FFN]`` with ``grad_ffn``."""
    g = torch.Generator().manual_seed(seed + 13)
    return {"x": rand(g, S, B, H), "grad": rand(g, S, B, H), "hidden": rand(g, S, B, FFN), "grad_ffn": rand(g, S, B, FFN)}


def second_input(seed: int) -> torch.Tensor:
    """The second call of a module: [S2, B2, H], a batch of one sequence."""
    return rand(torch.Generator().manual_seed(seed + 3), S2, B2, H)


def extra_shape(seed: int) -> tuple[int, ...]:
    """1 to 4 dimensions; the first and last a multiple of 4 (every op can split them), the
    middle ones from 1 to 3 (a seeded case on top of :data:`OP_SHAPES`)."""
    g = torch.Generator().manual_seed(seed + 5)
    dims = int(torch.randint(1, 5, (1,), generator=g))
    sizes = [int(v) for v in torch.randint(1, 4, (dims,), generator=g)]
    if dims == 1:
        return (4 * sizes[0],)
    return (4 * sizes[0], *sizes[1:-1], 4 * sizes[-1])


# The communication ops' deterministic cases besides [S, B, H] float64: 1-D float64 and 4-D
# float32 (with a dimension of 1); the seeded extra shape (float32, 1-D to 4-D) comes on top.
OP_SHAPES = (((12,), torch.float64), ((8, 3, 1, 4), torch.float32))


def extra_data(seed: int, t: int, shape: tuple[int, ...] | None = None, dtype: torch.dtype = torch.float32) -> dict:
    """Like :func:`activations`, in ``dtype`` and ``shape`` (default: :func:`extra_shape`)."""
    shape = shape or extra_shape(seed)
    g = torch.Generator().manual_seed(seed + 77 * t + 7 * len(shape))
    draw = lambda: torch.randn(*shape, generator=g, dtype=dtype)  # noqa: E731
    return {"x": draw(), "grad": draw(), "x_r": [draw() for _ in range(t)], "grad_r": [draw() for _ in range(t)]}


def op_cases(seed: int, t: int) -> list[tuple[str, dict]]:
    """``(label, data)`` of every case of the communication ops: ``[8, 2, 16] float64``, the
    shapes of :data:`OP_SHAPES` (the 1-D one rounded to two decimals), the same 1-D case plus
    ``1e-7`` (its twin: printed alike, so a result remembered by the repr of its input shows),
    and the seeded extra shape in float32."""
    first = {k: round_data(v) for k, v in extra_data(seed, t, *OP_SHAPES[0]).items()}
    twin = {k: plus_a_little(v) for k, v in first.items()}
    datas = [activations(seed, t), first, *(extra_data(seed, t, shape, dtype) for shape, dtype in OP_SHAPES[1:]),
             twin, extra_data(seed, t)]
    labels = [f"{list(d['x'].shape)} {str(d['x'].dtype).replace('torch.', '')}" for d in datas]
    labels[-2] += " (the first 1-D input plus 1e-7: printed alike, not equal)"
    labels[-1] += " (drawn from the seed)"
    return list(zip(labels, datas))


def round_data(value):
    """``value`` (a tensor or a list of them) rounded to two decimals."""
    return [v.round(decimals=2) for v in value] if isinstance(value, list) else value.round(decimals=2)


def plus_a_little(value):
    """``value`` + 1e-7: printed (4 decimals) like ``value`` when it is rounded to two."""
    return [v + 1e-7 for v in value] if isinstance(value, list) else value + 1e-7


def linear_master(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 7)
    return {"weight": rand(g, OUT, IN, scale=IN ** -0.5), "bias": rand(g, OUT),
            "x": rand(g, S, B, IN), "grad": rand(g, S, B, OUT), "x2": rand(g, ROWS2, IN),
            "row.weight": rand(g, OUT, IN, scale=IN ** -0.5), "row.bias": rand(g, OUT)}


def range_edges() -> list[int]:
    """The first and the last id of every rank's vocabulary range, for every t: ``> end``
    instead of ``>= end`` (or ``<= start``) shows only at these ids."""
    return sorted({edge for t in ALL_SIZES for r in range(t) for edge in (r * VOCAB // t, (r + 1) * VOCAB // t - 1)})


def vocab_data(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 11)
    ids = torch.randint(0, VOCAB, (S, B), generator=g)
    edges = range_edges()
    ids.view(-1)[: len(edges)] = torch.tensor(edges)
    logits = rand(g, S, B, VOCAB, scale=3.0)
    logits[1, 0] += 800.0  # exp() overflows without subtracting the max
    logits[3, 0, VOCAB // 2 + 1] += 1000.0  # ... and subtracting any other value (the minimum) than the max
    logits[2, 1, 0] = logits[2, 1, VOCAB - 1] = float(logits[2, 1].max()) + 1.0  # a tie between the first and last rank
    return {"table": rand(g, VOCAB, H), "ids": ids, "grad": rand(g, S, B, H),
            "logits": logits, "loss_grad": rand(g, S, B), "ids2": torch.randint(0, VOCAB, (IDS2,), generator=g)}


def later_losses(d: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The fused loss's later calls: ``(label, dense logits, targets)``; each rank passes its
    block of the last dimension (float32 2-D, a batch of one sequence, one token 1-D)."""
    flat = d["logits"].reshape(TOKENS, VOCAB)[: TOKENS - 3].float()
    return [(f"2-D float32 logits [{TOKENS - 3}, V/t]", flat, d["ids"].reshape(-1)[: TOKENS - 3]),
            (f"logits of a batch of one sequence [{S}, 1, V/t]", d["logits"][:, :1], d["ids"][:, :1]),
            ("1-D logits [V/t] of one token (a 0-d target)", d["logits"][2, 1], d["ids"][2, 1])]


def model_master(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 31)
    master = {"embedding.weight": rand(g, VOCAB, H), "output.weight": rand(g, VOCAB, H, scale=H ** -0.5),
              "final_ln.weight": 1 + rand(g, H, scale=0.2), "final_ln.bias": rand(g, H, scale=0.2)}
    for i in range(LAYERS):
        master.update({f"layers.{i}.{k}": v for k, v in layer_master(seed + 100 * (i + 1)).items()})
    return master


# (s, b) of each training step, and of the held-out batch evaluated after training; the steps
# are given in two calls of train_language_model (CALLS: the steps of each)
STEP_SHAPES, HELD_OUT = ((S, B), (S // 2, 1), (S // 2, B)), (S, 1)
CALLS = ((0, 1), (2,))


def model_batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed + 41)
    return [(torch.randint(0, VOCAB, shape, generator=g), torch.randint(0, VOCAB, shape, generator=g))
            for shape in (*STEP_SHAPES, HELD_OUT)]
