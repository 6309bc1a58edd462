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


BAD_INTERLEAVED = [(4, 6, 2), (3, 4, 2), (2, 3, 2), (8, 12, 4), (4, 2, 2)]


def observe_interleaved_bad_m(seed: int, params: dict) -> dict:
    """What the student's function does when M is not a multiple of K (and on one valid call)."""
    student = _student()
    outcomes = []
    for args in BAD_INTERLEAVED:
        try:
            student.interleaved_one_f_one_b(*args)
            outcomes.append("returned")
        except ValueError as error:
            outcomes.append(f"ValueError: {error}")
        except NotImplementedError:
            raise
        except Exception as error:  # reported, not raised: the message names the call
            outcomes.append(f"{type(error).__name__}: {error}")
    try:
        student.interleaved_one_f_one_b(4, 8, 2)
        valid = "returned"
    except NotImplementedError:
        raise
    except Exception as error:
        valid = f"{type(error).__name__}: {error}"
    return {"bad": outcomes, "valid": valid}


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
    """Valid; step = (M + (K-1)/v)(F + B); device d holds at most Megatron's warm-up + 1 chunks."""
    cases = _interleaved_cases(seed)
    _expect_count(observation, len(cases))
    for (num_stages, num_microbatches, num_chunks), schedule in zip(cases, observation["schedules"]):
        call = f"interleaved_one_f_one_b({num_stages}, {num_microbatches}, {num_chunks})"
        timeline = _simulate(schedule, call, num_microbatches, num_chunks, num_stages)
        expected = (num_microbatches + (num_stages - 1) / num_chunks) * (T_F + T_B)
        if not math.isclose(timeline.makespan, expected, rel_tol=1e-9):
            raise Fail(
                f"{call}: one step takes {timeline.makespan:g} units (F = 1, B = 2 per device, 1/v per chunk); "
                f"interleaving should give (M + (K-1)/v)(F + B) = {expected:g}: the 1F1B bubble divided by v"
            )
        for device, peak in enumerate(timeline.peak_in_flight):
            if num_chunks == 1:
                limit = min(num_stages - device, num_microbatches)
            else:
                warmup = 2 * (num_stages - device - 1) + (num_chunks - 1) * num_stages
                limit = min(warmup + 1, num_microbatches * num_chunks) / num_chunks
            if peak > limit + 1e-9:
                raise Fail(
                    f"{call}: device {device} holds up to {peak:g} microbatches' activations at once (counting "
                    f"1/v per chunk); Megatron's order holds at most {limit:g}: start backwards after "
                    f"2(K-d-1) + (v-1)K warm-up forwards"
                )


def judge_interleaved_bad_m(seed: int, params: dict, observation: dict) -> None:
    """ValueError for every M that is not a multiple of K; a valid call still returns."""
    for args, outcome in zip(BAD_INTERLEAVED, observation["bad"]):
        if not outcome.startswith("ValueError"):
            raise Fail(
                f"interleaved_one_f_one_b{args}: M = {args[1]} is not a multiple of K = {args[0]}, expected "
                f"ValueError, got {outcome}"
            )
    if observation["valid"] != "returned":
        raise Fail(f"interleaved_one_f_one_b(4, 8, 2) is valid but raised {observation['valid']}")


def _expect_count(observation: dict, count: int) -> None:
    if len(observation.get("schedules", [])) != count:
        raise Fail(f"expected {count} schedules from the grader's calls, got {len(observation.get('schedules', []))}")


# ---------------------------------------------------------------- 4.3: recomputation

BATCH, WIDTH = 24, 32  # activations (24 x 32 float64 = 6144 bytes) differ in size from weights (32 x 32)

# (layers, segments, dropout probability): None means the default round(sqrt(n)) segments
RECOMPUTE_CASES = [(16, None, 0.25), (12, 3, 0.0), (9, 2, 0.5), (6, 6, 0.3), (5, 1, 0.2)]


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
    num_layers, _, dropout = RECOMPUTE_CASES[index]
    generator = torch.Generator().manual_seed(seed * 100 + index)
    layers = [GraderLayer(generator, dropout) for _ in range(num_layers)]
    x = torch.randn(BATCH, WIDTH, generator=generator, dtype=torch.float64).requires_grad_()
    return layers, x, seed * 100 + index + 1


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
        "grads": [_clone(x.grad)] + [_clone(p.grad) for layer in layers for p in layer.parameters()],
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
    for index, (_, segments, _) in enumerate(RECOMPUTE_CASES):
        layers, x, rng_seed = build_case(seed, index)
        plain = plain_run(layers, x, rng_seed)
        for layer in layers:
            layer.zero_grad(set_to_none=True)
        x.grad = None
        torch.manual_seed(rng_seed)
        output = _checkpoint_call(student, layers, x, segments)
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
        num_layers, segments, dropout = RECOMPUTE_CASES[index]
        layers, x, rng_seed = build_case(seed, index)
        reference = plain_run(layers, x, rng_seed)
        what = f"{num_layers} layers, segments={segments}, dropout p={dropout}"
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
    """Stored activations after forward, peak during backward, and layer calls per phase."""
    tracker = _StorageTracker()
    phase = ["forward"]
    calls = {"forward": [0] * len(layers), "backward": [0] * len(layers)}
    peak = [0]

    def exclude():
        parameters = [p for layer in layers for p in layer.parameters()]
        return parameters + [p.grad for p in parameters] + [x, x.grad]

    def hook(index):
        def counted(module, inputs, output):
            calls[phase[0]][index] += 1
            if phase[0] == "backward":
                peak[0] = max(peak[0], tracker.alive(exclude()))

        return counted

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
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
    return {"stored_after_forward": stored, "peak_during_backward": peak[0], "calls": calls}


MEMORY_CASES = [0, 1, 2]  # indices into RECOMPUTE_CASES with 2 <= segments < layers


def observe_recompute_memory(seed: int, params: dict) -> dict:
    """Activation storages alive after the checkpointed forward and during its backward."""
    student = _student()
    results = []
    for index in MEMORY_CASES:
        layers, x, rng_seed = build_case(seed, index)
        torch.manual_seed(rng_seed)
        segments = RECOMPUTE_CASES[index][1]
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
    num_layers, segments, _ = RECOMPUTE_CASES[index]
    return round(math.sqrt(num_layers)) if segments is None else segments


def judge_recompute_memory(seed: int, params: dict, observation: dict) -> None:
    """After forward only the segment inputs are alive; backward holds one segment at a time."""
    if len(observation["cases"]) != len(MEMORY_CASES):
        raise Fail(f"expected {len(MEMORY_CASES)} cases, got {len(observation['cases'])}")
    for index, case in zip(MEMORY_CASES, observation["cases"]):
        num_layers = RECOMPUTE_CASES[index][0]
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


def observe_recompute_count(seed: int, params: dict) -> dict:
    """How often each grader layer ran during the checkpointed forward and during backward."""
    student = _student()
    results = []
    for index, (_, segments, _) in enumerate(RECOMPUTE_CASES):
        layers, x, rng_seed = build_case(seed, index)
        torch.manual_seed(rng_seed)
        results.append(_measure(lambda: _checkpoint_call(student, layers, x, segments), layers, x)["calls"])
    return {"cases": results}


def judge_recompute_count(seed: int, params: dict, observation: dict) -> None:
    """Every layer runs once in forward and exactly once more (recomputed) in backward."""
    for index, calls in enumerate(observation["cases"]):
        num_layers = RECOMPUTE_CASES[index][0]
        what = f"{num_layers} layers in {_segments(index)} segments"
        for phase in ("forward", "backward"):
            counts = calls[phase]
            if len(counts) != num_layers or any(count != 1 for count in counts):
                layer = next((i for i, c in enumerate(counts) if c != 1), 0)
                raise Fail(
                    f"{what}: layer {layer} ran {counts[layer]} times during the {phase}, expected once "
                    f"(calls per layer: {counts}); each layer runs once in forward and is recomputed "
                    "exactly once in backward"
                )
