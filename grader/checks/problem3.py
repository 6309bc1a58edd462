"""Hidden checks for Problem 3 (tensor parallelism), run on gloo with t = 2 and t = 4 in float64;
3.1-single-process runs every part once more in one plain process without a process group
(t = 1: every communication op is the identity, every layer equals its dense counterpart).

Each ``observe_*`` launches the ranks with the grader's own ``minitorch.distributed.launch``
(t = 1 runs in the observing process itself);
the ranks build the student's layers from master tensors derived from ``seed``, run forward and
backward, and report outputs, gradients and every ``torch.distributed`` collective they issued
(kind, number of elements, dtype, phase). Each ``judge_*`` rebuilds the same master tensors,
computes the expected values with dense single-process PyTorch (``F.linear``,
``nn.MultiheadAttention``, ``nn.LayerNorm``, ``F.embedding``, ``F.cross_entropy``) and compares.

Recording collectives: ``_install_recorder`` wraps the collectives of ``torch.distributed`` in
the observing process BEFORE the ranks are forked, so every rank inherits the wrappers. A
collective's size is the number of elements of its largest tensor argument (a list counts as
the sum of its tensors): an all-reduce of n, an all-gather INTO n elements and a reduce-scatter
FROM n elements all record n. Collectives called from inside another one are not recorded again.
"""
from __future__ import annotations

import functools
import re
import threading
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.checks import Fail, expect_tensor, in_every_rank, rank_values
from grader.checks.compare import max_difference
from grader.layout import PACKAGE, STUDENT_FILES

WORLD_SIZES = (2, 4)  # t = 1 (no process group) is the criterion 3.1-single-process
S, B, H, HEADS, FFN, VOCAB = 8, 2, 16, 4, 32, 48   # all divisible by 4
N = S * B * H                                       # elements of one [s, b, h] activation
TOL = 1e-10
SHARD = "that block"  # what a parameter is compared with in the shard checks
DTYPE = torch.float64
LAUNCH_TIMEOUT = 10.0


# ======================================================================================
# Recording collectives (in the ranks)
# ======================================================================================
_KINDS = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather", "all_gather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_single": "all_gather",
    "_all_gather_base": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "isend": "send", "irecv": "recv",
    "batch_isend_irecv": "send/recv", "barrier": "barrier", "monitored_barrier": "barrier",
    "all_gather_object": "all_gather_object", "broadcast_object_list": "broadcast_object_list",
    "gather_object": "gather_object", "scatter_object_list": "scatter_object_list",
    "send_object_list": "send_object_list", "recv_object_list": "recv_object_list",
}
_LOG: list[dict] = []
_PHASE = ["setup"]
_NESTING = threading.local()


def _install_recorder() -> None:
    """Wrap every collective of torch.distributed (idempotent)."""
    c10d = dist.distributed_c10d
    for name, kind in _KINDS.items():
        for module in (dist, c10d):
            original = getattr(module, name, None)
            if original is not None and not getattr(original, "_grader_recorded", False):
                setattr(module, name, _recorded(original, kind))


def _recorded(original, kind):
    @functools.wraps(original)
    def collective(*args, **kwargs):
        if getattr(_NESTING, "depth", 0):
            return original(*args, **kwargs)
        numel, dtype = _largest_tensor_argument(list(args) + list(kwargs.values()))
        op = kwargs.get("op", args[1] if kind == "all_reduce" and len(args) > 1 else None)
        _LOG.append({"phase": _PHASE[0], "kind": kind, "numel": numel, "dtype": dtype,
                     "op": str(op).rsplit(".", 1)[-1] if op is not None else ""})
        _NESTING.depth = 1
        try:
            return original(*args, **kwargs)
        finally:
            _NESTING.depth = 0

    collective._grader_recorded = True
    return collective


def _largest_tensor_argument(arguments) -> tuple[int, str]:
    best, dtype = 0, ""
    for argument in arguments:
        tensors = [argument] if isinstance(argument, torch.Tensor) else (
            [a for a in argument if isinstance(a, torch.Tensor)]
            if isinstance(argument, (list, tuple)) else [])
        size = sum(t.numel() for t in tensors)
        if tensors and size > best:
            best, dtype = size, str(tensors[0].dtype).replace("torch.", "")
    return best, dtype


class _Phase:
    """``with _Phase("forward"):`` tags the collectives issued inside."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        _PHASE[0] = self.name

    def __exit__(self, *exc):
        _PHASE[0] = "setup"


def _start_rank() -> None:
    _LOG.clear()
    _PHASE[0] = "setup"


def _launch(rank_fn, seed: int, params: dict) -> dict:
    """Run ``rank_fn(rank, t, seed, params)`` for every t; ``{"t2": [rank values], ...}``.

    t = 1 runs here, in one process with no process group; what it raised is kept as
    ``{"t1": {"error": text}}`` so that the judge reports it after the multi-rank results."""
    from minitorch.distributed import launch

    _install_recorder()
    checked = in_every_rank(rank_fn)  # the child's tamper check never runs in the forked ranks
    results: dict = {}
    for t in params.get("world_sizes", WORLD_SIZES):
        if t == 1:
            results["t1"] = _single_process(rank_fn, seed, params)
            continue
        try:
            ranks = launch(checked, t, seed, params, backend="gloo", timeout=LAUNCH_TIMEOUT)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - a rank's exception: the student's, in their terms
            raise Fail(f"t={t}: your code raised {_student_error(error)}") from None
        results[f"t{t}"] = rank_values(ranks)
    return results


def _single_process(rank_fn, seed: int, params: dict):
    """``[rank_fn(0, 1, seed, params)]`` without a process group, or ``{"error": ...}``."""
    try:
        return [rank_fn(0, 1, seed, params)]
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - the student's exception is the finding
        return {"error": _student_error(error)}


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$')


def _student_error(error: BaseException) -> str:
    """``Type: message`` and the frames of the student's file in its traceback: this process's
    traceback, or the rank's (``launch`` attaches it as a note), never the grader's frames."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    text += "\n".join(getattr(error, "__notes__", []))
    lines, frames = text.splitlines(), []
    for number, line in enumerate(lines):
        frame = _FRAME.match(line)
        if frame and Path(frame["path"]).name in STUDENT_FILES and Path(frame["path"]).parent.name == PACKAGE:
            code = lines[number + 1].strip() if number + 1 < len(lines) and not _FRAME.match(lines[number + 1]) else ""
            frames.append(f'  File "{Path(frame["path"]).name}", line {frame["line"]}, in {frame["name"]}'
                          + (f"\n    {code}" if code else ""))
    frames = list(dict.fromkeys(frames))  # Python 3.11 prints the notes with the traceback too
    return "\n".join([f"{type(error).__name__}: {str(error)[:500]}", *frames[-6:]])


def _multi_rank(params: dict) -> list[int]:
    """The world sizes with a process group, where the collectives are judged (t = 1 has none)."""
    return [t for t in params.get("world_sizes", WORLD_SIZES) if t > 1]


def _ranks(observation, t: int) -> list:
    """The rank results of world size ``t``; for t = 1, Fail with what the single process raised."""
    ranks = observation[f"t{t}"]
    if isinstance(ranks, dict):
        raise Fail(f"your code raised {ranks['error']}\n(with no process group, every communication op is the "
                   "identity and calls no collective: get_world_size() is 1)")
    return ranks


def _backward(output, grad) -> None:
    """``output.backward(grad)`` without its one-off import of sympy (0.4 s in every rank)."""
    (output * grad).sum().backward()


def _strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout (an op must not assume contiguous input)."""
    if tensor.dim() < 2:
        return tensor.clone()
    return tensor.transpose(0, -1).contiguous().transpose(0, -1)


def _run_op(op, x: torch.Tensor, grad: torch.Tensor, phase: str, strided: bool = True) -> dict:
    """Forward ``op`` on a copy of ``x`` and backward a copy of ``grad`` into it, both
    non-contiguous when ``strided``: output, input grad, and whether the op changed its input
    or the gradient handed to its backward (both belong to the caller: "returns a new tensor")."""
    layout = _strided if strided else torch.clone
    x = layout(x).requires_grad_()
    x_before = x.detach().clone()
    handed: list[tuple[torch.Tensor, torch.Tensor]] = []  # (gradient handed on, its value then)

    def hand_on(incoming):
        copy = layout(incoming)
        handed.append((copy, copy.clone()))
        return copy

    with _Phase(f"{phase}.forward"):
        y = op(x)
    if isinstance(y, torch.Tensor) and y.requires_grad:
        y.register_hook(hand_on)
    with _Phase(f"{phase}.backward"):
        _backward(y, grad)
    return {"out": _out(y), "grad": _out(x.grad), "input_changed": not torch.equal(x.detach(), x_before),
            "grad_changed": any(not torch.equal(now, then) for now, then in handed)}


def _out(tensor):
    """A tensor fit to travel back to the parent."""
    if not isinstance(tensor, torch.Tensor):
        return None
    return tensor.detach().cpu().clone()


# ======================================================================================
# Data shared by the ranks and the judge: everything derives from ``seed``
# ======================================================================================
def _rand(generator, *shape, scale=1.0):
    return torch.randn(*shape, generator=generator, dtype=DTYPE) * scale


def _master(seed: int) -> dict[str, torch.Tensor]:
    """Master tensors of one dense transformer layer, named as the student modules expect."""
    g = torch.Generator().manual_seed(seed)
    m = {}
    for name in ("q", "k", "v", "out"):
        m[f"attention.{name}.weight"] = _rand(g, H, H, scale=H ** -0.5)
        m[f"attention.{name}.bias"] = _rand(g, H, scale=0.1)
    m["mlp.fc1.weight"], m["mlp.fc1.bias"] = _rand(g, FFN, H, scale=H ** -0.5), _rand(g, FFN, scale=0.1)
    m["mlp.fc2.weight"], m["mlp.fc2.bias"] = _rand(g, H, FFN, scale=FFN ** -0.5), _rand(g, H, scale=0.1)
    for ln in ("ln1", "ln2"):
        m[f"{ln}.weight"], m[f"{ln}.bias"] = 1 + _rand(g, H, scale=0.2), _rand(g, H, scale=0.2)
    return m


def _sub(master: dict, prefix: str) -> dict:
    return {k[len(prefix) + 1:]: v for k, v in master.items() if k.startswith(prefix + ".")}


def _activations(seed: int, t: int) -> dict[str, torch.Tensor]:
    """Inputs and upstream gradients; ``*_r`` entries are per rank (a list of t tensors)."""
    g = torch.Generator().manual_seed(seed + 1000 * t)
    return {
        "x": _rand(g, S, B, H), "grad": _rand(g, S, B, H),
        "x_r": [_rand(g, S, B, H) for _ in range(t)], "grad_r": [_rand(g, S, B, H) for _ in range(t)],
    }


def _column_block(tensor: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """Rank's block of the LAST dimension."""
    return tensor.chunk(t, dim=-1)[rank]


def _row_block(tensor: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    """Rank's block of the FIRST dimension."""
    return tensor.chunk(t, dim=0)[rank]


# ======================================================================================
# Judging helpers
# ======================================================================================
def _close(actual, expected) -> bool:
    d = max_difference(actual, expected)
    return d is not None and d <= TOL * (1 + expected.abs().max().item())


def _expect(what: str, actual, expected, reference: str = "the dense single-process result") -> None:
    if actual is None:
        raise Fail(f"{what}: no value (None); expected a tensor of shape {tuple(expected.shape)}")
    expect_tensor(actual, what)
    d = max_difference(actual, expected)
    if d is None:
        raise Fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}")
    if not _close(actual, expected):
        raise Fail(f"{what}: differs from {reference} by {d:.3g} (max abs; tolerance {TOL:g} in "
                   "float64)")


def _describe(log: list[dict]) -> str:
    if not log:
        return "no collective"
    return ", ".join(f"{c['kind']}{'(' + c['op'] + ')' if c['op'] and c['op'] != 'SUM' else ''}"
                     f" of {c['numel']} {c['dtype']}" for c in log)


def _phase_log(log: list[dict], phase: str) -> list[dict]:
    return [c for c in log if c["phase"] == phase]


def _expect_collectives(what: str, log: list[dict], phase: str, expected: list[tuple[str, int]],
                        why: str) -> None:
    """The collectives of ``phase`` must be exactly ``expected`` [(kind, numel)], in order."""
    got = _phase_log(log, phase)
    if [(c["kind"], c["numel"]) for c in got] != expected:
        step = phase.rsplit(".", 1)[-1]
        want = (f"must communicate exactly {', '.join(f'{k} of {n}' for k, n in expected)}"
                if expected else "must not communicate")
        raise Fail(f"{what}: the {step} {want} ({why}); recorded {_describe(got)}")


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: _out(p.grad) for name, p in module.named_parameters()}


def _values(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: _out(p) for name, p in module.named_parameters()}


def _raised(build) -> str:
    """Name of the exception ``build()`` raised, or ``"no exception"``."""
    try:
        build()
    except Exception as error:  # reported by name; the judge says what was expected
        return type(error).__name__
    return "no exception"


def _expect_value_error(what: str, raised: str) -> None:
    if raised != "ValueError":
        raise Fail(f"{what} must raise ValueError; got {raised}")


# ======================================================================================
# 3.1 f and g, both directions
# ======================================================================================
def _rank_fg(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    data = _activations(seed, t)
    result = {}
    for name, op, x, grad in (
        ("f", tp.copy_to_tensor_model_parallel_region, data["x"], data["grad_r"][rank]),
        ("g", tp.reduce_from_tensor_model_parallel_region, data["x_r"][rank], data["grad_r"][rank]),
    ):
        result[name] = _run_op(op, x, grad, name)  # non-contiguous: an op must not assume contiguous
        result[f"{name} contiguous"] = _run_op(op, x, grad, f"{name} contiguous", strided=False)
    result["log"] = list(_LOG)
    return result


def observe_fg(seed: int, params: dict):
    """Launches t = 2, 4 gloo ranks that run f and g forward and backward, recording outputs, gradients and collectives."""
    return _launch(_rank_fg, seed, params)


def judge_fg(seed: int, params: dict, observation) -> None:
    for t in params.get("world_sizes", WORLD_SIZES):
        data, ranks = _activations(seed, t), _ranks(observation, t)
        grad_sum, x_sum = sum(data["grad_r"]), sum(data["x_r"])
        for r, o in enumerate(ranks):
            for layout in ("contiguous", "non-contiguous"):
                f, g = (o[name] if layout != "contiguous" else o[f"{name} contiguous"] for name in ("f", "g"))
                where = f"t={t}, rank {r}, {layout} input and gradient"
                # judged after the contiguous run was right: then only the layout can be the cause
                hint = _IN_PLACE_HINT if layout == "non-contiguous" else ""
                if not _close(f["out"], data["x"]):
                    _expect(f"{where}: forward of f (copy_to_tensor_model_parallel_region) must be the "
                            "identity; output", f["out"], data["x"])
                if t > 1 and _close(f["grad"], data["grad_r"][r]):
                    raise Fail(f"{where}: backward of f must all-reduce the gradient: the input grad is a partial "
                               f"sum (it equals that rank's own output grad){hint}")
                _expect(f"{where}: backward of f must all-reduce (sum) the gradient; input grad", f["grad"], grad_sum)
                if t > 1 and _close(g["out"], data["x_r"][r]):
                    raise Fail(f"{where}: forward of g (reduce_from_tensor_model_parallel_region) must "
                               f"all-reduce: the output is only this rank's own partial sum{hint}")
                _expect(f"{where}: forward of g must sum the ranks' inputs; output", g["out"], x_sum)
                if t > 1 and _close(g["grad"], grad_sum):
                    raise Fail(f"{where}: backward of g must be the identity: the input grad is the "
                               "sum of all ranks' output grads (all-reduced again)")
                _expect(f"{where}: backward of g must be the identity; input grad", g["grad"], data["grad_r"][r])
                for name, result in (("f", f), ("g", g)):
                    _expect_untouched(where, name, result)
            if t > 1:
                log = o["log"]
                _expect_collectives(f"t={t}, rank {r}, f", log, "f.forward", [], "f's forward is the identity")
                _expect_collectives(f"t={t}, rank {r}, f", log, "f.backward", [("all_reduce", N)],
                                    "f's backward sums the gradient")
                _expect_collectives(f"t={t}, rank {r}, g", log, "g.forward", [("all_reduce", N)],
                                    "g's forward sums the partial results")
                _expect_collectives(f"t={t}, rank {r}, g", log, "g.backward", [], "g's backward is the identity")


_IN_PLACE_HINT = (" (right with a contiguous tensor, wrong with this one: dist.all_reduce(x.contiguous()) sums "
                  "a copy when x is not contiguous and leaves x as it was; all-reduce a new contiguous tensor, "
                  "e.g. x.clone(), and return that)")


def _expect_untouched(where: str, name: str, result) -> None:
    """An op returns a new tensor: its input, and the gradient handed to its backward, are the caller's."""
    if result["input_changed"]:
        raise Fail(f"{where}: {name} changed its input in place; it must return a new tensor and leave x as it "
                   "was (the caller may still use x): all-reduce a copy (x.clone()), not x")
    if result["grad_changed"]:
        raise Fail(f"{where}: the backward of {name} changed the gradient it was given in place; that tensor "
                   "belongs to autograd (other functions may use it): reduce a copy and return that")


# ======================================================================================
# 3.1 scatter / gather (last dimension) and the sequence-parallel ops (first dimension)
# ======================================================================================
_SCATTER_GATHER_OPS = (
    # name, input is per rank (else replicated), upstream grad is per rank, forward may communicate
    ("scatter_to_tensor_model_parallel_region", False, True, False),
    ("gather_from_tensor_model_parallel_region", True, False, True),
    ("scatter_to_sequence_parallel_region", False, True, False),
    ("gather_from_sequence_parallel_region", True, True, True),
    ("reduce_scatter_to_sequence_parallel_region", True, True, True),
)


def _scatter_gather_inputs(name: str, data: dict, rank: int, t: int):
    """(input of rank, upstream grad of rank) for op ``name``, from [s, b, h] data."""
    x, xr, grad, gr = data["x"], data["x_r"][rank], data["grad"], data["grad_r"][rank]
    return {
        "scatter_to_tensor_model_parallel_region": (x, _column_block(gr, rank, t)),
        "gather_from_tensor_model_parallel_region": (_column_block(xr, rank, t), grad),
        "scatter_to_sequence_parallel_region": (x, _row_block(gr, rank, t)),
        "gather_from_sequence_parallel_region": (_row_block(xr, rank, t), gr),
        "reduce_scatter_to_sequence_parallel_region": (xr, _row_block(gr, rank, t)),
    }[name]


def _scatter_gather_expected(name: str, data: dict, rank: int, t: int):
    """(expected output, expected input grad) of rank for op ``name``."""
    x, grad = data["x"], data["grad"]
    xs, gs = data["x_r"], data["grad_r"]
    if name == "scatter_to_tensor_model_parallel_region":
        return _column_block(x, rank, t), torch.cat([_column_block(gs[r], r, t) for r in range(t)], -1)
    if name == "gather_from_tensor_model_parallel_region":
        return torch.cat([_column_block(xs[r], r, t) for r in range(t)], -1), _column_block(grad, rank, t)
    if name == "scatter_to_sequence_parallel_region":
        return _row_block(x, rank, t), torch.cat([_row_block(gs[r], r, t) for r in range(t)])
    if name == "gather_from_sequence_parallel_region":
        return torch.cat([_row_block(xs[r], r, t) for r in range(t)]), _row_block(sum(gs), rank, t)
    return _row_block(sum(xs), rank, t), torch.cat([_row_block(gs[r], r, t) for r in range(t)])


def _rank_scatter_gather(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    data = _activations(seed, t)
    result = {}
    for name, *_ in _SCATTER_GATHER_OPS:
        x, grad = _scatter_gather_inputs(name, data, rank, t)
        result[name] = _run_op(getattr(tp, name), x, grad, name)
    result["log"] = list(_LOG)
    with _Phase("indivisible"):
        result["indivisible"] = {name: _raised(lambda: getattr(tp, name)(torch.zeros(shape, dtype=DTYPE)))
                                 for name, shape, _ in _INDIVISIBLE}
    return result


# (op, an input shape that t = 2 and t = 4 do not divide where the op splits, that dimension)
_INDIVISIBLE = (
    ("scatter_to_tensor_model_parallel_region", (S, B, H + 1), "last"),
    ("scatter_to_sequence_parallel_region", (S + 1, B, H), "first"),
    ("reduce_scatter_to_sequence_parallel_region", (S + 1, B, H), "first"),
)


def observe_scatter_gather(seed: int, params: dict):
    """Launches ranks that run the scatter/gather region ops, recording outputs, gradients and collectives."""
    return _launch(_rank_scatter_gather, seed, params)


def judge_scatter_gather(seed: int, params: dict, observation) -> None:
    for t in params.get("world_sizes", WORLD_SIZES):
        data, ranks = _activations(seed, t), _ranks(observation, t)
        for r, o in enumerate(ranks):
            for name, _, _, forward_communicates in _SCATTER_GATHER_OPS:
                out, grad = _scatter_gather_expected(name, data, r, t)
                _expect(f"t={t}: forward of {name}, rank {r} output (non-contiguous input)", o[name]["out"], out)
                _expect(f"t={t}: backward of {name}, rank {r} input grad", o[name]["grad"], grad)
                _expect_untouched(f"t={t}, rank {r}", name, o[name])
                if not forward_communicates:
                    _expect_collectives(f"t={t}, rank {r}, {name}", o["log"], f"{name}.forward", [],
                                        "every rank already holds the whole tensor; keep your block")
            for name, shape, dimension in _INDIVISIBLE if t > 1 else ():
                _expect_value_error(f"t={t}: {name} of a tensor of shape {list(shape)} (its {dimension} dimension "
                                    f"is not divisible by {t}; do not cut the rest off)", o["indivisible"][name])


# ======================================================================================
# 3.2 column- and row-parallel linear layers
# ======================================================================================
IN, OUT = 12, 16  # the linear layers' sizes; 16 and 12 are divisible by 2 and 4


def _linear_master(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed + 7)
    return {"weight": _rand(g, OUT, IN, scale=IN ** -0.5), "bias": _rand(g, OUT),
            "x": _rand(g, S, B, IN), "grad": _rand(g, S, B, OUT),
            "row.weight": _rand(g, OUT, IN, scale=IN ** -0.5), "row.bias": _rand(g, OUT)}


def _rank_column_row(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    m = _linear_master(seed)
    column_master = {"weight": m["weight"], "bias": m["bias"]}
    row_master = {"weight": m["row.weight"], "bias": m["row.bias"]}
    result = {}
    for name, build, x, grad in (
        ("column", lambda: tp.ColumnParallelLinear(IN, OUT, master=column_master),
         m["x"], _column_block(m["grad"], rank, t)),
        ("column_gather", lambda: tp.ColumnParallelLinear(IN, OUT, gather_output=True, master=column_master),
         m["x"], m["grad"]),
        ("row", lambda: tp.RowParallelLinear(IN, OUT, master=row_master),
         _column_block(m["x"], rank, t), m["grad"]),
        ("row_scatter", lambda: tp.RowParallelLinear(IN, OUT, input_is_parallel=False, master=row_master),
         m["x"], m["grad"]),
        *(_no_bias_variants(tp, m, rank, t) if t > 1 else ()),
    ):
        layer = build()
        x = x.clone().requires_grad_()
        with _Phase(f"{name}.forward"):
            y = layer(x)
        with _Phase(f"{name}.backward"):
            _backward(y, grad)
        result[name] = {"out": _out(y), "grad": _out(x.grad), "params": _values(layer),
                        "param_grads": _grads(layer)}
    odd = t * 2 + 1
    result["column_error"] = _raised(lambda: tp.ColumnParallelLinear(IN, odd, master=None))
    result["row_error"] = _raised(lambda: tp.RowParallelLinear(odd, OUT, master=None))
    result["log"] = list(_LOG)
    return result


def _no_bias_variants(tp, m: dict, rank: int, t: int) -> tuple:
    """The bias=False layers: judged with a process group (t = 1 judges the main configuration only,
    so an option's mistake costs its own criterion, not 3.1-single-process as well)."""
    return (
        ("column_no_bias", lambda: tp.ColumnParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}),
         m["x"], _column_block(m["grad"], rank, t)),
        ("row_no_bias", lambda: tp.RowParallelLinear(IN, OUT, bias=False, master={"weight": m["row.weight"]}),
         _column_block(m["x"], rank, t), m["grad"]),
    )


def _dense_linear(weight, bias, x, grad):
    """``nn.Linear`` forward + backward: (y, dx, dweight, dbias); ``bias`` may be None."""
    weight, x = weight.clone().requires_grad_(), x.clone().requires_grad_()
    bias = None if bias is None else bias.clone().requires_grad_()
    y = F.linear(x, weight, bias)
    _backward(y, grad)
    return y.detach(), x.grad, weight.grad, None if bias is None else bias.grad


def observe_column_row(seed: int, params: dict):
    """Launches ranks that build column- and row-parallel linear layers from the grader's weights and run them."""
    return _launch(_rank_column_row, seed, params)


def judge_column_row(seed: int, params: dict, observation) -> None:
    m = _linear_master(seed)
    column = _dense_linear(m["weight"], m["bias"], m["x"], m["grad"])
    row = _dense_linear(m["row.weight"], m["row.bias"], m["x"], m["grad"])
    column_no_bias = _dense_linear(m["weight"], None, m["x"], m["grad"])
    row_no_bias = _dense_linear(m["row.weight"], None, m["x"], m["grad"])
    for t in params.get("world_sizes", WORLD_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}"
            variants = t > 1  # the bias=False layers (see _no_bias_variants)
            for name, dense in (("column", column), ("column_gather", column), ("column_no_bias", column_no_bias)):
                if variants or name != "column_no_bias":
                    _judge_column(f"{where}: ColumnParallelLinear({_options(name)})", o[name], dense, m, r, t)
            for name, dense in (("row", row), ("row_scatter", row), ("row_no_bias", row_no_bias)):
                if variants or name != "row_no_bias":
                    _judge_row(f"{where}: RowParallelLinear({_options(name)})", o[name], dense, m, r, t)
            if t > 1:
                _expect_value_error(f"t={t}: ColumnParallelLinear({IN}, {2 * t + 1}) (out_features not "
                                    f"divisible by {t})", o["column_error"])
                _expect_value_error(f"t={t}: RowParallelLinear({2 * t + 1}, {OUT}) (in_features not "
                                    f"divisible by {t})", o["row_error"])
                _expect_collectives(f"{where}, ColumnParallelLinear", o["log"], "column.forward", [],
                                    "the input is replicated and each rank keeps its own output block")
                _expect_collectives(f"{where}, RowParallelLinear", o["log"], "row.forward",
                                    [("all_reduce", S * B * OUT)], "g sums the partial products")


def _options(name: str) -> str:
    return {"column": "gather_output=False", "column_gather": "gather_output=True", "column_no_bias": "bias=False",
            "row": "input_is_parallel=True", "row_scatter": "input_is_parallel=False", "row_no_bias": "bias=False"}[name]


def _judge_column(where: str, c, dense, m: dict, r: int, t: int) -> None:
    y, dx, dw, db = dense
    rows = f"rows {r * OUT // t}:{(r + 1) * OUT // t}"
    _expect(f"{where} weight must be {rows} of the master weight", c["params"].get("weight"),
            _row_block(m["weight"], r, t), SHARD)
    if db is None:
        if c["params"].get("bias") is not None or c["param_grads"].get("bias") is not None:
            raise Fail(f"{where} has a bias parameter; with bias=False it has none (self.bias is None)")
    else:
        _expect(f"{where} bias must be entries {rows[5:]} of the master bias", c["params"].get("bias"),
                _row_block(m["bias"], r, t), SHARD)
    gathered = "gather_output=True" in where
    _expect(f"{where} output", c["out"], y if gathered else _column_block(y, r, t))
    _expect(f"{where} input grad (f must sum it over ranks)", c["grad"], dx)
    _expect(f"{where} weight grad", c["param_grads"].get("weight"), _row_block(dw, r, t))
    if db is not None:
        _expect(f"{where} bias grad", c["param_grads"].get("bias"), _row_block(db, r, t))


def _judge_row(where: str, c, dense, m: dict, r: int, t: int) -> None:
    y, dx, dw, db = dense
    _expect(f"{where} weight must be columns {r * IN // t}:{(r + 1) * IN // t} of the master weight",
            c["params"].get("weight"), _column_block(m["row.weight"], r, t), SHARD)
    if db is None:
        if c["params"].get("bias") is not None or c["param_grads"].get("bias") is not None:
            raise Fail(f"{where} has a bias parameter; with bias=False it has none (self.bias is None)")
    else:
        _expect(f"{where} bias must be the whole master bias (added once)", c["params"].get("bias"),
                m["row.bias"], SHARD)
        if t > 1 and _close(c["out"], y + (t - 1) * m["row.bias"]):
            raise Fail(f"{where} adds the bias on every rank before the all-reduce, so the output has it {t} "
                       "times; add it once, after the reduction")
    _expect(f"{where} output", c["out"], y)
    _expect(f"{where} input grad", c["grad"], dx if "input_is_parallel=False" in where else _column_block(dx, r, t))
    _expect(f"{where} weight grad", c["param_grads"].get("weight"), _column_block(dw, r, t))
    if db is not None:
        _expect(f"{where} bias grad", c["param_grads"].get("bias"), db)


# ======================================================================================
# 3.3 MLP, attention, layer: dense references
# ======================================================================================
class _DenseLayer(nn.Module):
    """Plain single-process Pre-LN layer with the master tensors (names match the master)."""

    def __init__(self, master: dict):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(H, dtype=DTYPE), nn.LayerNorm(H, dtype=DTYPE)
        self.attention = nn.MultiheadAttention(H, HEADS, dtype=DTYPE)  # [s, b, h] in and out
        self.fc1, self.fc2 = nn.Linear(H, FFN, dtype=DTYPE), nn.Linear(FFN, H, dtype=DTYPE)
        a = _sub(master, "attention")
        with torch.no_grad():
            self.attention.in_proj_weight.copy_(torch.cat([a["q.weight"], a["k.weight"], a["v.weight"]]))
            self.attention.in_proj_bias.copy_(torch.cat([a["q.bias"], a["k.bias"], a["v.bias"]]))
            self.attention.out_proj.weight.copy_(a["out.weight"])
            self.attention.out_proj.bias.copy_(a["out.bias"])
            for module, name in ((self.ln1, "ln1"), (self.ln2, "ln2"), (self.fc1, "mlp.fc1"),
                                 (self.fc2, "mlp.fc2")):
                module.weight.copy_(master[f"{name}.weight"])
                module.bias.copy_(master[f"{name}.bias"])

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def attend(self, x, causal: bool = True):
        mask = torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).triu(1) if causal else None
        return self.attention(x, x, x, attn_mask=mask, need_weights=False)[0]

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def expected_grads(self, t: int, rank: int) -> dict[str, torch.Tensor]:
        """Rank's expected gradients, named like the student's parameters (parts that ran)."""
        grads = {}
        if self.ln1.weight.grad is not None:
            for ln in ("ln1", "ln2"):
                grads[f"{ln}.weight"] = getattr(self, ln).weight.grad
                grads[f"{ln}.bias"] = getattr(self, ln).bias.grad
        a = self.attention
        if a.in_proj_weight.grad is not None:
            qkv_weight, qkv_bias = a.in_proj_weight.grad.chunk(3), a.in_proj_bias.grad.chunk(3)
            # the fused QKV shard of rank r is cat([q_r, k_r, v_r]): whole heads
            grads["attention.qkv.weight"] = torch.cat([_row_block(w, rank, t) for w in qkv_weight])
            grads["attention.qkv.bias"] = torch.cat([_row_block(b_, rank, t) for b_ in qkv_bias])
            grads["attention.out.weight"] = _column_block(a.out_proj.weight.grad, rank, t)
            grads["attention.out.bias"] = a.out_proj.bias.grad
        if self.fc1.weight.grad is not None:
            grads["mlp.fc1.weight"] = _row_block(self.fc1.weight.grad, rank, t)
            grads["mlp.fc1.bias"] = _row_block(self.fc1.bias.grad, rank, t)
            grads["mlp.fc2.weight"] = _column_block(self.fc2.weight.grad, rank, t)
            grads["mlp.fc2.bias"] = self.fc2.bias.grad
        return grads


def _dense_run(seed: int, t: int, part: str):
    """Dense forward + backward of ``part`` ("mlp", "attention", "layer"): (y, dx, dense)."""
    dense = _DenseLayer(_master(seed))
    data = _activations(seed, t)
    x = data["x"].clone().requires_grad_()
    y = {"mlp": dense.mlp, "attention": dense.attend, "layer": dense}[part](x)
    _backward(y, data["grad"])
    return y.detach(), x.grad, dense


def _rank_block(rank, t, seed, params):
    """Run the student's ``params["part"]`` on replicated input (or sequence blocks with SP)."""
    import minitorch.tensor_parallel as tp

    _start_rank()
    part, sp = params["part"], params.get("sequence_parallel", False)
    master, data = _master(seed), _activations(seed, t)
    build = {
        "mlp": lambda: tp.ParallelMLP(H, FFN, master=_sub(master, "mlp")),
        "attention": lambda: tp.ParallelSelfAttention(H, HEADS, master=_sub(master, "attention")),
        "layer": lambda: tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=sp, master=master),
    }[part]
    module = build()
    x, grad = data["x"], data["grad"]
    if sp:
        x, grad = _row_block(x, rank, t), _row_block(grad, rank, t)
    x = x.clone().requires_grad_()
    with _Phase("forward"):
        y = module(x)
    with _Phase("backward"):
        _backward(y, grad)
    result = {"out": _out(y), "grad": _out(x.grad), "param_grads": _grads(module), "log": list(_LOG)}
    if part == "attention" and t > 1:  # the options are judged with a process group (see _no_bias_variants)
        heads = t + 1
        result["heads_error"] = _raised(lambda: tp.ParallelSelfAttention(2 * heads, heads))
        everywhere = tp.ParallelSelfAttention(H, HEADS, causal=False, master=_sub(master, "attention"))
        x = data["x"].clone().requires_grad_()
        with _Phase("non-causal"):
            y = everywhere(x)
            _backward(y, data["grad"])
        result["non_causal"] = {"out": _out(y), "grad": _out(x.grad)}
    return result


def _judge_block(seed: int, params: dict, observation, what: str, prefix: str) -> None:
    part = params["part"]
    for t in params.get("world_sizes", WORLD_SIZES):
        y, dx, dense = _dense_run(seed, t, part)
        for r, o in enumerate(_ranks(observation, t)):
            expected_grads = {k[len(prefix):]: v for k, v in dense.expected_grads(t, r).items()
                              if k.startswith(prefix)}
            where = f"t={t}, rank {r}: {what}"
            _expect(f"{where} output", o["out"], y)
            _expect(f"{where} input grad", o["grad"], dx)
            missing = sorted(set(expected_grads) - set(o["param_grads"]))
            if missing:
                raise Fail(f"{where} has no parameter(s) {missing}; keep the given __init__ "
                           f"(parameters: {sorted(o['param_grads'])})")
            for name, expected in expected_grads.items():
                _expect(f"{where} gradient of {name}", o["param_grads"][name], expected)


# ======================================================================================
# 3.3 MLP
# ======================================================================================
def observe_mlp(seed: int, params: dict):
    """Launches ranks that run the student's parallel MLP block on the grader's weights and inputs."""
    return _launch(_rank_block, seed, {**params, "part": "mlp"})


def judge_mlp(seed: int, params: dict, observation) -> None:
    params = {**params, "part": "mlp"}
    dense = _DenseLayer(_master(seed))
    for t in params.get("world_sizes", WORLD_SIZES):
        x = _activations(seed, t)["x"]
        with torch.no_grad():
            gelu_last = F.gelu(dense.fc2(dense.fc1(x)))
        for r, o in enumerate(_ranks(observation, t)):
            if _close(o["out"], gelu_last):
                raise Fail(f"t={t}, rank {r}: ParallelMLP applies GeLU to the summed output of fc2; "
                           "GeLU belongs between the layers, on each rank's own block of fc1's output "
                           "(no communication needed there)")
    _judge_block(seed, params, observation, "ParallelMLP", "mlp.")
    for t in _multi_rank(params):
        for r, o in enumerate(_ranks(observation, t)):
            _expect_collectives(f"t={t}, rank {r}: ParallelMLP", o["log"], "forward", [("all_reduce", N)],
                                "column then row: only the row-parallel output is summed")
            _expect_collectives(f"t={t}, rank {r}: ParallelMLP", o["log"], "backward", [("all_reduce", N)],
                                "f sums the input gradient")


# ======================================================================================
# 3.3 attention
# ======================================================================================
def observe_attention(seed: int, params: dict):
    """Launches ranks that run the student's parallel attention block on the grader's weights and inputs."""
    return _launch(_rank_block, seed, {**params, "part": "attention"})


def judge_attention(seed: int, params: dict, observation) -> None:
    params = {**params, "part": "attention"}
    _judge_block(seed, params, observation, "ParallelSelfAttention (causal)", "attention.")
    dense = _DenseLayer(_master(seed))
    for t in _multi_rank(params):  # the options are judged with a process group (see _no_bias_variants)
        data = _activations(seed, t)
        x = data["x"].clone().requires_grad_()
        y = dense.attend(x, causal=False)
        _backward(y, data["grad"])
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: ParallelSelfAttention(causal=False)"
            _expect(f"{where} output (every position attends to every position)", o["non_causal"]["out"], y.detach())
            _expect(f"{where} input grad", o["non_causal"]["grad"], x.grad)
            _expect_value_error(f"t={t}: ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1}) "
                                f"(heads not divisible by {t})", o["heads_error"])
            where = f"t={t}, rank {r}: ParallelSelfAttention"
            _expect_collectives(where, o["log"], "forward", [("all_reduce", N)],
                                "each rank's heads go through the row-parallel output projection")
            _expect_collectives(where, o["log"], "backward", [("all_reduce", N)],
                                "f sums the input gradient of the QKV projection")


# ======================================================================================
# 3.3 transformer layer
# ======================================================================================
def observe_layer(seed: int, params: dict):
    """Launches ranks that run the student's parallel transformer layer on the grader's weights and inputs."""
    return _launch(_rank_block, seed, {**params, "part": "layer"})


def judge_layer(seed: int, params: dict, observation) -> None:
    params = {**params, "part": "layer"}
    _judge_block(seed, params, observation, "ParallelTransformerLayer", "")
    for t in _multi_rank(params):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: ParallelTransformerLayer"
            _expect_collectives(where, o["log"], "forward", [("all_reduce", N)] * 2,
                                "g after attention and after the MLP")
            _expect_collectives(where, o["log"], "backward", [("all_reduce", N)] * 2,
                                "f before the MLP and before attention")


# ======================================================================================
# 3.4 vocabulary-parallel embedding
# ======================================================================================
def _vocab_data(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed + 11)
    ids = torch.randint(0, VOCAB, (S, B), generator=g)
    # The first and the last id of every rank's range, for every t: `> end` instead of
    # `>= end` (or `<= start`) shows only at these ids.
    bounds = sorted({edge for t in WORLD_SIZES for r in range(t) for edge in (r * VOCAB // t, (r + 1) * VOCAB // t - 1)})
    ids.view(-1)[: len(bounds)] = torch.tensor(bounds)
    logits = _rand(g, S, B, VOCAB, scale=3.0)
    logits[1, 0] += 800.0  # exp() overflows without subtracting the max
    return {"table": _rand(g, VOCAB, H), "ids": ids, "grad": _rand(g, S, B, H),
            "logits": logits, "loss_grad": _rand(g, S, B)}


def _rank_embedding(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    d = _vocab_data(seed)
    embedding = tp.VocabParallelEmbedding(VOCAB, H, master={"weight": d["table"]})
    with _Phase("forward"):
        y = embedding(d["ids"])
    with _Phase("backward"):
        _backward(y, d["grad"])
    return {"out": _out(y), "weight": _out(embedding.weight), "weight_grad": _out(embedding.weight.grad),
            "log": list(_LOG)}


def observe_embedding(seed: int, params: dict):
    """Launches ranks that run the vocab-parallel embedding on token ids spanning every rank's range."""
    return _launch(_rank_embedding, seed, params)


def judge_embedding(seed: int, params: dict, observation) -> None:
    d = _vocab_data(seed)
    table = d["table"].clone().requires_grad_()
    y = F.embedding(d["ids"], table)
    _backward(y, d["grad"])
    for t in params.get("world_sizes", WORLD_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: VocabParallelEmbedding"
            _expect(f"{where} weight must be rows {r * VOCAB // t}:{(r + 1) * VOCAB // t} of the master "
                    "table", o["weight"], _row_block(d["table"], r, t), SHARD)
            _expect_per_token(f"{where} output", o["out"], y.detach(), d["ids"], t,
                              "a rank looks up only the ids of its range (start <= id < end); ids outside a rank's "
                              "vocabulary range must contribute zeros before the all-reduce")
            _expect(f"{where} weight grad", o["weight_grad"], _row_block(table.grad, r, t))
            if t > 1:
                _expect_collectives(where, o["log"], "forward", [("all_reduce", N)],
                                    "sum the ranks' masked lookups")
            _expect_collectives(where, o["log"], "backward", [], "each rank's rows get their own gradient")


def _expect_per_token(what: str, actual, expected: torch.Tensor, ids: torch.Tensor, t: int, rule: str) -> None:
    """``actual`` equals ``expected`` ([s, b, ...] per token), or Fail naming the first wrong
    token's id and the rank range it belongs to (a range test off by one shows at its edges)."""
    if max_difference(actual, expected) is None:
        _expect(what, actual, expected)  # missing, not a tensor, or another shape: it says which
    if _close(actual, expected):
        return
    per_token = (actual - expected).abs().reshape(S * B, -1).amax(dim=1)
    wrong = int((~(per_token <= TOL * (1 + expected.abs().max().item()))).nonzero()[0])  # NaN is wrong too
    token_id, size = int(ids.reshape(-1)[wrong]), VOCAB // t
    owner = token_id // size
    edge = (" (the first id of that range)" if token_id == owner * size
            else " (the last id of that range)" if token_id == (owner + 1) * size - 1 else "")
    raise Fail(f"{what} for token id {token_id} differs by {float(per_token[wrong]):.3g}; that id belongs to rank "
               f"{owner}'s range [{owner * size}, {(owner + 1) * size}){edge}: {rule}")


# ======================================================================================
# 3.4 fused vocabulary-parallel cross-entropy
# ======================================================================================
TOKENS = S * B
FEW_SCALARS = 4  # per token and collective: "a few scalars per token"; VOCAB / t is 12 or more


def _rank_fused_loss(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    d = _vocab_data(seed)
    logits = _column_block(d["logits"], rank, t).clone().requires_grad_()
    with _Phase("forward"):
        loss = tp.vocab_parallel_cross_entropy(logits, d["ids"])
    with _Phase("backward"):
        _backward(loss, d["loss_grad"])
    return {"loss": _out(loss), "grad": _out(logits.grad), "log": list(_LOG)}


def observe_fused_loss(seed: int, params: dict):
    """Launches ranks that run the vocab-parallel fused cross-entropy, recording losses, gradients and collectives."""
    return _launch(_rank_fused_loss, seed, params)


def judge_fused_loss(seed: int, params: dict, observation) -> None:
    d = _vocab_data(seed)
    logits = d["logits"].clone().requires_grad_()
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), d["ids"].reshape(-1), reduction="none").view(S, B)
    _backward(loss, d["loss_grad"])
    for t in params.get("world_sizes", WORLD_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: vocab_parallel_cross_entropy"
            forward = _phase_log(o["log"], "forward")
            big = [c for c in forward if c["numel"] > FEW_SCALARS * TOKENS]
            if big:
                raise Fail(f"{where} must not gather the logits nor communicate anything else with a vocabulary "
                           f"dimension (at most {FEW_SCALARS} scalars per token, {FEW_SCALARS * TOKENS} elements, "
                           f"per collective): recorded {_describe(big)}; all-reduce the per-token max, the sum of "
                           "exponentials and the target logit instead")
            _expect_per_token(f"{where} per-token loss (like F.cross_entropy(reduction='none'))", o["loss"],
                              loss.detach(), d["ids"], t,
                              "only the rank whose range start <= id < end holds the target's logit")
            _expect(f"{where} gradient of this rank's logits", o["grad"], _column_block(logits.grad, r, t))
            if len(forward) > 4:
                raise Fail(f"{where}: the forward should need about 3 all-reduces of {TOKENS} scalars "
                           f"(max, sum of exponentials, target logit); recorded {_describe(forward)}")
            _expect_collectives(where, o["log"], "backward", [],
                                "the gradient softmax - onehot is computed from saved local values")


# ======================================================================================
# 3.5 sequence parallelism
# ======================================================================================
_VOLUME = {"all_reduce": lambda t: 2 * (t - 1) / t, "all_gather": lambda t: (t - 1) / t,
           "reduce_scatter": lambda t: (t - 1) / t, "all_to_all": lambda t: (t - 1) / t}


def _expect_volume(what: str, t: int, log: list[dict], expected: float, why: str) -> None:
    """Elements one rank moves over the recorded collectives (ring algorithms) == expected."""
    unknown = [c for c in log if c["kind"] not in _VOLUME]
    moved = sum(_VOLUME[c["kind"]](t) * c["numel"] for c in log if c["kind"] in _VOLUME)
    if unknown or abs(moved - expected) > 1e-9 * expected:
        raise Fail(f"{what} must move {expected:g} elements per rank ({why}); recorded "
                   f"{_describe(log)}, which moves {moved:g}" +
                   (f" plus {_describe(unknown)}" if unknown else ""))


def observe_sequence_parallel(seed: int, params: dict):
    """Launches ranks that run the sequence-parallel layer, recording outputs, gradients and collective volumes."""
    return _launch(_rank_block, seed, {**params, "part": "layer", "sequence_parallel": True})


def judge_sequence_parallel(seed: int, params: dict, observation) -> None:
    for t in params.get("world_sizes", WORLD_SIZES):
        y, dx, dense = _dense_run(seed, t, "layer")
        ranks, partial = _ranks(observation, t), _partial_grads(seed, t)
        what = "ParallelTransformerLayer(sequence_parallel=True)"
        for r, o in enumerate(ranks):
            where = f"t={t}, rank {r}: {what}"
            _expect(f"{where} output (rank r keeps block r of the sequence, [s/t, b, h])", o["out"],
                    _row_block(y, r, t))
            _expect(f"{where} input grad", o["grad"], _row_block(dx, r, t))
            expected = dense.expected_grads(t, r)
            for name, blocks in partial.items() if t > 1 else ():
                if _close(o["param_grads"].get(name), blocks[r]):
                    raise Fail(f"{where}: the gradient of {name} is a partial sum over this rank's "
                               "block of the sequence; a replicated parameter applied to one block "
                               "(LayerNorm weight and bias, row-parallel bias) needs its gradient "
                               "summed over ranks")
            missing = sorted(set(expected) - set(o["param_grads"]))
            if missing:
                raise Fail(f"{where} has no parameter(s) {missing}; keep the given __init__")
            for name, value in expected.items():
                _expect(f"{where} gradient of {name}", o["param_grads"][name], value)
            # activation-sized collectives; the LayerNorm gradient sums ([h] each) are apart
            activations = [c for c in o["log"] if c["phase"] in ("forward", "backward")
                           and c["numel"] > 4 * H]
            all_reduces = [c for c in activations if c["kind"] == "all_reduce"]
            if all_reduces:
                raise Fail(f"{where}: sequence parallelism replaces each all-reduce of activations "
                           f"by a reduce-scatter and an all-gather; recorded {_describe(all_reduces)} "
                           f"in the {all_reduces[0]['phase']}")
            _expect_volume(where, t, activations, 4 * 2 * (t - 1) / t * N,
                           "the same as the 4 all-reduces of plain tensor parallelism")


def _partial_grads(seed: int, t: int) -> dict[str, list[torch.Tensor]]:
    """What each rank's gradients of the replicated parameters (LayerNorms, row-parallel
    biases) are WITHOUT the sum over ranks: the contribution of its own block of the
    sequence, ``{name: [rank 0's, rank 1's, ...]}``."""
    dense, data = _DenseLayer(_master(seed)), _activations(seed, t)
    x = data["x"]
    ln1 = dense.ln1(x)
    attention = dense.attend(ln1)
    hidden = x + attention
    ln2 = dense.ln2(hidden)
    mlp = dense.mlp(ln2)
    grads = torch.autograd.grad(((hidden + mlp) * data["grad"]).sum(), (ln1, attention, ln2, mlp))
    g_ln1, g_attention, g_ln2, g_mlp = (g.detach() for g in grads)
    normalized = {"ln1": F.layer_norm(x, (H,)).detach(), "ln2": F.layer_norm(hidden, (H,)).detach()}
    partial = {name: [] for name in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
                                     "attention.out.bias", "mlp.fc2.bias")}
    for r in range(t):
        block = slice(r * S // t, (r + 1) * S // t)
        for ln, grad in (("ln1", g_ln1), ("ln2", g_ln2)):
            partial[f"{ln}.weight"].append((grad[block] * normalized[ln][block]).sum(dim=(0, 1)))
            partial[f"{ln}.bias"].append(grad[block].sum(dim=(0, 1)))
        partial["attention.out.bias"].append(g_attention[block].sum(dim=(0, 1)))
        partial["mlp.fc2.bias"].append(g_mlp[block].sum(dim=(0, 1)))
    return partial


# ======================================================================================
# 3.1 one process, no process group (t = 1)
# ======================================================================================
# (part, what it builds, its rank function, extra params, its judge): every other criterion's
# run, once more in this process with no process group, judged by that criterion's judge.
SINGLE_PROCESS_PARTS = (
    ("fg", "f and g", _rank_fg, {}, judge_fg),
    ("scatter_gather", "the scatter/gather ops", _rank_scatter_gather, {}, judge_scatter_gather),
    ("column_row", "the column- and row-parallel linear layers", _rank_column_row, {}, judge_column_row),
    ("mlp", "ParallelMLP", _rank_block, {"part": "mlp"}, judge_mlp),
    ("attention", "ParallelSelfAttention", _rank_block, {"part": "attention"}, judge_attention),
    ("layer", "ParallelTransformerLayer", _rank_block, {"part": "layer"}, judge_layer),
    ("embedding", "VocabParallelEmbedding", _rank_embedding, {}, judge_embedding),
    ("fused_loss", "vocab_parallel_cross_entropy", _rank_fused_loss, {}, judge_fused_loss),
    ("sequence_parallel", "ParallelTransformerLayer(sequence_parallel=True)", _rank_block,
     {"part": "layer", "sequence_parallel": True}, judge_sequence_parallel),
)


def observe_single_process(seed: int, params: dict):
    """Runs every part of Problem 3 in this process, without a process group (t = 1)."""
    _install_recorder()
    return {name: _single_process(rank_fn, seed, {**params, **extra})
            for name, _, rank_fn, extra, _ in SINGLE_PROCESS_PARTS}


def judge_single_process(seed: int, params: dict, observation) -> None:
    for name, what, _, _, judge in SINGLE_PROCESS_PARTS:
        try:
            judge(seed, {**params, "world_sizes": [1]}, {"t1": observation[name]})
        except Fail as failure:
            raise Fail(f"{what}, in one process without a process group (t = 1): {failure}") from None
