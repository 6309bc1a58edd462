"""Hidden checks for Problem 4: 1F1B (4.1), interleaved 1F1B (4.2), recomputation (4.3),
training with your own schedule (4.4).

Schedules are judged in the parent by simulating them with the grader's own copy of
``minitorch.schedules``, with instant transfers and with a delay on every transfer, and
comparing with closed forms and with the grader's own 1F1B and Megatron-LM orders (written
here, never the answer key). Recomputation is judged against plain PyTorch runs of layers
the grader builds itself; stored activations are counted by the grader (weak references to
every tensor its own layers create, plus the young tensors the garbage collector sees) and
recomputations by forward hooks on its own layers, so nothing the submission reports about
itself is trusted. 4.4 runs the student's ``train_step`` on the grader's stages, which
record what ran where and how many activations each device held; when the student's own
schedule is not valid (4.1/4.2 charge that), the step runs with the grader's schedule builders
bound in place of the student's, so that it is judged on its own code only.

Every case a check draws is named in its failure message; ``--seed`` repeats the draw.
"""
import contextlib
import gc
import importlib
import math
import random
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from grader.checks import Fail, expect_cases, student_tensor
from grader.checks.compare import close, difference

# The first backward of a process imports torch's symbolic-shape machinery (sympy: 1-3 s). The
# harness preloads it in the forkserver, so every child that runs a backward has it already; the
# grader's own process imports it only if a judge runs a backward.
FORKSERVER_PRELOAD = ("torch.fx.experimental.symbolic_shapes",)

T_F, T_B = 1.0, 2.0  # F takes 1 unit, B 2 units, as in the lecture
T_COMM = 0.5  # the transfer delay the schedules are also simulated with
MAX_ACTIONS = 100_000


def _student():
    """The submitted ``minitorch.pipeline`` (imported here, inside observe functions, in the child)."""
    from minitorch import pipeline

    return pipeline


@contextlib.contextmanager
def _one_thread():
    """Run torch on one thread: these layers are tiny, and on a busy machine a pool of threads
    makes each of their matrix products wait for cores (10 times slower, measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _single_threaded(function):
    """``function`` run inside :func:`_one_thread`."""
    def run(*args, **kwargs):
        with _one_thread():
            return function(*args, **kwargs)

    run.__name__, run.__doc__ = function.__name__, function.__doc__
    return run


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
    """``[K, M]``: the edges (K = 1, M = 1, M < K, M = K) and a seeded draw."""
    rng = random.Random(seed)
    fixed = [[1, 1], [1, 4], [2, 1], [4, 2], [4, 4], [4, 8], [5, 3], [8, 32]]
    return fixed + [[rng.randint(1, 8), rng.randint(1, 24)] for _ in range(12)]


def _interleaved_cases(seed: int) -> list:
    """``[K, M, v]`` with M a multiple of K: the edges (K = 1, M = K, v = 1) and a seeded draw."""
    rng = random.Random(seed + 1)
    fixed = [[1, 3, 2], [2, 2, 2], [2, 4, 2], [4, 4, 2], [4, 8, 2], [4, 8, 4], [3, 6, 3], [4, 8, 1], [8, 32, 4]]
    randoms = []
    for _ in range(8):
        k = rng.randint(1, 6)
        randoms.append([k, k * rng.randint(1, 4), rng.randint(2, 4)])
    return fixed + randoms


def _observe_schedules(function: str, cases: list) -> dict:
    student = _student()
    results = []
    for case in cases:
        call = f"{function}({', '.join(map(str, case))})"
        results.append({"case": list(case), "schedule": _plain_schedule(getattr(student, function)(*case), call)})
    return {"schedules": results}


def observe_one_f_one_b(seed: int, params: dict) -> dict:
    """Call the student's ``one_f_one_b`` on a fixed and a seeded random set of (K, M)."""
    return _observe_schedules("one_f_one_b", _one_f_one_b_cases(seed))


def observe_one_f_one_b_peak(seed: int, params: dict) -> dict:
    """The same calls as ``observe_one_f_one_b``; judged on peak in-flight microbatches."""
    return observe_one_f_one_b(seed, params)


def observe_interleaved(seed: int, params: dict) -> dict:
    """Call the student's ``interleaved_one_f_one_b`` on valid (K, M, v), with the grader's
    ``one_f_one_b`` bound in its module (v = 1 may delegate to it: 4.1's code is 4.1's criteria')."""
    with _grader_schedules(_student(), names=("one_f_one_b",)):
        return _observe_schedules("interleaved_one_f_one_b", _interleaved_cases(seed))


def reference_one_f_one_b(num_stages: int, num_microbatches: int) -> list:
    """The lecture's 1F1B order, the grader's own: K - d - 1 warm-up forwards, then one F one B."""
    rows = []
    for device in range(num_stages):
        warmup = min(num_stages - device - 1, num_microbatches)
        row = [(device, "F", m) for m in range(warmup)]
        for m in range(num_microbatches - warmup):
            row += [(device, "F", warmup + m), (device, "B", m)]
        rows.append(row + [(device, "B", m) for m in range(num_microbatches - warmup, num_microbatches)])
    return rows


def reference_interleaved(num_stages: int, num_microbatches: int, num_chunks: int) -> list:
    """Megatron-LM's interleaved order, the grader's own (``v = 1``: the 1F1B order)."""
    if num_chunks == 1:
        return reference_one_f_one_b(num_stages, num_microbatches)
    K, v, total = num_stages, num_chunks, num_microbatches * num_chunks

    def kth(k: int, device: int, kind: str) -> tuple:
        group, rest = divmod(k, K * v)
        chunk = rest // K if kind == "F" else v - 1 - rest // K
        return (chunk * K + device, kind, group * K + rest % K)

    rows = []
    for device in range(K):
        warmup = min(2 * (K - device - 1) + (v - 1) * K, total)
        row = [kth(k, device, "F") for k in range(warmup)]
        for k in range(total - warmup):
            row += [kth(warmup + k, device, "F"), kth(k, device, "B")]
        rows.append(row + [kth(k, device, "B") for k in range(total - warmup, total)])
    return rows


def _simulate(schedule: list, call: str, num_microbatches: int, num_chunks: int, num_stages: int,
              t_b: float = T_B, t_comm: float = 0.0):
    from minitorch import schedules

    if len(schedule) != num_stages:
        raise Fail(f"{call} returned {len(schedule)} device lists, expected one per device ({num_stages})")
    actions = [[schedules.Action(*a) for a in row] for row in schedule]
    try:
        return schedules.simulate(
            actions, T_F, t_b, t_comm=t_comm, num_microbatches=num_microbatches, num_chunks=num_chunks
        )
    except ValueError as error:
        raise Fail(f"{call} is not a valid schedule: {error}") from None


def _picture(timeline) -> str:
    from minitorch import schedules

    if timeline.makespan > 60 or timeline.num_devices > 6:
        return ""
    return "\nyour schedule, simulated:\n" + schedules.render_ascii(timeline, width=200)


def _no_slower_with_transfers(schedule, reference, call: str, num_microbatches: int, num_chunks: int,
                              num_stages: int, whose: str) -> None:
    """With a delay on every transfer, the schedule is no slower than the grader's ``reference``
    order (an order that only ties with instant transfers shows here)."""
    timeline = _simulate(schedule, call, num_microbatches, num_chunks, num_stages, T_B, T_COMM)
    ours = _simulate(reference, "the grader's reference", num_microbatches, num_chunks, num_stages, T_B, T_COMM)
    if timeline.makespan > ours.makespan + 1e-9:
        raise Fail(
            f"{call}: with a transfer delay of {T_COMM:g} units between devices (F = 1, B = 2), one step takes "
            f"{timeline.makespan:g} units; {whose} takes {ours.makespan:g}. With instant transfers the two tie: "
            f"your order leaves no room for the transfers{_picture(timeline)}"
        )


def judge_one_f_one_b(seed: int, params: dict, observation: dict) -> None:
    """Every schedule valid; its step as long as GPipe's for B = 2F and B = F; with transfer
    delays no slower than the lecture's 1F1B order."""
    cases = _one_f_one_b_cases(seed)
    entries = expect_cases(observation["schedules"], cases, "one_f_one_b")
    for (num_stages, num_microbatches), entry in zip(cases, entries):
        call, schedule = f"one_f_one_b({num_stages}, {num_microbatches})", entry["schedule"]
        for t_b in (T_B, T_F):
            timeline = _simulate(schedule, call, num_microbatches, 1, num_stages, t_b)
            expected = (num_microbatches + num_stages - 1) * (T_F + t_b)
            if not math.isclose(timeline.makespan, expected, rel_tol=1e-9):
                raise Fail(
                    f"{call}: one step takes {timeline.makespan:g} units with F = 1, B = {t_b:g} and instant "
                    f"transfers; GPipe's takes (M + K - 1)(F + B) = {expected:g} and 1F1B must not be slower"
                    f"{_picture(timeline)}"
                )
        _no_slower_with_transfers(schedule, reference_one_f_one_b(num_stages, num_microbatches), call,
                                  num_microbatches, 1, num_stages, "the lecture's 1F1B order")


def judge_one_f_one_b_peak(seed: int, params: dict, observation: dict) -> None:
    """Device d holds at most (and, being 1F1B, exactly) min(K - d, M) microbatches."""
    cases = _one_f_one_b_cases(seed)
    entries = expect_cases(observation["schedules"], cases, "one_f_one_b")
    for (num_stages, num_microbatches), entry in zip(cases, entries):
        call = f"one_f_one_b({num_stages}, {num_microbatches})"
        timeline = _simulate(entry["schedule"], call, num_microbatches, 1, num_stages)
        expected = [min(num_stages - d, num_microbatches) for d in range(num_stages)]
        if timeline.peak_in_flight != expected:
            device = next(d for d, (a, b) in enumerate(zip(timeline.peak_in_flight, expected)) if a != b)
            raise Fail(
                f"{call}: device {device} holds up to {timeline.peak_in_flight[device]:g} microbatches' activations "
                f"at once; 1F1B holds min(K - d, M) = {expected[device]}. Peaks per device: got "
                f"{timeline.peak_in_flight}, expected {expected}{_picture(timeline)}"
            )


def judge_interleaved(seed: int, params: dict, observation: dict) -> None:
    """Valid; step = (M + (K-1)/v)(F + B); no slower than Megatron-LM's order with transfer
    delays; device d holds no more than Megatron-LM's order holds (v = 1: plain 1F1B)."""
    cases = _interleaved_cases(seed)
    entries = expect_cases(observation["schedules"], cases, "interleaved_one_f_one_b")
    for (num_stages, num_microbatches, num_chunks), entry in zip(cases, entries):
        call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
        schedule = entry["schedule"]
        timeline = _simulate(schedule, call, num_microbatches, num_chunks, num_stages)
        expected = (num_microbatches + (num_stages - 1) / num_chunks) * (T_F + T_B)
        if not math.isclose(timeline.makespan, expected, rel_tol=1e-9):
            goal = ("with v = 1 it is plain 1F1B: (M + K - 1)(F + B)" if num_chunks == 1 else
                    "interleaving should give (M + (K-1)/v)(F + B), the 1F1B bubble divided by v")
            raise Fail(
                f"{call}: one step takes {timeline.makespan:g} units (F = 1, B = 2 per device, 1/v per chunk, "
                f"instant transfers); {goal} = {expected:g}{_picture(timeline)}"
            )
        reference = reference_interleaved(num_stages, num_microbatches, num_chunks)
        whose = "the 1F1B order" if num_chunks == 1 else "Megatron-LM's order"
        _no_slower_with_transfers(schedule, reference, call, num_microbatches, num_chunks, num_stages, whose)
        limits = _simulate(reference, "the grader's reference", num_microbatches, num_chunks, num_stages).peak_in_flight
        for device, (peak, limit) in enumerate(zip(timeline.peak_in_flight, limits)):
            if peak > limit + 1e-9:
                raise Fail(
                    f"{call}: device {device} holds up to {peak:g} microbatches' activations at once (counting "
                    f"1/v per chunk); {whose} holds at most {limit:g} there{_picture(timeline)}"
                )


# Arguments: (label, arguments, what is wrong with them); each must raise ValueError at the call
BAD_ONE_F_ONE_B = [
    ("(0, 4)", (0, 4), "K = 0"), ("(4, 0)", (4, 0), "M = 0"), ("(-1, 3)", (-1, 3), "K < 0"),
    ("(3, -2)", (3, -2), "M < 0"), ("(2.0, 4)", (2.0, 4), "K is a float"), ("(4, 3.0)", (4, 3.0), "M is a float"),
    ("(True, 4)", (True, 4), "K is a bool"), ("(4, True)", (4, True), "M is a bool"),
    ("('4', 8)", ("4", 8), "K is a string"), ("(4, None)", (4, None), "M is None"),
]
BAD_INTERLEAVED = [
    ("(4, 6, 2)", (4, 6, 2), "M = 6 is not a multiple of K = 4"),
    ("(3, 4, 2)", (3, 4, 2), "M = 4 is not a multiple of K = 3"),
    ("(8, 12, 4)", (8, 12, 4), "M = 12 is not a multiple of K = 8"),
    ("(4, 2, 2)", (4, 2, 2), "M = 2 is not a multiple of K = 4"),
    ("(4, 6, 1)", (4, 6, 1), "M = 6 is not a multiple of K = 4 (the rule holds for v = 1 too)"),
    ("(3, 5, 1)", (3, 5, 1), "M = 5 is not a multiple of K = 3 (the rule holds for v = 1 too)"),
    ("(4, 8, 0)", (4, 8, 0), "v = 0"), ("(0, 8, 2)", (0, 8, 2), "K = 0"), ("(4, 0, 2)", (4, 0, 2), "M = 0"),
    ("(2, 4, -1)", (2, 4, -1), "v < 0"), ("(4, 8, 2.0)", (4, 8, 2.0), "v is a float"),
    ("(4, 8, True)", (4, 8, True), "v is a bool"), ("(True, 2, 2)", (True, 2, 2), "K is a bool"),
    ("(4, '8', 2)", (4, "8", 2), "M is a string"), ("(4, 8, None)", (4, 8, None), "v is None"),
]
VALID_ONE_F_ONE_B = [("(4, 8)", (4, 8)), ("(3, 5)", (3, 5))]
VALID_INTERLEAVED = [("(4, 8, 2)", (4, 8, 2)), ("(3, 6, 1)", (3, 6, 1))]


def _outcome(call) -> str:
    """``"returned"``, or the exception ``call()`` raised as ``"Type: message"``."""
    try:
        result = call()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - reported, not raised: the judge names the call
        return f"{type(error).__name__}: {str(error)[:200]}"
    if isinstance(result, (list, tuple)):
        list(result)  # a lazy result would raise here, after the call: still "returned"
    return "returned"


def _observe_arguments(function: str, bad: list, valid: list) -> dict:
    call = getattr(_student(), function)
    return {"bad": [{"case": label, "outcome": _outcome(lambda args=args: call(*args))} for label, args, _ in bad],
            "valid": [{"case": label, "outcome": _outcome(lambda args=args: call(*args))} for label, args in valid]}


def observe_one_f_one_b_arguments(seed: int, params: dict) -> dict:
    """What the student's ``one_f_one_b`` does with bad arguments, and with valid ones."""
    return _observe_arguments("one_f_one_b", BAD_ONE_F_ONE_B, VALID_ONE_F_ONE_B)


def observe_interleaved_arguments(seed: int, params: dict) -> dict:
    """What the student's ``interleaved_one_f_one_b`` does with bad arguments (M not a multiple
    of K for every v, sizes < 1, not ints), and with valid ones; the grader's ``one_f_one_b``
    bound in its module, as for 4.2-interleaved."""
    with _grader_schedules(_student(), names=("one_f_one_b",)):
        return _observe_arguments("interleaved_one_f_one_b", BAD_INTERLEAVED, VALID_INTERLEAVED)


def _judge_arguments(function: str, bad: list, valid: list, observation: dict) -> None:
    bad_entries = expect_cases(observation["bad"], [label for label, _, _ in bad], function)
    for (label, _, wrong), entry in zip(bad, bad_entries):
        outcome = str(entry["outcome"])
        if not outcome.startswith("ValueError"):
            got = "it returned" if outcome == "returned" else f"got {outcome}"
            raise Fail(f"{function}{label}: {wrong}, expected ValueError at the call; {got}")
    for (label, _), entry in zip(valid, expect_cases(observation["valid"], [label for label, _ in valid], function)):
        if entry["outcome"] != "returned":
            raise Fail(f"{function}{label} is valid but raised {entry['outcome']}")


def judge_one_f_one_b_arguments(seed: int, params: dict, observation: dict) -> None:
    """ValueError for sizes < 1 and for sizes that are not ints (bools, floats, strings, None)."""
    _judge_arguments("one_f_one_b", BAD_ONE_F_ONE_B, VALID_ONE_F_ONE_B, observation)


def judge_interleaved_arguments(seed: int, params: dict, observation: dict) -> None:
    """ValueError for every M that is not a multiple of K (v = 1 included), for sizes < 1 and
    for sizes that are not ints; valid calls still return."""
    _judge_arguments("interleaved_one_f_one_b", BAD_INTERLEAVED, VALID_INTERLEAVED, observation)


# ---------------------------------------------------------------- 4.3: recomputation

BATCH, WIDTH = 24, 32  # activations (24 x 32 float64 = 6144 bytes) differ in size from weights (32 x 32)
CONTAINERS = {"list": list, "tuple": tuple, "ModuleList": nn.ModuleList, "Sequential": nn.Sequential}


@dataclass(frozen=True)
class RecomputeCase:
    """``layers`` layers cut into ``segments`` (None: the default round(sqrt(n))).

    ``kind``: "grader" (the grader's layer: linear, tanh, dropout), "frozen" (every other
    one with frozen parameters), "no-params" (modules without parameters), "functions"
    (every ``function_every``-th layer a plain callable). ``input_grad``: whether the input
    requires grad. ``shape``: the input's leading dims (the last is WIDTH). ``dtype``,
    ``transposed`` (a non-contiguous input), ``container`` (how the layers are passed) and
    ``warm_up`` (the same layers were already used once with another input shape and
    segment count) are the other things the contract allows."""

    layers: int
    segments: int | None
    dropout: float
    kind: str = "grader"
    function_every: int = 0
    input_grad: bool = True
    shape: tuple = (BATCH,)
    dtype: str = "float64"
    transposed: bool = False
    container: str = "list"
    warm_up: bool = False

    def describe(self) -> str:
        words = [f"{self.layers} layers, segments={self.segments}, dropout p={self.dropout}"]
        words += {"frozen": ["every other layer frozen"], "no-params": ["modules without parameters"],
                  "functions": [f"every {self.function_every}. layer a plain function"]}.get(self.kind, [])
        if not self.input_grad:
            words.append("an input that does not require grad")
        if self.shape != (BATCH,) or self.dtype != "float64" or self.transposed:
            layout = "non-contiguous " if self.transposed else ""
            words.append(f"a {layout}{self.dtype} input of shape {(*self.shape, WIDTH)}")
        if self.container != "list":
            words.append(f"layers passed as a {self.container}")
        if self.warm_up:
            words.append("the layers used once before with another input shape and segment count")
        return ", ".join(words)


RECOMPUTE_CASES = [
    RecomputeCase(16, None, 0.25), RecomputeCase(12, 3, 0.0), RecomputeCase(9, 2, 0.5), RecomputeCase(6, 6, 0.3),
    RecomputeCase(5, 1, 0.2),
    RecomputeCase(7, None, 0.2),  # round(sqrt(7)) = 3 segments; int(sqrt(7)) = 2
    RecomputeCase(10, None, 0.2),  # round(sqrt(10)) = 3 segments; ceil(sqrt(10)) = 4
    RecomputeCase(8, 3, 0.2, kind="functions", function_every=2, input_grad=False),
    RecomputeCase(6, 2, 0.2, kind="frozen", container="tuple"),
    RecomputeCase(4, 2, 0.3, kind="no-params", input_grad=True, container="ModuleList"),
    RecomputeCase(5, 2, 0.2, shape=(), dtype="float32", container="Sequential"),
    RecomputeCase(4, None, 0.2, shape=(2, 3), transposed=True, warm_up=True),
    RecomputeCase(4, 2, 0.0, input_grad=False, transposed=True),
]


def recompute_cases(seed: int) -> list:
    """The fixed cases, then three drawn from everything the contract allows (seeded)."""
    rng = random.Random(seed + 2)
    drawn = []
    for _ in range(3):
        layers = rng.randint(1, 12)
        kind = rng.choice(["grader", "frozen", "no-params", "functions"])
        drawn.append(RecomputeCase(
            layers, rng.choice([None, rng.randint(1, layers)]), rng.choice([0.0, 0.1, 0.5]), kind=kind,
            function_every=2 if kind == "functions" else 0, input_grad=rng.random() < 0.7,
            shape=rng.choice([(), (1,), (BATCH,), (2, 3)]), dtype=rng.choice(["float64", "float32"]),
            transposed=rng.random() < 0.3, warm_up=rng.random() < 0.3,
            container=rng.choice(["list", "tuple"] if kind == "functions" else list(CONTAINERS)),
        ))
    return RECOMPUTE_CASES + drawn


class PlainFunction:
    """``sin(x)``: a layer that is a plain callable, not an ``nn.Module`` (no parameters).
    ``on_call`` (set by the grader while it counts) is called on every call."""

    def __init__(self):
        self.on_call = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_call is not None:
            self.on_call()
        return torch.sin(x)


class _Tracker:
    """Weak references to the storages of every tensor the grader's layers create while a
    measurement runs (``_Tracker.active``): what autograd saves inside the graph, which no
    Python object shows."""

    active = None

    def __init__(self):
        self.refs: dict[int, StorageWeakRef] = {}

    def add(self, *tensors: torch.Tensor) -> None:
        for tensor in tensors:
            storage = tensor.untyped_storage()
            self.refs[storage.data_ptr()] = StorageWeakRef(storage)

    def alive(self, exclude) -> int:
        """Activation-sized storages alive now, other than those of ``exclude``: the grader's
        layers' tensors, and any tensor object created since the measurement began (copies
        kept in lists or on ``ctx``; ``gc.freeze`` put all older objects out of sight)."""
        excluded = {t.untyped_storage().data_ptr() for t in exclude if t is not None}
        alive = {ptr for ptr, ref in self.refs.items() if not ref.expired()}
        for thing in gc.get_objects():
            if isinstance(thing, torch.Tensor) and thing.untyped_storage().nbytes() >= BATCH * WIDTH * 8:
                alive.add(thing.untyped_storage().data_ptr())
        return len(alive - excluded)


class GraderLayer(nn.Module):
    """``dropout(tanh(x @ weight + bias))``: a layer the grader builds, hooks and counts."""

    def __init__(self, generator: torch.Generator, dropout: float, dtype: torch.dtype):
        super().__init__()
        scale = 1 / math.sqrt(WIDTH)
        self.weight = nn.Parameter(torch.randn(WIDTH, WIDTH, generator=generator, dtype=dtype) * scale)
        self.bias = nn.Parameter(torch.randn(WIDTH, generator=generator, dtype=dtype) * scale)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _tanh_dropout(x @ self.weight + self.bias, self.dropout)


class ParameterFreeLayer(nn.Module):
    """``dropout(tanh(1.5 x))``: a module without parameters."""

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _tanh_dropout(1.5 * x, self.dropout)


def _tanh_dropout(pre: torch.Tensor, dropout: float) -> torch.Tensor:
    """Dropout written out, so that every tensor it keeps is one the tracker sees."""
    activation = torch.tanh(pre)
    if not dropout:
        if _Tracker.active is not None:
            _Tracker.active.add(pre, activation)
        return activation
    keep = torch.rand(activation.shape, dtype=activation.dtype) >= dropout
    output = activation * keep / (1 - dropout)
    if _Tracker.active is not None:
        _Tracker.active.add(pre, activation, keep, output)
    return output


def build_case(seed: int, index: int):
    """The layers (a plain list), input and RNG seed of recomputation case ``index``, from ``seed``."""
    case = recompute_cases(seed)[index]
    dtype = getattr(torch, case.dtype)
    generator = torch.Generator().manual_seed(seed * 100 + index)
    layers = []
    for i in range(case.layers):
        if case.kind == "functions" and i % case.function_every == case.function_every - 1:
            layers.append(PlainFunction())
        elif case.kind == "no-params":
            layers.append(ParameterFreeLayer(case.dropout))
        else:
            layer = GraderLayer(generator, case.dropout, dtype)
            if case.kind == "frozen" and i % 2 == 0:
                layer.requires_grad_(False)
            layers.append(layer)
    shape = (*case.shape, WIDTH)
    if case.transposed:
        x = torch.randn(shape[::-1], generator=generator, dtype=dtype).permute(*reversed(range(len(shape))))
    else:
        x = torch.randn(shape, generator=generator, dtype=dtype)
    return layers, x.requires_grad_(case.input_grad), seed * 100 + index + 1


def _as_passed(layers: list, case: RecomputeCase):
    """The layers in the container ``case`` passes them in."""
    container = CONTAINERS[case.container]
    return container(*layers) if container is nn.Sequential else container(layers)


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
    if output.requires_grad:
        (output * weights).sum().backward()
    return {
        "output": output.detach().clone(),
        "grads": [_clone(x.grad)] + [_clone(p.grad) for p in _parameters(layers)],
        "rng_after_forward": after_forward,
        "rng_after_backward": torch.get_rng_state(),
    }


def _clone(tensor):
    return None if tensor is None else student_tensor(tensor, "a gradient").detach().clone()


def _checkpoint_call(student, layers, x, segments):
    with _forbid_torch_checkpoint():
        if segments is None:
            output = student.checkpoint_sequential(layers, x)
        else:
            output = student.checkpoint_sequential(layers, x, segments)
    return student_tensor(output, "checkpoint_sequential")


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


def _warm_up(student, layers, case: RecomputeCase) -> None:
    """Use the layers once with another input shape and segment count, then forget the grads."""
    x = torch.randn(3, 1, WIDTH, dtype=getattr(torch, case.dtype), requires_grad=True)
    _checkpoint_call(student, _as_passed(layers, case), x, len(layers)).sum().backward()
    for parameter in _parameters(layers):
        parameter.grad = None


@_single_threaded
def observe_recompute_grads(seed: int, params: dict) -> dict:
    """Outputs, gradients and RNG states of the plain run and of the student's checkpointed run."""
    student = _student()
    cases = []
    for index, case in enumerate(recompute_cases(seed)):
        layers, x, rng_seed = build_case(seed, index)
        plain = plain_run(layers, x, rng_seed)
        for parameter in _parameters(layers):
            parameter.grad = None
        x.grad = None
        if case.warm_up:
            _warm_up(student, layers, case)
        torch.manual_seed(rng_seed)
        output = _checkpoint_call(student, _as_passed(layers, case), x, case.segments)
        cases.append({"case": index, "plain": plain, "student": _finish(layers, x, output)})
    return {"cases": cases}


@_single_threaded
def judge_recompute_grads(seed: int, params: dict, observation: dict) -> None:
    """Bit-identical output and gradients, and the global RNG left as the plain run leaves it."""
    cases = recompute_cases(seed)
    entries = expect_cases(observation["cases"], list(range(len(cases))), "checkpoint_sequential")
    for index, case in enumerate(entries):
        dropout = cases[index].dropout
        layers, x, rng_seed = build_case(seed, index)
        reference = plain_run(layers, x, rng_seed)
        what = f"{cases[index].describe()} (case {index}, seed {seed})"
        # The child's plain run is the bit-level reference (same process, same kernels); it
        # must itself agree with the grader's own run, or the child was tampered with.
        for name, ours, theirs in _pairs(reference, case["plain"]):
            same = close(theirs, ours, rtol=0.0, atol=0.0) if name.startswith("RNG") else close(theirs, ours, rtol=1e-5, atol=1e-6)
            if not same:
                raise Fail(f"{what}: the plain run inside your process differs from the grader's ({name}); "
                           "does your module change torch's global state?")
        for name, plain, mine in _pairs(case["plain"], case["student"], what):
            if not close(mine, plain, rtol=0.0, atol=0.0):
                hint = " (are the random numbers of the forward drawn again in backward?)" if dropout and name.startswith("grad") else ""
                raise Fail(f"{what}: {name} is not bit-identical to the plain run: it {difference(mine, plain)}{hint}")


def _pairs(first: dict, second: dict, what: str = ""):
    names = ["output", "rng_after_forward", "rng_after_backward"]
    for name in names:
        yield (name if name == "output" else f"RNG state {name[4:].replace('_', ' ')}"), first[name], second[name]
    labels = ["grad of x"] + [f"grad of parameter {i}" for i in range(len(first["grads"]) - 1)]
    for label, a, b in zip(labels, first["grads"], second["grads"]):
        if label == "grad of x" and a is None:
            continue  # x does not require grad: whether the caller's x gets one is 4.3-caller-unchanged's
        if a is not None or b is not None:
            if a is None or b is None:
                raise Fail(f"{what}: {label}: {'none expected' if a is None else 'expected a gradient'}, got "
                           f"{'none' if b is None else 'a gradient'}")
            yield label, a, b


def _measure(run, layers, x) -> dict:
    """Stored activations after forward, peak during backward, layer calls per phase, and the
    order in which backward ran the layers (it shows the segments: last segment first)."""
    tracker = _Tracker()
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
    gc.freeze()  # every object made so far is out of the tracker's sight: it sees what the run keeps
    _Tracker.active = tracker
    try:
        output = run()
        stored = tracker.alive(exclude() + [output])
        phase[0] = "backward"
        if output.requires_grad:
            output.sum().backward()
    finally:
        _Tracker.active = None
        gc.unfreeze()
        for handle in handles:
            handle.remove()
        for layer in layers:
            if not isinstance(layer, nn.Module):
                layer.on_call = None
    return {"stored_after_forward": stored, "peak_during_backward": peak[0], "calls": calls, "order": order}


# (label, layers, x, segments, what is wrong): each call must raise ValueError
BAD_CHECKPOINT = [
    ("([], x)", "[]", "x", None, "no layers"),
    ("([tanh], x, segments=0)", "[tanh]", "x", 0, "segments = 0"),
    ("([tanh] * 3, x, segments=4)", "[tanh] * 3", "x", 4, "more segments than layers"),
    ("([tanh] * 3, x, segments=-1)", "[tanh] * 3", "x", -1, "segments < 0"),
    ("([tanh], x, segments=1.5)", "[tanh]", "x", 1.5, "segments is not an int"),
    ("([tanh] * 3, x, segments=2.0)", "[tanh] * 3", "x", 2.0, "segments is a float"),
    ("([tanh] * 3, x, segments=True)", "[tanh] * 3", "x", True, "segments is a bool"),
    ("([tanh] * 3, x, segments='2')", "[tanh] * 3", "x", "2", "segments is a string"),
    ("([3], x)", "[3]", "x", None, "a layer that is not callable"),
    ("([tanh], [[1.0]])", "[tanh]", "[[1.0]]", None, "x is not a tensor"),
]


def observe_recompute_arguments(seed: int, params: dict) -> dict:
    """What the student's ``checkpoint_sequential`` does with bad arguments, and with a valid call."""
    student = _student()
    tanh = nn.Tanh()  # a module: plain-function layers are 4.3-bit-identical's, not this criterion's
    values = {"[]": [], "[tanh]": [tanh], "[tanh] * 3": [tanh] * 3, "[3]": [3],
              "x": torch.ones(2, 3), "[[1.0]]": [[1.0]]}
    bad = [{"case": label, "outcome": _outcome(lambda: _checkpoint_call(student, values[layers], values[x], segments))}
           for label, layers, x, segments, _ in BAD_CHECKPOINT]
    valid = _outcome(lambda: _checkpoint_call(student, [tanh] * 3, torch.ones(2, 3), 3))
    return {"bad": bad, "valid": valid}


def judge_recompute_arguments(seed: int, params: dict, observation: dict) -> None:
    entries = expect_cases(observation["bad"], [label for label, *_ in BAD_CHECKPOINT], "checkpoint_sequential")
    for (label, _, _, _, wrong), entry in zip(BAD_CHECKPOINT, entries):
        outcome = str(entry["outcome"])
        if not outcome.startswith("ValueError"):
            got = "it returned" if outcome == "returned" else f"got {outcome}"
            raise Fail(f"checkpoint_sequential{label}: {wrong}, expected ValueError at the call; {got}")
    if observation["valid"] != "returned":
        raise Fail(f"checkpoint_sequential([tanh] * 3, x, segments=3) is valid but raised {observation['valid']}")


MEMORY_CASES = [0, 1, 2]  # indices into RECOMPUTE_CASES with 2 <= segments < layers


@_single_threaded
def observe_recompute_memory(seed: int, params: dict) -> dict:
    """Activation storages alive after the checkpointed forward and during its backward."""
    student = _student()
    results = []
    for index in MEMORY_CASES:
        layers, x, rng_seed = build_case(seed, index)
        torch.manual_seed(rng_seed)
        segments = RECOMPUTE_CASES[index].segments
        measured = _measure(lambda: _checkpoint_call(student, layers, x, segments), layers, x)
        results.append({"case": index, **measured})
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


@_single_threaded
def judge_recompute_memory(seed: int, params: dict, observation: dict) -> None:
    """After forward only the segment inputs are alive; backward holds one segment at a time."""
    entries = expect_cases(observation["cases"], MEMORY_CASES, "checkpoint_sequential")
    for index, case in zip(MEMORY_CASES, entries):
        num_layers = RECOMPUTE_CASES[index].layers
        segments = _segments(index)
        longest = -(-num_layers // segments)
        plain, mine = plain_stored(seed, index), case["stored_after_forward"]
        per_layer = max(1, -(-plain // num_layers))  # activation tensors one layer stores
        what = f"{RECOMPUTE_CASES[index].describe()}: {num_layers} layers in {segments} segments"
        if mine > segments:
            raise Fail(
                f"{what}: after the forward, {mine} activation tensors are still stored besides the input and "
                f"the output (the plain run stores {plain}); only the inputs of segments 1..{segments - 1} may "
                "stay until backward"
            )
        limit = segments + per_layer * longest + 2
        peak = case["peak_during_backward"]
        if peak > limit:
            raise Fail(
                f"{what}: during backward up to {peak} activation tensors are alive at once; recomputing one "
                f"segment at a time needs at most about {limit} (segment inputs + one segment's activations)"
            )


# The grader's own layers with an input that requires grad: plain functions, other kinds of
# layers and inputs without grad are 4.3-bit-identical's concern, not this criterion's
COUNT_CASES = [index for index, case in enumerate(RECOMPUTE_CASES) if case.kind == "grader" and case.input_grad]


@_single_threaded
def observe_recompute_count(seed: int, params: dict) -> dict:
    """How often each grader layer ran during the checkpointed forward and during backward, and in which order backward ran them."""
    student = _student()
    results = []
    for index in COUNT_CASES:
        case = RECOMPUTE_CASES[index]
        layers, x, rng_seed = build_case(seed, index)
        if case.warm_up:
            _warm_up(student, layers, case)
        torch.manual_seed(rng_seed)
        measured = _measure(lambda: _checkpoint_call(student, _as_passed(layers, case), x, case.segments), layers, x)
        results.append({"case": index, "calls": measured["calls"], "order": measured["order"]})
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
    entries = expect_cases(observation["cases"], COUNT_CASES, "checkpoint_sequential")
    for index, case in zip(COUNT_CASES, entries):
        spec = RECOMPUTE_CASES[index]
        segments = _segments(index)
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


def _bounds(num_layers: int, segments: int) -> list[tuple[int, int]]:
    """``segment_bounds`` of the docstring, written out here (the grader never uses the answer key)."""
    size, extra = divmod(num_layers, segments)
    bounds, start = [], 0
    for index in range(segments):
        stop = start + size + (index < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


# Conventions (4.3-caller-unchanged): the caller's input and a second backward
CALLER_CASES = [
    ("an input that does not require grad", False),
    ("an input that requires grad", True),
]


@_single_threaded
def observe_recompute_caller(seed: int, params: dict) -> dict:
    """The caller's input after the checkpointed forward and backward, and a second backward."""
    student = _student()
    results = []
    for label, input_grad in CALLER_CASES:
        generator = torch.Generator().manual_seed(seed)
        layers = [GraderLayer(generator, 0.2, torch.float64) for _ in range(4)]
        x = torch.randn(BATCH, WIDTH, generator=generator, dtype=torch.float64).requires_grad_(input_grad)
        before = x.detach().clone()
        torch.manual_seed(seed)
        output = _checkpoint_call(student, layers, x, 2)
        first, second, again = [], "not tried: the first backward failed (4.3-bit-identical's concern)", []
        try:
            output.sum().backward(retain_graph=True)
        except RuntimeError:
            pass
        else:
            first = [_clone(p.grad) for p in _parameters(layers)] + [_clone(x.grad)]
            for tensor in [*_parameters(layers), x]:
                tensor.grad = None
            try:
                output.sum().backward()
                second = "ran"
            except RuntimeError as error:
                second = f"RuntimeError: {str(error)[:200]}"
            again = [_clone(p.grad) for p in _parameters(layers)] + [_clone(x.grad)]
        results.append({"case": label, "x": x.detach().clone(), "before": before, "requires_grad": x.requires_grad,
                        "first": first, "second": second, "again": again})
    return {"cases": results}


def judge_recompute_caller(seed: int, params: dict, observation: dict) -> None:
    """The caller's x keeps its values and requires_grad; a second backward (retain_graph) works
    and gives the same gradients."""
    entries = expect_cases(observation["cases"], [label for label, _ in CALLER_CASES], "checkpoint_sequential")
    for (label, input_grad), case in zip(CALLER_CASES, entries):
        what = f"checkpoint_sequential(4 layers, x, segments=2) with {label}"
        if case["requires_grad"] is not input_grad:
            raise Fail(f"{what}: afterwards x.requires_grad is {case['requires_grad']}; the caller's tensor must "
                       f"keep requires_grad={input_grad}")
        if not close(case["x"], case["before"], rtol=0.0, atol=0.0):
            raise Fail(f"{what}: the caller's x changed: it {difference(case['x'], case['before'])}")
        if str(case["second"]).startswith("not tried"):
            continue
        if case["second"] != "ran":
            raise Fail(f"{what}: a second backward through the same graph (retain_graph=True the first time) "
                       f"failed: {case['second']}; the tensors kept for backward must survive the first one")
        for position, (first, again) in enumerate(zip(case["first"], case["again"])):
            if (first is None) != (again is None) or first is not None and not close(again, first, rtol=0.0, atol=0.0):
                name = "x" if position == len(case["first"]) - 1 else f"parameter {position}"
                raise Fail(f"{what}: the second backward gives another gradient of {name} than the first")


# ---------------------------------------------------------------- 4.4: training with your own schedule

TRAIN_WIDTH = 6
TRAIN_CASES = [  # [K devices, v chunks, M microbatches]: v = 1 with M < K, M = K, M not a multiple of K
    [2, 1, 4], [3, 1, 5], [4, 1, 2], [2, 2, 4], [3, 2, 3], [2, 3, 2],
]
TRAIN_TIMEOUT = 10.0  # the StageWorkers' limit: a stuck step fails well inside the criterion's timeout
REASON_CHARS = 400  # why a schedule is invalid, or what a step raised, as quoted in a message


class RecordingStage(nn.Module):
    """``tanh(x @ weight + bias)`` that notes, on the grader's ``log``, every forward and
    the start of every backward (when the gradient of its output arrives), per device."""

    def __init__(self, generator: torch.Generator, stage: int, num_devices: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(TRAIN_WIDTH, TRAIN_WIDTH, generator=generator, dtype=torch.float64) / 2)
        self.bias = nn.Parameter(torch.randn(TRAIN_WIDTH, generator=generator, dtype=torch.float64) / 2)
        self.stage, self.device_index, self.log = stage, stage % num_devices, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = torch.tanh(x @ self.weight + self.bias)
        if self.log is not None:
            self.log.note(self.device_index, self.stage, "F")
            if output.requires_grad:
                output.register_hook(lambda grad: self.log.note(self.device_index, self.stage, "B"))
        return output


@dataclass
class _StepLog:
    """What ran on each device, in order, and its peak of held activations (1/v per chunk)."""

    num_devices: int
    num_chunks: int
    events: list = field(default_factory=list)
    held: list = field(default_factory=list)
    peaks: list = field(default_factory=list)

    def __post_init__(self):
        self.events = [[] for _ in range(self.num_devices)]
        self.held = [0] * self.num_devices
        self.peaks = [0.0] * self.num_devices

    def note(self, device: int, stage: int, kind: str) -> None:
        self.events[device].append([stage, kind])
        self.held[device] += 1 if kind == "F" else -1
        self.peaks[device] = max(self.peaks[device], self.held[device] / self.num_chunks)


def build_training(seed: int, case: list):
    """The stages, inputs and targets of training case ``case`` (the parent rebuilds them)."""
    num_devices, num_chunks, num_microbatches = case
    generator = torch.Generator().manual_seed(seed * 10 + num_devices * 100 + num_chunks * 10 + num_microbatches)
    stages = [RecordingStage(generator, s, num_devices) for s in range(num_devices * num_chunks)]
    batch = 2 * num_microbatches + 1  # microbatches of unequal size
    inputs = torch.randn(batch, TRAIN_WIDTH, generator=generator, dtype=torch.float64)
    targets = torch.randn(batch, TRAIN_WIDTH, generator=generator, dtype=torch.float64)
    return stages, inputs, targets


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).mean()


def _schedule_call(case: list) -> tuple[str, tuple]:
    """The schedule function a training case's step must follow, and its arguments."""
    num_devices, num_chunks, num_microbatches = case
    if num_chunks == 1:
        return "one_f_one_b", (num_devices, num_microbatches)
    return "interleaved_one_f_one_b", (num_devices, num_microbatches, num_chunks)


def _call_text(case: list) -> str:
    function, arguments = _schedule_call(case)
    return f"{function}({', '.join(map(str, arguments))})"


def _invalid(schedule: list, case: list) -> str:
    """Why ``schedule`` (plain lists) is not a valid schedule for training case ``case``, or
    ``""``: the validity test of the 4.1 and 4.2 judges (the grader's simulator accepts it)."""
    num_devices, num_chunks, num_microbatches = case
    try:
        _simulate(schedule, _call_text(case), num_microbatches, num_chunks, num_devices)
    except Fail as failure:
        return str(failure)[:REASON_CHARS]
    return ""


def _as_actions(rows: list) -> list:
    from minitorch import schedules

    return [[schedules.Action(*action) for action in row] for row in rows]


def _grader_one_f_one_b(num_stages: int, num_microbatches: int) -> list:
    """The grader's 1F1B order as ``Action`` rows, bound in the student's module for 4.4 and,
    where the student's interleaved builder delegates v = 1 to it, for 4.2; its contract's
    ValueError included (4.2-arguments may reach it through that delegation)."""
    for name, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return _as_actions(reference_one_f_one_b(num_stages, num_microbatches))


def _grader_interleaved(num_stages: int, num_microbatches: int, num_chunks: int) -> list:
    """Megatron-LM's interleaved order as ``Action`` rows (bound in the student's module for 4.4)."""
    return _as_actions(reference_interleaved(num_stages, num_microbatches, num_chunks))


@contextlib.contextmanager
def _grader_schedules(student, names: tuple = ("one_f_one_b", "interleaved_one_f_one_b")):
    """The grader's schedule builders bound in the student's module in place of ``names`` for
    the block (as ``tp_pieces.substitute`` does for Problem 3), then the student's put back,
    whatever the block raised."""
    builders = {"one_f_one_b": _grader_one_f_one_b, "interleaved_one_f_one_b": _grader_interleaved}
    grader = {name: builders[name] for name in names}
    saved = {name: vars(student)[name] for name in grader if name in vars(student)}
    for name, function in grader.items():
        setattr(student, name, function)
    try:
        yield
    finally:
        for name in grader:
            if name in saved:
                setattr(student, name, saved[name])
            elif name in vars(student):
                delattr(student, name)


def _student_schedule(student, case: list) -> tuple[list | None, str]:
    """The student's schedule for ``case`` as plain lists (None if it could not be read) and
    why it is not valid (``""`` when it is)."""
    function, arguments = _schedule_call(case)
    try:
        schedule = _plain_schedule(getattr(student, function)(*arguments), _call_text(case))
    except Fail as failure:
        return None, str(failure)[:REASON_CHARS]
    except Exception as error:  # noqa: BLE001 - a schedule function that raises has no valid schedule
        return None, f"{_call_text(case)} raised {_exception_text(error)}"
    return schedule, _invalid(schedule, case)


def _exception_text(error: BaseException) -> str:
    """``TypeError: message``, bounded, even when the exception's ``str`` raises."""
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - a student's exception whose __str__ raises
        message = "(its message could not be read)"
    return f"{type(error).__name__}: {message}"[:REASON_CHARS]


def _run_step(student, seed: int, case: list) -> tuple[object, list, _StepLog]:
    """The student's ``train_step`` on the grader's recording stages of ``case``: its report
    and the stages (their gradients), with what ran where noted on the returned log."""
    from minitorch.runtime import StageWorkers

    num_devices, num_chunks, num_microbatches = case
    stages, inputs, targets = build_training(seed, case)
    log = _StepLog(num_devices, num_chunks)
    for stage in stages:
        stage.log = log
    try:
        with StageWorkers(["cpu"] * num_devices, timeout=TRAIN_TIMEOUT) as workers:
            report = student.train_step(workers, stages, inputs, targets, _mse, num_microbatches)
    finally:
        for stage in stages:
            stage.log = None
    return report, stages, log


@_single_threaded
def observe_train_step(seed: int, params: dict) -> dict:
    """Run the student's ``train_step`` on the grader's recording stages, and return the
    student's own schedule for each case. When that schedule is not valid (4.1/4.2 charge it),
    the step runs with the grader's schedule builders bound in its place, so that it is still
    judged on what it does; an exception of that run is noted (the parent then says why the
    grader's schedule was used); a ``NotImplementedError`` is the stub's and says so."""
    student = _student()
    results = []
    for case in TRAIN_CASES:
        schedule, invalid = _student_schedule(student, case)
        entry = {"case": case, "schedule": schedule, "invalid": invalid, "ran_with": "grader's" if invalid else "yours",
                 "error": None}
        if not invalid:
            report, stages, log = _run_step(student, seed, case)
        else:
            with _grader_schedules(student):
                try:
                    report, stages, log = _run_step(student, seed, case)
                except NotImplementedError:
                    raise
                except Exception as error:  # noqa: BLE001 - the parent reports it with its cause
                    results.append({**entry, "error": _exception_text(error), "events": [], "peaks": [],
                                    "loss": None, "grads": []})
                    continue
        loss = getattr(report, "loss", None)
        results.append({
            **entry, "events": log.events, "peaks": log.peaks,
            "loss": float(loss) if isinstance(loss, (int, float)) else None,
            "grads": [_clone(p.grad) for stage in stages for p in stage.parameters()],
        })
    return {"cases": results}


def _sequential(seed: int, case: list) -> tuple[float, list]:
    """The batch through all stages without a pipeline: the loss and every parameter's gradient."""
    stages, inputs, targets = build_training(seed, case)
    h = inputs
    for stage in stages:
        h = stage(h)
    loss = _mse(h, targets)
    loss.backward()
    return loss.item(), [p.grad for stage in stages for p in stage.parameters()]


def _schedule_to_follow(case: list, entry: dict, what: str) -> tuple[list, str, str]:
    """The schedule the step of ``case`` had to follow (plain lists), whose it is, and ``what``
    the messages name: the student's schedule when it is valid; otherwise the grader's, which
    the child bound in place of the student's functions for that run (4.4 judges the step,
    4.1 and 4.2 the schedule)."""
    function = _schedule_call(case)[0]
    schedule = entry["schedule"]
    if schedule is None:  # the function raised or returned no list of rows (the child says which)
        reason = str(entry["invalid"])[:REASON_CHARS] or f"{_call_text(case)} returned no schedule"
    else:
        reason = _invalid(schedule, case)
    ran_with = "grader's" if reason else "yours"
    if entry["ran_with"] != ran_with:
        raise Fail(f"{what}: the step came back as run with {str(entry['ran_with'])[:40]!r} schedule where the "
                   f"grader asked for {ran_with!r}: what came back from your code's process cannot be judged")
    if not reason:
        return schedule, "your schedule", what
    num_devices, num_chunks, num_microbatches = case
    grader = [[list(action) for action in row] for row in reference_interleaved(num_devices, num_microbatches, num_chunks)]
    problem = "4.1" if num_chunks == 1 else "4.2"
    return grader, "the grader's schedule", (
        f"{what}, judged with the grader's {function} bound in place of yours because yours is not valid "
        f"(Problem {problem} charges that: {reason})"
    )


@_single_threaded
def judge_train_step(seed: int, params: dict, observation: dict) -> None:
    """Each device ran its row of the schedule it had to follow, in order: the student's when
    it is valid, the grader's (bound in its place) when not; the measured peak of held
    activations is what the simulator predicts for that schedule; loss and gradients are the
    sequential run's."""
    entries = expect_cases(observation["cases"], TRAIN_CASES, "train_step")
    for case, entry in zip(TRAIN_CASES, entries):
        num_devices, num_chunks, num_microbatches = case
        what = f"train_step on {num_devices} devices x {num_chunks} chunks, M = {num_microbatches}"
        schedule, whose, what = _schedule_to_follow(case, entry, what)
        if entry["error"] is not None:
            raise Fail(f"{what}: train_step raised {str(entry['error'])[:REASON_CHARS]}")
        timeline = _simulate(schedule, f"{what}: {whose}", num_microbatches, num_chunks, num_devices)
        if len(entry["events"]) != num_devices or len(entry["peaks"]) != num_devices:
            raise Fail(f"{what}: the grader's record has {len(entry['events'])} devices, expected {num_devices}")
        for device, (row, ran) in enumerate(zip(schedule, entry["events"])):
            planned = [f"{kind}{stage}" for stage, kind, _ in row]
            done = [f"{kind}{stage}" for stage, kind in ran]
            if planned != done:
                step = next((i for i, (a, b) in enumerate(zip(planned, done)) if a != b), min(len(planned), len(done)))
                raise Fail(
                    f"{what}: device {device} ran (kind, stage) {' '.join(done[:step + 3])} ...; {whose} says "
                    f"{' '.join(planned[:step + 3])} ... (they part at step {step}); the step must follow the schedule "
                    f"{_schedule_call(case)[0]} returns, with stage s on device s % K"
                )
        measured, predicted = list(entry["peaks"]), timeline.peak_in_flight
        if any(abs(a - b) > 1e-9 for a, b in zip(measured, predicted)) or len(measured) != len(predicted):
            raise Fail(f"{what}: peak activations held per device, measured {measured}; the simulator predicts "
                       f"{predicted} for {whose}")
        loss, grads = _sequential(seed, case)
        if not isinstance(entry["loss"], float) or not math.isclose(entry["loss"], loss, rel_tol=1e-9, abs_tol=1e-12):
            raise Fail(f"{what}: the step reports loss {entry['loss']}; the mean loss of the batch is {loss:.12g}")
        if len(entry["grads"]) != len(grads):
            raise Fail(f"{what}: expected {len(grads)} parameter gradients, got {len(entry['grads'])}")
        for index, (mine, expected) in enumerate(zip(entry["grads"], grads)):
            stage, name = divmod(index, 2)
            label = f"the gradient of stage {stage}'s {'bias' if name else 'weight'}"
            if mine is None:
                raise Fail(f"{what}: {label} is None after the step")
            if not close(mine, expected, rtol=1e-9, atol=1e-12):
                raise Fail(f"{what}: {label} {difference(mine, expected)} the sequential run's (the mean loss over "
                           "the whole batch, no pipeline)")
