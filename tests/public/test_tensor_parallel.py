"""Public tests for Problem 3 (tensor parallelism).

Each test starts t = 2 or t = 4 local processes with ``minitorch.distributed.launch`` (gloo, CPU)
and compares your sharded layers, in float64, with the dense single-process computation built from
the same master tensors (the ``dense_*`` functions below are plain PyTorch). Run one part with e.g.

    pytest -m problem_3_2 tests/public/test_tensor_parallel.py

A failure inside a rank is re-raised here with the rank in its message and the rank's own
traceback attached below it. ``@pytest.mark.criterion(...)`` names the grader's criteria whose
kind of mistake a test catches.
"""
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import minitorch.tensor_parallel as tp
from minitorch.distributed import launch

pytestmark = pytest.mark.multirank  # launches torch.distributed ranks, each a process of its own

S, B, H, HEADS, FFN, VOCAB = 8, 2, 16, 4, 32, 48   # [seq, batch, hidden]; divisible by 2 and 4
ATOL = RTOL = 1e-10                                 # float64: sharding only reorders sums
DT = torch.float64
WORLD_SIZES = [2, 4]


def run(worker, t, *args):
    return launch(worker, t, *args, backend="gloo", timeout=30)


def randn(generator, *shape, scale=1.0):
    return torch.randn(*shape, generator=generator, dtype=DT) * scale


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)


def block(tensor, rank, t, dim):
    """Rank's contiguous block of ``dim``."""
    return tensor.chunk(t, dim=dim)[rank]


def grad_of(output, grad, *inputs):
    """d(sum(output * grad)) / d(inputs)."""
    return torch.autograd.grad((output * grad).sum(), inputs)


def strided(tensor):
    """The same values in a non-contiguous layout: ops must not assume contiguous inputs."""
    return tensor.transpose(0, -1).contiguous().transpose(0, -1)


def run_untouched(op, x, grad):
    """``op`` forward on ``x`` and backward of ``grad``; fails if the op changed its input or the
    gradient handed to its backward in place (both belong to the caller). Returns (y, x.grad)."""
    x = x.detach().clone().requires_grad_()  # clone keeps the layout (strides)
    x_before, handed = x.detach().clone(), []
    y = op(x)
    y.register_hook(lambda g: handed.append((g, g.clone())))
    (dx,) = grad_of(y, grad, x)
    assert torch.equal(x.detach(), x_before), f"{op.__name__} changed its input in place: work on a copy"
    assert all(torch.equal(g, before) for g, before in handed), (
        f"the backward of {op.__name__} changed the gradient it was given in place: work on a copy")
    return y.detach(), dx


class CollectiveCounter:
    """Counts calls of torch.distributed collectives inside one rank (call ``install`` there)."""

    NAMES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
             "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
             "all_to_all_single", "broadcast")

    def __init__(self):
        self.calls, self.sizes = [], []  # sizes: elements of each call's tensor argument

    def install(self):
        for name in self.NAMES:
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._counting(name, original))
        return self

    def _counting(self, name, original):
        def counted(*args, **kwargs):
            self.calls.append(name)
            self.sizes.append(max((a.numel() for a in args if isinstance(a, torch.Tensor)), default=0))
            return original(*args, **kwargs)
        return counted

    def take(self):
        calls, self.calls = self.calls, []
        return calls

    def take_sizes(self):
        sizes, self.sizes = self.sizes, []
        return sizes


# ----------------------------------------------------------------------------------------
# Dense references (plain PyTorch, one process)
# ----------------------------------------------------------------------------------------
def make_master(seed=0):
    g = torch.Generator().manual_seed(seed)
    m = {}
    for name in ("q", "k", "v", "out"):
        m[f"attention.{name}.weight"] = randn(g, H, H, scale=H ** -0.5)
        m[f"attention.{name}.bias"] = randn(g, H, scale=0.1)
    m["mlp.fc1.weight"], m["mlp.fc1.bias"] = randn(g, FFN, H, scale=H ** -0.5), randn(g, FFN, scale=0.1)
    m["mlp.fc2.weight"], m["mlp.fc2.bias"] = randn(g, H, FFN, scale=FFN ** -0.5), randn(g, H, scale=0.1)
    for ln in ("ln1", "ln2"):
        m[f"{ln}.weight"], m[f"{ln}.bias"] = 1 + randn(g, H, scale=0.2), randn(g, H, scale=0.2)
    return m


def sub(master, prefix):
    return {k[len(prefix) + 1:]: v for k, v in master.items() if k.startswith(prefix + ".")}


def dense_mlp(m, x):
    return F.linear(F.gelu(F.linear(x, m["fc1.weight"], m["fc1.bias"])), m["fc2.weight"], m["fc2.bias"])


def dense_attention(m, x, causal=True):
    s, b, h = x.shape
    d = h // HEADS

    def heads(name):  # [s, b, h] -> [b, heads, s, d]
        return F.linear(x, m[f"{name}.weight"], m[f"{name}.bias"]).view(s, b, HEADS, d).permute(1, 2, 0, 3)

    scores = heads("q") @ heads("k").transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    context = (scores.softmax(-1) @ heads("v")).permute(2, 0, 1, 3).reshape(s, b, h)
    return F.linear(context, m["out.weight"], m["out.bias"])


def dense_layer(m, x):
    x = x + dense_attention(sub(m, "attention"), F.layer_norm(x, (H,), m["ln1.weight"], m["ln1.bias"]))
    return x + dense_mlp(sub(m, "mlp"), F.layer_norm(x, (H,), m["ln2.weight"], m["ln2.bias"]))


def leaves(master):
    return {k: v.clone().requires_grad_() for k, v in master.items()}


# ----------------------------------------------------------------------------------------
# 3.1 communication ops
# ----------------------------------------------------------------------------------------
@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-single-process")
def test_comm_ops_are_identities_without_a_process_group():
    x = torch.randn(4, 2, 6, dtype=DT, requires_grad=True)
    for op in (tp.copy_to_tensor_model_parallel_region, tp.reduce_from_tensor_model_parallel_region,
               tp.scatter_to_tensor_model_parallel_region, tp.gather_from_tensor_model_parallel_region,
               tp.scatter_to_sequence_parallel_region, tp.gather_from_sequence_parallel_region,
               tp.reduce_scatter_to_sequence_parallel_region):
        grad = torch.randn_like(x)
        y = op(x)
        close(y, x.detach())
        close(grad_of(y, grad, x)[0], grad)


def _f_and_g(rank, t, x, xs, grads, layout):
    x, x_r, grad = (layout(v) for v in (x, xs[rank], grads[rank]))
    f, f_grad = run_untouched(tp.copy_to_tensor_model_parallel_region, x, grad)
    g, g_grad = run_untouched(tp.reduce_from_tensor_model_parallel_region, x_r, grad)
    return {"f": f, "f_grad": f_grad, "g": g, "g_grad": g_grad}


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-f-g")
@pytest.mark.parametrize("layout", [torch.clone, strided], ids=["contiguous", "non-contiguous"])
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_f_and_g_forward_and_backward(t, layout):
    g = torch.Generator().manual_seed(t)
    x, xs, grads = randn(g, S, B, H), [randn(g, S, B, H) for _ in range(t)], [randn(g, S, B, H) for _ in range(t)]
    for rank, out in enumerate(run(_f_and_g, t, x, xs, grads, layout)):
        close(out["f"], x)                  # f forward: identity
        close(out["f_grad"], sum(grads))    # f backward: all-reduce (NOT this rank's grad alone)
        close(out["g"], sum(xs))            # g forward: all-reduce
        close(out["g_grad"], grads[rank])   # g backward: identity (NOT the sum)


def _scatter_gather(rank, t, x, xs, grads):
    out = {"errors": []}
    for op, shape in ((tp.scatter_to_tensor_model_parallel_region, (S, B, H + 1)),
                      (tp.scatter_to_sequence_parallel_region, (S + 1, B, H)),
                      (tp.reduce_scatter_to_sequence_parallel_region, (S + 1, B, H))):
        try:
            op(torch.zeros(shape, dtype=DT))
            out["errors"].append(f"{op.__name__}: no exception")
        except Exception as error:
            out["errors"].append(f"{op.__name__}: {type(error).__name__}")
    for name, op, inp, grad in (
        ("scatter", tp.scatter_to_tensor_model_parallel_region, x, block(grads[rank], rank, t, -1)),
        ("gather", tp.gather_from_tensor_model_parallel_region, block(xs[rank], rank, t, -1), grads[rank]),
        ("seq_scatter", tp.scatter_to_sequence_parallel_region, x, block(grads[rank], rank, t, 0)),
        ("seq_gather", tp.gather_from_sequence_parallel_region, block(xs[rank], rank, t, 0), grads[rank]),
        ("seq_reduce_scatter", tp.reduce_scatter_to_sequence_parallel_region, xs[rank],
         block(grads[rank], rank, t, 0)),
    ):
        out[name] = run_untouched(op, strided(inp), grad)
    return out


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-scatter-gather")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_scatter_gather_and_sequence_parallel_ops(t):
    g = torch.Generator().manual_seed(10 + t)
    x, xs, grads = randn(g, S, B, H), [randn(g, S, B, H) for _ in range(t)], [randn(g, S, B, H) for _ in range(t)]
    for rank, out in enumerate(run(_scatter_gather, t, x, xs, grads)):
        y, dx = out["scatter"]
        close(y, block(x, rank, t, -1))
        close(dx, torch.cat([block(grads[r], r, t, -1) for r in range(t)], -1))
        y, dx = out["gather"]
        close(y, torch.cat([block(xs[r], r, t, -1) for r in range(t)], -1))
        close(dx, block(grads[rank], rank, t, -1))
        y, dx = out["seq_scatter"]
        close(y, block(x, rank, t, 0))
        close(dx, torch.cat([block(grads[r], r, t, 0) for r in range(t)]))
        y, dx = out["seq_gather"]                                   # backward: reduce-scatter
        close(y, torch.cat([block(xs[r], r, t, 0) for r in range(t)]))
        close(dx, block(sum(grads), rank, t, 0))
        y, dx = out["seq_reduce_scatter"]                           # backward: all-gather
        close(y, block(sum(xs), rank, t, 0))
        close(dx, torch.cat([block(grads[r], r, t, 0) for r in range(t)]))
        for error in out["errors"]:  # a size t does not divide must raise, not be cut short
            assert error.endswith("ValueError"), error


# ----------------------------------------------------------------------------------------
# 3.2 column- and row-parallel linear layers
# ----------------------------------------------------------------------------------------
IN, OUT = 12, 16


def _linears(rank, t, m, x, grad):
    out = {}
    for name, layer, inp, up in (
        ("column", tp.ColumnParallelLinear(IN, OUT, master=m), x, block(grad, rank, t, -1)),
        ("column_gather", tp.ColumnParallelLinear(IN, OUT, gather_output=True, master=m), x, grad),
        ("row", tp.RowParallelLinear(IN, OUT, master=m), block(x, rank, t, -1), grad),
        ("row_scatter", tp.RowParallelLinear(IN, OUT, input_is_parallel=False, master=m), x, grad),
    ):
        inp = inp.clone().requires_grad_()
        y = layer(inp)
        dx, dw, db = grad_of(y, up, inp, layer.weight, layer.bias)
        out[name] = {"y": y.detach(), "dx": dx, "dw": dw, "db": db}
    for name, layer, inp in (("column_no_bias", tp.ColumnParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}), x),
                             ("row_no_bias", tp.RowParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}),
                              block(x, rank, t, -1))):
        assert layer.bias is None
        out[name] = layer(inp).detach()
    zero = {"weight": torch.zeros(OUT, IN, dtype=DT), "bias": m["bias"]}
    out["row_zero_weight"] = tp.RowParallelLinear(IN, OUT, master=zero)(block(x, rank, t, -1)).detach()
    errors = []
    for build in (lambda: tp.ColumnParallelLinear(IN, 2 * t + 1), lambda: tp.RowParallelLinear(2 * t + 1, OUT)):
        try:
            build()
            errors.append("no exception")
        except Exception as error:
            errors.append(type(error).__name__)
    out["errors"] = errors
    return out


@pytest.mark.problem_3_2
@pytest.mark.criterion("3.2-column-row")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_column_and_row_parallel_linear_equal_nn_linear(t):
    g = torch.Generator().manual_seed(20 + t)
    m = {"weight": randn(g, OUT, IN, scale=IN ** -0.5), "bias": randn(g, OUT)}
    x, grad = randn(g, S, B, IN), randn(g, S, B, OUT)
    dense = leaves({**m, "x": x})
    y = F.linear(dense["x"], dense["weight"], dense["bias"])
    dx, dw, db = grad_of(y, grad, dense["x"], dense["weight"], dense["bias"])
    for rank, out in enumerate(run(_linears, t, m, x, grad)):
        c, cg = out["column"], out["column_gather"]
        close(c["y"], block(y, rank, t, -1).detach())      # column split: exact block of Y
        close(cg["y"], y.detach())
        for part in (c, cg):
            close(part["dx"], dx)                          # f summed the input grad
            close(part["dw"], block(dw, rank, t, 0))       # weight [out/t, in]
            close(part["db"], block(db, rank, t, 0))
        for name in ("row", "row_scatter"):
            r = out[name]
            close(r["y"], y.detach())                      # row split: exact after the sum
            close(r["dx"], block(dx, rank, t, -1) if name == "row" else dx)
            close(r["dw"], block(dw, rank, t, 1))          # weight [out, in/t]
            close(r["db"], db)                             # bias whole, replicated
        close(out["row_zero_weight"], m["bias"].expand(S, B, OUT))  # bias added once, not t times
        close(out["column_no_bias"], block(F.linear(x, m["weight"]), rank, t, -1))  # bias=False: no bias at all
        close(out["row_no_bias"], F.linear(x, m["weight"]))
        assert out["errors"] == ["ValueError", "ValueError"], "sizes not divisible by t must raise ValueError"


# ----------------------------------------------------------------------------------------
# 3.3 MLP, attention, transformer layer
# ----------------------------------------------------------------------------------------
def _mlp(rank, t, m, x, grad):
    counter = CollectiveCounter().install()
    mlp = tp.ParallelMLP(H, FFN, master=m)
    x_ = x.clone().requires_grad_()
    y = mlp(x_)
    forward_calls = counter.take()
    dx, dw1, dw2 = grad_of(y, grad, x_, mlp.fc1.weight, mlp.fc2.weight)
    # The lecture's pitfall: split the FIRST matrix by rows and apply GeLU to each rank's
    # partial sum before adding them up. GeLU is not additive, so this is wrong.
    first = tp.RowParallelLinear(H, FFN, bias=False, master={"weight": m["fc1.weight"]})
    wrong = F.gelu(F.linear(block(x, rank, t, -1), first.weight))
    dist.all_reduce(wrong)
    return {"y": y.detach(), "dx": dx, "dw1": dw1, "dw2": dw2, "forward_calls": forward_calls,
            "gelu_of_partial_sums": wrong}


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-mlp")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_parallel_mlp_equals_dense_and_gelu_of_partial_sums_does_not(t):
    g = torch.Generator().manual_seed(30 + t)
    m, x, grad = sub(make_master(t), "mlp"), randn(g, S, B, H), randn(g, S, B, H)
    dense = leaves({**m, "x": x})
    y = dense_mlp(dense, dense["x"])
    dx, dw1, dw2 = grad_of(y, grad, dense["x"], dense["fc1.weight"], dense["fc2.weight"])
    right_hidden = F.gelu(F.linear(x, m["fc1.weight"]))
    for rank, out in enumerate(run(_mlp, t, m, x, grad)):
        close(out["y"], y.detach())
        close(out["dx"], dx)
        close(out["dw1"], block(dw1, rank, t, 0))
        close(out["dw2"], block(dw2, rank, t, 1))
        assert out["forward_calls"] == ["all_reduce"], "the MLP forward needs exactly one all-reduce"
        assert (out["gelu_of_partial_sums"] - right_hidden).abs().max() > 0.1


def _attention(rank, t, m, x, grad):
    attention = tp.ParallelSelfAttention(H, HEADS, master=m)
    x_ = x.clone().requires_grad_()
    y = attention(x_)
    (dx,) = grad_of(y, grad, x_)
    everywhere = tp.ParallelSelfAttention(H, HEADS, causal=False, master=m)(x).detach()
    try:
        tp.ParallelSelfAttention(2 * (t + 1), t + 1)
        error = "no exception"
    except Exception as e:
        error = type(e).__name__
    return {"y": y.detach(), "dx": dx, "error": error, "non_causal": everywhere}


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-attention")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_parallel_attention_equals_dense_causal_attention(t):
    g = torch.Generator().manual_seed(40 + t)
    m, x, grad = sub(make_master(t), "attention"), randn(g, S, B, H), randn(g, S, B, H)
    x_ = x.clone().requires_grad_()
    y = dense_attention(m, x_)
    (dx,) = grad_of(y, grad, x_)
    for out in run(_attention, t, m, x, grad):
        close(out["y"], y.detach())
        close(out["dx"], dx)
        close(out["non_causal"], dense_attention(m, x, causal=False))  # causal=False: every position sees all
        assert out["error"] == "ValueError", f"{t + 1} heads cannot be split over {t} ranks"


def _layer(rank, t, m, x, grad, sequence_parallel):
    layer = tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=sequence_parallel, master=m)
    if sequence_parallel:
        x, grad = block(x, rank, t, 0), block(grad, rank, t, 0)
    counter = CollectiveCounter().install()
    x_ = x.clone().requires_grad_()
    y = layer(x_)
    names = ["ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "mlp.fc1.weight", "mlp.fc2.bias"]
    params = dict(layer.named_parameters())
    grads = grad_of(y, grad, x_, *(params[n] for n in names))
    return {"y": y.detach(), "dx": grads[0], "grads": dict(zip(names, grads[1:])), "calls": counter.take()}


def _check_layer(t, sequence_parallel):
    g = torch.Generator().manual_seed(50 + t)
    m, x, grad = make_master(t), randn(g, S, B, H), randn(g, S, B, H)
    dense = leaves({**m, "x": x})
    y = dense_layer(dense, dense["x"])
    names = ["ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "mlp.fc1.weight", "mlp.fc2.bias"]
    expected = dict(zip(["x"] + names, grad_of(y, grad, dense["x"], *(dense[n] for n in names))))
    outs = run(_layer, t, m, x, grad, sequence_parallel)
    if sequence_parallel:   # rank r holds block r of the sequence
        close(torch.cat([o["y"] for o in outs]), y.detach())
        close(torch.cat([o["dx"] for o in outs]), expected["x"])
    for rank, out in enumerate(outs):
        if not sequence_parallel:
            close(out["y"], y.detach())
            close(out["dx"], expected["x"])
        for name in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "mlp.fc2.bias"):
            close(out["grads"][name], expected[name])      # replicated: full grad on every rank
        close(out["grads"]["mlp.fc1.weight"], block(expected["mlp.fc1.weight"], rank, t, 0))
    return outs


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-layer")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_transformer_layer_equals_dense_with_two_all_reduces_each_way(t):
    for out in _check_layer(t, sequence_parallel=False):
        assert out["calls"] == ["all_reduce"] * 4, "2 all-reduces forward (g) and 2 backward (f)"


# ----------------------------------------------------------------------------------------
# 3.4 vocabulary-parallel embedding and cross-entropy
# ----------------------------------------------------------------------------------------
def _vocab(rank, t, table, ids, logits, target, grad):
    counter = CollectiveCounter().install()
    embedding = tp.VocabParallelEmbedding(VOCAB, H, master={"weight": table})
    e = embedding(ids)
    (de,) = grad_of(e, grad, embedding.weight)
    counter.take()
    local = block(logits, rank, t, -1).clone().requires_grad_()
    counter.take_sizes()
    loss = tp.vocab_parallel_cross_entropy(local, target)
    loss_calls, loss_sizes = counter.take(), counter.take_sizes()
    (dlogits,) = grad_of(loss, torch.ones_like(loss), local)
    return {"e": e.detach(), "de": de, "loss": loss.detach(), "dlogits": dlogits, "loss_calls": loss_calls,
            "loss_sizes": loss_sizes, "backward_calls": counter.take()}


@pytest.mark.problem_3_4
@pytest.mark.criterion("3.4-embedding", "3.4-fused-loss")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_vocab_parallel_embedding_and_fused_cross_entropy(t):
    g = torch.Generator().manual_seed(60 + t)
    table, grad = randn(g, VOCAB, H), randn(g, S, B, H)
    ids = torch.randint(0, VOCAB, (S, B), generator=g)
    size = VOCAB // t  # the first and the last id of every rank's range: start <= id < end
    edges = [edge for r in range(t) for edge in (r * size, (r + 1) * size - 1)]
    ids.view(-1)[: len(edges)] = torch.tensor(edges)
    logits = randn(g, S, B, VOCAB, scale=3.0)
    logits[0, 0] += 1000.0                      # exp() overflows unless the max is subtracted
    dense = leaves({"table": table, "logits": logits})
    e = F.embedding(ids, dense["table"])
    (de,) = grad_of(e, grad, dense["table"])
    loss = F.cross_entropy(dense["logits"].view(-1, VOCAB), ids.view(-1), reduction="none").view(S, B)
    (dlogits,) = grad_of(loss, torch.ones_like(loss), dense["logits"])
    for rank, out in enumerate(run(_vocab, t, table, ids, logits, ids, grad)):
        close(out["e"], e.detach())
        close(out["de"], block(de, rank, t, 0))
        close(out["loss"], loss.detach())        # equals F.cross_entropy(reduction="none")
        close(out["dlogits"], block(dlogits, rank, t, -1))
        assert set(out["loss_calls"]) == {"all_reduce"}, "the fused loss must not gather the logits"
        assert max(out["loss_sizes"]) <= 4 * S * B, "the fused loss communicates a few scalars per token, never logits"
        assert out["backward_calls"] == [], "the fused loss's backward needs no communication"


# ----------------------------------------------------------------------------------------
# 3.5 sequence parallelism
# ----------------------------------------------------------------------------------------
@pytest.mark.problem_3_5
@pytest.mark.criterion("3.5-sequence-parallel")
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_sequence_parallel_layer_equals_dense_without_activation_all_reduces(t):
    for out in _check_layer(t, sequence_parallel=True):
        calls = out["calls"]
        gathers = sum(c.startswith("all_gather") for c in calls)
        scatters = sum(c.startswith("reduce_scatter") for c in calls)
        assert gathers == 4 and scatters == 4, f"expected 4 all-gathers and 4 reduce-scatters, got {calls}"
        # what is left are the small all-reduces of replicated parameters' gradients
        assert calls.count("all_reduce") == len(calls) - 8


# ----------------------------------------------------------------------------------------
# one plain process, no process group: t = 1, every layer equals its dense counterpart
# ----------------------------------------------------------------------------------------
@pytest.mark.problem_3_2
@pytest.mark.criterion("3.1-single-process")
def test_linear_layers_without_a_process_group_equal_nn_linear():
    g = torch.Generator().manual_seed(70)
    linear, x = {"weight": randn(g, OUT, IN), "bias": randn(g, OUT)}, randn(g, S, B, IN)
    close(tp.ColumnParallelLinear(IN, OUT, master=linear)(x), F.linear(x, **linear))
    close(tp.RowParallelLinear(IN, OUT, master=linear)(x), F.linear(x, **linear))


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.1-single-process")
def test_blocks_without_a_process_group_equal_dense():
    g = torch.Generator().manual_seed(71)
    m, x = make_master(71), randn(g, S, B, H)
    close(tp.ParallelMLP(H, FFN, master=sub(m, "mlp"))(x), dense_mlp(sub(m, "mlp"), x))
    for causal in (True, False):
        close(tp.ParallelSelfAttention(H, HEADS, causal=causal, master=sub(m, "attention"))(x),
              dense_attention(sub(m, "attention"), x, causal=causal))
    close(tp.ParallelTransformerLayer(H, HEADS, FFN, master=m)(x), dense_layer(m, x))


@pytest.mark.problem_3_4
@pytest.mark.criterion("3.1-single-process")
def test_vocab_parallel_without_a_process_group_equals_dense():
    g = torch.Generator().manual_seed(72)
    table, ids, logits = randn(g, VOCAB, H), torch.randint(0, VOCAB, (S, B), generator=g), randn(g, S, B, VOCAB)
    close(tp.VocabParallelEmbedding(VOCAB, H, master={"weight": table})(ids), F.embedding(ids, table))
    close(tp.vocab_parallel_cross_entropy(logits, ids),
          F.cross_entropy(logits.view(-1, VOCAB), ids.view(-1), reduction="none").view(S, B))


@pytest.mark.problem_3_5
@pytest.mark.criterion("3.1-single-process")
def test_sequence_parallel_layer_without_a_process_group_equals_dense():
    g = torch.Generator().manual_seed(73)
    m, x = make_master(73), randn(g, S, B, H)
    close(tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=True, master=m)(x), dense_layer(m, x))
