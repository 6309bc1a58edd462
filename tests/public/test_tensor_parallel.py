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
IN, OUT = 12, 16


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
    assert actual.dtype == expected.dtype, (
        f"{what}: got dtype {str(actual.dtype)[6:]}, expected {str(expected.dtype)[6:]} (outputs have the input's dtype)")
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


def dense_layer(m, x, causal=True, eps=1e-5):
    x = x + dense_attention(sub(m, "attention"), F.layer_norm(x, (H,), m["ln1.weight"], m["ln1.bias"], eps), causal)
    return x + dense_mlp(sub(m, "mlp"), F.layer_norm(x, (H,), m["ln2.weight"], m["ln2.bias"], eps))


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


def _f_and_g(rank, t, x, xs, grads):
    traffic = Traffic().install() if t > 1 else None
    out = {}
    for name, op, inp in (("f", tp.copy_to_tensor_model_parallel_region, x),
                          ("g", tp.reduce_from_tensor_model_parallel_region, xs[rank])):
        leaf = inp.clone().requires_grad_()
        y = op(leaf)
        forward = traffic.take() if traffic else []
        (dx,) = grad_of(y, grads[rank], leaf)
        out[name] = {"y": y.detach(), "dx": dx, "forward": forward, "backward": traffic.take() if traffic else [],
                     "requires_grad": op(inp.clone()).requires_grad}
        if traffic:
            traffic.take()
    return out


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-f-g")
@pytest.mark.parametrize("shape,dtype", [((S, B, H), DT), ((4, 3, 2, 8), torch.float32), ((12,), DT)],
                         ids=["sbh-float64", "4d-float32", "1d"])
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_f_and_g_forward_and_backward(t, shape, dtype):
    g = torch.Generator().manual_seed(t)
    x = randn(g, *shape, dtype=dtype)
    xs, grads = [randn(g, *shape, dtype=dtype) for _ in range(t)], [randn(g, *shape, dtype=dtype) for _ in range(t)]
    all_reduce = 2 * (t - 1) / t * x.numel()
    for rank, out in enumerate(run(_f_and_g, t, x, xs, grads)):
        case = f"t={t}, rank {rank}, {list(shape)} {str(dtype)[6:]}"
        close(out["f"]["y"], x, f"{case}: f's forward returns its input unchanged in value; output")
        close(out["f"]["dx"], sum(grads), f"{case}: f's backward gives the SUM over ranks of the output gradients")
        close(out["g"]["y"], sum(xs), f"{case}: g's forward gives the SUM over ranks of the inputs")
        close(out["g"]["dx"], grads[rank], f"{case}: g's backward gives this rank's output gradient unchanged")
        for name, direction, allowed in (("f", "forward", 0), ("f", "backward", all_reduce), ("g", "forward", all_reduce),
                                         ("g", "backward", 0)):
            calls = out[name][direction]
            assert moved(calls, t) <= allowed + 1e-9, (
                f"{case}: {name}'s {direction} may move at most {allowed:g} elements per rank (one all-reduce of "
                f"{x.numel()} elements, or none); recorded {describe(calls)}")
        for name in ("f", "g"):
            assert not out[name]["requires_grad"], (
                f"{case}: {name}'s output requires grad for an input that does not; it must not (an output requires "
                "grad exactly when the dense computation's would)")


def _scatter_gather(rank, t, x, xs, grads):
    traffic = Traffic().install() if t > 1 else None
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
        if traffic:
            traffic.take()
        leaf = inp.clone().requires_grad_()
        y = op(leaf)
        forward = traffic.take() if traffic else []
        (dx,) = grad_of(y, grad, leaf)
        out[name] = {"y": y.detach(), "dx": dx, "forward": forward, "backward": traffic.take() if traffic else [],
                     "requires_grad": op(inp.clone()).requires_grad}
    return out


# The budget of each op that has one: {direction: (most collectives, most elements moved per rank
# per element of the output)}; the reduce-scatter's forward: at most what an all-reduce of x moves.
SCATTER_GATHER_BUDGETS = {"scatter": {"forward": (0, 0)}, "seq_scatter": {"forward": (0, 0)},
                          "gather": {"forward": (1, 1), "backward": (1, 1)},
                          "seq_gather": {"forward": (1, 1), "backward": (1, 1)}}


def scatter_gather_expected(x, xs, grads, rank, t):
    """``{op name: (key, expected output, expected input grad)}``."""
    return {
        "scatter_to_tensor_model_parallel_region": ("scatter", block(x, rank, t, -1),
                                                    torch.cat([block(grads[r], r, t, -1) for r in range(t)], -1)),
        "gather_from_tensor_model_parallel_region": ("gather", torch.cat([block(xs[r], r, t, -1) for r in range(t)], -1),
                                                     block(grads[rank], rank, t, -1)),
        "scatter_to_sequence_parallel_region": ("seq_scatter", block(x, rank, t, 0),
                                                torch.cat([block(grads[r], r, t, 0) for r in range(t)])),
        "gather_from_sequence_parallel_region": ("seq_gather", torch.cat([block(xs[r], r, t, 0) for r in range(t)]),
                                                 block(sum(grads), rank, t, 0)),
        "reduce_scatter_to_sequence_parallel_region": ("seq_reduce_scatter", block(sum(xs), rank, t, 0),
                                                       torch.cat([block(grads[r], r, t, 0) for r in range(t)])),
    }


@pytest.mark.problem_3_1
@pytest.mark.criterion("3.1-scatter-gather")
@pytest.mark.parametrize("shape,dtype", [((S, B, H), DT), ((8, 3, 1, 4), torch.float32), ((12,), DT)],
                         ids=["sbh", "4d-float32", "1d"])
@pytest.mark.parametrize("t", WORLD_SIZES)
def test_scatter_gather_and_sequence_parallel_ops(t, shape, dtype):
    g = torch.Generator().manual_seed(10 + t)
    x = randn(g, *shape, dtype=dtype)
    xs, grads = [randn(g, *shape, dtype=dtype) for _ in range(t)], [randn(g, *shape, dtype=dtype) for _ in range(t)]
    for rank, out in enumerate(run(_scatter_gather, t, x, xs, grads)):
        case = f"t={t}, rank {rank}, {list(shape)} {str(dtype)[6:]}"
        for name, (key, want_y, want_dx) in scatter_gather_expected(x, xs, grads, rank, t).items():
            result = out[key]
            close(result["y"], want_y, f"{case}: {name} forward (see its contract); output")
            close(result["dx"], want_dx, f"{case}: {name} backward (see its contract); input grad")
            assert not result["requires_grad"], f"{case}: {name}'s output requires grad for an input that does not"
            for direction, (most, share) in SCATTER_GATHER_BUDGETS.get(key, {}).items():
                calls = result[direction]
                assert len(calls) <= most and moved(calls, t) <= share * want_y.numel() + 1e-9, (
                    f"{case}: {name}'s {direction} may issue at most {most} collective(s) moving at most "
                    f"{share * want_y.numel():g} elements per rank; recorded {describe(calls)}")
            if key == "seq_reduce_scatter":
                assert moved(result["forward"], t) <= 2 * (t - 1) / t * x.numel() + 1e-9, (
                    f"{case}: {name}'s forward may move at most what one all-reduce of its input moves; recorded "
                    f"{describe(result['forward'])}")
        for name, raised in out["refused"].items():
            assert raised != "no exception", (
                f"t={t}: {name} of a size {t} does not divide returned without raising; expected it to refuse "
                "(raise), not cut the rest off")


# ----------------------------------------------------------------------------------------
# 3.0 conventions: the caller's objects; ValueError; memory layout
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
            # exact: each tensor against its own copy taken before the call (unchanged means the same bits); the same backward run twice on the same graph
            if not torch.equal(inp.detach(), before):
                changed.append(f"{name} ({layout.__name__}) changed its input in place")
            # exact: each tensor against its own copy taken before the call (unchanged means the same bits); the same backward run twice on the same graph
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
    # exact: each tensor against its own copy taken before the call (unchanged means the same bits); the same backward run twice on the same graph
    if set(m) != set(before) or any(not torch.equal(m[k], before[k]) for k in m):
        changed.append("ColumnParallelLinear changed the master dict or its tensors (or its parameters share memory "
                       "with them)")
    master = model_master(rank)
    before = {k: v.clone() for k, v in master.items()}
    tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, master=master)
    # exact: each tensor against its own copy taken before the call (unchanged means the same bits); the same backward run twice on the same graph
    if set(master) != set(before) or any(not torch.equal(master[k], before[k]) for k in master):
        changed.append(f"ParallelLanguageModel changed the master dict (keys now {len(master)}, were {len(before)}) or "
                       "its tensors")
    logits = block(x, rank, t, -1).clone().requires_grad_()
    logits_before, target = logits.detach().clone(), torch.zeros(S, B, dtype=torch.long)
    loss = tp.vocab_parallel_cross_entropy(logits, target)
    # exact: each tensor against its own copy taken before the call (unchanged means the same bits); the same backward run twice on the same graph
    if not torch.equal(logits.detach(), logits_before):
        changed.append("vocab_parallel_cross_entropy changed the caller's logits in place")
    first = torch.autograd.grad(loss.sum(), logits, retain_graph=True)[0]
    try:
        second = torch.autograd.grad(loss.sum(), logits)[0]
    except RuntimeError as error:
        changed.append(f"vocab_parallel_cross_entropy: a second backward through the same graph raised {error}")
    else:
        # exact: each tensor against its own copy taken before the call (unchanged means the same bits); the same backward run twice on the same graph
        if not torch.equal(first, second):
            changed.append("vocab_parallel_cross_entropy: a second backward through the same graph gave another "
                           "gradient (its backward changed, in place, what the forward saved)")
    return changed


@pytest.mark.problem_3_0
@pytest.mark.criterion("3.0-caller-unchanged")
@pytest.mark.parametrize("t", [1, 2])
def test_the_callers_tensors_are_left_unchanged(t):
    g = torch.Generator().manual_seed(5)
    x = randn(g, S, B, H)
    for rank, changed in enumerate(run(_untouched, t, x)):
        assert changed == [], (f"t={t}, rank {rank}: the caller's objects belong to the caller (inputs, logits, master "
                               f"tensors and their dict, the gradient handed to a backward): {'; '.join(changed)}")


def _errors(rank, t):
    odd = 2 * t + 1
    calls = {
        "ParallelSelfAttention(10, num_heads=4)": lambda: tp.ParallelSelfAttention(10, 4),
        "ColumnParallelLinear(12, 16) from master tensors of another shape":
            lambda: tp.ColumnParallelLinear(12, 16, master={"weight": torch.zeros(17, 12), "bias": torch.zeros(17)}),
    }
    if t > 1:
        calls.update({
            "scatter_to_tensor_model_parallel_region([8, 2, 17])":
                lambda: tp.scatter_to_tensor_model_parallel_region(torch.zeros(S, B, H + 1, dtype=DT)),
            "reduce_scatter_to_sequence_parallel_region([9, 2, 16])":
                lambda: tp.reduce_scatter_to_sequence_parallel_region(torch.zeros(S + 1, B, H, dtype=DT)),
            f"ColumnParallelLinear(12, {odd})": lambda: tp.ColumnParallelLinear(12, odd),
            f"RowParallelLinear({odd}, 16)": lambda: tp.RowParallelLinear(odd, 16),
            f"ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1})": lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1),
            f"ParallelMLP({H}, {odd})": lambda: tp.ParallelMLP(H, odd),
            f"VocabParallelEmbedding({odd}, {H})": lambda: tp.VocabParallelEmbedding(odd, H),
        })
    traffic = Traffic().install() if t > 1 else None
    return {call: (refused(build), describe(traffic.take()) if traffic else "no collective")
            for call, build in calls.items()}


@pytest.mark.problem_3_0
@pytest.mark.criterion("3.0-errors")
@pytest.mark.parametrize("t", [1, 2])
def test_sizes_t_does_not_divide_raise_value_error(t):
    for rank, raised in enumerate(run(_errors, t)):
        for call, (name, sent) in raised.items():
            assert name == "ValueError", f"t={t}, rank {rank}: {call} must raise ValueError; got {name}"
            assert sent == "no collective", (
                f"t={t}, rank {rank}: {call} raised only after communicating ({sent}); check the sizes before any "
                "collective, so that every rank raises and none waits for the others")


def _on_layout(layout, function, arguments):
    """Output and gradients of ``function(*arguments)``, the arguments and the gradient handed to
    its backward laid out by ``layout`` (floating arguments require grad)."""
    arguments = [layout(a).requires_grad_() if a.is_floating_point() else layout(a) for a in arguments]
    y = function(*arguments)
    y.register_hook(layout)
    wanted = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    parameters = list(function.parameters()) if isinstance(function, torch.nn.Module) else []
    grads = torch.autograd.grad((y * wanted).sum(), [a for a in arguments if a.requires_grad] + parameters)
    return [y.detach(), *grads]


def _layouts(rank, t, x, m, layer, table, ids, logits):
    """Every op, a linear layer, the MLP, the embedding and the loss, on contiguous inputs and on the
    same values laid out non-contiguously."""
    parts = {name: (getattr(tp, name), [x]) for name in OPS}
    parts.update({
        "ColumnParallelLinear": (tp.ColumnParallelLinear(IN, OUT, master=m), [x[..., :IN]]),
        "RowParallelLinear": (tp.RowParallelLinear(IN, OUT, master=m), [block(x[..., :IN], rank, t, -1)]),
        "ParallelMLP": (tp.ParallelMLP(H, FFN, master=sub(layer, "mlp")), [x]),
        "VocabParallelEmbedding": (tp.VocabParallelEmbedding(VOCAB, H, master={"weight": table}), [ids]),
        "vocab_parallel_cross_entropy": (tp.vocab_parallel_cross_entropy, [block(logits, rank, t, -1), ids]),
    })
    return {name: [_on_layout(layout, function, arguments) for layout in (torch.clone, strided)]
            for name, (function, arguments) in parts.items()}


@pytest.mark.problem_3_0
@pytest.mark.criterion("3.0-layout")
@pytest.mark.parametrize("t", [1, 2])
def test_non_contiguous_inputs_give_the_same_results(t):
    g = torch.Generator().manual_seed(7)
    x, table, logits = randn(g, S, B, H), randn(g, VOCAB, H), randn(g, S, B, VOCAB)
    m, ids = {"weight": randn(g, OUT, IN), "bias": randn(g, OUT)}, torch.randint(0, VOCAB, (S, B), generator=g)
    for rank, found in enumerate(run(_layouts, t, x, m, make_master(0), table, ids, logits)):
        for name, (contiguous, non_contiguous) in found.items():
            for what, a, b in zip(("output", "input gradient", "next gradient"), non_contiguous, contiguous):
                close(a, b, f"t={t}, rank {rank}: {name}'s {what} on a non-contiguous input (the gradient handed to its "
                            "backward non-contiguous too) must equal the one on the same values laid out contiguously "
                            "(dist.all_reduce(x.contiguous()) sums a copy; .view needs contiguous memory)")


# ----------------------------------------------------------------------------------------
# 3.2 column- and row-parallel linear layers
# ----------------------------------------------------------------------------------------
def _linears(rank, t, m, x, grad):
    traffic = Traffic().install() if t > 1 else None
    out = {}
    for name, layer, inp, up in (
        ("column", tp.ColumnParallelLinear(IN, OUT, master=m), x, block(grad, rank, t, -1)),
        ("column_gather", tp.ColumnParallelLinear(IN, OUT, gather_output=True, master=m), x, grad),
        ("row", tp.RowParallelLinear(IN, OUT, master=m), block(x, rank, t, -1), grad),
        ("row_scatter", tp.RowParallelLinear(IN, OUT, input_is_parallel=False, master=m), x, grad),
    ):
        inp = inp.clone().requires_grad_()
        if traffic:
            traffic.take()
        y = layer(inp)
        forward = traffic.take() if traffic else []
        dx, dw, db = grad_of(y, up, inp, layer.weight, layer.bias)
        (layer(inp.detach().clone()) * up).sum().backward()  # twice: the parameters' .grad accumulate
        (layer(inp.detach().clone()) * up).sum().backward()
        with torch.no_grad():  # later calls: a 2-D input [b, in], a batch of one sequence, a 1-D input
            later = [layer(inp.detach()[0]), layer(inp.detach()[:, :1]), layer(inp.detach()[0, 0])]
        out[name] = {"y": y.detach(), "dx": dx, "dw": dw, "db": db, "forward": forward, "later": later,
                     "twice": (layer.weight.grad, layer.bias.grad), "requires_grad": [v.requires_grad for v in later]}
    for name, layer, inp in (("column_no_bias", tp.ColumnParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}), x),
                             ("row_no_bias", tp.RowParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}),
                              block(x, rank, t, -1))):
        out[name] = {"bias": layer.bias, "y": layer(inp).detach()}
    zero = {"weight": torch.zeros(OUT, IN, dtype=DT), "bias": m["bias"]}
    out["row_zero_weight"] = tp.RowParallelLinear(IN, OUT, master=zero)(block(x, rank, t, -1)).detach()
    float32 = {k: v.float() for k, v in m.items()}
    out["float32"] = tp.ColumnParallelLinear(IN, OUT, gather_output=True, master=float32)(x.float()).detach()
    out["refused"] = [refused(lambda: tp.ColumnParallelLinear(IN, 2 * t + 1)),
                      refused(lambda: tp.RowParallelLinear(2 * t + 1, OUT))] if t > 1 else []
    return out


# The forward's budget of each layer option, in elements moved per rank (ring algorithms).
LINEAR_BUDGETS = {"column": lambda t: 0.0, "column_gather": lambda t: (t - 1) / t * S * B * OUT,
                  "row": lambda t: 2 * (t - 1) / t * S * B * OUT, "row_scatter": lambda t: 2 * (t - 1) / t * S * B * OUT}


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
    later = [F.linear(v, m["weight"], m["bias"]) for v in (x[0], x[:, :1], x[0, 0])]
    for rank, out in enumerate(run(_linears, t, m, x, grad)):
        case = f"t={t}, rank {rank}"
        for name in ("column", "column_gather", "row", "row_scatter"):
            c, column = out[name], name.startswith("column")
            what = f"{case}: {'Column' if column else 'Row'}ParallelLinear({name.split('_')[-1] if '_' in name else ''})"
            whole = name in ("column_gather", "row", "row_scatter")
            pick = (lambda v: v) if whole else (lambda v: block(v, rank, t, -1))  # noqa: B023 - used at once
            close(c["y"], pick(y), f"{what} output: {'the whole dense output' if whole else 'block r of the output features'}")
            close(c["dx"], block(dx, rank, t, -1) if name == "row" else dx, f"{what} input grad")
            weight_block, bias_block = (block(dw, rank, t, 0), block(db, rank, t, 0)) if column else (block(dw, rank, t, 1), db)
            close(c["dw"], weight_block, f"{what} weight grad: block r of the dense one")
            close(c["db"], bias_block, f"{what} bias grad ({'block r of' if column else 'the whole'} dense one)")
            close(c["twice"][0], 2 * weight_block, f"{what} weight grad after two more forwards and backwards without "
                                                   "zeroing: gradients accumulate")
            close(c["twice"][1], 2 * bias_block, f"{what} bias grad after two more forwards and backwards: they accumulate")
            for label, value, expected in zip(("a 2-D input", "a batch of one sequence [s, 1, in]", "a 1-D input"),
                                              c["later"], later):
                close(value, pick(expected), f"{what}, called again under torch.no_grad() with {label}")
            assert not any(c["requires_grad"]), f"{what}: an output computed under torch.no_grad() requires grad"
            assert moved(c["forward"], t) <= LINEAR_BUDGETS[name](t) + 1e-9, (
                f"{what}: the forward may move at most {LINEAR_BUDGETS[name](t):g} elements per rank; recorded "
                f"{describe(c['forward'])}")
        close(out["row_zero_weight"], m["bias"].expand(S, B, OUT),
              f"{case}: RowParallelLinear with a zero weight must output its bias, once (not {t} times)")
        assert out["column_no_bias"]["bias"] is None and out["row_no_bias"]["bias"] is None, (
            f"{case}: with bias=False, ColumnParallelLinear.bias is {out['column_no_bias']['bias']!r:.60} and "
            f"RowParallelLinear.bias is {out['row_no_bias']['bias']!r:.60}; expected None for both")
        close(out["column_no_bias"]["y"], block(F.linear(x, m["weight"]), rank, t, -1),
              f"{case}: ColumnParallelLinear(bias=False) output")
        close(out["row_no_bias"]["y"], F.linear(x, m["weight"]), f"{case}: RowParallelLinear(bias=False) output")
        close(out["float32"], F.linear(x.float(), m["weight"].float(), m["bias"].float()),
              f"{case}: ColumnParallelLinear(gather_output=True) built from float32 master tensors: output")
        assert "no exception" not in out["refused"], (
            f"{case}: ColumnParallelLinear({IN}, {2 * t + 1}) and RowParallelLinear({2 * t + 1}, {OUT}), sizes {t} does "
            f"not divide: {' and '.join(out['refused'])}; expected both to raise")


# ----------------------------------------------------------------------------------------
# 3.3 MLP, attention, transformer layer: output, input grad, and a second call after one SGD
# step (parameter gradients, whatever your parameters are called); memory and traffic budgets
# ----------------------------------------------------------------------------------------
MATRICES = {"mlp": 2 * H * FFN, "attention": 4 * H * H, "layer": 2 * H * FFN + 4 * H * H}
ALL_REDUCES = {"mlp": 1, "attention": 1, "layer": 2}
DRAWN_SEED, OPTION_EPS = 3, 0.05


def _build(part, master, sequence_parallel=False, **options):
    """The module ``part`` from the layer's ``master`` tensors, or drawn from ``options``' seed
    and dtype when ``master`` is None (then the layer's ffn_hidden_size is its default, 4h)."""
    if part == "mlp":
        return tp.ParallelMLP(H, FFN, master=sub(master, "mlp") if master else None, **options)
    if part == "attention":
        return tp.ParallelSelfAttention(H, HEADS, master=sub(master, "attention") if master else None, **options)
    if master is None:
        return tp.ParallelTransformerLayer(H, HEADS, sequence_parallel=sequence_parallel, **options)
    return tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=sequence_parallel, master=master, **options)


def drawn_master(part, seed, dtype):
    """The master tensors ``part`` draws from ``seed`` without ``master`` (its docstring's rule)."""
    def linear(prefix, n_in, n_out, s):
        return {f"{prefix}.{k}": v for k, v in tp.master_linear(n_in, n_out, seed=s, dtype=dtype).items()}

    if part == "mlp":
        return {**linear("mlp.fc1", H, FFN, seed), **linear("mlp.fc2", FFN, H, seed + 1)}
    master = {k: v for i, name in enumerate("qkv") for k, v in linear(f"attention.{name}", H, H, seed + i).items()}
    master.update(linear("attention.out", H, H, seed + 3))
    if part == "layer":
        master.update({**linear("mlp.fc1", H, 4 * H, seed + 4), **linear("mlp.fc2", 4 * H, H, seed + 5)})
        for ln in ("ln1", "ln2"):
            master[f"{ln}.weight"], master[f"{ln}.bias"] = torch.ones(H, dtype=dtype), torch.zeros(H, dtype=dtype)
    return master


def _block(rank, t, part, master, x, grad, x2, sequence_parallel):
    module = _build(part, master, sequence_parallel)
    if sequence_parallel:
        x, grad, x2 = block(x, rank, t, 0), block(grad, rank, t, 0), block(x2, rank, t, 0)
    traffic = Traffic().install() if t > 1 else None
    x_ = x.clone().requires_grad_()
    y = module(x_)
    forward = traffic.take() if traffic else []
    (y * grad).sum().backward()  # fills every parameter's .grad, for the SGD step below
    (module(x.clone()) * grad).sum().backward()  # again: every .grad accumulates (twice the gradient)
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
                parameter -= LR / 2 * parameter.grad  # the accumulated gradient: one dense step of LR
        out["y2"] = module(x2)
    if not sequence_parallel:
        with torch.no_grad():
            out["drawn"] = _build(part, None, seed=DRAWN_SEED, dtype=DT)(x)
            out["float32"] = _build(part, {k: v.float() for k, v in master.items()})(x.float())
            if part == "layer":
                out["options"] = _build(part, master, causal=False, eps=OPTION_EPS)(x)
    if part == "attention":
        out["non_causal"] = _build(part, master, causal=False)(x).detach()
        out["refused"] = [refused(lambda: tp.ParallelSelfAttention(10, 4)),
                          *([refused(lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1))] if t > 1 else [])]
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
    strip = (lambda v: v) if part == "layer" else (lambda v: sub(v, part))
    for rank, out in enumerate(outs):
        case = f"t={t}, rank {rank}: {what}"
        pick = (lambda v: block(v, rank, t, 0)) if sequence_parallel else (lambda v: v)  # noqa: B023
        close(out["y"], pick(y.detach()), f"{case} output ([{S}, {B}, {H}] input) vs the dense module")
        close(out["dx"], pick(grads["x"]), f"{case} input grad vs the dense module")
        for name, difference in out.get("shared", {}).items():
            assert difference == 0, (f"{case}: after backward the gradient of {name} differs between ranks (by "
                                     f"{difference:.3g}); every rank must hold the gradient over the whole sequence")
        close(out["y2"], pick(y2), f"{case}: output of a second call on a [{S // 2}, 1, {H}] input after two backwards "
                                   f"and one SGD step p -= {LR / 2} * p.grad (the dense step of {LR}: a wrong or "
                                   "double-counted parameter gradient, or state kept from the first call, shows here)")
        assert not out["y2"].requires_grad, f"{case}: an output computed under torch.no_grad() requires grad"
        if not sequence_parallel:
            close(out["drawn"], DENSE[part](strip(drawn_master(part, DRAWN_SEED, DT)), x),
                  f"{case} built without master from seed={DRAWN_SEED}, dtype=torch.float64 (the master tensors its "
                  "docstring draws): output")
            close(out["float32"], DENSE[part](strip({k: v.float() for k, v in m.items()}), x.float()),
                  f"{case} built from float32 master tensors, on a float32 input: output")
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
        assert "no exception" not in out["refused"], (
            f"t={t}: 4 heads cannot split 10 features, and {t + 1} heads cannot be split over {t} ranks: refuse")


@pytest.mark.problem_3_3
@pytest.mark.criterion("3.3-layer")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_transformer_layer_equals_dense(t):
    m, x, outs = _check_block("layer", t)
    for rank, out in enumerate(outs):
        close(out["options"], dense_layer(m, x, causal=False, eps=OPTION_EPS),
              f"t={t}, rank {rank}: ParallelTransformerLayer(..., causal=False, eps={OPTION_EPS}): output (its "
              "LayerNorms use that eps; every position attends to every position)")


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
    logits[1, 1, 0] = logits[1, 1, VOCAB - 1] = float(logits[1, 1].max()) + 1  # the largest logit, on two ranks
    return table, grad, ids, logits


def _embedding(rank, t, table, ids, grad):
    traffic = Traffic().install() if t > 1 else None
    embedding = tp.VocabParallelEmbedding(VOCAB, H, master={"weight": table})
    e = embedding(ids)
    forward = traffic.take() if traffic else []
    (de,) = grad_of(e, grad, embedding.weight)
    backward = traffic.take() if traffic else []
    for _ in range(2):  # twice more: .grad accumulates
        (embedding(ids.clone()) * grad).sum().backward()
    with torch.no_grad():
        later = [embedding(ids[:, 0]), embedding(ids[:, :1])]
    return {"e": e.detach(), "de": de, "forward": forward, "backward": backward, "later": later,
            "twice": embedding.weight.grad}


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
        close(out["twice"], 2 * block(de, rank, t, 0), f"{case} weight grad after two more forwards and backwards "
                                                       "without zeroing: gradients accumulate")
        for label, value, expected in zip(("1-D ids", "ids of a batch of one sequence [s, 1]"), out["later"],
                                          (F.embedding(ids[:, 0], table), F.embedding(ids[:, :1], table))):
            close(value, expected, f"{case}, called again under torch.no_grad() with {label}")
            assert not value.requires_grad, f"{case}: an output computed under torch.no_grad() requires grad"
        assert moved(out["forward"], t) <= 2 * (t - 1) / t * S * B * H + 1e-9, (
            f"{case}: the forward may move one all-reduce of the output; recorded {describe(out['forward'])}")
        assert out["backward"] == [], f"{case}: the backward needs no communication; recorded {describe(out['backward'])}"


def _fused_loss(rank, t, logits, target):
    traffic = Traffic().install() if t > 1 else None
    local = block(logits, rank, t, -1).clone().requires_grad_()
    loss = tp.vocab_parallel_cross_entropy(local, target)
    forward = traffic.take() if traffic else []
    (dlogits,) = grad_of(loss, torch.ones_like(loss), local)
    backward = traffic.take() if traffic else []
    with torch.no_grad():  # later calls: 2-D float32 logits, a batch of one sequence, 1-D logits of one token
        later = [tp.vocab_parallel_cross_entropy(block(v, rank, t, -1).clone(), y)
                 for v, y in ((logits.reshape(S * B, VOCAB).float(), target.reshape(-1)), (logits[:, :1], target[:, :1]),
                              (logits[1, 1], target[1, 1]))]
    return {"loss": loss.detach(), "dlogits": dlogits, "forward": forward, "backward": backward, "later": later}


@pytest.mark.problem_3_4
@pytest.mark.criterion("3.4-fused-loss")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_fused_cross_entropy_equals_f_cross_entropy(t):
    _, _, ids, logits = _vocab_data(t)
    dense = leaves({"logits": logits})
    loss = F.cross_entropy(dense["logits"].view(-1, VOCAB), ids.view(-1), reduction="none").view(S, B)
    (dlogits,) = grad_of(loss, torch.ones_like(loss), dense["logits"])
    later = [F.cross_entropy(logits.reshape(S * B, VOCAB).float(), ids.reshape(-1), reduction="none"),
             F.cross_entropy(logits[:, :1].reshape(S, VOCAB), ids[:, :1].reshape(-1), reduction="none").view(S, 1),
             F.cross_entropy(logits[1, 1], ids[1, 1])]
    for rank, out in enumerate(run(_fused_loss, t, logits, ids)):
        case = f"t={t}, rank {rank}: vocab_parallel_cross_entropy"
        close(out["loss"], loss.detach(), f"{case} per-token loss vs F.cross_entropy(reduction='none') (one logit "
                                          "is 1000 larger than the rest; one token's largest logit is on two ranks)")
        close(out["dlogits"], block(dlogits, rank, t, -1), f"{case} gradient of this rank's logits")
        for label, value, expected in zip(("2-D float32 logits [tokens, V/t]", "a batch of one sequence [s, 1, V/t]",
                                           "1-D logits [V/t] of one token"), out["later"], later):
            close(value, expected, f"{case}, called again under torch.no_grad() with {label}: losses")
            assert not value.requires_grad, f"{case}: losses computed under torch.no_grad() require grad"
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


def _sequence_parallel_parts(rank, t, m, x, hidden, grad, grad_hidden):
    traffic = Traffic().install() if t > 1 else None
    fc1, fc2, ln = sub(m, "mlp.fc1"), sub(m, "mlp.fc2"), sub(m, "ln1")
    parts = {
        "ColumnParallelLinear": (lambda bias: tp.ColumnParallelLinear(H, FFN, bias=bias, sequence_parallel=True,
                                                                      master=fc1 if bias else {"weight": fc1["weight"]}),
                                 block(x, rank, t, 0), block(grad_hidden, rank, t, -1)),
        "RowParallelLinear": (lambda bias: tp.RowParallelLinear(FFN, H, bias=bias, sequence_parallel=True,
                                                                master=fc2 if bias else {"weight": fc2["weight"]}),
                              block(hidden, rank, t, -1), block(grad, rank, t, 0)),
        "ReplicatedLayerNorm": (lambda bias: tp.ReplicatedLayerNorm(H, sequence_parallel=True, master=ln),
                                block(x, rank, t, 0), block(grad, rank, t, 0)),
    }
    out = {}
    for name, (build, inp, up) in parts.items():
        for bias in (True, False) if name != "ReplicatedLayerNorm" else (True,):
            module, leaf = build(bias), inp.clone().requires_grad_()
            if traffic:
                traffic.take()
            y = module(leaf)
            forward = traffic.take() if traffic else []
            (y * up).sum().backward()
            backward = traffic.take() if traffic else []
            grads = {k: p.grad.clone() for k, p in module.named_parameters()}
            (module(inp.clone()) * up).sum().backward()  # again: .grad accumulates
            out[(name, bias)] = {"y": y.detach(), "dx": leaf.grad, "grads": grads, "forward": forward,
                                 "backward": backward, "twice": {k: p.grad for k, p in module.named_parameters()},
                                 "has_bias": getattr(module, "bias", None) is not None}
    return out


@pytest.mark.problem_3_5
@pytest.mark.criterion("3.5-sequence-parallel")
@pytest.mark.parametrize("t", ALL_SIZES)
def test_sequence_parallel_linear_layers_and_layer_norm(t):
    g = torch.Generator().manual_seed(40 + t)
    m, x, hidden = make_master(t), randn(g, S, B, H), randn(g, S, B, FFN)
    grad, grad_hidden = randn(g, S, B, H), randn(g, S, B, FFN)
    dense = {}
    for name, function, inp, up in (
        ("ColumnParallelLinear", lambda v, p: F.linear(v, p["weight"], p.get("bias")), x, grad_hidden),
        ("RowParallelLinear", lambda v, p: F.linear(v, p["weight"], p.get("bias")), hidden, grad),
        ("ReplicatedLayerNorm", lambda v, p: F.layer_norm(v, (H,), p["weight"], p["bias"]), x, grad),
    ):
        master = sub(m, {"ColumnParallelLinear": "mlp.fc1", "RowParallelLinear": "mlp.fc2"}.get(name, "ln1"))
        for bias in (True, False) if name != "ReplicatedLayerNorm" else (True,):
            p = leaves(master if bias else {"weight": master["weight"]})
            leaf = inp.clone().requires_grad_()
            y = function(leaf, p)
            dense[(name, bias)] = (y.detach(), *grad_of(y, up, leaf, *p.values()))
    # what rank r holds of each dense result: (output, input grad, {parameter: its share of the gradient})
    sequence, features = (lambda v, r: block(v, r, t, 0)), (lambda v, r: block(v, r, t, -1))
    shares = {"ColumnParallelLinear": (features, sequence, {"weight": sequence, "bias": sequence}),
              "RowParallelLinear": (sequence, features, {"weight": features, "bias": lambda v, r: v}),
              "ReplicatedLayerNorm": (sequence, sequence, {"weight": lambda v, r: v, "bias": lambda v, r: v})}
    budgets = {"ColumnParallelLinear": ("forward", (t - 1) / t * S * B * H, "the input moves once"),
               "RowParallelLinear": ("forward", (t - 1) / t * S * B * H, "one reduce-scatter of the output"),
               "ReplicatedLayerNorm": ("backward", 2 * 2 * (t - 1) / t * H, f"one all-reduce of {H} per parameter")}
    for rank, out in enumerate(run(_sequence_parallel_parts, t, m, x, hidden, grad, grad_hidden)):
        for (name, bias), result in out.items():
            case = f"t={t}, rank {rank}: {name}({'' if bias else 'bias=False, '}sequence_parallel=True)"
            y, dx, *dparams = dense[(name, bias)]
            out_share, in_share, param_shares = shares[name]
            close(result["y"], out_share(y, rank), f"{case} output (this rank's share of the dense output)")
            close(result["dx"], in_share(dx, rank), f"{case} input grad")
            assert result["has_bias"] == bias, f"{case}: with bias=False the layer has no bias (self.bias is None)"
            for parameter, value in zip(("weight", "bias"), dparams):
                share = param_shares[parameter](value, rank)
                close(result["grads"].get(parameter), share, f"{case} {parameter} grad (replicated parameters: the "
                                                             "gradient over the whole sequence, on every rank)")
                close(result["twice"].get(parameter), 2 * share, f"{case} {parameter} grad after a second forward and "
                                                                 "backward: gradients accumulate")
            direction, budget, why = budgets[name]
            calls = result[direction] if direction == "backward" else result["forward"]
            if direction == "backward":
                assert result["forward"] == [], f"{case}: the forward communicates nothing; recorded {describe(result['forward'])}"
            assert moved(calls, t) <= budget + 1e-9, (
                f"{case}: the {direction} may move at most {budget:g} elements per rank ({why}); recorded "
                f"{describe(calls)}")


# ----------------------------------------------------------------------------------------
# 3.6 a tensor-parallel language model, trained
# ----------------------------------------------------------------------------------------
LAYERS, MODEL_LR, MODEL_EPS = 1, 0.5, 1e-3


def model_master(seed=0):
    g = torch.Generator().manual_seed(seed)
    master = {"embedding.weight": randn(g, VOCAB, H), "output.weight": randn(g, VOCAB, H, scale=H ** -0.5),
              "final_ln.weight": 1 + randn(g, H, scale=0.2), "final_ln.bias": randn(g, H, scale=0.2)}
    for i in range(LAYERS):
        master.update({f"layers.{i}.{k}": v for k, v in make_master(seed + i + 1).items()})
    return master


def drawn_model_master(seed):
    """The master tensors ParallelLanguageModel draws from ``seed`` without ``master`` (float64)."""
    master = {"embedding.weight": torch.randn(VOCAB, H, generator=torch.Generator().manual_seed(seed), dtype=DT),
              "output.weight": tp.master_linear(H, VOCAB, False, seed=seed + 1, dtype=DT)["weight"],
              "final_ln.weight": torch.ones(H, dtype=DT), "final_ln.bias": torch.zeros(H, dtype=DT)}
    for i in range(LAYERS):
        master.update({f"layers.{i}.{k}": v for k, v in drawn_master("layer", seed + 10 * (i + 1), DT).items()})
    return master


def dense_model(m, ids, targets, eps=1e-5):
    x = F.embedding(ids, m["embedding.weight"])
    for i in range(LAYERS):
        x = dense_layer(sub(m, f"layers.{i}"), x, eps=eps)
    x = F.layer_norm(x, (H,), m["final_ln.weight"], m["final_ln.bias"], eps)
    return F.cross_entropy(F.linear(x, m["output.weight"]).reshape(-1, VOCAB), targets.reshape(-1))


def _train(rank, t, master, batches, sequence_parallel):
    traffic = Traffic().install() if t > 1 else None
    steps = []  # (tokens of a step's batch, the collectives of that step)

    def one_by_one(chosen):  # an iterator, not a list; the collectives of each step kept apart
        for ids, targets in chosen:
            traffic and traffic.take()
            yield ids, targets
            steps.append((ids.numel(), traffic.take() if traffic else []))

    model = tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, sequence_parallel=sequence_parallel,
                                     eps=MODEL_EPS, master=master)
    losses = [tp.train_language_model(model, one_by_one(batches[:2]), MODEL_LR),  # two calls: the second trains on
              tp.train_language_model(model, one_by_one(batches[2:3]), MODEL_LR)]
    grads_left = [name for name, p in model.named_parameters() if p.grad is not None]
    with torch.no_grad():
        held_out = model(*batches[-1])
        drawn = tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, seed=DRAWN_SEED, dtype=DT)(*batches[-1])
    return {"losses": losses, "held_out": held_out, "grads_left": grads_left, "drawn": drawn,
            "matrices": sum(p.numel() for p in model.parameters() if p.dim() >= 2), "steps": steps}


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
        loss = dense_model(params, ids, targets, MODEL_EPS)
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        params = {k: v.requires_grad_() for k, v in sgd_step(params, grads, MODEL_LR).items()}
        losses.append(float(loss.detach()))
    held_out = dense_model(params, *batches[-1], MODEL_EPS).detach()
    drawn = dense_model(drawn_model_master(DRAWN_SEED), *batches[-1])
    matrices = LAYERS * MATRICES["layer"] + 2 * VOCAB * H
    for rank, out in enumerate(run(_train, t, master, batches, sequence_parallel)):
        case = f"t={t}, rank {rank}, sequence_parallel={sequence_parallel}"
        for call, (returned, expected) in enumerate(zip(out["losses"], (losses[:2], losses[2:]))):
            assert type(returned) is list and [type(v) for v in returned] == [float] * len(expected), (
                f"{case}: train_language_model's call {call + 1} returns a list of Python floats, one per batch "
                f"({len(expected)}); got {returned!r}")
            for step, (value, want) in enumerate(zip(returned, expected)):
                assert abs(value - want) <= RTOL * (1 + abs(want)), (
                    f"{case}: call {call + 1} (batches given as an iterator; the second call trains on from the "
                    f"first), step {step}: the loss is {value:.12g}; the dense model trained the same way (eps="
                    f"{MODEL_EPS}) gives {want:.12g}")
        close(out["held_out"], held_out, f"{case}: the mean loss on a held-out batch after training")
        assert not out["held_out"].requires_grad, f"{case}: a loss computed under torch.no_grad() requires grad"
        assert out["grads_left"] == [], (f"{case}: train_language_model leaves no .grad behind; these parameters still "
                                         f"hold one: {out['grads_left'][:4]}")
        close(out["drawn"], drawn, f"{case}: ParallelLanguageModel without master, drawn from seed={DRAWN_SEED} "
                                   "(dtype=torch.float64), as its docstring says: the mean loss")
        if t > 1:
            assert out["matrices"] <= matrices / t, (
                f"{case}: the model holds {out['matrices']} elements of weight matrices on this rank; at most 1/{t} "
                f"of the dense {matrices} (the embedding and output tables included)")
            for tokens, calls in out["steps"]:
                whole = [c for c in calls if c[1] >= tokens * VOCAB]  # the logits of the step's batch, all of V
                assert not whole, (f"{case}: the model never builds the whole vocabulary's logits ({tokens} tokens x "
                                   f"{VOCAB}); a training step recorded {describe(whole)}")
