"""PARENT side of 4.3: the student's recomputation judged against the plain run of the same
layers (bit for bit), against the activations the grader counted, and against the contract's
ValueError and its promises to the caller."""
from __future__ import annotations

import math

import torch

from grader.checks.compare import difference
from grader.checks.judging import Fail, expect_cases
from grader.checks.problem4.recompute import cases as table
from grader.checks.problem4.recompute.layers import build_case, optimizer_step, plain_forward
from grader.checks.problem4.recompute.measure import measure
from grader.checks.problem4.recompute.runs import plain_run
from grader.checks.threads import single_threaded

WRONG = {  # what is wrong with each bad call of table.BAD
    "([], x)": "no layers", "([tanh], x, segments=0)": "segments = 0",
    "([tanh] * 3, x, segments=4)": "more segments than layers", "([tanh] * 3, x, segments=-1)": "segments < 0",
    "([tanh], x, segments=1.5)": "segments is not an int", "([tanh] * 3, x, segments=2.0)": "segments is a float",
    "([tanh] * 3, x, segments=True)": "segments is a bool", "([tanh] * 3, x, segments='2')": "segments is a string",
    "([tanh] * 3, x, segments=numpy.int64(2))": "segments is a numpy integer (the contract takes Python ints only)",
    "([3], x)": "a layer that is not callable", "([tanh, 3], x)": "the second layer is not callable",
    "([tanh], [[1.0]])": "x is not a tensor",
}


def _refused(observation, what: str) -> None:
    if observation["torch_checkpoint"]:
        raise Fail(f"{what}: Problem 4.3 asks for hand-written recomputation; your code called "
                   f"{', '.join(map(str, observation['torch_checkpoint'][:2]))}")


def _bits(mine, plain: torch.Tensor) -> str:
    """Why ``mine`` is not bit for bit ``plain`` (another kind, dtype, shape or value), or ""."""
    if not isinstance(mine, torch.Tensor):
        return difference(mine, plain)
    if mine.dtype != plain.dtype:
        return f"has dtype {mine.dtype}, expected {plain.dtype} (the plain run's)"
    # exact: 4.3's promise is bit-identity with the plain run made in the same child (same kernels, same shapes); RNG states are integers
    if mine.shape != plain.shape or not torch.equal(mine, plain):
        return difference(mine, plain)
    return ""


def _labels(count: int) -> list[str]:
    return ["grad of x"] + [f"grad of parameter {i}" for i in range(count - 1)]


def _reference_agrees(ours: dict, theirs: dict, what: str) -> None:
    """The child's plain run (the bit-level reference: same process, same kernels) agrees
    with the grader's own, or the child's process was tampered with."""
    # exact: 4.3's promise is bit-identity with the plain run made in the same child (same kernels, same shapes); RNG states are integers
    same = [torch.equal(theirs[name], ours[name]) for name in ("rng_after_forward", "rng_after_backward")]
    pairs = [(theirs["output"], ours["output"])] + list(zip(theirs["grads"], ours["grads"]))
    for a, b in pairs:
        both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        same.append((a is None and b is None) or (both and a.shape == b.shape and a.dtype == b.dtype
                                                  and torch.allclose(a, b, rtol=1e-5, atol=1e-6)))
    if not all(same):
        raise Fail(f"{what}: the plain run inside your process differs from the grader's; does your module change "
                   "torch's global state?")


def _compare(plain: dict, mine: dict, what: str, dropout: float) -> None:
    hint = " (are the random numbers of the forward drawn again in backward?)" if dropout else ""
    if mine["handed_out_again"] is True:
        raise Fail(f"{what}: it returned the very tensor the same call returned before; each call computes its "
                   "output afresh, from the layers as they are now")
    why = _bits(mine["output"], plain["output"])
    if why:
        raise Fail(f"{what}: the output is not bit-identical to the plain run: it {why}")
    # x's requires_grad switched on by the call is 4.3-caller-unchanged's; the output then requires grad
    switched = mine["x_requires_grad"] is True and plain["x_requires_grad"] is False
    if mine["requires_grad"] is not (plain["requires_grad"] or switched):
        raise Fail(f"{what}: the output has requires_grad={mine['requires_grad']}; the plain run's has "
                   f"{plain['requires_grad']} (it requires grad exactly when x or a parameter does)")
    # exact: 4.3's promise is bit-identity with the plain run made in the same child (same kernels, same shapes); RNG states are integers
    if not torch.equal(mine["rng_after_forward"], plain["rng_after_forward"]):
        raise Fail(f"{what}: the RNG state after forward is not the plain run's")
    labels = _labels(len(plain["grads"]))
    for label, a, b, had, has in zip(labels, plain["grads"], mine["grads"], plain["has_grad"], mine["has_grad"]):
        if label == "grad of x" and a is None:
            continue  # x does not require grad: whether the caller's x gets one is 4.3-caller-unchanged's
        if a is None and b is not None:
            raise Fail(f"{what}: {label}: the plain run gives it no gradient, yours gives one")
        if a is not None and b is None:
            raise Fail(f"{what}: {label}: the plain run gives it a gradient, yours gives none")
        why = "" if a is None else _bits(b, a)
        if why:
            raise Fail(f"{what}: {label} is not bit-identical to the plain run: it {why}{hint}")
        if label != "grad of x" and had is not has:
            state = "has a .grad" if has else "has no .grad"
            raise Fail(f"{what}: afterwards the {label[8:]} {state}; after the plain run it "
                       f"{'has one' if had else 'has none'} (gradients go where autograd puts them, nowhere else)")
    # exact: 4.3's promise is bit-identity with the plain run made in the same child (same kernels, same shapes); RNG states are integers
    if not torch.equal(mine["rng_after_backward"], plain["rng_after_backward"]):
        raise Fail(f"{what}: the RNG state after backward is not the plain run's")


@single_threaded
def judge_bit_identical(seed: int, params: dict, observation) -> None:
    """Bit-identical output and gradients, the output's requires_grad, no ``.grad`` where the
    plain run leaves none, and the global RNG left as the plain run leaves it."""
    _refused(observation, "checkpoint_sequential")
    cases = table.recompute_cases(seed)
    entries = expect_cases(observation["cases"], list(range(len(cases))), "checkpoint_sequential")
    for index, entry in enumerate(entries):
        case = cases[index]
        layers, x, rng_seed = build_case(seed, index)
        if case.repeat:
            optimizer_step(layers)  # as the child's did after the same call before
        what = f"{case.describe()} (case {index}, seed {seed})"
        _reference_agrees(plain_run(layers, x, rng_seed, case), entry["plain"], what)
        _compare(entry["plain"], entry["student"], what, case.dropout)


def _segments(index: int) -> int:
    case = table.RECOMPUTE_CASES[index]
    return round(math.sqrt(case.layers)) if case.segments is None else case.segments


def _plain_stored(seed: int, index: int) -> int:
    """Activation tensors the plain (no recomputation) run keeps after its forward."""
    layers, x, rng_seed = build_case(seed, index)
    torch.manual_seed(rng_seed)
    return measure(lambda: plain_forward(layers, x), layers, x)["stored_after_forward"]


@single_threaded
def judge_stored_activations(seed: int, params: dict, observation) -> None:
    """After forward only the segment inputs are alive; backward holds one segment at a time;
    after backward nothing is kept (the caller still holding the output)."""
    _refused(observation, "checkpoint_sequential")
    for index, case in zip(table.MEMORY_CASES, expect_cases(observation["cases"], table.MEMORY_CASES,
                                                            "checkpoint_sequential")):
        num_layers, segments = table.RECOMPUTE_CASES[index].layers, _segments(index)
        plain, mine = _plain_stored(seed, index), case["stored_after_forward"]
        per_layer = max(1, -(-plain // num_layers))  # activation tensors one layer stores
        what = f"{table.RECOMPUTE_CASES[index].describe()}: {num_layers} layers in {segments} segments"
        if mine > segments:
            raise Fail(
                f"{what}: after the forward, {mine} activation tensors are still stored besides the input and "
                f"the output (the plain run stores {plain}); only the inputs of segments 1..{segments - 1} may "
                "stay until backward"
            )
        limit = segments + per_layer * -(-num_layers // segments) + 2
        if case["peak_during_backward"] > limit:
            raise Fail(
                f"{what}: during backward up to {case['peak_during_backward']} activation tensors are alive at once; "
                f"recomputing one segment at a time needs at most about {limit} (segment inputs + one segment's "
                "activations)"
            )
        if case["stored_after_backward"] > 0:
            raise Fail(
                f"{what}: after the backward (no retain_graph), {case['stored_after_backward']} activation tensors "
                "are still alive while the caller holds the output; the plain run keeps none. A tensor kept on "
                "ctx instead of ctx.save_for_backward outlives the backward"
            )


def _segment_sizes(order: list) -> list[int]:
    """The segments backward recomputed, from the order it ran the layers: each segment runs
    its layers in increasing order, the segments from the last to the first."""
    sizes: list[int] = []
    for position, layer in enumerate(order):
        if position and layer == order[position - 1] + 1:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes[::-1]


def _bounds(num_layers: int, segments: int) -> list[tuple[int, int]]:
    """``segment_bounds`` of the docstring, written out here (the grader never uses the answer key)."""
    size, extra = divmod(num_layers, segments)
    bounds, start = [], 0
    for index in range(segments):
        stop = start + size + (index < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def judge_count(seed: int, params: dict, observation) -> None:
    """Every layer runs once in forward and exactly once more (recomputed) in backward, segment
    by segment as segment_bounds cuts them (the default: round(sqrt(n)) segments)."""
    _refused(observation, "checkpoint_sequential")
    for index, case in zip(table.COUNT_CASES, expect_cases(observation["cases"], table.COUNT_CASES,
                                                           "checkpoint_sequential")):
        spec, segments = table.RECOMPUTE_CASES[index], _segments(index)
        what = f"{spec.describe()}: {spec.layers} layers in {segments} segments"
        for phase in ("forward", "backward"):
            counts = list(case["calls"][phase])
            if len(counts) != spec.layers or any(count != 1 for count in counts):
                layer = next((i for i, c in enumerate(counts) if c != 1), 0)
                raise Fail(
                    f"{what}: layer {layer} ran {counts[layer]} times during the {phase}, expected once "
                    f"(calls per layer: {counts}); each layer runs once in forward and is recomputed "
                    "exactly once in backward"
                )
        expected = [stop - start for start, stop in _bounds(spec.layers, segments)]
        got = _segment_sizes(list(case["order"]))
        if got != expected:
            default = (f"; segments=None means round(sqrt({spec.layers})) = {segments}, the nearest int"
                       if spec.segments is None and len(got) != segments else "")
            raise Fail(
                f"{what}: backward recomputed segments of {got} layers (from the first layer on); expected "
                f"{expected}, the pieces of segment_bounds({spec.layers}, {segments}){default}"
            )


def judge_arguments(seed: int, params: dict, observation) -> None:
    """ValueError at the call for each bad call; the valid calls at the same edges return."""
    _refused(observation, "checkpoint_sequential")
    labels = [label for label, *_ in table.BAD]
    for label, entry in zip(labels, expect_cases(observation["bad"], labels, "checkpoint_sequential")):
        if entry["raised"] is None or entry["value_error"] is not True:
            got = "it returned" if entry["raised"] is None else f"got {str(entry['raised'])[:60]}: {str(entry['message'])[:200]}"
            raise Fail(f"checkpoint_sequential{label}: {WRONG[label]}, expected ValueError at the call; {got}")
    labels = [label for label, *_ in table.VALID]
    for label, entry in zip(labels, expect_cases(observation["valid"], labels, "checkpoint_sequential")):
        if entry["raised"] is not None:
            raise Fail(f"checkpoint_sequential{label} is valid but raised {str(entry['raised'])[:60]}: "
                       f"{str(entry['message'])[:200]}")


def judge_caller(seed: int, params: dict, observation) -> None:
    """The caller's tensors keep their values and requires_grad, and get no ``.grad`` where
    they do not require grad; a second backward (retain_graph) works and gives the same
    gradients again."""
    _refused(observation, "checkpoint_sequential")
    labels = [label for label, *_ in table.CALLER_CASES]
    for (label, _, _, segments), case in zip(table.CALLER_CASES, expect_cases(observation["cases"], labels,
                                                                              "checkpoint_sequential")):
        what = f"checkpoint_sequential(4 layers, x, segments={segments}) with {label}"
        _caller_tensors(case, what)
        if str(case["second"]).startswith("not tried"):
            continue  # the first backward failed: 4.3-bit-identical's concern
        if case["second"] != "ran":
            raise Fail(f"{what}: a second backward through the same graph (retain_graph=True the first time) "
                       f"failed: {str(case['second'])[:300]}; the tensors kept for backward must survive the first one")
        names = [f"parameter {i}" for i in range(len(case["first"]) - 1)] + ["x"]
        for name, first, again in zip(names, case["first"], case["again"]):
            if (first is None) != (again is None) or first is not None and _bits(again, first):
                raise Fail(f"{what}: the second backward gives another gradient of {name} than the first")


def _caller_tensors(case, what: str) -> None:
    names = [f"parameter {i}" for i in range(len(case["requires_grad"]) - 1)] + ["x"]
    for name, before, after, has in zip(names, case["requires_grad"], case["requires_grad_after"], case["has_grad"]):
        if after is not before:
            raise Fail(f"{what}: afterwards {name}.requires_grad is {after}; the caller's tensor must keep "
                       f"requires_grad={before}")
        if has and not before:
            raise Fail(f"{what}: afterwards {name} has a .grad although it does not require grad")
    why = _bits(case["x"], case["before"])
    if why:
        raise Fail(f"{what}: the caller's x changed: it {why}")
