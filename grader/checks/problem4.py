"""Hidden checks for Problem 4: 1F1B (4.1), interleaved 1F1B (4.2), recomputation (4.3).

Schedules are judged in the parent by simulating them with the grader's own copy of
``minitorch.schedules`` and comparing with closed forms (makespan ``(M + (K-1)/v)(F+B)``,
peak in-flight microbatches); no reference schedule is used. Recomputation is judged
against plain PyTorch runs of layers the grader builds itself; stored activations are
counted by the grader (a dispatch mode that watches every tensor created, and weak
references to their storages) and recomputations by forward hooks on its own layers,
so nothing the submission reports about itself is trusted.
"""
import contextlib
import importlib
import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from grader.checks import Fail
from grader.checks.compare import close, difference

T_F, T_B = 1.0, 2.0  # F takes 1 unit, B 2 units, as in the lecture
MAX_ACTIONS = 100_000


def _student():
    """The submitted ``minitorch.pipeline`` (imported here, inside observe functions, in the child)."""
    from minitorch import pipeline

    return pipeline


@contextlib.contextmanager
def _forbid(module_name: str, names: tuple, problem: str):
    """Make ``module_name``'s ``names`` raise while the student's code runs."""
    module = importlib.import_module(module_name)
    saved = {name: getattr(module, name) for name in names if hasattr(module, name)}

    def refuse(name):
        def refused(*args, **kwargs):
            raise Fail(f"Problem {problem} must build the result itself, not call {module_name}.{name}")

        return refused

    for name in saved:
        setattr(module, name, refuse(name))
    try:
        yield saved
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


# ---------------------------------------------------------------- 4.1 and 4.2: schedules


def _plain_schedule(schedule, call: str) -> list:
    """The student's schedule as plain lists ``[stage, kind, microbatch]`` (for the parent)."""
    if not isinstance(schedule, (list, tuple)):
        raise Fail(f"{call} must return a list with one list of actions per device, got {type(schedule).__name__}")
    rows, count = [], 0
    for device, row in enumerate(schedule):
        if not isinstance(row, (list, tuple)):
            raise Fail(f"{call}[{device}] must be a list of Action, got {type(row).__name__}")
        plain = []
        for step, action in enumerate(row):
            try:
                stage, kind, microbatch = action
                plain.append([int(stage), str(kind), int(microbatch)])
            except (TypeError, ValueError):
                raise Fail(f"{call}[{device}][{step}] must be Action(stage, kind, microbatch), got {action!r}") from None
        count += len(plain)
        if count > MAX_ACTIONS:
            raise Fail(f"{call} returned more than {MAX_ACTIONS} actions")
        rows.append(plain)
    return rows


def _one_f_one_b_cases(seed: int) -> list:
    rng = random.Random(seed)
    fixed = [(1, 1), (1, 4), (2, 1), (4, 2), (4, 4), (4, 8), (5, 3), (8, 32)]
    return fixed + [(rng.randint(1, 8), rng.randint(1, 24)) for _ in range(12)]


def _interleaved_cases(seed: int) -> list:
    rng = random.Random(seed + 1)
    fixed = [(1, 3, 2), (2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 8, 4), (3, 6, 3), (4, 8, 1), (8, 32, 4)]
    randoms = []
    for _ in range(8):
        k = rng.randint(1, 6)
        randoms.append((k, k * rng.randint(1, 4), rng.randint(2, 4)))
    return fixed + randoms


def observe_one_f_one_b(seed: int, params: dict) -> dict:
    """Call the student's ``one_f_one_b`` on a fixed and a seeded random set of (K, M)."""
    student = _student()
    results = []
    for num_stages, num_microbatches in _one_f_one_b_cases(seed):
        call = f"one_f_one_b({num_stages}, {num_microbatches})"
        results.append(_plain_schedule(student.one_f_one_b(num_stages, num_microbatches), call))
    return {"schedules": results}


def observe_one_f_one_b_peak(seed: int, params: dict) -> dict:
    """The same calls as ``observe_one_f_one_b``; judged on peak in-flight microbatches."""
    return observe_one_f_one_b(seed, params)


def observe_interleaved(seed: int, params: dict) -> dict:
    """Call the student's ``interleaved_one_f_one_b`` on valid (K, M, v)."""
    student = _student()
    results = []
    for num_stages, num_microbatches, num_chunks in _interleaved_cases(seed):
        call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
        schedule = student.interleaved_one_f_one_b(num_stages, num_microbatches, num_chunks)
        results.append(_plain_schedule(schedule, call))
    return {"schedules": results}


# (arguments, what is wrong with them): each must raise ValueError
BAD_ONE_F_ONE_B = [((0, 4), "K = 0"), ((4, 0), "M = 0"), ((-1, 3), "K < 0"), ((3, -2), "M < 0"),
                   ((2.0, 4), "K is not an int"), ((4, 3.0), "M is not an int")]
BAD_INTERLEAVED = [((4, 6, 2), "M = 6 is not a multiple of K = 4"), ((3, 4, 2), "M = 4 is not a multiple of K = 3"),
                   ((2, 3, 2), "M = 3 is not a multiple of K = 2"), ((8, 12, 4), "M = 12 is not a multiple of K = 8"),
                   ((4, 2, 2), "M = 2 is not a multiple of K = 4"), ((4, 8, 0), "v = 0"), ((0, 8, 2), "K = 0"),
                   ((4, 0, 2), "M = 0"), ((2, 4, -1), "v < 0"), ((4, 8, 2.0), "v is not an int")]


def _outcome(call) -> str:
    """``"returned"``, or the exception ``call()`` raised as ``"Type: message"``."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - reported, not raised: the judge names the call
        return f"{type(error).__name__}: {str(error)[:200]}"
    return "returned"


def observe_one_f_one_b_arguments(seed: int, params: dict) -> dict:
    """What the student's ``one_f_one_b`` does with bad arguments, and with valid ones."""
    student = _student()
    return {"bad": [_outcome(lambda: student.one_f_one_b(*args)) for args, _ in BAD_ONE_F_ONE_B],
            "valid": _outcome(lambda: student.one_f_one_b(4, 8))}


def judge_one_f_one_b_arguments(seed: int, params: dict, observation: dict) -> None:
    _expect_value_errors("one_f_one_b", BAD_ONE_F_ONE_B, observation["bad"])
    if observation["valid"] != "returned":
        raise Fail(f"one_f_one_b(4, 8) is valid but raised {observation['valid']}")


def observe_interleaved_arguments(seed: int, params: dict) -> dict:
    """What the student's ``interleaved_one_f_one_b`` does with bad arguments (M not a multiple of K, sizes < 1), and on one valid call."""
    student = _student()
    return {"bad": [_outcome(lambda: student.interleaved_one_f_one_b(*args)) for args, _ in BAD_INTERLEAVED],
            "valid": _outcome(lambda: student.interleaved_one_f_one_b(4, 8, 2))}


def _expect_value_errors(function: str, cases: list, outcomes) -> None:
    for (args, wrong), outcome in zip(cases, outcomes):
        if not outcome.startswith("ValueError"):
            got = "it returned" if outcome == "returned" else f"got {outcome}"
            raise Fail(f"{function}{args}: {wrong}, expected ValueError; {got}")


def _simulate(schedule: list, call: str, num_microbatches: int, num_chunks: int, num_stages: int, t_b: float = T_B):
    from minitorch import schedules

    if len(schedule) != num_stages:
        raise Fail(f"{call} returned {len(schedule)} device lists, expected one per device ({num_stages})")
    actions = [[schedules.Action(*a) for a in row] for row in schedule]
    try:
        return schedules.simulate(
            actions, T_F, t_b, num_microbatches=num_microbatches, num_chunks=num_chunks
        )
    except ValueError as error:
        raise Fail(f"{call} is not a valid schedule: {error}") from None


def _picture(timeline) -> str:
    from minitorch import schedules

    if timeline.makespan > 60 or timeline.num_devices > 6:
        return ""
    return "\nyour schedule (F = 1 unit, B = 2 units):\n" + schedules.render_ascii(timeline)


def judge_one_f_one_b(seed: int, params: dict, observation: dict) -> None:
    """Every schedule valid; its step as long as GPipe's, for B = 2F and for B = F."""
    cases = _one_f_one_b_cases(seed)
    _expect_count(observation, len(cases))
    for (num_stages, num_microbatches), schedule in zip(cases, observation["schedules"]):
        call = f"one_f_one_b({num_stages}, {num_microbatches})"
        for t_b in (T_B, T_F):
            timeline = _simulate(schedule, call, num_microbatches, 1, num_stages, t_b)
            expected = (num_microbatches + num_stages - 1) * (T_F + t_b)
            if not math.isclose(timeline.makespan, expected, rel_tol=1e-9):
                raise Fail(
                    f"{call}: one step takes {timeline.makespan:g} units with F = 1, B = {t_b:g}; GPipe's takes "
                    f"(M + K - 1)(F + B) = {expected:g} and 1F1B must not be slower{_picture(timeline)}"
                )


def judge_one_f_one_b_peak(seed: int, params: dict, observation: dict) -> None:
    """Device d holds at most (and, being 1F1B, exactly) min(K - d, M) microbatches."""
    cases = _one_f_one_b_cases(seed)
    _expect_count(observation, len(cases))
    for (num_stages, num_microbatches), schedule in zip(cases, observation["schedules"]):
        call = f"one_f_one_b({num_stages}, {num_microbatches})"
        timeline = _simulate(schedule, call, num_microbatches, 1, num_stages)
        expected = [min(num_stages - d, num_microbatches) for d in range(num_stages)]
        if timeline.peak_in_flight != expected:
            device = next(d for d, (a, b) in enumerate(zip(timeline.peak_in_flight, expected)) if a != b)
            raise Fail(
                f"{call}: device {device} holds up to {timeline.peak_in_flight[device]:g} microbatches' activations "
                f"at once; 1F1B holds min(K - d, M) = {expected[device]} (warm up with K - d - 1 forwards, then "
                f"alternate F and B). Peaks per device: got {timeline.peak_in_flight}, expected {expected}"
                f"{_picture(timeline)}"
            )


def judge_interleaved(seed: int, params: dict, observation: dict) -> None:
    """Valid; step = (M + (K-1)/v)(F + B); device d holds at most Megatron-LM's warm-up + 1 chunks (v >= 2; v = 1 is 1F1B)."""
    cases = _interleaved_cases(seed)
    _expect_count(observation, len(cases))
    for (num_stages, num_microbatches, num_chunks), schedule in zip(cases, observation["schedules"]):
        call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
        timeline = _simulate(schedule, call, num_microbatches, num_chunks, num_stages)
        expected = (num_microbatches + (num_stages - 1) / num_chunks) * (T_F + T_B)
        if not math.isclose(timeline.makespan, expected, rel_tol=1e-9):
            goal = ("with v = 1 it is plain 1F1B: (M + K - 1)(F + B)" if num_chunks == 1 else
                    "interleaving should give (M + (K-1)/v)(F + B), the 1F1B bubble divided by v")
            raise Fail(
                f"{call}: one step takes {timeline.makespan:g} units (F = 1, B = 2 per device, 1/v per chunk); "
                f"{goal} = {expected:g}"
            )
        for device, peak in enumerate(timeline.peak_in_flight):
            if num_chunks == 1:
                limit = min(num_stages - device, num_microbatches)
                how = (f"with v = 1 the schedule is plain 1F1B (one_f_one_b), which holds at most min(K - d, M) = "
                       f"{limit}: start backwards after K - d - 1 = {num_stages - device - 1} warm-up forwards "
                       "(2(K-d-1) + (v-1)K is the warm-up of v >= 2 only)")
            else:
                warmup = 2 * (num_stages - device - 1) + (num_chunks - 1) * num_stages
                limit = min(warmup + 1, num_microbatches * num_chunks) / num_chunks
                how = (f"the interleaved order of the docstring holds at most {limit:g}: start backwards after "
                       f"min(2(K-d-1) + (v-1)K, M v) = {min(warmup, num_microbatches * num_chunks)} warm-up forwards")
            if peak > limit + 1e-9:
                raise Fail(
                    f"{call}: device {device} holds up to {peak:g} microbatches' activations at once (counting "
                    f"1/v per chunk); {how}"
                )


def judge_interleaved_arguments(seed: int, params: dict, observation: dict) -> None:
    """ValueError for every M that is not a multiple of K and for sizes < 1; a valid call still returns."""
    _expect_value_errors("interleaved_one_f_one_b", BAD_INTERLEAVED, observation["bad"])
    if observation["valid"] != "returned":
        raise Fail(f"interleaved_one_f_one_b(4, 8, 2) is valid but raised {observation['valid']}")


def _expect_count(observation: dict, count: int) -> None:
    if len(observation.get("schedules", [])) != count:
        raise Fail(f"expected {count} schedules from the grader's calls, got {len(observation.get('schedules', []))}")


# ---------------------------------------------------------------- 4.3: recomputation

BATCH, WIDTH = 24, 32  # activations (24 x 32 float64 = 6144 bytes) differ in size from weights (32 x 32)


@dataclass(frozen=True)
class RecomputeCase:
    """``layers`` layers cut into ``segments`` (None: the default round(sqrt(n))); every
    ``function_every``-th layer (0: none) is a plain callable without parameters; ``input_grad``
    says whether the input requires grad (the docstring: "may or may not")."""

    layers: int
    segments: int | None
    dropout: float
    function_every: int = 0
    input_grad: bool = True

    def describe(self) -> str:
        words = [f"{self.layers} layers, segments={self.segments}, dropout p={self.dropout}"]
        if self.function_every:
            words.append(f"every {self.function_every}. layer a plain function (no parameters)")
        if not self.input_grad:
            words.append("an input that does not require grad")
        return ", ".join(words)


RECOMPUTE_CASES = [
    RecomputeCase(16, None, 0.25), RecomputeCase(12, 3, 0.0), RecomputeCase(9, 2, 0.5), RecomputeCase(6, 6, 0.3),
    RecomputeCase(5, 1, 0.2),
    RecomputeCase(7, None, 0.2),  # round(sqrt(7)) = 3 segments, int(sqrt(7)) = 2
    RecomputeCase(8, 3, 0.2, function_every=2, input_grad=False),
]


class PlainFunction:
    """``sin(x)``: a layer that is a plain callable, not an ``nn.Module`` (no parameters).
    ``on_call`` (set by the grader while it counts) is called on every call."""

    def __init__(self):
        self.on_call = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_call is not None:
            self.on_call()
        return torch.sin(x)


class GraderLayer(nn.Module):
    """``dropout(tanh(x @ weight + bias))``: a layer the grader builds, hooks and counts."""

    def __init__(self, generator: torch.Generator, dropout: float):
        super().__init__()
        scale = 1 / math.sqrt(WIDTH)
        self.weight = nn.Parameter(torch.randn(WIDTH, WIDTH, generator=generator, dtype=torch.float64) * scale)
        self.bias = nn.Parameter(torch.randn(WIDTH, generator=generator, dtype=torch.float64) * scale)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ self.weight + self.bias)
        return F.dropout(h, self.dropout, training=True) if self.dropout else h


def build_case(seed: int, index: int):
    """The layers, input and RNG seed of recomputation case ``index``, from ``seed``."""
    case = RECOMPUTE_CASES[index]
    generator = torch.Generator().manual_seed(seed * 100 + index)
    layers = [PlainFunction() if case.function_every and i % case.function_every == case.function_every - 1
              else GraderLayer(generator, case.dropout) for i in range(case.layers)]
    x = torch.randn(BATCH, WIDTH, generator=generator, dtype=torch.float64).requires_grad_(case.input_grad)
    return layers, x, seed * 100 + index + 1


def _parameters(layers) -> list:
    return [p for layer in layers if isinstance(layer, nn.Module) for p in layer.parameters()]


def plain_run(layers, x, rng_seed: int) -> dict:
    """The reference: the layers one after the other, loss = weighted sum of the output."""
    torch.manual_seed(rng_seed)
    h = x
    for layer in layers:
        h = layer(h)
    return _finish(layers, x, h)


def _finish(layers, x, output) -> dict:
    after_forward = torch.get_rng_state()
    weights = torch.linspace(-1, 1, output.numel(), dtype=output.dtype).reshape(output.shape)
    (output * weights).sum().backward()
    return {
        "output": output.detach().clone(),
        "grads": [_clone(x.grad)] + [_clone(p.grad) for p in _parameters(layers)],
        "rng_after_forward": after_forward,
        "rng_after_backward": torch.get_rng_state(),
    }


def _clone(tensor):
    return None if tensor is None else tensor.detach().clone()


def _checkpoint_call(student, layers, x, segments):
    with _forbid_torch_checkpoint():
        if segments is None:
            return student.checkpoint_sequential(layers, x)
        return student.checkpoint_sequential(layers, x, segments)


@contextlib.contextmanager
def _forbid_torch_checkpoint():
    import torch.utils.checkpoint as torch_checkpoint

    names = ("checkpoint", "checkpoint_sequential", "_checkpoint_without_reentrant_generator")
    with _forbid("torch.utils.checkpoint", names, "4.3"):
        original = torch_checkpoint.CheckpointFunction.forward

        def refused(*args, **kwargs):
            raise Fail("Problem 4.3 asks for hand-written recomputation; torch.utils.checkpoint was used")

        torch_checkpoint.CheckpointFunction.forward = staticmethod(refused)
        try:
            yield
        finally:
            torch_checkpoint.CheckpointFunction.forward = original


def observe_recompute_grads(seed: int, params: dict) -> dict:
    """Outputs, gradients and RNG states of the plain run and of the student's checkpointed run."""
    student = _student()
    cases = []
    for index, case in enumerate(RECOMPUTE_CASES):
        layers, x, rng_seed = build_case(seed, index)
        plain = plain_run(layers, x, rng_seed)
        for parameter in _parameters(layers):
            parameter.grad = None
        x.grad = None
        torch.manual_seed(rng_seed)
        output = _checkpoint_call(student, layers, x, case.segments)
        if not isinstance(output, torch.Tensor):
            raise Fail(f"checkpoint_sequential must return a tensor, got {type(output).__name__}")
        cases.append({"plain": plain, "student": _finish(layers, x, output)})
    return {"cases": cases}


def judge_recompute_grads(seed: int, params: dict, observation: dict) -> None:
    """Bit-identical output and gradients, and the global RNG left as the plain run leaves it."""
    cases = observation["cases"]
    if len(cases) != len(RECOMPUTE_CASES):
        raise Fail(f"expected {len(RECOMPUTE_CASES)} cases, got {len(cases)}")
    for index, case in enumerate(cases):
        dropout = RECOMPUTE_CASES[index].dropout
        layers, x, rng_seed = build_case(seed, index)
        reference = plain_run(layers, x, rng_seed)
        what = RECOMPUTE_CASES[index].describe()
        # The child's plain run is the bit-level reference (same process, same kernels); it
        # must itself agree with the grader's own run, or the child was tampered with.
        for name, ours, theirs in _pairs(reference, case["plain"]):
            same = close(theirs, ours, rtol=0.0, atol=0.0) if name.startswith("RNG") else close(theirs, ours, rtol=1e-10, atol=1e-12)
            if not same:
                raise Fail(f"{what}: the plain run inside your process differs from the grader's ({name}); "
                           "does your module change torch's global state?")
        for name, plain, mine in _pairs(case["plain"], case["student"]):
            if not close(mine, plain, rtol=0.0, atol=0.0):
                hint = " (is the RNG state replayed in backward?)" if dropout and name.startswith("grad") else ""
                raise Fail(f"{what}: {name} is not bit-identical to the plain run: it {difference(mine, plain)}{hint}")


def _pairs(first: dict, second: dict):
    names = ["output", "rng_after_forward", "rng_after_backward"]
    for name in names:
        yield (name if name == "output" else f"RNG state {name[4:].replace('_', ' ')}"), first[name], second[name]
    labels = ["grad of x"] + [f"grad of parameter {i}" for i in range(len(first["grads"]) - 1)]
    for label, a, b in zip(labels, first["grads"], second["grads"]):
        if a is not None:
            yield label, a, b


class _StorageTracker(TorchDispatchMode):
    """Remembers (weakly) every activation-sized storage created while active."""

    def __init__(self):
        super().__init__()
        self.refs = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                storage = tensor.untyped_storage()
                if storage.nbytes() >= BATCH * WIDTH * 8:
                    self.refs[storage.data_ptr()] = StorageWeakRef(storage)
        return out

    def alive(self, exclude) -> int:
        """How many remembered storages still exist, other than those of ``exclude``."""
        excluded = {t.untyped_storage().data_ptr() for t in exclude if t is not None}
        return sum(1 for ptr, ref in self.refs.items() if not ref.expired() and ptr not in excluded)


def _measure(run, layers, x) -> dict:
    """Stored activations after forward, peak during backward, layer calls per phase, and the
    order in which backward ran the layers (it shows the segments: last segment first)."""
    tracker = _StorageTracker()
    phase = ["forward"]
    calls = {"forward": [0] * len(layers), "backward": [0] * len(layers)}
    order: list[int] = []
    peak = [0]

    def exclude():
        parameters = _parameters(layers)
        return parameters + [p.grad for p in parameters] + [x, x.grad]

    def count(index):
        calls[phase[0]][index] += 1
        if phase[0] == "backward":
            order.append(index)
            peak[0] = max(peak[0], tracker.alive(exclude()))

    handles = []
    for index, layer in enumerate(layers):
        if isinstance(layer, nn.Module):
            handles.append(layer.register_forward_hook(lambda module, inputs, output, index=index: count(index)))
        else:
            layer.on_call = lambda index=index: count(index)
    try:
        with tracker:
            output = run()
            if not isinstance(output, torch.Tensor):
                raise Fail(f"checkpoint_sequential must return a tensor, got {type(output).__name__}")
            stored = tracker.alive(exclude() + [output])
            phase[0] = "backward"
            if output.requires_grad:
                output.sum().backward()
    finally:
        for handle in handles:
            handle.remove()
        for layer in layers:
            if not isinstance(layer, nn.Module):
                layer.on_call = None
    return {"stored_after_forward": stored, "peak_during_backward": peak[0], "calls": calls, "order": order}


# (layers, x, segments, what is wrong): each call must raise ValueError
BAD_CHECKPOINT = [
    ("[]", "x", None, "no layers"),
    ("[tanh]", "x", 0, "segments = 0"),
    ("[tanh] * 3", "x", 4, "more segments than layers"),
    ("[tanh] * 3", "x", -1, "segments < 0"),
    ("[tanh]", "x", 1.5, "segments is not an int"),
    ("[3]", "x", None, "a layer that is not callable"),
    ("[tanh]", "[[1.0]]", None, "x is not a tensor"),
]


def observe_recompute_arguments(seed: int, params: dict) -> dict:
    """What the student's ``checkpoint_sequential`` does with bad arguments, and with valid ones."""
    student = _student()
    tanh = nn.Tanh()  # a module: plain-function layers are 4.3-bit-identical's, not this criterion's
    values = {"[]": [], "[tanh]": [tanh], "[tanh] * 3": [tanh] * 3, "[3]": [3],
              "x": torch.ones(2, 3), "[[1.0]]": [[1.0]]}
    bad = [_outcome(lambda: _checkpoint_call(student, values[layers], values[x], segments))
           for layers, x, segments, _ in BAD_CHECKPOINT]
    valid = _outcome(lambda: _checkpoint_call(student, [tanh] * 3, torch.ones(2, 3), 3))
    return {"bad": bad, "valid": valid}


def judge_recompute_arguments(seed: int, params: dict, observation: dict) -> None:
    for (layers, x, segments, wrong), outcome in zip(BAD_CHECKPOINT, observation["bad"]):
        if not outcome.startswith("ValueError"):
            got = "it returned" if outcome == "returned" else f"got {outcome}"
            raise Fail(f"checkpoint_sequential({layers}, {x}, segments={segments}): {wrong}, expected ValueError; {got}")
    if observation["valid"] != "returned":
        raise Fail(f"checkpoint_sequential([tanh] * 3, x, segments=3) is valid but raised {observation['valid']}")


MEMORY_CASES = [0, 1, 2]  # indices into RECOMPUTE_CASES with 2 <= segments < layers


def observe_recompute_memory(seed: int, params: dict) -> dict:
    """Activation storages alive after the checkpointed forward and during its backward."""
    student = _student()
    results = []
    for index in MEMORY_CASES:
        layers, x, rng_seed = build_case(seed, index)
        torch.manual_seed(rng_seed)
        segments = RECOMPUTE_CASES[index].segments
        results.append(_measure(lambda: _checkpoint_call(student, layers, x, segments), layers, x))
    return {"cases": results}


def plain_stored(seed: int, index: int) -> int:
    """Activation tensors the plain (no recomputation) run keeps after its forward."""
    layers, x, rng_seed = build_case(seed, index)
    torch.manual_seed(rng_seed)
    return _measure(lambda: _plain_forward(layers, x), layers, x)["stored_after_forward"]


def _plain_forward(layers, x):
    h = x
    for layer in layers:
        h = layer(h)
    return h


def _segments(index: int) -> int:
    case = RECOMPUTE_CASES[index]
    return round(math.sqrt(case.layers)) if case.segments is None else case.segments


def judge_recompute_memory(seed: int, params: dict, observation: dict) -> None:
    """After forward only the segment inputs are alive; backward holds one segment at a time."""
    if len(observation["cases"]) != len(MEMORY_CASES):
        raise Fail(f"expected {len(MEMORY_CASES)} cases, got {len(observation['cases'])}")
    for index, case in zip(MEMORY_CASES, observation["cases"]):
        num_layers = RECOMPUTE_CASES[index].layers
        segments = _segments(index)
        longest = -(-num_layers // segments)
        plain, mine = plain_stored(seed, index), case["stored_after_forward"]
        per_layer = max(1, -(-plain // num_layers))  # activation tensors one layer stores
        what = f"{num_layers} layers in {segments} segments"
        if mine > segments:
            raise Fail(
                f"{what}: after the forward, {mine} activation tensors are still stored besides the input and "
                f"the output (the plain run stores {plain}); keep only the inputs of segments 1..{segments - 1} "
                "and recompute the rest in backward"
            )
        limit = segments + per_layer * longest + 2
        peak = case["peak_during_backward"]
        if peak > limit:
            raise Fail(
                f"{what}: during backward up to {peak} activation tensors are alive at once; recomputing one "
                f"segment at a time needs at most about {limit} (segment inputs + one segment's activations)"
            )


# The cases whose layers are all modules: plain-function layers are 4.3-bit-identical's concern
COUNT_CASES = [index for index, case in enumerate(RECOMPUTE_CASES) if not case.function_every]


def observe_recompute_count(seed: int, params: dict) -> dict:
    """How often each grader layer ran during the checkpointed forward and during backward, and in which order backward ran them."""
    student = _student()
    results = []
    for index in COUNT_CASES:
        case = RECOMPUTE_CASES[index]
        layers, x, rng_seed = build_case(seed, index)
        torch.manual_seed(rng_seed)
        measured = _measure(lambda: _checkpoint_call(student, layers, x, case.segments), layers, x)
        results.append({"calls": measured["calls"], "order": measured["order"]})
    return {"cases": results}


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


def judge_recompute_count(seed: int, params: dict, observation: dict) -> None:
    """Every layer runs once in forward and exactly once more (recomputed) in backward, segment
    by segment as segment_bounds cuts them (the default: round(sqrt(n)) segments)."""
    if len(observation["cases"]) != len(COUNT_CASES):
        raise Fail(f"expected {len(COUNT_CASES)} cases, got {len(observation['cases'])}")
    for index, case in zip(COUNT_CASES, observation["cases"]):
        spec = RECOMPUTE_CASES[index]
        segments = _segments(index)
        what = f"{spec.describe()}: {spec.layers} layers in {segments} segments"
        for phase in ("forward", "backward"):
            counts = case["calls"][phase]
            if len(counts) != spec.layers or any(count != 1 for count in counts):
                layer = next((i for i, c in enumerate(counts) if c != 1), 0)
                raise Fail(
                    f"{what}: layer {layer} ran {counts[layer]} times during the {phase}, expected once "
                    f"(calls per layer: {counts}); each layer runs once in forward and is recomputed "
                    "exactly once in backward"
                )
        expected = [stop - start for start, stop in _bounds(spec.layers, segments)]
        got = _segment_sizes(case["order"])
        if got != expected:
            default = (f"; segments=None means round(sqrt({spec.layers})) = {segments}, not int(sqrt(...))"
                       if spec.segments is None and len(got) != segments else "")
            raise Fail(
                f"{what}: backward recomputed segments of {got} layers (from the first layer on); expected "
                f"{expected}, the pieces of segment_bounds({spec.layers}, {segments}){default}"
            )


def _bounds(num_layers: int, segments: int) -> list[tuple[int, int]]:
    """``segment_bounds`` of the docstring, written out here (the grader never uses the answer key)."""
    size, extra = divmod(num_layers, segments)
    bounds, start = [], 0
    for index in range(segments):
        stop = start + size + (index < extra)
        bounds.append((start, stop))
        start = stop
    return bounds
