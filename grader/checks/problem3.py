"""Hidden checks for Problem 3 (tensor parallelism), run on gloo with t = 2 and t = 4 in float64
(float32 and other shapes as extra cases), and for 3.2-3.6 also in one plain process without a
process group (t = 1); 3.1-single-process runs the 3.1 ops there.

One criterion judges one sub-problem's code: where it needs another sub-problem's pieces (3.2's
layers need 3.1's f and g; the 3.6 model needs 3.3's layers and 3.4's loss) the ranks bind the
grader's own pieces (``grader/checks/tp_pieces.py``) in the student's module first. Conventions
(the caller's tensors left unchanged, ValueError) are criteria of their own, so that right code
following the field's other convention (an in-place all-reduce, an ``assert``) loses one point.

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

import contextlib
import functools
import re
import threading
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.checks import Fail, expect_cases, expect_tensor, in_every_rank, rank_values, student_tensor, tp_pieces
from grader.checks.compare import max_difference
from grader.layout import PACKAGE, STUDENT_FILES

WORLD_SIZES = (2, 4)  # the 3.1 ops; their t = 1 is the criterion 3.1-single-process
ALL_SIZES = (1, 2, 4)  # 3.2-3.6: t = 1 runs in the observing process, with no process group
S, B, H, HEADS, FFN, VOCAB = 8, 2, 16, 4, 32, 48   # all divisible by 4
N = S * B * H                                       # elements of one [s, b, h] activation
TOL = 1e-10
TOL32 = 1e-5  # float32 cases
LR = 0.1  # the SGD step that checks parameter gradients without knowing the student's parameter names
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


def _multi_rank(params: dict, default=WORLD_SIZES) -> list[int]:
    """The world sizes with a process group, where the collectives are judged (t = 1 has none)."""
    return [t for t in params.get("world_sizes", default) if t > 1]


def _observe(rank_fn, seed: int, params: dict, default=WORLD_SIZES) -> list[dict]:
    """``_launch`` with the student's module imported first, here, before any process group
    exists (module state computed at import must not break anything); one entry per world size,
    ``{"case": {"t": t}, "ranks": [...]}``."""
    import minitorch.tensor_parallel  # noqa: F401 - imported before init_process_group, on purpose

    params = {"world_sizes": list(params.get("world_sizes", default)), **params}
    results = _launch(rank_fn, seed, params)
    return [{"case": {"t": t}, "ranks": results[f"t{t}"]} for t in params["world_sizes"]]


def _cases(observation, params: dict, what: str, default=WORLD_SIZES) -> dict:
    """``{"t2": ranks, ...}`` after checking the observation holds exactly the world sizes asked."""
    sizes = list(params.get("world_sizes", default))
    entries = expect_cases(observation, [{"t": t} for t in sizes], what)
    by_size = {}
    for t, entry in zip(sizes, entries):
        ranks = entry["ranks"]
        if not isinstance(ranks, dict) and (not isinstance(ranks, list) or len(ranks) != t):
            raise Fail(f"{what}: the grader could not read what your code produced: t={t} did not hand back "
                       f"one result per rank")
        by_size[f"t{t}"] = ranks
    return by_size


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
    """A tensor fit to travel back to the parent, read as a plain tensor first (no method of a
    Tensor subclass the student returned runs); None when it is not a tensor."""
    if not isinstance(tensor, torch.Tensor):
        return None
    return student_tensor(tensor, "a value your code returned").detach().cpu().clone()


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
    """Inputs and upstream gradients; ``*_r`` entries are per rank (a list of t tensors). ``x`` and
    ``grad`` do not depend on t, so that a judge runs each dense reference once."""
    replicated, g = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1000 * t)
    return {
        "x": _rand(replicated, S, B, H), "grad": _rand(replicated, S, B, H),
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
def _tolerance(expected: torch.Tensor) -> float:
    return TOL32 if expected.dtype == torch.float32 else TOL


def _close(actual, expected) -> bool:
    d = max_difference(actual, expected)
    return d is not None and d <= _tolerance(expected) * (1 + expected.abs().max().item())


def _expect(what: str, actual, expected, reference: str = "the dense single-process result") -> None:
    if actual is None:
        raise Fail(f"{what}: no value (None); expected a tensor of shape {tuple(expected.shape)}")
    expect_tensor(actual, what)
    d = max_difference(actual, expected)
    if d is None:
        raise Fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}")
    if not _close(actual, expected):
        raise Fail(f"{what}: differs from {reference} by {d:.3g} (max abs; tolerance {_tolerance(expected):g} "
                   f"relative, in {str(expected.dtype).replace('torch.', '')})")


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


def _expect_refused(what: str, raised: str) -> None:
    """Understanding: the call refuses (raises, any Exception); its type is 3.0-errors'."""
    if raised == "no exception":
        raise Fail(f"{what} must refuse (raise an exception); it returned normally")


def _moved(t: int, log: list[dict]) -> tuple[float, list[dict]]:
    """Elements one rank moves over ``log`` (ring algorithms), and the collectives of other kinds."""
    unknown = [c for c in log if c["kind"] not in _VOLUME]
    return sum(_VOLUME[c["kind"]](t) * c["numel"] for c in log if c["kind"] in _VOLUME), unknown


def _expect_budget(what: str, t: int, log: list[dict], phase: str, budget: float, why: str) -> None:
    """The collectives of ``phase`` move at most ``budget`` elements per rank."""
    got = _phase_log(log, phase)
    moved, unknown = _moved(t, got)
    if unknown or moved > budget * (1 + 1e-9):
        raise Fail(f"{what}: the forward may move at most {budget:g} elements per rank ({why}); recorded "
                   f"{_describe(got)}, which moves {moved:g}" + (f" plus {_describe(unknown)}" if unknown else ""))


_VOLUME = {"all_reduce": lambda t: 2 * (t - 1) / t, "all_gather": lambda t: (t - 1) / t,
           "reduce_scatter": lambda t: (t - 1) / t, "all_to_all": lambda t: (t - 1) / t}


# ======================================================================================
# Extra cases drawn from the seed: other ranks (1-D to 4-D), float32, sizes with 1
# ======================================================================================
def _extra_shape(seed: int) -> tuple[int, ...]:
    """1 to 4 dimensions; the first and last a multiple of 4 (every op can split them), the
    middle ones from 1 to 3."""
    g = torch.Generator().manual_seed(seed + 5)
    dims = int(torch.randint(1, 5, (1,), generator=g))
    sizes = [int(v) for v in torch.randint(1, 4, (dims,), generator=g)]
    if dims == 1:
        return (4 * sizes[0],)
    return (4 * sizes[0], *sizes[1:-1], 4 * sizes[-1])


def _extra_data(seed: int, t: int) -> dict:
    """Like ``_activations``, in float32 and the shape of ``_extra_shape``."""
    g, shape = torch.Generator().manual_seed(seed + 77 * t), _extra_shape(seed)
    draw = lambda: torch.randn(*shape, generator=g, dtype=torch.float32)  # noqa: E731
    return {"x": draw(), "grad": draw(), "x_r": [draw() for _ in range(t)], "grad_r": [draw() for _ in range(t)]}


def _substituted(tp, **pieces):
    """``with _substituted(tp, ops=True, ...)``: the grader's pieces bound in the student's module
    for the block (see tp_pieces), restored afterwards (t = 1 runs in the observing process)."""
    @contextlib.contextmanager
    def bound():
        saved = dict(vars(tp))
        tp_pieces.substitute(tp, **pieces)
        try:
            yield
        finally:
            for name in set(vars(tp)) - set(saved):
                delattr(tp, name)
            for name, value in saved.items():
                if vars(tp).get(name) is not value:
                    setattr(tp, name, value)

    return bound()


# ======================================================================================
# 3.1 f and g, both directions
# ======================================================================================
def _fg_cases(seed: int, t: int, rank: int):
    """(case, op name, data): float64 [s, b, h], contiguous and not; float32 of another shape."""
    main, extra = _activations(seed, t), _extra_data(seed, t)
    return [(f"{name}{suffix}", name, data, strided) for name in ("f", "g")
            for suffix, data, strided in (("", main, True), (" contiguous", main, False), (" float32", extra, True))]


def _rank_fg(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    ops = {"f": tp.copy_to_tensor_model_parallel_region, "g": tp.reduce_from_tensor_model_parallel_region}
    result = {}
    for case, name, data, strided in _fg_cases(seed, t, rank):
        x = data["x"] if name == "f" else data["x_r"][rank]
        result[case] = _run_op(ops[name], x, data["grad_r"][rank], case, strided=strided)
    result["log"] = list(_LOG)
    return result


def observe_fg(seed: int, params: dict):
    """Launches t = 2, 4 gloo ranks that run f and g forward and backward, recording outputs, gradients and collectives."""
    return _observe(_rank_fg, seed, params)


def judge_fg(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "f and g")
    for t in params.get("world_sizes", WORLD_SIZES):
        ranks = _ranks(observation, t)
        for r, o in enumerate(ranks):
            for case, name, data, _ in _fg_cases(seed, t, r):
                shape = "x".join(map(str, data["x"].shape))
                where = f"t={t}, rank {r}, {case} ({shape} {str(data['x'].dtype)[6:]})"
                grad_sum, x_sum = sum(data["grad_r"]), sum(data["x_r"])
                hint = _IN_PLACE_HINT if case in ("f", "g") else ""
                result = o[case]
                if name == "f":
                    if not _close(result["out"], data["x"]):
                        _expect(f"{where}: forward of f (copy_to_tensor_model_parallel_region) must be the "
                                "identity; output", result["out"], data["x"])
                    if t > 1 and _close(result["grad"], data["grad_r"][r]):
                        raise Fail(f"{where}: backward of f must give the SUM over ranks of the output gradients: "
                                   f"the input grad equals this rank's own output grad{hint}")
                    _expect(f"{where}: backward of f must sum the gradient over ranks; input grad",
                            result["grad"], grad_sum)
                else:
                    if t > 1 and _close(result["out"], data["x_r"][r]):
                        raise Fail(f"{where}: forward of g (reduce_from_tensor_model_parallel_region) must sum "
                                   f"over ranks: the output is only this rank's own input{hint}")
                    _expect(f"{where}: forward of g must sum the ranks' inputs; output", result["out"], x_sum)
                    if t > 1 and _close(result["grad"], grad_sum):
                        raise Fail(f"{where}: backward of g must be the identity: the input grad is the "
                                   "sum of all ranks' output grads (summed again)")
                    _expect(f"{where}: backward of g must be the identity; input grad", result["grad"],
                            data["grad_r"][r])
            for name, forward, backward in (("f", [], [("all_reduce", N)]), ("g", [("all_reduce", N)], [])):
                for phase, budget, why in (("forward", forward, "f's forward is the identity" if name == "f"
                                            else "g's forward sums the inputs"),
                                           ("backward", backward, "f's backward sums the gradient" if name == "f"
                                            else "g's backward is the identity")):
                    got = _phase_log(o["log"], f"{name}.{phase}")
                    moved, unknown = _moved(t, got)
                    allowed, _ = _moved(t, [{"kind": k, "numel": n} for k, n in budget])
                    if unknown or moved > allowed * (1 + 1e-9):
                        raise Fail(f"t={t}, rank {r}, {name}: the {phase} may move at most {allowed:g} elements "
                                   f"per rank ({why}); recorded {_describe(got)}")


_IN_PLACE_HINT = (" (right with a contiguous tensor, wrong with this one: dist.all_reduce(x.contiguous()) sums "
                  "a copy when x is not contiguous and leaves x as it was)")


# ======================================================================================
# 3.1 scatter / gather (last dimension) and the sequence-parallel ops (first dimension)
# ======================================================================================
_SCATTER_GATHER_OPS = (
    # name, forward may communicate
    ("scatter_to_tensor_model_parallel_region", False),
    ("gather_from_tensor_model_parallel_region", True),
    ("scatter_to_sequence_parallel_region", False),
    ("gather_from_sequence_parallel_region", True),
    ("reduce_scatter_to_sequence_parallel_region", True),
)


def _scatter_gather_inputs(name: str, data: dict, rank: int, t: int):
    """(input of rank, upstream grad of rank) for op ``name``."""
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


# (op, an input shape that t = 2 and t = 4 do not divide where the op splits, that dimension)
_INDIVISIBLE = (
    ("scatter_to_tensor_model_parallel_region", (S, B, H + 1), "last"),
    ("scatter_to_sequence_parallel_region", (S + 1, B, H), "first"),
    ("reduce_scatter_to_sequence_parallel_region", (S + 1, B, H), "first"),
)


def _rank_scatter_gather(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    result = {}
    for label, data in (("", _activations(seed, t)), (" float32", _extra_data(seed, t))):
        for name, _ in _SCATTER_GATHER_OPS:
            x, grad = _scatter_gather_inputs(name, data, rank, t)
            result[name + label] = _run_op(getattr(tp, name), x, grad, name + label)
    result["log"] = list(_LOG)
    with _Phase("indivisible"):
        result["indivisible"] = {name: _raised(lambda: getattr(tp, name)(torch.zeros(shape, dtype=DTYPE)))
                                 for name, shape, _ in _INDIVISIBLE}
    return result


def observe_scatter_gather(seed: int, params: dict):
    """Launches ranks that run the scatter/gather region ops, recording outputs, gradients and collectives."""
    return _observe(_rank_scatter_gather, seed, params)


def judge_scatter_gather(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "the scatter/gather ops")
    for t in params.get("world_sizes", WORLD_SIZES):
        ranks = _ranks(observation, t)
        for r, o in enumerate(ranks):
            for label, data in (("", _activations(seed, t)), (" float32", _extra_data(seed, t))):
                shape = "x".join(map(str, data["x"].shape))
                for name, forward_communicates in _SCATTER_GATHER_OPS:
                    out, grad = _scatter_gather_expected(name, data, r, t)
                    case = f"non-contiguous {shape} {str(data['x'].dtype)[6:]} input"
                    _expect(f"t={t}: forward of {name}, rank {r} output ({case})", o[name + label]["out"], out)
                    _expect(f"t={t}: backward of {name}, rank {r} input grad ({case})", o[name + label]["grad"], grad)
                    if not forward_communicates:
                        _expect_collectives(f"t={t}, rank {r}, {name}", o["log"], f"{name}{label}.forward", [],
                                            "every rank already holds the whole tensor")
            for name, shape, dimension in _INDIVISIBLE if t > 1 else ():
                _expect_refused(f"t={t}: {name} of a tensor of shape {list(shape)} (its {dimension} dimension "
                                f"is not divisible by {t}; do not cut the rest off)", o["indivisible"][name])


# ======================================================================================
# 3.2 column- and row-parallel linear layers (with the grader's 3.1 ops)
# ======================================================================================
IN, OUT = 12, 16  # the linear layers' sizes; 16 and 12 are divisible by 2 and 4
ROWS2 = 5  # a second call: a 2-D input of 5 rows


def _linear_master(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed + 7)
    return {"weight": _rand(g, OUT, IN, scale=IN ** -0.5), "bias": _rand(g, OUT),
            "x": _rand(g, S, B, IN), "grad": _rand(g, S, B, OUT), "x2": _rand(g, ROWS2, IN),
            "row.weight": _rand(g, OUT, IN, scale=IN ** -0.5), "row.bias": _rand(g, OUT)}


def _rank_column_row(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    with _substituted(tp, ops=True):
        return _run_column_row(tp, rank, t, seed)


def _run_column_row(tp, rank, t, seed):
    m = _linear_master(seed)
    column_master = {"weight": m["weight"], "bias": m["bias"]}
    row_master = {"weight": m["row.weight"], "bias": m["row.bias"]}
    result = {}
    for name, build, x, grad, x2 in (
        ("column", lambda: tp.ColumnParallelLinear(IN, OUT, master=column_master),
         m["x"], _column_block(m["grad"], rank, t), m["x2"]),
        ("column_gather", lambda: tp.ColumnParallelLinear(IN, OUT, gather_output=True, master=column_master),
         m["x"], m["grad"], m["x2"]),
        ("row", lambda: tp.RowParallelLinear(IN, OUT, master=row_master),
         _column_block(m["x"], rank, t), m["grad"], _column_block(m["x2"], rank, t)),
        ("row_scatter", lambda: tp.RowParallelLinear(IN, OUT, input_is_parallel=False, master=row_master),
         m["x"], m["grad"], m["x2"]),
        *(_no_bias_variants(tp, m, rank, t) if t > 1 else ()),
    ):
        layer = build()
        x = _strided(x).requires_grad_()
        with _Phase(f"{name}.forward"):
            y = layer(x)
        with _Phase(f"{name}.backward"):
            _backward(y, grad)
        result[name] = {"out": _out(y), "grad": _out(x.grad), "params": _values(layer),
                        "param_grads": _grads(layer)}
        with _Phase(f"{name}.second"), torch.no_grad():
            result[name]["out2"] = _out(layer(x2))
        if name in ("column", "row"):  # float32, built from float32 master tensors
            master = {key: value.float() for key, value in (column_master if name == "column" else row_master).items()}
            layer32 = type(layer)(IN, OUT, master=master)
            with _Phase(f"{name}.float32"), torch.no_grad():
                result[name]["out32"] = _out(layer32(x.detach().float()))
    odd = t * 2 + 1
    result["column_error"] = _raised(lambda: tp.ColumnParallelLinear(IN, odd, master=None))
    result["row_error"] = _raised(lambda: tp.RowParallelLinear(odd, OUT, master=None))
    result["log"] = list(_LOG)
    return result


def _no_bias_variants(tp, m: dict, rank: int, t: int) -> tuple:
    """The bias=False layers (judged with a process group)."""
    return (
        ("column_no_bias", lambda: tp.ColumnParallelLinear(IN, OUT, bias=False, master={"weight": m["weight"]}),
         m["x"], _column_block(m["grad"], rank, t), m["x2"]),
        ("row_no_bias", lambda: tp.RowParallelLinear(IN, OUT, bias=False, master={"weight": m["row.weight"]}),
         _column_block(m["x"], rank, t), m["grad"], _column_block(m["x2"], rank, t)),
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
    return _observe(_rank_column_row, seed, params, ALL_SIZES)


def judge_column_row(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "the column- and row-parallel layers", ALL_SIZES)
    m = _linear_master(seed)
    dense = {"column": (m["weight"], m["bias"]), "row": (m["row.weight"], m["row.bias"]),
             "column_no_bias": (m["weight"], None), "row_no_bias": (m["row.weight"], None)}
    for t in params.get("world_sizes", ALL_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}"
            for name in ("column", "column_gather", "column_no_bias", "row", "row_scatter", "row_no_bias"):
                if name.endswith("no_bias") and t == 1:
                    continue
                weight, bias = dense[name.replace("_gather", "").replace("_scatter", "")]
                judge = _judge_column if name.startswith("column") else _judge_row
                what = f"{where}: {'Column' if name.startswith('column') else 'Row'}ParallelLinear({_options(name)})"
                judge(what, o[name], _dense_linear(weight, bias, m["x"], m["grad"]), weight, bias, r, t)
                y2 = F.linear(m["x2"], weight, bias)
                expected2 = _column_block(y2, r, t) if name in ("column", "column_no_bias") else y2
                _expect(f"{what}, called again with a 2-D input of {ROWS2} rows: output", o[name]["out2"], expected2)
                if name in ("column", "row"):
                    y32 = F.linear(m["x"].float(), weight.float(), bias.float())
                    _expect(f"{what} built in float32: output", o[name]["out32"],
                            _column_block(y32, r, t) if name == "column" else y32)
            if t > 1:
                _expect_refused(f"t={t}: ColumnParallelLinear({IN}, {2 * t + 1}) (out_features not "
                                f"divisible by {t})", o["column_error"])
                _expect_refused(f"t={t}: RowParallelLinear({2 * t + 1}, {OUT}) (in_features not "
                                f"divisible by {t})", o["row_error"])
                _expect_budget(f"{where}, ColumnParallelLinear(gather_output=False)", t, o["log"], "column.forward", 0,
                               "the input is the same on every rank and each rank keeps its own output block")
                _expect_budget(f"{where}, RowParallelLinear", t, o["log"], "row.forward",
                               _VOLUME["all_reduce"](t) * S * B * OUT, "one all-reduce of the output")


def _options(name: str) -> str:
    return {"column": "gather_output=False", "column_gather": "gather_output=True", "column_no_bias": "bias=False",
            "row": "input_is_parallel=True", "row_scatter": "input_is_parallel=False", "row_no_bias": "bias=False"}[name]


def _judge_column(where: str, c, dense, master_weight, master_bias, r: int, t: int) -> None:
    y, dx, dw, db = dense
    rows = f"rows {r * OUT // t}:{(r + 1) * OUT // t}"
    _expect(f"{where} weight must be {rows} of the master weight", c["params"].get("weight"),
            _row_block(master_weight, r, t), SHARD)
    if db is None:
        if c["params"].get("bias") is not None or c["param_grads"].get("bias") is not None:
            raise Fail(f"{where} has a bias parameter; with bias=False it has none (self.bias is None)")
    else:
        _expect(f"{where} bias must be entries {rows[5:]} of the master bias", c["params"].get("bias"),
                _row_block(master_bias, r, t), SHARD)
    gathered = "gather_output=True" in where
    _expect(f"{where} output", c["out"], y if gathered else _column_block(y, r, t))
    _expect(f"{where} input grad (the whole dense gradient, on every rank)", c["grad"], dx)
    _expect(f"{where} weight grad", c["param_grads"].get("weight"), _row_block(dw, r, t))
    if db is not None:
        _expect(f"{where} bias grad", c["param_grads"].get("bias"), _row_block(db, r, t))


def _judge_row(where: str, c, dense, master_weight, master_bias, r: int, t: int) -> None:
    y, dx, dw, db = dense
    _expect(f"{where} weight must be columns {r * IN // t}:{(r + 1) * IN // t} of the master weight",
            c["params"].get("weight"), _column_block(master_weight, r, t), SHARD)
    if db is None:
        if c["params"].get("bias") is not None or c["param_grads"].get("bias") is not None:
            raise Fail(f"{where} has a bias parameter; with bias=False it has none (self.bias is None)")
    else:
        _expect(f"{where} bias must be the whole master bias", c["params"].get("bias"), master_bias, SHARD)
        if t > 1 and _close(c["out"], y + (t - 1) * master_bias):
            raise Fail(f"{where}: the output holds the bias {t} times (once per rank); the dense layer adds it once")
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

    def sgd_step(self) -> None:
        with torch.no_grad():
            for parameter in self.parameters():
                if parameter.grad is not None:
                    parameter -= LR * parameter.grad

    def expected_grads(self, t: int, rank: int) -> dict[str, torch.Tensor]:
        """Rank's expected gradients, named like the grader's own modules' parameters."""
        grads = {}
        for ln in ("ln1", "ln2"):
            grads[f"{ln}.weight"] = getattr(self, ln).weight.grad
            grads[f"{ln}.bias"] = getattr(self, ln).bias.grad
        a = self.attention
        qkv_weight, qkv_bias = a.in_proj_weight.grad.chunk(3), a.in_proj_bias.grad.chunk(3)
        # the fused QKV shard of rank r is cat([q_r, k_r, v_r]): whole heads
        grads["attention.qkv.weight"] = torch.cat([_row_block(w, rank, t) for w in qkv_weight])
        grads["attention.qkv.bias"] = torch.cat([_row_block(b_, rank, t) for b_ in qkv_bias])
        grads["attention.out.weight"] = _column_block(a.out_proj.weight.grad, rank, t)
        grads["attention.out.bias"] = a.out_proj.bias.grad
        grads["mlp.fc1.weight"] = _row_block(self.fc1.weight.grad, rank, t)
        grads["mlp.fc1.bias"] = _row_block(self.fc1.bias.grad, rank, t)
        grads["mlp.fc2.weight"] = _column_block(self.fc2.weight.grad, rank, t)
        grads["mlp.fc2.bias"] = self.fc2.bias.grad
        return grads


S2, B2 = 4, 1  # the second call: another sequence length and a batch of one sequence
# Elements of the dense weight MATRICES of each part: each rank may hold at most 1/t of them.
_MATRICES = {"mlp": 2 * H * FFN, "attention": 4 * H * H, "layer": 2 * H * FFN + 4 * H * H}
# Forward communication budget in all-reduces of one [s, b, h] activation.
_ALL_REDUCES = {"mlp": 1, "attention": 1, "layer": 2}


def _second_input(seed: int) -> torch.Tensor:
    return _rand(torch.Generator().manual_seed(seed + 3), S2, B2, H)


def _dense_run(seed: int, t: int, part: str, causal: bool = True):
    """Dense forward + backward of ``part``, then one SGD step and the second call:
    (y, dx, dense after the step, y2); the same for every t (judges only read it)."""
    return _dense_run_once(seed, part, causal)


@functools.lru_cache(maxsize=8)
def _dense_run_once(seed: int, part: str, causal: bool):
    dense = _DenseLayer(_master(seed))
    data = _activations(seed, 1)
    x = data["x"].clone().requires_grad_()
    run = {"mlp": dense.mlp, "attention": lambda v: dense.attend(v, causal), "layer": dense}[part]
    y = run(x)
    _backward(y, data["grad"])
    grads = {name: p.grad.clone() for name, p in dense.named_parameters() if p.grad is not None}
    dense.sgd_step()
    with torch.no_grad():
        y2 = run(_second_input(seed))
    for name, p in dense.named_parameters():  # expected_grads reads the step's gradients
        p.grad = grads.get(name)
    return y.detach(), x.grad, dense, y2


def _rank_block(rank, t, seed, params):
    """Run ``params["part"]`` on replicated input (or sequence blocks with SP): 3.3 with the
    grader's ops and linear layers; 3.5 with the grader's ops and modules over the student's
    linear layers and LayerNorm."""
    import minitorch.tensor_parallel as tp

    _start_rank()
    sp = params.get("sequence_parallel", False)
    pieces = {"ops": True, "blocks": True} if sp else {"ops": True, "linear": True}
    with _substituted(tp, **pieces):
        return _run_block(tp, rank, t, seed, params["part"], sp)


def _run_block(tp, rank, t, seed, part, sp):
    master, data = _master(seed), _activations(seed, t)
    build = {
        "mlp": lambda: tp.ParallelMLP(H, FFN, master=_sub(master, "mlp")),
        "attention": lambda: tp.ParallelSelfAttention(H, HEADS, master=_sub(master, "attention")),
        "layer": lambda: tp.ParallelTransformerLayer(H, HEADS, FFN, sequence_parallel=sp, master=master),
    }[part]
    module = build()
    x, grad, x2 = data["x"], data["grad"], _second_input(seed)
    if sp:
        x, grad, x2 = _row_block(x, rank, t), _row_block(grad, rank, t), _row_block(x2, rank, t)
    x = _strided(x).requires_grad_()
    with _Phase("forward"):
        y = module(x)
    with _Phase("backward"):
        _backward(y, grad)
    result = {"out": _out(y), "grad": _out(x.grad), "param_grads": _grads(module), "log": list(_LOG),
              "matrix_numel": sum(p.numel() for p in module.parameters() if p.dim() >= 2)}
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.grad is not None:
                parameter -= LR * parameter.grad
        with _Phase("second"):
            result["out2"] = _out(module(x2))
    if part == "attention" and t > 1:  # the options are judged with a process group
        heads = t + 1
        result["heads_error"] = _raised(lambda: tp.ParallelSelfAttention(2 * heads, heads))
        everywhere = tp.ParallelSelfAttention(H, HEADS, causal=False, master=_sub(master, "attention"))
        x = data["x"].clone().requires_grad_()
        with _Phase("non-causal"):
            y = everywhere(x)
            _backward(y, data["grad"])
        result["non_causal"] = {"out": _out(y), "grad": _out(x.grad)}
    return result


def _judge_block(seed: int, params: dict, observation, what: str) -> None:
    """Outputs, input grads, the second call after one SGD step (parameter gradients, whatever
    the student's parameters are), the memory and the forward's communication budgets."""
    part = params["part"]
    for t in params.get("world_sizes", ALL_SIZES):
        y, dx, dense, y2 = _dense_run(seed, t, part)
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: {what}"
            _expect(f"{where} output (non-contiguous [{S}, {B}, {H}] input)", o["out"], y)
            _expect(f"{where} input grad", o["grad"], dx)
            _expect(f"{where} output of a second call on a [{S2}, {B2}, {H}] input after one SGD step "
                    f"(p -= {LR} * p.grad on every rank; a wrong parameter gradient, or state kept from the "
                    "first call, shows here)", o["out2"], y2)
            if t > 1:
                budget = _MATRICES[part] / t
                if not isinstance(o["matrix_numel"], int) or o["matrix_numel"] > budget:
                    raise Fail(f"{where} holds {o['matrix_numel']} elements of weight matrices on this rank; "
                               f"each rank may hold at most 1/{t} of the dense module's {_MATRICES[part]} "
                               f"({budget:g})")
                _expect_budget(where, t, o["log"], "forward", _ALL_REDUCES[part] * _VOLUME["all_reduce"](t) * N,
                               f"the elements of {_ALL_REDUCES[part]} all-reduce(s) of the [{S}, {B}, {H}] "
                               "activation")


def observe_mlp(seed: int, params: dict):
    """Launches ranks that run the student's parallel MLP block on the grader's weights and inputs."""
    return _observe(_rank_block, seed, {**params, "part": "mlp"}, ALL_SIZES)


def judge_mlp(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "ParallelMLP", ALL_SIZES)
    params = {**params, "part": "mlp"}
    dense = _DenseLayer(_master(seed))
    for t in _multi_rank(params, ALL_SIZES):
        x = _activations(seed, t)["x"]
        with torch.no_grad():
            gelu_last = F.gelu(dense.fc2(dense.fc1(x)))
        for r, o in enumerate(_ranks(observation, t)):
            if _close(o["out"], gelu_last):
                raise Fail(f"t={t}, rank {r}: ParallelMLP's output equals GeLU applied to the whole second "
                           "linear layer's output; the dense MLP applies GeLU between the two layers")
    _judge_block(seed, params, observation, "ParallelMLP")


def observe_attention(seed: int, params: dict):
    """Launches ranks that run the student's parallel attention block on the grader's weights and inputs."""
    return _observe(_rank_block, seed, {**params, "part": "attention"}, ALL_SIZES)


def judge_attention(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "ParallelSelfAttention", ALL_SIZES)
    params = {**params, "part": "attention"}
    _judge_block(seed, params, observation, "ParallelSelfAttention (causal)")
    for t in _multi_rank(params, ALL_SIZES):
        y, dx, _, _ = _dense_run(seed, t, "attention", causal=False)
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: ParallelSelfAttention(causal=False)"
            _expect(f"{where} output (every position attends to every position)", o["non_causal"]["out"], y)
            _expect(f"{where} input grad", o["non_causal"]["grad"], dx)
            _expect_refused(f"t={t}: ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1}) "
                            f"(heads not divisible by {t})", o["heads_error"])


def observe_layer(seed: int, params: dict):
    """Launches ranks that run the student's parallel transformer layer on the grader's weights and inputs."""
    return _observe(_rank_block, seed, {**params, "part": "layer"}, ALL_SIZES)


def judge_layer(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "ParallelTransformerLayer", ALL_SIZES)
    _judge_block(seed, {**params, "part": "layer"}, observation, "ParallelTransformerLayer")


# ======================================================================================
# 3.4 vocabulary-parallel embedding (with the grader's 3.1 ops)
# ======================================================================================
IDS2 = 7  # a second call: 1-D ids


def _vocab_data(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed + 11)
    ids = torch.randint(0, VOCAB, (S, B), generator=g)
    # The first and the last id of every rank's range, for every t: `> end` instead of
    # `>= end` (or `<= start`) shows only at these ids.
    bounds = sorted({edge for t in ALL_SIZES for r in range(t) for edge in (r * VOCAB // t, (r + 1) * VOCAB // t - 1)})
    ids.view(-1)[: len(bounds)] = torch.tensor(bounds)
    logits = _rand(g, S, B, VOCAB, scale=3.0)
    logits[1, 0] += 800.0  # exp() overflows without subtracting the max
    return {"table": _rand(g, VOCAB, H), "ids": ids, "grad": _rand(g, S, B, H),
            "logits": logits, "loss_grad": _rand(g, S, B), "ids2": torch.randint(0, VOCAB, (IDS2,), generator=g)}


def _rank_embedding(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    d = _vocab_data(seed)
    with _substituted(tp, ops=True):
        embedding = tp.VocabParallelEmbedding(VOCAB, H, master={"weight": d["table"]})
        with _Phase("forward"):
            y = embedding(_strided(d["ids"]))
        with _Phase("backward"):
            _backward(y, d["grad"])
        with _Phase("second"), torch.no_grad():
            y2 = embedding(d["ids2"])
    return {"out": _out(y), "weight": _out(embedding.weight), "weight_grad": _out(embedding.weight.grad),
            "out2": _out(y2), "log": list(_LOG)}


def observe_embedding(seed: int, params: dict):
    """Launches ranks that run the vocab-parallel embedding on token ids spanning every rank's range."""
    return _observe(_rank_embedding, seed, params, ALL_SIZES)


def judge_embedding(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "VocabParallelEmbedding", ALL_SIZES)
    d = _vocab_data(seed)
    table = d["table"].clone().requires_grad_()
    y = F.embedding(d["ids"], table)
    _backward(y, d["grad"])
    for t in params.get("world_sizes", ALL_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: VocabParallelEmbedding"
            _expect(f"{where} weight must be rows {r * VOCAB // t}:{(r + 1) * VOCAB // t} of the master "
                    "table", o["weight"], _row_block(d["table"], r, t), SHARD)
            _expect_per_token(f"{where} output", o["out"], y.detach(), d["ids"], t,
                              "every rank's output must be the embedding of every id, whichever rank's range it "
                              "is in")
            _expect(f"{where} weight grad", o["weight_grad"], _row_block(table.grad, r, t))
            _expect(f"{where}, called again with 1-D ids of {IDS2} tokens: output", o["out2"],
                    F.embedding(d["ids2"], d["table"]))
            if t > 1:
                _expect_budget(where, t, o["log"], "forward", _VOLUME["all_reduce"](t) * N,
                               "one all-reduce of the output")
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
MAX_COLLECTIVES = 4


def _rank_fused_loss(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    d = _vocab_data(seed)
    logits = _strided(_column_block(d["logits"], rank, t)).requires_grad_()
    with _substituted(tp, ops=True):
        with _Phase("forward"):
            loss = tp.vocab_parallel_cross_entropy(logits, d["ids"])
        with _Phase("backward"):
            _backward(loss, d["loss_grad"])
        with _Phase("second"), torch.no_grad():  # 2-D logits [tokens, V/t], float32
            flat = _column_block(d["logits"], rank, t).reshape(TOKENS, -1)[: TOKENS - 3].float()
            loss2 = tp.vocab_parallel_cross_entropy(flat, d["ids"].reshape(-1)[: TOKENS - 3])
    return {"loss": _out(loss), "grad": _out(logits.grad), "loss2": _out(loss2), "log": list(_LOG)}


def observe_fused_loss(seed: int, params: dict):
    """Launches ranks that run the vocab-parallel fused cross-entropy, recording losses, gradients and collectives."""
    return _observe(_rank_fused_loss, seed, params, ALL_SIZES)


def judge_fused_loss(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "vocab_parallel_cross_entropy", ALL_SIZES)
    d = _vocab_data(seed)
    logits = d["logits"].clone().requires_grad_()
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), d["ids"].reshape(-1), reduction="none").view(S, B)
    _backward(loss, d["loss_grad"])
    loss2 = F.cross_entropy(d["logits"].reshape(TOKENS, -1)[: TOKENS - 3].float(), d["ids"].reshape(-1)[: TOKENS - 3],
                            reduction="none")
    for t in params.get("world_sizes", ALL_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            where = f"t={t}, rank {r}: vocab_parallel_cross_entropy"
            forward = _phase_log(o["log"], "forward")
            big = [c for c in forward if c["numel"] > FEW_SCALARS * TOKENS]
            if big:
                raise Fail(f"{where} must not gather the logits nor communicate anything else with a vocabulary "
                           f"dimension (at most {FEW_SCALARS} scalars per token, {FEW_SCALARS * TOKENS} elements, "
                           f"per collective): recorded {_describe(big)}")
            _expect_per_token(f"{where} per-token loss (like F.cross_entropy(reduction='none'), non-contiguous "
                              "logits)", o["loss"], loss.detach(), d["ids"], t,
                              "the loss of a token needs the logit of its target, which one rank's block holds")
            _expect(f"{where} gradient of this rank's logits", o["grad"], _column_block(logits.grad, r, t))
            _expect(f"{where}, called again with 2-D float32 logits [{TOKENS - 3}, {VOCAB // t}]: losses",
                    o["loss2"], loss2)
            if len(forward) > MAX_COLLECTIVES:
                raise Fail(f"{where}: the forward may issue at most {MAX_COLLECTIVES} collectives of a few scalars "
                           f"per token; recorded {_describe(forward)}")
            _expect_collectives(where, o["log"], "backward", [],
                                "the gradient of the logits needs only values this rank computed in forward")


# ======================================================================================
# 3.5 sequence parallelism (the student's linear layers and LayerNorm in the grader's layer)
# ======================================================================================
def observe_sequence_parallel(seed: int, params: dict):
    """Launches ranks that run a sequence-parallel layer, recording outputs, gradients and collective volumes."""
    return _observe(_rank_block, seed, {**params, "part": "layer", "sequence_parallel": True}, ALL_SIZES)


def judge_sequence_parallel(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "the sequence-parallel layer", ALL_SIZES)
    for t in params.get("world_sizes", ALL_SIZES):
        y, dx, dense, y2 = _dense_run(seed, t, "layer")
        ranks, partial = _ranks(observation, t), _partial_grads(seed, t)
        what = "a transformer layer built from your ColumnParallelLinear, RowParallelLinear and " \
               "ReplicatedLayerNorm with sequence_parallel=True"
        for r, o in enumerate(ranks):
            where = f"t={t}, rank {r}: {what}"
            _expect(f"{where}: output (rank r keeps block r of the sequence, [s/t, b, h])", o["out"],
                    _row_block(y, r, t))
            _expect(f"{where}: input grad", o["grad"], _row_block(dx, r, t))
            expected = dense.expected_grads(t, r)
            for name, blocks in partial.items() if t > 1 else ():
                if _close(o["param_grads"].get(name), blocks[r]):
                    raise Fail(f"{where}: the gradient of {name} covers only this rank's block of the sequence; "
                               "after backward every rank must hold the gradient over the whole sequence")
            for name, value in expected.items():
                _expect(f"{where}: gradient of {name}", o["param_grads"].get(name), value)
            _expect(f"{where}: output of a second call on a [{S2}, {B2}, {H}] input", o["out2"], _row_block(y2, r, t))
            if t == 1:
                continue
            activations = [c for c in _phase_log(o["log"], "forward") if c["numel"] > 4 * H]
            all_reduces = [c for c in activations if c["kind"] == "all_reduce"]
            if all_reduces:
                raise Fail(f"{where}: with sequence parallelism the forward all-reduces no activation (each rank "
                           f"keeps only its block of the sequence between the layers); recorded "
                           f"{_describe(all_reduces)}")
            _expect_budget(where, t, activations, "forward", 2 * _VOLUME["all_reduce"](t) * N,
                           "the same as the 2 all-reduces of plain tensor parallelism")


@functools.lru_cache(maxsize=4)
def _layer_pieces(seed: int):
    """The dense layer's gradients at the LayerNorm outputs, the attention and the MLP outputs,
    and the normalised LayerNorm inputs (what the partial sums of ``_partial_grads`` sum)."""
    dense, data = _DenseLayer(_master(seed)), _activations(seed, 1)
    x = data["x"]
    ln1 = dense.ln1(x)
    attention = dense.attend(ln1)
    hidden = x + attention
    ln2 = dense.ln2(hidden)
    mlp = dense.mlp(ln2)
    grads = torch.autograd.grad(((hidden + mlp) * data["grad"]).sum(), (ln1, attention, ln2, mlp))
    normalized = {"ln1": F.layer_norm(x, (H,)).detach(), "ln2": F.layer_norm(hidden, (H,)).detach()}
    return (*(g.detach() for g in grads), normalized)


def _partial_grads(seed: int, t: int) -> dict[str, list[torch.Tensor]]:
    """What each rank's gradients of the replicated parameters (LayerNorms, row-parallel
    biases) are WITHOUT the sum over ranks: the contribution of its own block of the
    sequence, ``{name: [rank 0's, rank 1's, ...]}``."""
    g_ln1, g_attention, g_ln2, g_mlp, normalized = _layer_pieces(seed)
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
# 3.1 one process, no process group (t = 1): the 3.1 ops
# ======================================================================================
SINGLE_PROCESS_PARTS = (
    ("fg", "f and g", _rank_fg, judge_fg),
    ("scatter_gather", "the scatter/gather ops", _rank_scatter_gather, judge_scatter_gather),
)


def observe_single_process(seed: int, params: dict):
    """Runs the 3.1 ops in this process, without a process group (t = 1)."""
    _install_recorder()
    return {name: [{"case": {"t": 1}, "ranks": _single_process(rank_fn, seed, params)}]
            for name, _, rank_fn, _ in SINGLE_PROCESS_PARTS}


def judge_single_process(seed: int, params: dict, observation) -> None:
    for name, what, _, judge in SINGLE_PROCESS_PARTS:
        try:
            judge(seed, {**params, "world_sizes": [1]}, observation[name])
        except Fail as failure:
            raise Fail(f"{what}, in one process without a process group (t = 1): {failure}") from None


# ======================================================================================
# 3.0 conventions: the caller's tensors left unchanged; ValueError
# ======================================================================================
_OPS = ("copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region",
        *(name for name, _ in _SCATTER_GATHER_OPS))
CONVENTION_SIZES = (2,)


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor) and t.numel()}


def _watched(master: dict, *tensors) -> tuple[dict, list]:
    """Copies of the caller's tensors, to compare with after the run."""
    return {k: v.clone() for k, v in master.items()}, [t.clone() for t in tensors]


def _changes(master: dict, before_master: dict, tensors, before, flags) -> list[str]:
    changed = [f"master[{k!r}]" for k, v in master.items() if not torch.equal(v, before_master[k])]
    changed += [f"argument {i}" for i, (t, b) in enumerate(zip(tensors, before)) if not torch.equal(t.detach(), b)]
    return changed + [f"argument {i}'s requires_grad" for i, (t, flag) in enumerate(zip(tensors, flags))
                      if t.requires_grad != flag]


def _check_module(build, master: dict, inputs: list, grad=None) -> dict:
    """Build from ``master``, run forward (+ backward with ``grad``, then one SGD step): which of the
    caller's tensors changed, and whether a parameter shares memory with a master tensor."""
    before_master, before = _watched(master, *inputs)
    flags = [t.requires_grad for t in inputs]
    module = build()
    parameters = dict(module.named_parameters()) if isinstance(module, nn.Module) else {}
    aliased = sorted(name for name, p in parameters.items() if _storages([p]) & _storages(master.values()))
    y = module(*inputs)
    if grad is not None:
        _backward(y, grad if y.dim() else 1.0)
        with torch.no_grad():
            for parameter in parameters.values():
                if parameter.grad is not None:
                    parameter -= LR * parameter.grad
    return {"changed": _changes(master, before_master, inputs, before, flags), "aliased": aliased}


def _rank_caller_unchanged(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    data, m, layer_master, d = _activations(seed, t), _linear_master(seed), _master(seed), _vocab_data(seed)
    parts: dict = {}

    def attempt(name, run):
        try:
            parts[name] = run()
        except Exception as error:  # noqa: BLE001 - that part's own criterion reports it
            parts[name] = {"raised": type(error).__name__, "message": str(error)[:200]}

    for name in _OPS:
        x, grad = _scatter_gather_inputs(name, data, rank, t) if name in dict(_SCATTER_GATHER_OPS) else (
            data["x_r"][rank], data["grad_r"][rank])
        for strided in (False, True):
            attempt(f"{name} ({'non-' if strided else ''}contiguous)",
                    lambda: _run_op(getattr(tp, name), x, grad, name, strided=strided))
    linear = {"weight": m["weight"].clone(), "bias": m["bias"].clone()}
    x_block = _strided(_column_block(m["x"], rank, t))
    attempt("ColumnParallelLinear", lambda: _check_module(lambda: tp.ColumnParallelLinear(IN, OUT, master=linear),
                                                          linear, [_strided(m["x"])], _column_block(m["grad"], rank, t)))
    attempt("RowParallelLinear", lambda: _check_module(lambda: tp.RowParallelLinear(IN, OUT, master=linear),
                                                       linear, [x_block], m["grad"]))
    for part, build in (("ParallelMLP", lambda mm: tp.ParallelMLP(H, FFN, master=mm)),
                        ("ParallelSelfAttention", lambda mm: tp.ParallelSelfAttention(H, HEADS, master=mm)),
                        ("ParallelTransformerLayer", lambda mm: tp.ParallelTransformerLayer(H, HEADS, FFN, master=mm))):
        prefix = {"ParallelMLP": "mlp", "ParallelSelfAttention": "attention"}.get(part)
        master = {k: v.clone() for k, v in (_sub(layer_master, prefix) if prefix else layer_master).items()}
        attempt(part, lambda: _check_module(lambda: build(master), master, [_strided(data["x"])], data["grad"]))
    table = {"weight": d["table"].clone()}
    attempt("VocabParallelEmbedding", lambda: _check_module(lambda: tp.VocabParallelEmbedding(VOCAB, H, master=table),
                                                            table, [d["ids"].clone()], d["grad"]))
    logits = _strided(_column_block(d["logits"], rank, t)).requires_grad_()
    attempt("vocab_parallel_cross_entropy", lambda: _check_module(
        lambda: tp.vocab_parallel_cross_entropy, {},
        [logits, d["ids"].clone()], d["loss_grad"]))
    model_master = {k: v.clone() for k, v in _model_master(seed).items()}
    attempt("ParallelLanguageModel", lambda: _check_module(
        lambda: tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, master=model_master), model_master,
        list(_model_batches(seed)[0]), torch.ones((), dtype=DTYPE)))
    return parts


def observe_caller_unchanged(seed: int, params: dict):
    """Launches ranks that run every op, layer, the loss and the model, watching the caller's tensors."""
    return _observe(_rank_caller_unchanged, seed, params, CONVENTION_SIZES)


def judge_caller_unchanged(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "the caller's tensors", CONVENTION_SIZES)
    ran = 0
    for t in params.get("world_sizes", CONVENTION_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            for part, result in o.items():
                if "raised" in result:
                    continue
                ran += 1
                where = f"t={t}, rank {r}: {part}"
                if result.get("input_changed"):
                    raise Fail(f"{where} changed its input in place; the caller's tensor must be left as it was "
                               "(the caller may still use it)")
                if result.get("grad_changed"):
                    raise Fail(f"{where}: its backward changed the gradient autograd handed it, in place; that "
                               "tensor is not yours (other functions may use it)")
                if result.get("aliased"):
                    raise Fail(f"{where}: parameter(s) {', '.join(result['aliased'])} share memory with the master "
                               "tensors they were built from; a training step would change the caller's tensors")
                if result.get("changed"):
                    raise Fail(f"{where} changed the caller's {', '.join(result['changed'])} in place (checked "
                               "after forward, backward and one SGD step); leave them as they were")
    if not ran:
        stubs = [str(result.get("message", "")) for o in observation.values() if isinstance(o, list)
                 for rank in o if isinstance(rank, dict) for result in rank.values()
                 if isinstance(result, dict) and result.get("raised") == "NotImplementedError"]
        if stubs:
            raise Fail(f"not implemented yet (Problem 3.0): every part it watches still raises NotImplementedError "
                       f"(first: {stubs[0] or 'a stub'})")
        raise Fail("no op, layer, loss or model of Problem 3 ran (each raised); nothing to check")


def _rank_errors(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    odd = 2 * t + 1
    cases = {f"{name} of a tensor of shape {list(shape)}": (lambda n=name, sh=shape: getattr(tp, n)(
        torch.zeros(sh, dtype=DTYPE))) for name, shape, _ in _INDIVISIBLE}
    cases.update({
        f"ColumnParallelLinear({IN}, {odd})": lambda: tp.ColumnParallelLinear(IN, odd),
        f"RowParallelLinear({odd}, {OUT})": lambda: tp.RowParallelLinear(odd, OUT),
        f"ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1})": lambda: tp.ParallelSelfAttention(2 * (t + 1), t + 1),
        f"ParallelMLP({H}, {odd})": lambda: tp.ParallelMLP(H, odd),
        f"VocabParallelEmbedding({odd}, {H})": lambda: tp.VocabParallelEmbedding(odd, H),
        f"ParallelLanguageModel({odd}, {H}, {HEADS}, 1, {FFN})": lambda: tp.ParallelLanguageModel(odd, H, HEADS, 1, FFN),
    })
    with _Phase("errors"):
        return {"cases": [{"case": what, "raised": _raised(build)} for what, build in cases.items()]}


def observe_errors(seed: int, params: dict):
    """Launches ranks that call every op and constructor with a size t does not divide."""
    return _observe(_rank_errors, seed, params, CONVENTION_SIZES)


def judge_errors(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "ValueError", CONVENTION_SIZES)
    for t in params.get("world_sizes", CONVENTION_SIZES):
        odd = 2 * t + 1
        asked = [f"{name} of a tensor of shape {list(shape)}" for name, shape, _ in _INDIVISIBLE] + [
            f"ColumnParallelLinear({IN}, {odd})", f"RowParallelLinear({odd}, {OUT})",
            f"ParallelSelfAttention({2 * (t + 1)}, num_heads={t + 1})", f"ParallelMLP({H}, {odd})",
            f"VocabParallelEmbedding({odd}, {H})", f"ParallelLanguageModel({odd}, {H}, {HEADS}, 1, {FFN})"]
        for r, o in enumerate(_ranks(observation, t)):
            for entry in expect_cases(o["cases"], asked, "ValueError"):
                if entry["raised"] == "NotImplementedError":
                    raise Fail(f"not implemented yet (Problem 3.0): {entry['case']} still raises NotImplementedError")
                if entry["raised"] != "ValueError":
                    raise Fail(f"t={t}, rank {r}: {entry['case']} (a size {t} does not divide) must raise "
                               f"ValueError; got {entry['raised']}")


# ======================================================================================
# 3.6 a tensor-parallel language model, trained (with the grader's 3.1-3.5 pieces)
# ======================================================================================
LAYERS = 1
MODEL_LR = 0.5
# (s, b) of each training step, and of the held-out batch evaluated after training
STEP_SHAPES, HELD_OUT = ((S, B), (S // 2, 1)), (S, 1)


def _model_master(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 31)
    master = {"embedding.weight": _rand(g, VOCAB, H), "output.weight": _rand(g, VOCAB, H, scale=H ** -0.5),
              "final_ln.weight": 1 + _rand(g, H, scale=0.2), "final_ln.bias": _rand(g, H, scale=0.2)}
    for i in range(LAYERS):
        master.update({f"layers.{i}.{k}": v for k, v in _master(seed + 100 * (i + 1)).items()})
    return master


def _model_batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed + 41)
    return [(torch.randint(0, VOCAB, shape, generator=g), torch.randint(0, VOCAB, shape, generator=g))
            for shape in (*STEP_SHAPES, HELD_OUT)]


class _DenseModel(nn.Module):
    def __init__(self, master: dict):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, H, dtype=DTYPE)
        self.layers = nn.ModuleList(_DenseLayer(_sub(master, f"layers.{i}")) for i in range(LAYERS))
        self.final_ln = nn.LayerNorm(H, dtype=DTYPE)
        self.output = nn.Linear(H, VOCAB, bias=False, dtype=DTYPE)
        with torch.no_grad():
            for name in ("embedding.weight", "final_ln.weight", "final_ln.bias", "output.weight"):
                self.get_parameter(name).copy_(master[name])

    def forward(self, ids, targets):
        x = self.embedding(ids)
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.output(self.final_ln(x)).reshape(-1, VOCAB), targets.reshape(-1))


def _rank_train(rank, t, seed, params):
    import minitorch.tensor_parallel as tp

    _start_rank()
    batches, result = _model_batches(seed), {}
    with _substituted(tp, ops=True, linear=True, norm=True, blocks=True, vocab=True):
        for sp in _sequence_parallel_cases(t):
            model = tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, sequence_parallel=sp,
                                             master=_model_master(seed))
            with _Phase(f"train sp={sp}"):
                losses = tp.train_language_model(model, batches[:-1], MODEL_LR)
            with _Phase(f"held-out sp={sp}"), torch.no_grad():
                held_out = model(*batches[-1])
            full = [p for p in model.parameters() if p.dim() >= 2]
            result[f"sp={sp}"] = {"losses": [float(v) if isinstance(v, (int, float)) else None for v in losses]
                                  if isinstance(losses, (list, tuple)) else None,
                                  "held_out": _out(held_out), "matrix_numel": sum(p.numel() for p in full)}
    return result


def _sequence_parallel_cases(t: int) -> tuple[bool, ...]:
    """Both at t = 2; at t = 1 they are the same model; at t = 4 the one that moves the sequence
    (its blocks of 2 rows: the time budget keeps one training per rank there)."""
    return {1: (False,), 2: (False, True)}.get(t, (True,))


def observe_train(seed: int, params: dict):
    """Launches ranks that build the student's ParallelLanguageModel (on the grader's layers) and train it."""
    return _observe(_rank_train, seed, params, ALL_SIZES)


def _dense_training(seed: int) -> tuple[list[float], torch.Tensor]:
    model, batches = _DenseModel(_model_master(seed)), _model_batches(seed)
    losses = []
    for ids, targets in batches[:-1]:
        model.zero_grad(set_to_none=True)
        loss = model(ids, targets)
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= MODEL_LR * parameter.grad
        losses.append(float(loss.detach()))
    with torch.no_grad():
        return losses, model(*batches[-1])


def judge_train(seed: int, params: dict, observation) -> None:
    observation = _cases(observation, params, "ParallelLanguageModel", ALL_SIZES)
    losses, held_out = _dense_training(seed)
    matrices = LAYERS * _MATRICES["layer"] + 2 * VOCAB * H
    for t in params.get("world_sizes", ALL_SIZES):
        for r, o in enumerate(_ranks(observation, t)):
            for sp in _sequence_parallel_cases(t):
                run = o[f"sp={sp}"]
                where = f"t={t}, rank {r}, sequence_parallel={sp}"
                if t > 1 and (not isinstance(run["matrix_numel"], int) or run["matrix_numel"] > matrices / t):
                    raise Fail(f"{where}: the model holds {run['matrix_numel']} elements of weight matrices on this "
                               f"rank; each rank may hold at most 1/{t} of the dense model's {matrices} "
                               f"({matrices / t:g}), the embedding and output tables included")
                got = run["losses"]
                if not isinstance(got, list) or len(got) != len(losses) or None in got:
                    raise Fail(f"{where}: train_language_model must return {len(losses)} losses as floats (one per "
                               f"batch); got {got!r:.200}")
                for step, (value, expected) in enumerate(zip(got, losses)):
                    if not abs(value - expected) <= TOL * (1 + abs(expected)):
                        raise Fail(f"{where}: the loss of step {step} (batch of shape {list(STEP_SHAPES[step])}) is "
                                   f"{value:.12g}; the dense model trained the same way gives {expected:.12g}")
                _expect(f"{where}: the mean loss on a held-out batch after training (the parameters after the last "
                        "step)", run["held_out"], held_out)
