"""Public tests for Problem 3 (tensor parallelism).

Each test runs your code with t = 1 (this process, no process group) or t = 2, 4 local processes
(``minitorch.distributed.launch``, gloo, CPU) and compares it, in float64, with the dense
single-process computation built from the same master tensors (the ``dense_*`` functions below
are plain PyTorch). Run one part with e.g. ``pytest -m problem_3_2``.

A failure inside a rank is re-raised here with the rank in its message and the rank's own
traceback attached below it. Every failure names the contract it checks, the case (t, rank,
shape) and what was expected. ``@pytest.mark.criterion(...)`` names the grader's criteria whose
kind of mistake a test catches; the grader tries more cases of the same promises.
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
RTOL = 1e-10                                         # float64: sharding only reorders sums
DT = torch.float64
WORLD_SIZES = [2, 4]
ALL_SIZES = [1, 2, 4]  # t = 1: one plain process without a process group
LR = 0.1


def run(worker, t, *args):
    """``[worker(rank, t, *args) for every rank]``; t = 1 in this process, without a process group."""
    if t == 1:
        return [worker(0, 1, *args)]
    return launch(worker, t, *args, backend="gloo", timeout=30)


def randn(generator, *shape, scale=1.0, dtype=DT):
    return torch.randn(*shape, generator=generator, dtype=dtype) * scale


def close(actual, expected, what):
    """``actual`` equals ``expected`` (relative 1e-10 in float64, 1e-5 in float32), or a failure
    that starts with ``what``: the contract and the case."""
    tolerance = 1e-5 if expected.dtype == torch.float32 else RTOL
    assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}, expected a tensor"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: got shape {list(actual.shape)}, expected {list(expected.shape)}")
    torch.testing.assert_close(actual.to(expected.dtype), expected, rtol=0,
                               atol=tolerance * (1 + float(expected.abs().max())),
                               msg=lambda message: f"{what}\n{message}")


def block(tensor, rank, t, dim):
    """Rank's contiguous block of ``dim``."""
    return tensor.chunk(t, dim=dim)[rank]


def grad_of(output, grad, *inputs):
    """d(sum(output * grad)) / d(inputs)."""
    return torch.autograd.grad((output * grad).sum(), inputs, allow_unused=True)


def strided(tensor):
    """The same values in a non-contiguous layout: ops must not assume contiguous inputs."""
    return tensor.transpose(0, -1).contiguous().transpose(0, -1)


def refused(build):
    """The name of the exception ``build()`` raised, or "no exception". A stub's
    NotImplementedError is raised on: the test then reads "not implemented yet"."""
    try:
        build()
    except NotImplementedError:
        raise
    except Exception as error:
        return type(error).__name__
    return "no exception"


class Traffic:
    """Records the torch.distributed collectives of one rank (call ``install`` there): kind and
    elements (the largest tensor or list argument: an all-gather INTO n elements counts n)."""

    KINDS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
             "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
             "all_to_all": "all_to_all", "all_to_all_single": "all_to_all", "broadcast": "broadcast"}

    def __init__(self):
        self.calls = []

    def install(self):
        for name, kind in self.KINDS.items():
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._recording(kind, original))
        return self

    def _recording(self, kind, original):
        def recorded(*args, **kwargs):
            sizes = [sum(t.numel() for t in a) if isinstance(a, (list, tuple)) else a.numel()
                     for a in list(args) + list(kwargs.values())
                     if isinstance(a, torch.Tensor) or (isinstance(a, (list, tuple)) and a
                                                         and all(isinstance(t, torch.Tensor) for t in a))]
            self.calls.append((kind, max(sizes, default=0)))
            return original(*args, **kwargs)
        return recorded

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def moved(calls, t):
    """Elements one rank sends in ring algorithms: an all-reduce of n moves 2(t-1)/t n."""
    factor = {"all_reduce": 2 * (t - 1) / t, "all_gather": (t - 1) / t, "reduce_scatter": (t - 1) / t,
              "all_to_all": (t - 1) / t, "broadcast": 1.0}
    return sum(factor[kind] * n for kind, n in calls)


def describe(calls):
    return ", ".join(f"{kind} of {n}" for kind, n in calls) or "no collective"


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


DENSE = {"mlp": dense_mlp, "attention": dense_attention, "layer": dense_layer}


def leaves(master):
    return {k: v.clone().requires_grad_() for k, v in master.items()}


def sgd_step(parameters, grads, lr=LR):
    """The dense parameters after one step ``p -= lr * grad``."""
    return {k: (v - lr * grads[k] if grads[k] is not None else v).detach() for k, v in parameters.items()}


# ----------------------------------------------------------------------------------------
# 3.1 communication ops
# ----------------------------------------------------------------------------------------
OPS = ("copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region",
       "scatter_to_tensor_model_parallel_region", "gather_from_tensor_model_parallel_region",
       "scatter_to_sequence_parallel_region", "gather_from_sequence_parallel_region",
       "reduce_scatter_to_sequence_parallel_region")


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-single-process")
def test_comm_ops_are_identities_without_a_process_group():
    x = torch.randn(4, 2, 6, dtype=DT, requires_grad=True)
    for name in OPS:
        grad = torch.randn_like(x)
        y = getattr(tp, name)(x)
        close(y, x.detach(), f"t = 1 (no process group): {name} must be the identity; output")
        close(grad_of(y, grad, x)[0], grad, f"t = 1 (no process group): {name} must be the identity; input grad")


def _op(op, x, grad):
    x = x.detach().clone().requires_grad_()  # clone keeps the layout (strides)
    y = op(x)
    return y.detach(), grad_of(y, grad, x)[0]


def _f_and_g(rank, t, x, xs, grads, layout):
    x, x_r, grad = (layout(v) for v in (x, xs[rank], grads[rank]))
    f, f_grad = _op(tp.copy_to_tensor_model_parallel_region, x, grad)
    g, g_grad = _op(tp.reduce_from_tensor_model_parallel_region, x_r, grad)
    return {"f": f, "f_grad": f_grad, "g": g, "g_grad": g_grad}


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-f-g")
@pytest.mark.parametrize("shape,dtype", [((S, B, H), DT), ((4, 3, 2, 8), torch.float32), ((12,), DT)],
                         ids=["sbh-float64", "4d-float32", "1d"])
@pytest.mark.parametrize("layout", [torch.clone, strided], ids=["contiguous", "non-contiguous"])
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_f_and_g_forward_and_backward(t, layout, shape, dtype):
    g = torch.Generator().manual_seed(t)
    x = randn(g, *shape, dtype=dtype)
    xs, grads = [randn(g, *shape, dtype=dtype) for _ in range(t)], [randn(g, *shape, dtype=dtype) for _ in range(t)]
    for rank, out in enumerate(run(_f_and_g, t, x, xs, grads, layout)):
        case = f"t={t}, rank {rank}, {layout.__name__} {list(shape)} {str(dtype)[6:]}"
        close(out["f"], x, f"{case}: f's forward returns its input unchanged in value; output")
        close(out["f_grad"], sum(grads), f"{case}: f's backward gives the SUM over ranks of the output gradients")
        close(out["g"], sum(xs), f"{case}: g's forward gives the SUM over ranks of the inputs")
        close(out["g_grad"], grads[rank], f"{case}: g's backward gives this rank's output gradient unchanged")


def _scatter_gather(rank, t, x, xs, grads):
    out = {"refused": {}}
    for name, shape in (("scatter_to_tensor_model_parallel_region", (S, B, H + 1)),
                        ("scatter_to_sequence_parallel_region", (S + 1, B, H)),
                        ("reduce_scatter_to_sequence_parallel_region", (S + 1, B, H))):
        out["refused"][name] = refused(lambda: getattr(tp, name)(torch.zeros(shape, dtype=DT)))
    for name, op, inp, grad in (
        ("scatter", tp.scatter_to_tensor_model_parallel_region, x, block(grads[rank], rank, t, -1)),
        ("gather", tp.gather_from_tensor_model_parallel_region, block(xs[rank], rank, t, -1), grads[rank]),
        ("seq_scatter", tp.scatter_to_sequence_parallel_region, x, block(grads[rank], rank, t, 0)),
        ("seq_gather", tp.gather_from_sequence_parallel_region, block(xs[rank], rank, t, 0), grads[rank]),
        ("seq_reduce_scatter", tp.reduce_scatter_to_sequence_parallel_region, xs[rank],
         block(grads[rank], rank, t, 0)),
    ):
        out[name] = _op(op, strided(inp), grad)
    return out


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-scatter-gather")
@pytest.mark.parametrize("shape,dtype", [((S, B, H), DT), ((8, 3, 1, 4), torch.float32)], ids=["sbh", "4d-float32"])
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_scatter_gather_and_sequence_parallel_ops(t, shape, dtype):
    g = torch.Generator().manual_seed(10 + t)
    x = randn(g, *shape, dtype=dtype)
    xs, grads = [randn(g, *shape, dtype=dtype) for _ in range(t)], [randn(g, *shape, dtype=dtype) for _ in range(t)]
    for rank, out in enumerate(run(_scatter_gather, t, x, xs, grads)):
        case = f"t={t}, rank {rank}, non-contiguous {list(shape)} {str(dtype)[6:]}"
        for name, (y, dx), want_y, want_dx in (
            ("scatter_to_tensor_model_parallel_region", out["scatter"], block(x, rank, t, -1),
             torch.cat([block(grads[r], r, t, -1) for r in range(t)], -1)),
            ("gather_from_tensor_model_parallel_region", out["gather"],
             torch.cat([block(xs[r], r, t, -1) for r in range(t)], -1), block(grads[rank], rank, t, -1)),
            ("scatter_to_sequence_parallel_region", out["seq_scatter"], block(x, rank, t, 0),
             torch.cat([block(grads[r], r, t, 0) for r in range(t)])),
            ("gather_from_sequence_parallel_region", out["seq_gather"],
             torch.cat([block(xs[r], r, t, 0) for r in range(t)]), block(sum(grads), rank, t, 0)),
            ("reduce_scatter_to_sequence_parallel_region", out["seq_reduce_scatter"], block(sum(xs), rank, t, 0),
             torch.cat([block(grads[r], r, t, 0) for r in range(t)])),
        ):
            close(y, want_y, f"{case}: {name} forward (see its contract); output")
            close(dx, want_dx, f"{case}: {name} backward (see its contract); input grad")
        for name, raised in out["refused"].items():
            assert raised != "no exception", (
                f"t={t}: {name} of a size {t} does not divide returned without raising; expected it to refuse "
                "(raise), not cut the rest off")


# ----------------------------------------------------------------------------------------
# 3.0 conventions: the caller's tensors; ValueError
# ----------------------------------------------------------------------------------------
def _untouched(rank, t, x):
    changed = []
    for name in OPS:
        for layout in (torch.clone, strided):
            inp = layout(block(x, rank, t, -1) if name.startswith("gather_from_tensor") else x).requires_grad_()
            before, handed = inp.detach().clone(), []
            y = getattr(tp, name)(inp)
            y.register_hook(lambda g: handed.append((g, g.clone())))
            grad_of(y, torch.ones_like(y), inp)
            if not torch.equal(inp.detach(), before):
                changed.append(f"{name} ({layout.__name__}) changed its input in place")
            if not all(torch.equal(g, then) for g, then in handed):
                changed.append(f"{name} ({layout.__name__}): its backward changed the gradient it was handed, "
                               "in place")
    g = torch.Generator().manual_seed(rank)
    m = {"weight": randn(g, 16, 12), "bias": randn(g, 16)}
    before = {k: v.clone() for k, v in m.items()}
    layer = tp.ColumnParallelLinear(12, 16, master=m)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(1.0)  # a training step
    if any(not torch.equal(m[k], before[k]) for k in m):
        changed.append("ColumnParallelLinear's parameters share memory with the master tensors")
    logits = strided(block(x, rank, t, -1)).clone()
    logits_before, target = logits.clone(), torch.zeros(S, B, dtype=torch.long)
    tp.vocab_parallel_cross_entropy(logits.requires_grad_(), target)
    if not torch.equal(logits.detach(), logits_before):
        changed.append("vocab_parallel_cross_entropy changed the caller's logits in place")
    return changed


@pytest.mark.problem_3_0
@pytest.mark.criterion("3.0-caller-unchanged")
def test_the_callers_tensors_are_left_unchanged():
    g = torch.Generator().manual_seed(5)
    x = randn(g, S, B, H)
    for rank, changed in enumerate(run(_untouched, 2, x)):
        assert changed == [], (f"t=2, rank {rank}: the caller's tensors belong to the caller (inputs, logits, master "
                               f"tensors, the gradient handed to a backward): {'; '.join(changed)}")


def _errors(rank, t):
    odd = 2 * t + 1
    return {
        "scatter_to_tensor_model_parallel_region([8, 2, 17])":
            refused(lambda: tp.scatter_to_tensor_model_parallel_region(torch.zeros(S, B, H + 1, dtype=DT))),
        f"ColumnParallelLinear(12, {odd})": refused(lambda: tp.ColumnParallelLinear(12, odd)),
        f"RowParallelLinear({odd}, 16)": refused(lambda: tp.RowParallelLinear(odd, 16)),
        f"ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1})":
            refused(lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1)),
        f"VocabParallelEmbedding({odd}, {H})": refused(lambda: tp.VocabParallelEmbedding(odd, H)),
    }


@pytest.mark.problem_3_0
@pytest.mark.criterion("3.0-errors")
def test_sizes_t_does_not_divide_raise_value_error():
    for rank, raised in enumerate(run(_errors, 2)):
        for call, name in raised.items():
            assert name == "ValueError", f"t=2, rank {rank}: {call} (a size 2 does not divide) must raise ValueError; got {name}"


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
        inp = strided(inp).requires_grad_()
        y = layer(inp)
        dx, dw, db = grad_of(y, up, inp, layer.weight, layer.bias)
        out[name] = {"y": y.detach(), "dx": dx, "dw": dw, "db": db,
                     "y2": layer(inp.detach()[0]).detach()}  # a second call, 2-D [b, in]
    for name, layer, inp in (("column_no_bias", tp.ColumnParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}), x),
                             ("row_no_bias", tp.RowParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}),
                              block(x, rank, t, -1))):
        out[name] = {"bias": layer.bias, "y": layer(inp).detach()}
    zero = {"weight": torch.zeros(OUT, IN, dtype=DT), "bias": m["bias"]}
    out["row_zero_weight"] = tp.RowParallelLinear(IN, OUT, master=zero)(block(x, rank, t, -1)).detach()
    out["refused"] = [refused(lambda: tp.ColumnParallelLinear(IN, 2 * t + 1)),
                      refused(lambda: tp.RowParallelLinear(2 * t + 1, OUT))] if t > 1 else []
    return out


@pytest.mark.problem_3_2
@pytest.mark.criterion("3.2-column-row")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_column_and_row_parallel_linear_equal_nn_linear(t):
    g = torch.Generator().manual_seed(20 + t)
    m = {"weight": randn(g, OUT, IN, scale=IN ** -0.5), "bias": randn(g, OUT)}
    x, grad = randn(g, S, B, IN), randn(g, S, B, OUT)
    dense = leaves({**m, "x": x})
    y = F.linear(dense["x"], dense["weight"], dense["bias"])
    dx, dw, db = grad_of(y, grad, dense["x"], dense["weight"], dense["bias"])
    y = y.detach()
    for rank, out in enumerate(run(_linears, t, m, x, grad)):
        case = f"t={t}, rank {rank}"
        for name in ("column", "column_gather"):
            c, gathered = out[name], name == "column_gather"
            what = f"{case}: ColumnParallelLinear(gather_output={gathered})"
            close(c["y"], y if gathered else block(y, rank, t, -1),
                  f"{what} output: {'the whole dense output' if gathered else 'block r of the output features'}")
            close(c["dx"], dx, f"{what} input grad: the whole dense input gradient, on every rank")
            close(c["dw"], block(dw, rank, t, 0), f"{what} weight grad: block r of the dense one ([out/t, in])")
            close(c["db"], block(db, rank, t, 0), f"{what} bias grad: block r of the dense one")
            y2 = F.linear(x[0], m["weight"], m["bias"])
            close(c["y2"], y2 if gathered else block(y2, rank, t, -1), f"{what}, called again with a 2-D input")
        for name in ("row", "row_scatter"):
            r, parallel = out[name], name == "row"
            what = f"{case}: RowParallelLinear(input_is_parallel={parallel})"
            close(r["y"], y, f"{what} output: the whole dense output on every rank")
            close(r["dx"], block(dx, rank, t, -1) if parallel else dx, f"{what} input grad")
            close(r["dw"], block(dw, rank, t, 1), f"{what} weight grad: block r of the dense one ([out, in/t])")
            close(r["db"], db, f"{what} bias grad: the whole dense bias gradient, on every rank")
            close(r["y2"], F.linear(x[0], m["weight"], m["bias"]), f"{what}, called again with a 2-D input")
        close(out["row_zero_weight"], m["bias"].expand(S, B, OUT),
              f"{case}: RowParallelLinear with a zero weight must output its bias, once (not {t} times)")
        assert out["column_no_bias"]["bias"] is None and out["row_no_bias"]["bias"] is None, (
            f"{case}: with bias=False, ColumnParallelLinear.bias is {out['column_no_bias']['bias']!r:.60} and "
            f"RowParallelLinear.bias is {out['row_no_bias']['bias']!r:.60}; expected None for both")
        close(out["column_no_bias"]["y"], block(F.linear(x, m["weight"]), rank, t, -1),
              f"{case}: ColumnParallelLinear(bias=False) output")
        close(out["row_no_bias"]["y"], F.linear(x, m["weight"]), f"{case}: RowParallelLinear(bias=False) output")
        assert "no exception" not in out["refused"], (
            f"{case}: ColumnParallelLinear({IN}, {2 * t + 1}) and RowParallelLinear({2 * t + 1}, {OUT}), sizes {t} does "
            f"not divide: {' and '.join(out['refused'])}; expected both to raise")


# ----------------------------------------------------------------------------------------
# 3.3 MLP, attention, transformer layer: output, input grad, and a second call after one SGD
# step (parameter gradients, whatever your parameters are called); memory and traffic budgets
# ----------------------------------------------------------------------------------------
MATRICES = {"mlp": 2 * H * FFN, "attention": 4 * H * H, "layer": 2 * H * FFN + 4 * H * H}
ALL_REDUCES = {"mlp": 1, "attention": 1, "layer": 2}


def _build(part, master, sequence_parallel=False, causal=True):
    if part == "mlp":
        return tp.ParallelMLP(H, FFN, master=sub(master, "mlp"))
    if part == "attention":
        return tp.ParallelSelfAttention(H, HEADS, causal=causal, master=sub(master, "attention"))
    return tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=sequence_parallel, master=master)


def _block(rank, t, part, master, x, grad, x2, sequence_parallel):
    module = _build(part, master, sequence_parallel)
    if sequence_parallel:
        x, grad, x2 = block(x, rank, t, 0), block(grad, rank, t, 0), block(x2, rank, t, 0)
    traffic = Traffic().install() if t > 1 else None
    x_ = strided(x).requires_grad_()
    y = module(x_)
    forward = traffic.take() if traffic else []
    (y * grad).sum().backward()  # fills every parameter's .grad, for the SGD step below
    out = {"y": y.detach(), "dx": x_.grad, "forward": forward,
           "matrices": sum(p.numel() for p in module.parameters() if p.dim() >= 2)}
    if sequence_parallel and t > 1:  # replicated parameters' gradients must agree between ranks
        shared = {f"{type(m).__name__} {name}": p.grad for m in module.modules()
                  if isinstance(m, (tp.ReplicatedLayerNorm, tp.RowParallelLinear))
                  for name, p in m.named_parameters(recurse=False) if p.dim() == 1 and p.grad is not None}
        out["shared"] = {}
        for name, value in shared.items():
            parts = [torch.empty_like(value) for _ in range(t)]
            dist.all_gather(parts, value.contiguous())
            out["shared"][name] = max(float((p - value).abs().max()) for p in parts)
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.grad is not None:
                parameter -= LR * parameter.grad
        out["y2"] = module(x2).detach()
    if part == "attention":
        out["non_causal"] = _build(part, master, causal=False)(x).detach()
        out["refused"] = refused(lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1)) if t > 1 else "ok"
    return out


def _check_block(part, t, sequence_parallel=False):
    g = torch.Generator().manual_seed(30 + t)
    m, x, grad, x2 = make_master(t), randn(g, S, B, H), randn(g, S, B, H), randn(g, S // 2, 1, H)
    dense = leaves({**(m if part == "layer" else sub(m, part)), "x": x})
    params = {k: v for k, v in dense.items() if k != "x"}
    run_dense = DENSE[part]
    y = run_dense(params, dense["x"])
    grads = dict(zip(["x", *params], grad_of(y, grad, dense["x"], *params.values())))
    y2 = run_dense(sgd_step(params, grads), x2)
    what = {"mlp": "ParallelMLP", "attention": "ParallelSelfAttention", "layer": "ParallelTransformerLayer"}[part]
    what += "(sequence_parallel=True)" if sequence_parallel else ""
    outs = run(_block, t, part, m, x, grad, x2, sequence_parallel)
    for rank, out in enumerate(outs):
        case = f"t={t}, rank {rank}: {what}"
        pick = (lambda v: block(v, rank, t, 0)) if sequence_parallel else (lambda v: v)
        close(out["y"], pick(y.detach()), f"{case} output (non-contiguous [{S}, {B}, {H}] input) vs the dense module")
        close(out["dx"], pick(grads["x"]), f"{case} input grad vs the dense module")
        for name, difference in out.get("shared", {}).items():
            assert difference == 0, (f"{case}: after backward the gradient of {name} differs between ranks (by "
                                     f"{difference:.3g}); every rank must hold the gradient over the whole sequence")
        close(out["y2"], pick(y2), f"{case}: output of a second call on a [{S // 2}, 1, {H}] input after one SGD step "
                                   f"p -= {LR} * p.grad (a wrong parameter gradient, or state kept from the first call, "
                                   "shows here)")
        if t > 1 and not sequence_parallel:
            assert out["matrices"] <= MATRICES[part] / t, (
                f"{case} holds {out['matrices']} elements of weight matrices; at most 1/{t} of the dense "
                f"{MATRICES[part]} per rank")
            budget = ALL_REDUCES[part] * 2 * (t - 1) / t * S * B * H
            assert moved(out["forward"], t) <= budget + 1e-9, (
                f"{case}: the forward may move at most {budget:g} elements per rank ({ALL_REDUCES[part]} "
                f"all-reduce(s) of [{S}, {B}, {H}]); recorded {describe(out['forward'])}")
        if sequence_parallel and t > 1:
            activations = [c for c in out["forward"] if c[1] > 4 * H]
            assert not [c for c in activations if c[0] == "all_reduce"], (
                f"{case}: with sequence parallelism the forward all-reduces no activation; recorded "
                f"{describe(activations)}")
            budget = 2 * 2 * (t - 1) / t * S * B * H
            assert moved(activations, t) <= budget + 1e-9, (
                f"{case}: the forward may move what plain tensor parallelism moves ({budget:g} elements per rank); "
                f"recorded {describe(activations)}")
    return m, x, outs


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-mlp")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_parallel_mlp_equals_dense(t):
    _check_block("mlp", t)


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-attention")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_parallel_attention_equals_dense_causal_attention(t):
    m, x, outs = _check_block("attention", t)
    for rank, out in enumerate(outs):
        close(out["non_causal"], dense_attention(sub(m, "attention"), x, causal=False),
              f"t={t}, rank {rank}: ParallelSelfAttention(causal=False): every position attends to every position")
        assert out["refused"] != "no exception", f"t={t}: {t + 1} heads cannot be split over {t} ranks: refuse"


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-layer")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_transformer_layer_equals_dense(t):
    _check_block("layer", t)


# ----------------------------------------------------------------------------------------
# 3.4 vocabulary-parallel embedding; fused cross-entropy (apart: one does not hide the other)
# ----------------------------------------------------------------------------------------
def _vocab_data(t):
    g = torch.Generator().manual_seed(60 + t)
    table, grad = randn(g, VOCAB, H), randn(g, S, B, H)
    ids = torch.randint(0, VOCAB, (S, B), generator=g)
    size = VOCAB // t  # the first and the last id of every rank's range: start <= id < end
    edges = [edge for r in range(t) for edge in (r * size, (r + 1) * size - 1)]
    ids.view(-1)[: len(edges)] = torch.tensor(edges)
    logits = randn(g, S, B, VOCAB, scale=3.0)
    logits[0, 0] += 1000.0                      # exp() overflows unless the max is subtracted
    return table, grad, ids, logits


def _embedding(rank, t, table, ids, grad):
    traffic = Traffic().install() if t > 1 else None
    embedding = tp.VocabParallelEmbedding(VOCAB, H, master={"weight": table})
    e = embedding(ids)
    forward = traffic.take() if traffic else []
    (de,) = grad_of(e, grad, embedding.weight)
    return {"e": e.detach(), "de": de, "forward": forward, "backward": traffic.take() if traffic else [],
            "e1": embedding(ids[:, 0]).detach()}


@pytest.mark.problem_3_4
@pytest.mark.criterion("3.4-embedding")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_vocab_parallel_embedding_equals_f_embedding(t):
    table, grad, ids, _ = _vocab_data(t)
    dense = leaves({"table": table})
    e = F.embedding(ids, dense["table"])
    (de,) = grad_of(e, grad, dense["table"])
    for rank, out in enumerate(run(_embedding, t, table, ids, grad)):
        case = f"t={t}, rank {rank}: VocabParallelEmbedding"
        close(out["e"], e.detach(), f"{case} output: every rank holds the embedding of every id (ids include "
                                    "the first and last id of every rank's range)")
        close(out["de"], block(de, rank, t, 0), f"{case} weight grad: rows of this rank's range of the dense one")
        close(out["e1"], F.embedding(ids[:, 0], table), f"{case}, called again with 1-D ids")
        assert moved(out["forward"], t) <= 2 * (t - 1) / t * S * B * H + 1e-9, (
            f"{case}: the forward may move one all-reduce of the output; recorded {describe(out['forward'])}")
        assert out["backward"] == [], f"{case}: the backward needs no communication; recorded {describe(out['backward'])}"


def _fused_loss(rank, t, logits, target):
    traffic = Traffic().install() if t > 1 else None
    local = strided(block(logits, rank, t, -1)).requires_grad_()
    loss = tp.vocab_parallel_cross_entropy(local, target)
    forward = traffic.take() if traffic else []
    (dlogits,) = grad_of(loss, torch.ones_like(loss), local)
    return {"loss": loss.detach(), "dlogits": dlogits, "forward": forward,
            "backward": traffic.take() if traffic else []}


@pytest.mark.problem_3_4
@pytest.mark.criterion("3.4-fused-loss")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_fused_cross_entropy_equals_f_cross_entropy(t):
    _, _, ids, logits = _vocab_data(t)
    dense = leaves({"logits": logits})
    loss = F.cross_entropy(dense["logits"].view(-1, VOCAB), ids.view(-1), reduction="none").view(S, B)
    (dlogits,) = grad_of(loss, torch.ones_like(loss), dense["logits"])
    for rank, out in enumerate(run(_fused_loss, t, logits, ids)):
        case = f"t={t}, rank {rank}: vocab_parallel_cross_entropy"
        close(out["loss"], loss.detach(), f"{case} per-token loss vs F.cross_entropy(reduction='none') (one logit "
                                          "is 1000 larger than the rest)")
        close(out["dlogits"], block(dlogits, rank, t, -1), f"{case} gradient of this rank's logits")
        big = [c for c in out["forward"] if c[1] > 4 * S * B]
        assert not big and len(out["forward"]) <= 4, (
            f"{case}: the forward may issue at most 4 collectives of at most 4 scalars per token ({4 * S * B} "
            f"elements), never the logits; recorded {describe(out['forward'])}")
        assert out["backward"] == [], f"{case}: the backward needs no communication; recorded {describe(out['backward'])}"


# ----------------------------------------------------------------------------------------
# 3.5 sequence parallelism
# ----------------------------------------------------------------------------------------
@pytest.mark.problem_3_5
@pytest.mark.criterion("3.5-sequence-parallel")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_sequence_parallel_layer_equals_dense_without_activation_all_reduces(t):
    _check_block("layer", t, sequence_parallel=True)


# ----------------------------------------------------------------------------------------
# 3.6 a tensor-parallel language model, trained
# ----------------------------------------------------------------------------------------
LAYERS, MODEL_LR = 1, 0.5


def model_master(seed=0):
    g = torch.Generator().manual_seed(seed)
    master = {"embedding.weight": randn(g, VOCAB, H), "output.weight": randn(g, VOCAB, H, scale=H ** -0.5),
              "final_ln.weight": 1 + randn(g, H, scale=0.2), "final_ln.bias": randn(g, H, scale=0.2)}
    for i in range(LAYERS):
        master.update({f"layers.{i}.{k}": v for k, v in make_master(seed + i + 1).items()})
    return master


def dense_model(m, ids, targets):
    x = F.embedding(ids, m["embedding.weight"])
    for i in range(LAYERS):
        x = dense_layer(sub(m, f"layers.{i}"), x)
    x = F.layer_norm(x, (H,), m["final_ln.weight"], m["final_ln.bias"])
    return F.cross_entropy(F.linear(x, m["output.weight"]).reshape(-1, VOCAB), targets.reshape(-1))


def _train(rank, t, master, batches, sequence_parallel):
    model = tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, sequence_parallel=sequence_parallel, master=master)
    losses = tp.train_language_model(model, batches[:-1], MODEL_LR)
    with torch.no_grad():
        held_out = model(*batches[-1])
    return {"losses": losses, "held_out": held_out.detach(),
            "matrices": sum(p.numel() for p in model.parameters() if p.dim() >= 2)}


@pytest.mark.problem_3_6
@pytest.mark.criterion("3.6-train")
@pytest.mark.parametrize("t,sequence_parallel", [(1, False), (2, False), (2, True), (4, True)],
                         ids=["t1", "t2", "t2-sp", "t4-sp"])
def test_language_model_trains_like_the_dense_model(t, sequence_parallel):
    g = torch.Generator().manual_seed(80 + t)
    master = model_master(t)
    batches = [(torch.randint(0, VOCAB, shape, generator=g), torch.randint(0, VOCAB, shape, generator=g))
               for shape in ((S, B), (S // 2, 1), (S, B), (S, 1))]
    params, losses = leaves(master), []
    for ids, targets in batches[:-1]:
        loss = dense_model(params, ids, targets)
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        params = {k: v.requires_grad_() for k, v in sgd_step(params, grads, MODEL_LR).items()}
        losses.append(float(loss.detach()))
    held_out = dense_model(params, *batches[-1]).detach()
    matrices = LAYERS * MATRICES["layer"] + 2 * VOCAB * H
    for rank, out in enumerate(run(_train, t, master, batches, sequence_parallel)):
        case = f"t={t}, rank {rank}, sequence_parallel={sequence_parallel}"
        assert isinstance(out["losses"], list) and len(out["losses"]) == len(losses), (
            f"{case}: train_language_model returns one loss per batch ({len(losses)}); got {out['losses']!r}")
        for step, (value, expected) in enumerate(zip(out["losses"], losses)):
            assert abs(value - expected) <= RTOL * (1 + abs(expected)), (
                f"{case}: the loss of step {step} is {value:.12g}; the dense model trained the same way gives "
                f"{expected:.12g}")
        close(out["held_out"], held_out, f"{case}: the mean loss on a held-out batch after training")
        if t > 1:
            assert out["matrices"] <= matrices / t, (
                f"{case}: the model holds {out['matrices']} elements of weight matrices on this rank; at most 1/{t} "
                f"of the dense {matrices} (the embedding and output tables included)")
