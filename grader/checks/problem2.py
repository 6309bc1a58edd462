"""Problem 2 checks: ``clock_cycles`` (2.1) and ``Pipe`` (2.2).

Every 2.2 check first puts the grader's own :func:`reference_clock_cycles` into the
student's module (``Pipe.forward`` looks ``clock_cycles`` up at call time), so a broken
2.1 does not cost 2.2 points twice. The pipelines run the grader's :class:`GraderStage`
modules, which record what each call saw (rows, thread, grad mode); the submit / start /
finish / receive events come from the grader's own copy of ``minitorch/runtime.py``.
The judges rebuild the same stages from the seed and run them in sequence with plain
PyTorch; nothing is taken from the answer key.
"""
from __future__ import annotations

import itertools
import math
import random
import threading
import time
import tracemalloc
from _tracemalloc import _get_object_traceback
from fractions import Fraction
from types import SimpleNamespace

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from grader.checks import Fail, Malformed, expect_cases, expect_tensor, student_tensor
from grader.checks.compare import close, difference, expected_calls, reference_clock_cycles

WIDTH = 6  # column 0 carries the row number through every stage; 5 features are mixed
DTYPE = torch.float64
RTOL, ATOL = 1e-7, 1e-9  # forward: float64, only the matmul blocking differs
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


# ---------------------------------------------------------------------------------------
# The grader's schedule and stages
# ---------------------------------------------------------------------------------------


class GraderStageError(Exception):
    """The exception a grader stage raises on purpose (2.2-exceptions)."""


class GraderInterrupt(BaseException):
    """A stage's exception that is not an ``Exception`` (as KeyboardInterrupt is not)."""


FAILURES = {"Exception": GraderStageError, "BaseException": GraderInterrupt}


class GraderStage(nn.Module):
    """``[row number | tanh(linear(features))]`` on the rows of a batch of any rank >= 2 (flattened
    to WIDTH features per row): column 0 passes through, so any stage can tell which rows (and so
    which microbatch) it was given. On a 1-D batch (one number per row), ``tanh(w x + b)``.

    ``parameters``: "trained" (weight and bias are parameters), "frozen" (parameters that do not
    require grad) or "buffers" (a stage without parameters). Every call appends ``(first row,
    rows)`` to ``given`` and, after its output is made, a record to ``log`` (a list shared by the
    stages of one pipe). ``sleep`` seconds are slept first (releasing the GIL; 2.2-concurrency
    checks the time each call took, so changing ``sleep`` shows); ``fail_on`` names a microbatch
    (the one holding row ``fail_on * split_size``) on which the stage raises ``FAILURES[fail_with]``.
    """

    def __init__(self, index: int, generator: torch.Generator, log: list | None = None,
                 dtype: torch.dtype = DTYPE, parameters: str = "trained"):
        super().__init__()
        features = WIDTH - 1
        weight = torch.randn(features, features, generator=generator, dtype=DTYPE).to(dtype) / features**0.5
        bias = torch.randn(features, generator=generator, dtype=DTYPE).to(dtype) / 4
        if parameters == "buffers":
            self.register_buffer("weight", weight)
            self.register_buffer("bias", bias)
        else:
            self.weight = nn.Parameter(weight, requires_grad=parameters == "trained")
            self.bias = nn.Parameter(bias, requires_grad=parameters == "trained")
        self.index = index
        self.log = log
        self.sleep = 0.0
        self.fail_on: int | None = None
        self.fail_with = "Exception"
        self.split_size = 1
        self.raised: list[BaseException] = []  # every exception it raised (stray calls may raise several)
        self.given: list[tuple[int, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        rows = int(x.shape[0])
        flat = x.reshape(rows, -1) if x.dim() > 1 else x
        first = int(flat[0, 0].item()) if rows and x.dim() > 1 else -1
        self.given.append((first, rows))
        if self.fail_on is not None and first <= self.fail_on * self.split_size < first + rows:
            error = FAILURES[self.fail_with](f"stage {self.index} refuses microbatch {self.fail_on}")
            self.raised.append(error)
            raise error
        if x.dim() == 1:
            out = torch.tanh(x * self.weight[0, 0] + self.bias[0])
        else:
            mixed = torch.tanh(torch.nn.functional.linear(flat[:, 1:], self.weight, self.bias))
            out = torch.cat([flat[:, :1], mixed], dim=1).reshape(x.shape)
        if self.log is not None:
            self.log.append({
                "stage": self.index, "rows": rows, "first": first,
                "thread": threading.current_thread().name, "grad_enabled": torch.is_grad_enabled(),
                "inference": torch.is_inference_mode_enabled(), "graph": out.grad_fn is not None,
            })
        return out


def build_stages(seed: int, tag: int, count: int, log: list | None = None, dtype: torch.dtype = DTYPE,
                 kinds: list[str] | None = None) -> list[GraderStage]:
    """``count`` stages whose weights depend only on (seed, tag), not on the global RNG."""
    generator = torch.Generator().manual_seed(seed * 1009 + tag)
    kinds = kinds or ["trained"] * count
    return [GraderStage(j, generator, log, dtype, kinds[j]) for j in range(count)]


def make_batch(seed: int, tag: int, rows: int) -> torch.Tensor:
    """``rows`` distinct rows: column 0 is the row number, the rest random."""
    generator = torch.Generator().manual_seed(seed * 7919 + tag)
    batch = torch.randn(rows, WIDTH, generator=generator, dtype=DTYPE)
    batch[:, 0] = torch.arange(rows, dtype=DTYPE)
    return batch


def sequential(stages: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for stage in stages:
        x = stage(x)
    return x


def microbatch_sizes(rows: int, split_size: int) -> list[int]:
    return [min(split_size, rows - start) for start in range(0, rows, split_size)]


def _student_pipeline():
    """The submitted ``minitorch.pipeline`` with the grader's clock_cycles, and the runtime."""
    import minitorch.pipeline as pipeline
    from minitorch import runtime

    pipeline.clock_cycles = reference_clock_cycles
    return pipeline, runtime


def _make_pipe(pipeline, stages: list[GraderStage], split_size: int, devices: list[str] | None = None):
    for stage in stages:
        stage.split_size = split_size
    return pipeline.Pipe(stages, devices=devices or ["cpu"] * len(stages), split_size=split_size)


def _run_pipe(pipe, x: torch.Tensor, what: str) -> torch.Tensor:
    """``pipe(x)``, failing in the student's terms when the result is not one row per input row
    (before the grader computes anything with it, so no grader code raises on a wrong shape)."""
    out = student_tensor(pipe(x), f"{what}: Pipe forward")
    if tuple(out.shape) != tuple(x.shape):
        raise Fail(
            f"{what}: Pipe returned a tensor of shape {list(out.shape)}; expected {list(x.shape)} "
            "(one output row per input row: the stages keep the width)"
        )
    return out


def _microbatch_mistake(given: list[int], rows: int, split_size: int) -> str | None:
    """What is wrong with the microbatch sizes stage 0 was given, counted before anything else;
    None when they are right, or when stage 0 did not see every row once (then the calls, not
    the split, are wrong: later checks say how)."""
    sizes = microbatch_sizes(rows, split_size)
    if given == sizes or sum(given) != rows:
        return None
    if len(given) != len(sizes):
        return (
            f"ran {len(given)} microbatch{'es' * (len(given) != 1)} ({given} rows); split_size={split_size} rows per "
            f"microbatch gives {len(sizes)} ({sizes} rows). split_size is the number of ROWS per microbatch: "
            "torch.split(x, split_size)"
        )
    return (
        f"stage 0 was given microbatches of {given} rows; expected {sizes}: split_size rows each, only the last "
        "may be smaller (torch.split(x, split_size); torch.chunk spreads the rows evenly instead)"
    )


def _describe(stages: int, rows: int, split_size: int) -> str:
    m = len(microbatch_sizes(rows, split_size))
    return f"{stages} stage{'s' * (stages != 1)}, a batch of {rows} rows, split_size={split_size} ({m} microbatch{'es' * (m != 1)})"


# ---------------------------------------------------------------------------------------
# 2.1 clock_cycles
# ---------------------------------------------------------------------------------------

SCHEDULE_CASES = [(m, k) for m in range(7) for k in range(1, 6)] + [(16, 4), (3, 8), (40, 3), (1, 12)]
# M < 0, K == 0 and K < 0 each on their own (a check of one argument must not hide behind the other)
INVALID_CASES = [(-1, 3), (2, 0), (2, -1), (0, -2), (0, 0), (-3, -1),
                 (True, 3), (3, True), (2.0, 3), (3, 2.0), ("3", 3), (3, None)]
SHOWN_CASE = (3, 3)  # the docstring's example: the one a message quotes when a whole call is wrong


def _pairs(wave) -> list | None:
    """``wave`` as plain ``[(i, j), ...]`` ints, or None when it is not a sequence of pairs."""
    try:
        return [(int(i), int(j)) for i, j in wave]
    except (TypeError, ValueError):
        return None


# Laziness is judged by the memory clock_cycles allocates before it hands out its first wave,
# not by time (on a loaded machine any time limit fails a lazy generator now and then). LAZY_CASE
# has M * K = 160,000 pairs: a schedule with every wave built first holds a tuple per pair, over
# 10 MB; wave 0 alone is one pair, and state kept per microbatch or per stage (O(M + K)) stays in
# the tens of kilobytes. LAZY_BYTES lies a factor of ten from both.
LAZY_CASE = (400, 400)
LAZY_BYTES = 1_000_000
# tracemalloc's functions as they were when this module was imported (before any student code),
# so a submission that rebinds tracemalloc's names changes nothing the measurement calls.
_TRACEMALLOC = SimpleNamespace(
    start=tracemalloc.start, stop=tracemalloc.stop, is_tracing=tracemalloc.is_tracing,
    reset_peak=tracemalloc.reset_peak, get_traced_memory=tracemalloc.get_traced_memory,
    object_traceback=_get_object_traceback,  # tracemalloc.get_object_traceback looks this up at each call
)


def _take(produced, limit: int) -> dict:
    """Up to ``limit`` waves of ``produced``: their text, pairs and types, the waves themselves, and the error."""
    waves, yielded, pairs, types, error = [], [], [], [], None
    try:
        for wave in itertools.islice(produced, limit):
            waves.append(wave)
            types.append(type(wave).__name__)
            yielded.append(repr(wave)[:500])
            pairs.append(_pairs(wave))
    except NotImplementedError:
        raise
    except Exception as raised:  # noqa: BLE001 - judged with the case it belongs to (e.g. only M = 0)
        error = f"{type(raised).__name__}: {str(raised)[:300]}"
    return {"objects": waves, "waves": yielded, "pairs": pairs, "types": types, "error": error}


def _first_wave_memory(clock_cycles) -> dict:
    """What ``clock_cycles(*LAZY_CASE)`` allocated until it handed out its first wave: the peak
    of the memory tracemalloc traced, in bytes over what was traced before the call; whether the
    measurement was intact afterwards (still tracing, and an object traced before the call still
    traced: stopping, restarting or clearing tracemalloc loses it); and the error, if it raised."""
    started_here = not _TRACEMALLOC.is_tracing()
    _TRACEMALLOC.start()
    witness = bytearray(64)  # allocated (no free list) and so traced now, until the tracing stops or is cleared
    try:
        _TRACEMALLOC.reset_peak()
        before, error = _TRACEMALLOC.get_traced_memory()[0], None
        try:
            produced = clock_cycles(*LAZY_CASE)
            next(iter(produced), None)
        except NotImplementedError:
            raise
        except Exception as raised:  # noqa: BLE001 - the schedule's criteria say what is wrong with it
            error = f"{type(raised).__name__}: {str(raised)[:300]}"
        peak = _TRACEMALLOC.get_traced_memory()[1] - before
        intact = _TRACEMALLOC.is_tracing() and _TRACEMALLOC.object_traceback(witness) is not None
    finally:
        if started_here:
            _TRACEMALLOC.stop()
    return {"case": list(LAZY_CASE), "peak_bytes": peak, "intact": intact, "error": error}


def _observe_waves() -> dict:
    """Every (M, K) of SCHEDULE_CASES through the student's ``clock_cycles``: each wave as it
    was yielded (text, pairs, type), the same waves again once the iteration is over (a list
    object reused for every wave shows there), what the call returned, the shown case run
    again while another call runs in between."""
    from minitorch.pipeline import clock_cycles

    runs, objects = [], {}
    for m, k in SCHEDULE_CASES:
        taken = _take(clock_cycles(m, k), m + k + 8)  # an endless generator is cut off, not waited for
        objects[(m, k)] = taken.pop("objects")
        runs.append({"case": [m, k], "M": m, "K": k, **taken, "after": [repr(w)[:500] for w in objects[(m, k)]]})
    m, k = SHOWN_CASE
    outer = iter(clock_cycles(m, k))  # a list returned instead would start again at each islice
    first = _take(outer, 1)
    first.pop("objects")
    _take(clock_cycles(4, 2), 12)  # another call while the first one is half way through
    rest = _take(outer, m + k + 8)
    fresh = rest.pop("objects")
    interleaved = {key: first[key] + rest[key] for key in ("waves", "pairs", "types")}
    interleaved["error"] = first["error"] or rest["error"]
    shared = any(any(wave is old for old in objects[SHOWN_CASE]) for wave in fresh)
    produced = clock_cycles(*SHOWN_CASE)
    iterator = iter(produced) is produced and hasattr(produced, "__next__")
    return {"runs": runs, "iterator": iterator, "type": type(produced).__name__, "interleaved": interleaved,
            "shared_across_calls": shared}


def _schedule_runs(observation) -> list:
    """The runs, after checking they are exactly the (M, K) the grader asked for."""
    return expect_cases(observation["runs"], [list(case) for case in SCHEDULE_CASES], "clock_cycles")


def _runs(observation, microbatches: bool, judge_errors: bool = True):
    """The runs with M >= 1 (``microbatches``) or with M == 0, as (call, expected waves, run).
    A run that raised is a Fail when ``judge_errors`` (the criterion of those cases), else left
    out (a convention's criterion does not pay again for a wrong schedule)."""
    for run in _schedule_runs(observation):
        m, k = run["case"]
        if (m >= 1) != microbatches or (run["error"] is not None and not judge_errors):
            continue
        call, expected = f"clock_cycles({m}, {k})", list(reference_clock_cycles(m, k))
        if run["error"] is not None:
            after = f" after yielding {len(run['waves'])} waves" if run["waves"] else ""
            raise Fail(f"{call} raised {run['error']}{after}; expected {len(expected)} waves" +
                       ("" if microbatches else " (none: M = 0 is valid and has no microbatches)"))
        yield call, expected, run


def _no_wave_at_all(observation) -> None:
    """Fail when no call with microbatches yielded anything (a criterion must not pass on nothing)."""
    if not any(run["waves"] for _, _, run in _runs(observation, microbatches=True, judge_errors=False)):
        m, k = SHOWN_CASE
        raise Fail(f"clock_cycles({m}, {k}) yielded no wave (nor did any other call with M >= 1); see 2.1-schedule")


def observe_schedule(seed: int, params: dict):
    """Drives the student's ``clock_cycles`` over every (M, K) of SCHEDULE_CASES and records each wave."""
    return _observe_waves()


def judge_schedule(seed: int, params: dict, observation) -> None:
    """The right pairs in the right waves for every M >= 1 (the order inside a wave is 2.1-stage-order),
    also for a call whose iteration is interrupted by another call."""
    m, k = SHOWN_CASE
    interleaved = (f"clock_cycles({m}, {k}) with a whole clock_cycles(4, 2) run after its first wave",
                   list(reference_clock_cycles(m, k)), observation["interleaved"])
    for call, expected, run in [*_runs(observation, microbatches=True), interleaved]:
        if run["error"] is not None:
            raise Fail(f"{call} raised {run['error']}; expected {len(expected)} waves")
        got, pairs = run["waves"], run["pairs"]
        for index, (want, have, text) in enumerate(zip(expected, pairs, got)):
            if have is None:
                raise Fail(f"{call}, wave {index} is {text}; expected a list of (microbatch, stage) pairs such as {want}")
            if sorted(have) != sorted(want):
                raise Fail(
                    f"{call}, wave {index}: expected the pairs {sorted(want, key=lambda p: p[1])} (in any order), "
                    f"got {text} (each pair in the earliest clock cycle it can run in)"
                )
        if len(got) < len(expected):
            raise Fail(f"{call} yielded {len(got)} waves; expected M + K - 1 = {len(expected)} (missing wave {len(got)}: {expected[len(got)]})")
        if len(got) > len(expected):
            more = "more than " if len(got) == len(expected) + 9 else ""
            raise Fail(f"{call} yielded {more}{len(got)} waves; expected M + K - 1 = {len(expected)}; wave {len(expected)} was {got[len(expected)]}")


def observe_stage_order(seed: int, params: dict):
    """The same calls as 2.1-schedule; judged on the order of the pairs inside each wave."""
    return _observe_waves()


def judge_stage_order(seed: int, params: dict, observation) -> None:
    """Inside every wave the pairs come by increasing stage j, as the Pipe submits them."""
    _no_wave_at_all(observation)
    ordered = 0
    for call, _, run in _runs(observation, microbatches=True, judge_errors=False):
        for index, (pairs, text) in enumerate(zip(run["pairs"], run["waves"])):
            if pairs is None or len(pairs) < 2:
                continue
            stages = [j for _, j in pairs]
            if stages != sorted(stages):
                raise Fail(
                    f"{call}, wave {index} is {text}: not ordered by increasing stage; expected "
                    f"{sorted(pairs, key=lambda p: p[1])} (list a wave by stage: stage 0 first, then 1, ...)"
                )
            ordered += 1
    if not ordered:
        raise Fail("no wave held two or more (microbatch, stage) pairs to order; see 2.1-schedule")


def observe_generator(seed: int, params: dict):
    """The same calls as 2.1-schedule, what ``clock_cycles(3, 3)`` returns, and the memory a long schedule's first wave takes."""
    from minitorch.pipeline import clock_cycles

    return {**_observe_waves(), "laziness": [_first_wave_memory(clock_cycles)]}


def judge_generator(seed: int, params: dict, observation) -> None:
    """A generator (an iterator, not a list) that yields each wave as a list of its own."""
    m, k = SHOWN_CASE
    if not observation["iterator"]:
        raise Fail(
            f"clock_cycles({m}, {k}) returned a {observation['type']}; expected a generator "
            "(write it with yield, one wave at a time, so a Pipe can start wave 0 before the rest is computed)"
        )
    _no_wave_at_all(observation)
    if observation["shared_across_calls"]:  # before laziness: a cache is also built eagerly, once
        raise Fail(f"clock_cycles{SHOWN_CASE} called twice yielded the same list objects both times (cached waves?): "
                   "a caller that changes its waves would change the next caller's. Yield new lists on every call")
    _judge_laziness(observation)
    for call, _, run in _runs(observation, microbatches=True, judge_errors=False):
        kinds = sorted({kind for kind in run["types"] if kind != "list"})
        if kinds:
            raise Fail(f"{call} yielded a wave of type {kinds[0]} ({run['waves'][run['types'].index(kinds[0])][:80]}); "
                       "expected each wave as a list")
        for index, (then, now) in enumerate(zip(run["waves"], run["after"])):
            if then != now:
                raise Fail(
                    f"{call}: wave {index} was {then} when it was yielded and {now} once the iteration was over: "
                    "the same list object is reused for every wave, so list(clock_cycles(...)) repeats the last "
                    "one. Yield a new list for each wave"
                )


def _judge_laziness(observation) -> None:
    """Fail when clock_cycles(*LAZY_CASE) allocated more than LAZY_BYTES before its first wave, or
    when its code stopped or cleared the memory measurement."""
    measured = expect_cases(observation["laziness"], [list(LAZY_CASE)], "clock_cycles laziness")[0]
    call = f"clock_cycles{LAZY_CASE}"
    if measured["intact"] is not True:
        raise Fail(
            f"{call} stopped, restarted or cleared tracemalloc, with which the grader measures the memory a "
            "generator takes before its first wave, so its laziness could not be judged. Leave tracemalloc alone"
        )
    peak = measured["peak_bytes"]
    if type(peak) is not int:
        raise Malformed(f"{call}: the grader could not read the memory it measured (got {type(peak).__name__})")
    if peak > LAZY_BYTES:
        until = f"it raised {measured['error']}" if measured["error"] is not None else "it yielded its first wave"
        raise Fail(
            f"{call} allocated {peak / 1e6:.1f} MB before {until} (wave 0 is the single pair (0, 0); the grader "
            f"allows {LAZY_BYTES / 1e6:.0f} MB, far more than state kept per microbatch or per stage takes): every "
            "wave was computed before the first was handed out. A generator computes each wave when it is asked for"
        )


def observe_no_microbatches(seed: int, params: dict):
    """The same calls as 2.1-schedule, including M = 0 with K = 1..5."""
    return _observe_waves()


def judge_no_microbatches(seed: int, params: dict, observation) -> None:
    """M = 0 yields no wave at all (not K - 1 empty ones)."""
    _no_wave_at_all(observation)
    for call, _, run in _runs(observation, microbatches=False):
        if run["waves"]:
            shown = ", ".join(run["waves"][:4]) + (", ..." if len(run["waves"]) > 4 else "")
            raise Fail(
                f"{call} yielded {len(run['waves'])} wave{'s' * (len(run['waves']) != 1)} ({shown}); "
                "expected none: with no microbatches there is nothing to schedule, not K - 1 empty waves"
            )


def observe_errors(seed: int, params: dict):
    """Calls ``clock_cycles`` with invalid (M, K) and records what it raised, and when (at the call or on iteration)."""
    from minitorch.pipeline import clock_cycles

    results = []
    for m, k in INVALID_CASES:
        entry = {"case": [repr(m), repr(k)], "M": repr(m), "K": repr(k)}
        try:
            produced = clock_cycles(m, k)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the type is what is graded
            results.append({**entry, "when": "call", "error": type(error).__name__, "message": str(error)[:300]})
            continue
        try:
            first = next(iter(produced))
        except NotImplementedError:
            raise
        except StopIteration:
            results.append({**entry, "when": "next", "error": None, "message": "yielded nothing"})
        except Exception as error:  # noqa: BLE001
            results.append({**entry, "when": "next", "error": type(error).__name__, "message": str(error)[:300]})
        else:
            results.append({**entry, "when": "next", "error": None, "message": f"yielded {first!r}"[:300]})
    return results


def judge_errors(seed: int, params: dict, observation) -> None:
    # The docstring promises ValueError at the call or, at the latest, on the first next():
    # a generator function raises on the first next, a wrapper that checks its arguments
    # first raises at the call; both are right. Any other exception type, or none, is wrong.
    asked = [[repr(m), repr(k)] for m, k in INVALID_CASES]
    for result in expect_cases(observation, asked, "clock_cycles with bad arguments"):
        call = f"clock_cycles({result['case'][0]}, {result['case'][1]})"
        if result["error"] is None:
            raise Fail(f"{call} must raise ValueError (not ints, num_microbatches < 0 or num_stages < 1); it {result['message']}")
        if result["error"] != "ValueError":
            raise Fail(f"{call} raised {result['error']}: {result['message']}; expected ValueError")


# ---------------------------------------------------------------------------------------
# 2.2 forward
# ---------------------------------------------------------------------------------------

# Each case: the stages, the batch size of each call on one Pipe (later calls with other sizes,
# one row), split_size (1, uneven, larger than the batch; 9 rows at 4 are [4, 4, 1], not
# torch.chunk's [3, 3, 3]), and what the contract allows beyond the worked example: ranks 1 to 4,
# float32, a non-contiguous batch, stages without or with frozen parameters, a tuple or a
# ModuleList of stages.
FORWARD_CASES = [
    {"stages": 1, "rows": [5, 5], "split": 2},
    {"stages": 2, "rows": [7, 3], "split": 3},
    {"stages": 3, "rows": [6, 1], "split": 1},
    {"stages": 3, "rows": [4, 9], "split": 10},
    {"stages": 3, "rows": [10, 10, 7], "split": 4},
    {"stages": 2, "rows": [8], "split": 8, "container": "tuple"},
    {"stages": 3, "rows": [9, 6], "split": 4, "container": "ModuleList"},
    {"stages": 2, "rows": [6], "split": 4},
    {"stages": 4, "rows": [7], "split": 2, "dtype": "float32", "kinds": ["trained", "buffers", "frozen", "trained"]},
    {"stages": 3, "rows": [5, 2], "split": 2, "shape": [2, 1, 3]},
    {"stages": 2, "rows": [5], "split": 2, "shape": []},
    {"stages": 3, "rows": [6], "split": 4, "layout": "transposed"},
]
TOLERANCE = {"float64": (RTOL, ATOL), "float32": (1e-5, 1e-6)}


def _case_stages(seed: int, index: int, case: dict, log: list | None = None) -> list[GraderStage]:
    dtype = getattr(torch, case.get("dtype", "float64"))
    return build_stages(seed, index, case["stages"], log, dtype, case.get("kinds"))


def case_input(seed: int, tag: int, rows: int, case: dict) -> torch.Tensor:
    """The batch of one call: ``make_batch``'s rows in the case's rank, dtype and layout."""
    batch = make_batch(seed, tag, rows)
    shape = case.get("shape", [WIDTH])
    x = batch[:, 1].contiguous() if not shape else batch.reshape(rows, *shape)
    x = x.to(getattr(torch, case.get("dtype", "float64")))
    return x.t().contiguous().t() if case.get("layout") == "transposed" else x


def _case_text(case: dict) -> str:
    extras = []
    shape = case.get("shape", [WIDTH])
    if shape != [WIDTH]:
        extras.append(f"a batch of shape [rows, {', '.join(map(str, shape))}]" if shape else "a 1-D batch")
    if "dtype" in case:
        extras.append(case["dtype"])
    if case.get("layout") == "transposed":
        extras.append("a non-contiguous batch (x.t().contiguous().t())")
    if "kinds" in case:
        extras.append("stages " + ", ".join(f"{j}: {kind}" for j, kind in enumerate(case["kinds"]))
                      + " (buffers: no parameters)")
    if "container" in case:
        extras.append(f"the stages given as a {case['container']}")
    return "; ".join(extras)


def _given_stages(stages: list, case: dict):
    container = case.get("container", "list")
    return tuple(stages) if container == "tuple" else nn.ModuleList(stages) if container == "ModuleList" else stages


def observe_forward(seed: int, params: dict):
    """Runs the student's ``Pipe`` on the grader's stages for every FORWARD_CASE and records outputs and stage logs."""
    pipeline, _ = _student_pipeline()
    cases = []
    for index, case in enumerate(FORWARD_CASES):
        log: list = []
        stages = _case_stages(seed, index, case, log)
        for stage in stages:
            stage.split_size = case["split"]
        pipe = pipeline.Pipe(_given_stages(stages, case), devices=["cpu"] * len(stages), split_size=case["split"])
        try:
            stage_params = {id(p) for stage in stages for p in stage.parameters()}
            registered = {id(p) for p in pipe.parameters()} & stage_params
            runs = []
            for call, rows in enumerate(case["rows"]):
                del log[:]
                x = case_input(seed, 100 * index + call, rows, case)
                extras = _case_text(case)
                what = _describe(len(stages), rows, case["split"]) + (f"; {extras}" if extras else "")
                out = _run_pipe(pipe, x, f"{what}, call {call + 1} of {len(case['rows'])} on one Pipe")
                runs.append({
                    "output": out.detach().clone(), "device": str(out.device),
                    "sizes": [[r["rows"] for r in log if r["stage"] == j] for j in range(len(stages))],
                })
        finally:
            pipe.close()
        cases.append({"case": index, "runs": runs, "registered": len(registered), "parameters": len(stage_params)})
    return cases


def _compare_rows(expected: torch.Tensor, got: torch.Tensor, split_size: int, rtol: float = RTOL,
                  atol: float = ATOL) -> str:
    """Say how ``got`` differs from ``expected`` row by row (reordered? which microbatch?)."""
    close = torch.isclose(got, expected, rtol=rtol, atol=atol).all(dim=1)
    bad = (~close).nonzero().flatten().tolist()
    moved = []
    for row in bad:
        match = torch.isclose(expected, got[row], rtol=rtol, atol=atol).all(dim=1).nonzero().flatten().tolist()
        moved.append(match[0] if match else None)
    if all(source is not None for source in moved):
        pairs = ", ".join(f"row {row} holds the result of input row {source}" for row, source in list(zip(bad, moved))[:4])
        return f"rows are out of order: {pairs} (concatenate the microbatches in their original order)"
    row = bad[0]
    return (
        f"output row {row} (microbatch {row // split_size}) differs from the stages run in sequence "
        f"{difference(got[row], expected[row]).removeprefix('differs ')}"
    )


def judge_forward(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, list(range(len(FORWARD_CASES))), "Pipe forward")
    for index, (case, seen) in enumerate(zip(FORWARD_CASES, entries)):
        split_size, calls = case["split"], len(case["rows"])
        stages = _case_stages(seed, index, case)
        rtol, atol = TOLERANCE[case.get("dtype", "float64")]
        extras = _case_text(case)
        if seen["registered"] != seen["parameters"]:
            raise Fail(f"case {index} ({extras or 'the grader stages'}): pipe.parameters() holds {seen['registered']} "
                       f"of the stages' {seen['parameters']} parameters")
        if len(seen["runs"]) != calls:
            raise Malformed(f"Pipe forward, case {index}: {len(seen['runs'])} calls came back; the grader made {calls}")
        for call, (rows, run) in enumerate(zip(case["rows"], seen["runs"])):
            what = _describe(case["stages"], rows, split_size) + (f"; {extras}" if extras else "")
            where = f"{what}, call {call + 1} of {calls} on one Pipe"
            x = case_input(seed, 100 * index + call, rows, case)
            sizes = microbatch_sizes(rows, split_size)
            mistake = _microbatch_mistake(run["sizes"][0], rows, split_size)
            if mistake:
                raise Fail(f"{where}: {mistake}")
            for j, got in enumerate(run["sizes"]):
                if got != sizes:
                    raise Fail(
                        f"{where}: stage {j} was given microbatches of {got} rows; expected {sizes}, as stage 0 "
                        "(the output of (i, j) is the input of (i, j + 1))"
                    )
            with torch.no_grad():
                expected = sequential(stages, x)
            out = expect_tensor(run["output"], f"{where}: the output")
            if tuple(out.shape) != tuple(expected.shape) or out.dtype != expected.dtype:
                raise Fail(f"{where}: expected an output of shape {list(expected.shape)} ({expected.dtype}), got {list(out.shape)} ({out.dtype})")
            if not torch.allclose(out, expected, rtol=rtol, atol=atol):
                stale = " (results left over from an earlier call?)" if call else ""
                flat_out, flat_expected = out.reshape(rows, -1), expected.reshape(rows, -1)
                if flat_out.dim() == 1:
                    flat_out, flat_expected = flat_out.unsqueeze(1), flat_expected.unsqueeze(1)
                raise Fail(f"{where}: {_compare_rows(flat_expected, flat_out, split_size, rtol, atol)}{stale}")
            if run["device"] != "cpu":
                raise Fail(f"{where}: the output is on {run['device']}; expected the last stage's device cpu")


# ---------------------------------------------------------------------------------------
# 2.2 input unchanged (a convention: the caller's tensor is not the Pipe's to change)
# ---------------------------------------------------------------------------------------

# (stages, rows, split_size, requires_grad, layout)
INPUT_CASES = [(3, 6, 2, False, "contiguous"), (2, 5, 2, True, "contiguous"), (2, 4, 1, False, "transposed"),
               (2, 3, 2, True, "transposed")]


def _input_case(seed: int, index: int) -> torch.Tensor:
    count, rows, split_size, requires_grad, layout = INPUT_CASES[index]
    return case_input(seed, 500 + index, rows, {"layout": layout}).requires_grad_(requires_grad)


def observe_input_unchanged(seed: int, params: dict):
    """Runs the ``Pipe`` on batches with and without requires_grad, contiguous or not, and records the batch afterwards."""
    pipeline, _ = _student_pipeline()
    entries = []
    for index, (count, _, split_size, _, _) in enumerate(INPUT_CASES):
        x = _input_case(seed, index)
        pipe = _make_pipe(pipeline, build_stages(seed, 500 + index, count), split_size)
        try:
            pipe(x)  # only what happens to x is judged here: a wrong or failing forward is 2.2-forward's
        except NotImplementedError:
            raise
        except Exception:  # noqa: BLE001
            pass
        finally:
            pipe.close()
        entries.append({"case": index, "values": x.detach().clone(), "requires_grad": bool(x.requires_grad),
                        "grad_fn": x.grad_fn is not None})
    return entries


def judge_input_unchanged(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, list(range(len(INPUT_CASES))), "Pipe forward, the caller's input")
    for index, entry in enumerate(entries):
        count, rows, split_size, requires_grad, layout = INPUT_CASES[index]
        where = f"{_describe(count, rows, split_size)}, a {layout} batch with requires_grad={requires_grad}"
        if entry["requires_grad"] != requires_grad or entry["grad_fn"]:
            raise Fail(f"{where}: after the forward the caller's x has requires_grad={entry['requires_grad']}; "
                       "the Pipe must not switch it (whether x gets a gradient is the caller's choice)")
        before = _input_case(seed, index).detach()
        if not close(expect_tensor(entry["values"], where), before, 0, 0):
            raise Fail(f"{where}: forward changed the caller's x in place (its values {difference(entry['values'], before)}); "
                       "it must leave x as it was")


# ---------------------------------------------------------------------------------------
# 2.2 call order
# ---------------------------------------------------------------------------------------

# (stages, rows, split_size, calls); 9 rows at split_size 4 are [4, 4, 1], not torch.chunk's [3, 3, 3]
CALL_ORDER_CASES = [(3, 6, 2, 2), (2, 9, 2, 1), (4, 2, 1, 1), (1, 3, 1, 1), (3, 5, 8, 1), (3, 9, 4, 1)]


def observe_call_order(seed: int, params: dict):
    """Records the submit/receive events the student's ``Pipe`` issues on ``StageWorkers`` for every CALL_ORDER_CASE."""
    pipeline, runtime = _student_pipeline()
    cases = []
    for case, (count, rows, split_size, calls) in enumerate(CALL_ORDER_CASES):
        log: list = []
        pipe = _make_pipe(pipeline, build_stages(seed, case, count, log), split_size)
        runs = []
        try:
            for call in range(calls):
                events: list = []
                del log[:]
                with runtime.observe(events.append):
                    pipe(make_batch(seed, 100 * case + call, rows))
                runs.append({
                    "events": [(e.kind, e.stage) for e in events if e.kind in ("submit", "receive")],
                    "ran": [(r["stage"], r["first"], r["rows"]) for r in log],
                })
        finally:
            pipe.close()
        cases.append({"case": list(CALL_ORDER_CASES[case]), "runs": runs})
    return cases


def judge_call_order(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, [list(case) for case in CALL_ORDER_CASES], "Pipe call order")
    for (count, rows, split_size, calls), entry in zip(CALL_ORDER_CASES, entries):
        runs = entry["runs"]
        if len(runs) != calls:
            raise Malformed(f"Pipe call order: {len(runs)} calls came back; the grader made {calls}")
        sizes = microbatch_sizes(rows, split_size)
        m = len(sizes)
        for call, run in enumerate(runs):
            where = f"{_describe(count, rows, split_size)}, call {call + 1}"
            got = [f"{kind}({stage})" for kind, stage in run["events"]]
            if not got:
                raise Fail(f"{where}: no submit or receive was recorded; every stage must run through self.workers.submit / receive")
            # Count (and size) the microbatches first: with another count every wave would differ.
            mistake = _microbatch_mistake([rows_ for stage, _, rows_ in run["ran"] if stage == 0], rows, split_size)
            if mistake:
                raise Fail(f"{where}: {mistake}")
            position = 0
            for wave, want in enumerate(expected_calls(m, count)):
                have = got[position : position + len(want)]
                if have != want:
                    raise Fail(f"{where}: wave {wave}: expected {' '.join(want)}; got {' '.join(have) or 'nothing'}")
                position += len(want)
            if position < len(got):
                raise Fail(f"{where}: after the last wave: expected nothing; got {' '.join(got[position:position + 8])}")
            for j in range(count):
                ran = [first // split_size for stage, first, _ in run["ran"] if stage == j]
                if ran != list(range(m)):
                    late = (f" Stage {j} ran {len(ran)} times for {m} submits: does the callable read i and j when "
                            "it runs (late binding) instead of binding them when it is made?" if len(ran) != m else "")
                    raise Fail(
                        f"{where}: stage {j} ran microbatches {ran}; expected {list(range(m))} in order "
                        f"(submit (i, j) with microbatch i's output of stage j - 1).{late}"
                    )


# ---------------------------------------------------------------------------------------
# 2.2 no_grad / inference_mode
# ---------------------------------------------------------------------------------------

GRAD_CASE = (3, 6, 2)
GRAD_MODES = {"torch.no_grad()": torch.no_grad, "torch.inference_mode()": torch.inference_mode}


def observe_no_grad(seed: int, params: dict):
    """Runs the ``Pipe`` under ``torch.no_grad()`` and ``torch.inference_mode()`` and records the grad mode each stage saw."""
    pipeline, _ = _student_pipeline()
    count, rows, split_size = GRAD_CASE
    log: list = []
    pipe = _make_pipe(pipeline, build_stages(seed, 0, count, log), split_size)
    modes = {}
    try:
        for name, mode in GRAD_MODES.items():
            del log[:]
            try:
                with mode():
                    out = _run_pipe(pipe, make_batch(seed, len(modes), rows), f"under {name}")
            except NotImplementedError:
                raise
            except Exception as error:  # noqa: BLE001 - e.g. a graph over inference tensors
                modes[name] = {"case": name, "error": f"{type(error).__name__}: {str(error)[:300]}"}
                continue
            modes[name] = {
                "case": name,
                "stages": [(r["stage"], r["graph"]) for r in log],
                "requires_grad": bool(out.requires_grad), "grad_fn": out.grad_fn is not None,
                "grad_enabled_after": torch.is_grad_enabled(),
                "inference_after": torch.is_inference_mode_enabled(),
            }
        del log[:]
        out = _run_pipe(pipe, make_batch(seed, 9, rows), "a forward after no_grad / inference_mode")
        after = {"requires_grad": bool(out.requires_grad), "stages": [(r["stage"], r["graph"]) for r in log]}
    finally:
        pipe.close()
    return {"modes": list(modes.values()), "after": after}


def judge_no_grad(seed: int, params: dict, observation) -> None:
    count = GRAD_CASE[0]
    thread_local = (
        "Grad mode is thread-local: a stage run on another thread must get the caller's mode "
        "(StageWorkers.submit does this for you; your own threads do not)"
    )
    for seen in expect_cases(observation["modes"], list(GRAD_MODES), "Pipe under no_grad / inference_mode"):
        name = seen["case"]
        if "error" in dict.keys(seen):
            raise Fail(f"under {name}, the forward raised {seen['error']}. A stage probably ran with grad mode on. {thread_local}")
        if not seen["stages"]:
            raise Fail(f"under {name}: no stage ran")
        graphs = sorted({stage for stage, graph in seen["stages"] if graph})
        if graphs:
            raise Fail(
                f"under {name}, stage {graphs[0]} built an autograd graph (its output has a grad_fn): it ran with "
                f"grad mode on. {thread_local}"
            )
        if seen["requires_grad"] or seen["grad_fn"]:
            raise Fail(f"under {name}, the Pipe's output requires grad; expected no graph at all")
        if not seen["grad_enabled_after"] or seen["inference_after"]:
            raise Fail(f"after a forward under {name}, grad mode on the calling thread was not restored")
    after = observation["after"]
    if not after["requires_grad"] or sorted({s for s, graph in after["stages"] if graph}) != list(range(count)):
        raise Fail("after forwards under no_grad / inference_mode, a normal forward no longer builds a graph in every stage")


# ---------------------------------------------------------------------------------------
# 2.2 exceptions
# ---------------------------------------------------------------------------------------

# (stages, rows, split_size, failing stage, failing microbatch, what it raises): an Exception in
# the middle, a BaseException in a wave that still has a pair to take back after it, an error in
# the last wave (after every other pair ran), one in the first wave (nothing else may run).
EXCEPTION_CASES = [(3, 6, 2, 1, 1, "Exception"), (3, 6, 2, 1, 2, "BaseException"), (3, 6, 2, 2, 2, "Exception"),
                   (3, 6, 2, 0, 0, "Exception")]


def _new_threads(before: set, wait: float = 2.0) -> list[str]:
    deadline = time.monotonic() + wait
    while True:
        alive = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def _chained(error: BaseException | None, target: BaseException, depth: int = 0) -> bool:
    """Whether ``target`` is ``error`` or its cause / context (a wrapper still carries it)."""
    if error is None or depth > 20:
        return False
    return error is target or _chained(error.__cause__ or error.__context__, target, depth + 1)


def _exception_case(seed: int, pipeline, index: int) -> dict:
    count, rows, split_size, bad_stage, bad_microbatch, kind = EXCEPTION_CASES[index]
    stages = build_stages(seed, 600 + index, count)
    stages[bad_stage].fail_on, stages[bad_stage].fail_with = bad_microbatch, kind
    pipe = _make_pipe(pipeline, stages, split_size)
    try:
        try:
            pipe(make_batch(seed, 600 + index, rows))
            caught = {"raised": False}
        except NotImplementedError:
            raise
        except BaseException as error:  # noqa: BLE001 - what reached the caller is graded
            raised = stages[bad_stage].raised
            caught = {
                "raised": True, "type": type(error).__qualname__, "message": str(error)[:500],
                "same_object": any(error is own for own in raised),
                "carries": any(_chained(error, own) for own in raised),
            }
        stage_raised = bool(stages[bad_stage].raised)
        calls = [len(stage.given) for stage in stages]
        given = list(stages[bad_stage].given)
        stages[bad_stage].fail_on = None
        try:
            out = _run_pipe(pipe, make_batch(seed, 700 + index, rows), "the next forward")
            again = {"output": student_tensor(out, "the next forward").detach().clone(), "error": None}
        except Fail:
            raise
        except Exception as error:  # noqa: BLE001
            again = {"output": None, "error": f"{type(error).__name__}: {str(error)[:300]}"}
    finally:
        pipe.close()
    return {"case": index, "caught": caught, "stage_raised": stage_raised, "given": given, "calls": calls, "again": again}


def _observe_exception_cases(seed: int) -> dict:
    pipeline, _ = _student_pipeline()
    before = set(threading.enumerate())
    cases = [_exception_case(seed, pipeline, index) for index in range(len(EXCEPTION_CASES))]
    return {"cases": cases, "alive": _new_threads(before)}


def _exception_where(index: int) -> str:
    count, rows, split_size, bad_stage, bad_microbatch, kind = EXCEPTION_CASES[index]
    name = FAILURES[kind].__qualname__
    return f"{_describe(count, rows, split_size)}, stage {bad_stage} raising {name} (an {kind}) on microbatch {bad_microbatch}"


def observe_exceptions(seed: int, params: dict):
    """Makes one grader stage raise on one microbatch (several cases) and records what reached the caller,
    the next forward, and which threads were left."""
    return _observe_exception_cases(seed)


def judge_exceptions(seed: int, params: dict, observation) -> None:
    """The stage's error reaches the caller (itself or carried by another exception) and the Pipe works again."""
    entries = expect_cases(observation["cases"], list(range(len(EXCEPTION_CASES))), "Pipe forward with a failing stage")
    for index, seen in enumerate(entries):
        count, rows, split_size, bad_stage, bad_microbatch, kind = EXCEPTION_CASES[index]
        where = _exception_where(index)
        caught = seen["caught"]
        if not seen["stage_raised"]:
            first = bad_microbatch * split_size
            given = ", ".join(f"rows {start}-{start + size - 1}" for start, size in seen["given"]) or "nothing"
            raise Fail(
                f"{where}: stage {bad_stage} was never given microbatch {bad_microbatch} (rows {first}-{first + split_size - 1}), "
                f"so it never raised; it was given {given}. The microbatches reach the wrong stages (a lambda that "
                "reads i and j when it runs instead of binding them? see 2.2-call-order)"
            )
        if not caught["raised"]:
            raise Fail(f"{where}: the Pipe returned normally; the stage's exception must reach the caller (it was swallowed)")
        same_kind = caught["type"] == FAILURES[kind].__qualname__
        if not (caught["carries"] or same_kind or f"stage {bad_stage} refuses microbatch {bad_microbatch}" in caught["message"]):
            raise Fail(f"{where}: the caller got {caught['type']}: {caught['message']!r}, which does not carry the stage's "
                       "exception; the stage's exception must reach the caller")
        again = seen["again"]
        if again["error"] is not None:
            raise Fail(f"{where}: the next forward on a good batch raised {again['error']}; the Pipe must still work after an error")
        stages = build_stages(seed, 600 + index, count)
        with torch.no_grad():
            expected = sequential(stages, make_batch(seed, 700 + index, rows))
        out = expect_tensor(again["output"], f"{where}: the next forward")
        if tuple(out.shape) != tuple(expected.shape) or not torch.allclose(out, expected, rtol=RTOL, atol=ATOL):
            detail = _compare_rows(expected, out, split_size) if out.shape == expected.shape else f"shape {list(out.shape)}"
            raise Fail(
                f"{where}: the next forward on a good batch is wrong ({detail}): either the forward itself is wrong "
                "(see 2.2-forward) or results of the failed call were left in the workers (receive the rest of the "
                "wave before raising)"
            )
    if observation["alive"]:
        raise Fail(f"threads still alive after close(): {', '.join(observation['alive'][:5])}")


def observe_exception_unchanged(seed: int, params: dict):
    """The same failing stages as 2.2-exceptions; judged on what reached the caller and on what ran after the error."""
    return _observe_exception_cases(seed)


def judge_exception_unchanged(seed: int, params: dict, observation) -> None:
    """The stage's own exception object, raised once its wave is taken back: no later wave runs."""
    entries = expect_cases(observation["cases"], list(range(len(EXCEPTION_CASES))), "Pipe forward with a failing stage")
    if not any(seen["stage_raised"] for seen in entries):
        raise Fail("no grader stage ever raised (it never got the microbatch it fails on); see 2.2-exceptions")
    for index, seen in enumerate(entries):
        count, rows, split_size, bad_stage, bad_microbatch, kind = EXCEPTION_CASES[index]
        where = _exception_where(index)
        caught = seen["caught"]
        if not seen["stage_raised"]:
            continue  # the microbatches went astray: 2.2-exceptions and 2.2-call-order say how
        if not caught["raised"]:
            raise Fail(f"{where}: the stage's exception never reached the caller; see 2.2-exceptions")
        name = FAILURES[kind].__qualname__
        if not caught["same_object"]:
            got = f"{caught['type']}: {caught['message']!r}"
            raise Fail(
                f"{where}: the caller got {got}, not the object the stage raised; re-raise the stage's own "
                f"exception (raise error), unchanged, not wrapped and not a new {name}, so its type, traceback and attributes reach the caller"
            )
        failing_wave = bad_stage + bad_microbatch
        microbatches = len(microbatch_sizes(rows, split_size))
        allowed = [sum(1 for i in range(microbatches) if i + j <= failing_wave) for j in range(count)]
        if sum(seen["calls"]) > sum(allowed):  # counted over all stages: microbatches sent astray are 2.2-call-order's
            raise Fail(
                f"{where}: the stages ran {list(seen['calls'])} microbatches (stage 0, 1, ...) before the error reached the "
                f"caller; expected {allowed}: the forward stops once the wave the error was raised in is taken back, "
                "no later wave runs"
            )


# ---------------------------------------------------------------------------------------
# 2.2 backward
# ---------------------------------------------------------------------------------------

BACKWARD_CASE = (3, 10, 3)  # stages, rows, split_size (microbatches of 3, 3, 3, 1)
SGD_STEPS, LEARNING_RATE = 3, 0.1


def _loss_weights(seed: int, tag: int, rows: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 104729 + tag)
    return torch.randn(rows, WIDTH, generator=generator, dtype=DTYPE)


def _gradients(stages) -> list[list]:
    return [[None if p.grad is None else p.grad.detach().clone() for p in stage.parameters()] for stage in stages]


def _run_backward(seed: int, model, stages, parameters) -> dict:
    """Gradients, then SGD steps through ``model`` (the Pipe, or the stages in sequence)."""
    rows = BACKWARD_CASE[1]
    x = make_batch(seed, 0, rows).requires_grad_()
    out = _run_pipe(model, x, _describe(*BACKWARD_CASE))
    (out * _loss_weights(seed, 0, rows)).sum().backward()
    seen = {"output": out.detach(), "input_grad": None if x.grad is None else x.grad.clone(), "grads": _gradients(stages)}
    # Plain SGD written out (torch.optim's first use costs seconds of lazy imports).
    losses = []
    for step in range(1, SGD_STEPS + 1):
        for parameter in parameters:
            parameter.grad = None
        loss = (_run_pipe(model, make_batch(seed, step, rows), f"SGD step {step}") * _loss_weights(seed, step, rows)).sum()
        loss.backward()
        with torch.no_grad():
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter -= LEARNING_RATE * parameter.grad
        losses.append(float(loss.detach()))
    seen["losses"] = losses
    seen["parameters"] = [[p.detach().clone() for p in stage.parameters()] for stage in stages]
    return seen


def observe_backward(seed: int, params: dict):
    """Runs forward, backward and SGD steps through the ``Pipe`` and records outputs, gradients and parameters."""
    pipeline, _ = _student_pipeline()
    count, rows, split_size = BACKWARD_CASE
    stages = build_stages(seed, 0, count)
    pipe = _make_pipe(pipeline, stages, split_size)
    try:
        return {"case": list(BACKWARD_CASE), **_run_backward(seed, pipe, stages, list(pipe.parameters()))}
    finally:
        pipe.close()


def judge_backward(seed: int, params: dict, observation) -> None:
    observation = expect_cases([observation], [list(BACKWARD_CASE)], "Pipe backward")[0]
    count, rows, split_size = BACKWARD_CASE
    stages = build_stages(seed, 0, count)
    expected = _run_backward(seed, lambda x: sequential(stages, x), stages, [p for s in stages for p in s.parameters()])
    what = _describe(count, rows, split_size)
    if not close(observation["output"], expected["output"], GRAD_RTOL, GRAD_ATOL):
        raise Fail(f"{what}: the forward output differs from the stages run in sequence (see 2.2-forward)")
    names = [name for name, _ in stages[0].named_parameters()]
    starved = [
        j for j, grads in enumerate(observation["grads"]) if all(g is None or not bool(g.abs().sum()) for g in grads)
    ]
    if starved and starved != list(range(count)):
        raise Fail(
            f"{what}: stage{'s' * (len(starved) > 1)} {', '.join(map(str, starved))} got no parameter gradient while "
            f"stage {count - 1} did: the graph is cut between stages. Do not detach() a microbatch (or run a stage "
            "under no_grad) between stages; backward must reach every stage and the input"
        )
    if observation["input_grad"] is None:
        raise Fail(f"{what}: x.grad is None after backward; the gradient must reach the input batch (do not detach it)")
    if not close(observation["input_grad"], expected["input_grad"], GRAD_RTOL, GRAD_ATOL):
        raise Fail(f"{what}: x.grad {difference(observation['input_grad'], expected['input_grad'])} (compared with the sequential run)")
    for j, (got, want) in enumerate(zip(observation["grads"], expected["grads"])):
        for name, g, w in zip(names, got, want):
            if not close(g, w, GRAD_RTOL, GRAD_ATOL):
                raise Fail(f"{what}: the gradient of stage {j}'s {name} {difference(g, w)} (rtol {GRAD_RTOL}, atol {GRAD_ATOL})")
    for step, (got, want) in enumerate(zip(observation["losses"], expected["losses"]), start=1):
        if abs(got - want) > GRAD_ATOL + GRAD_RTOL * abs(want):
            raise Fail(f"SGD over pipe.parameters(), step {step}: loss {got:.6g}, expected {want:.6g} from the sequential run")
    for j, (got, want) in enumerate(zip(observation["parameters"], expected["parameters"])):
        for name, g, w in zip(names, got, want):
            if not close(g, w, GRAD_RTOL, GRAD_ATOL):
                raise Fail(f"after {SGD_STEPS} SGD steps over pipe.parameters(), stage {j}'s {name} differs from the sequential run")


# ---------------------------------------------------------------------------------------
# 2.2 concurrency
# ---------------------------------------------------------------------------------------


def _concurrency_params(params: dict) -> tuple[int, int, float, int]:
    return (
        int(params.get("stages", 3)), int(params.get("microbatches", 4)),
        float(params.get("sleep", 0.08)), int(params.get("attempts", 3)),
    )


def time_limit(stages: int, microbatches: int, sleep: float) -> float:
    """Halfway between a pipeline's (M + K - 1) stage steps and a serial M * K."""
    return (microbatches + stages - 1 + microbatches * stages) / 2 * sleep


def observe_concurrency(seed: int, params: dict):
    """Times sleeping stages through the ``Pipe`` and records when each stage ran (start/end intervals per microbatch)."""
    pipeline, runtime = _student_pipeline()
    count, microbatches, sleep, attempts = _concurrency_params(params)
    stages = build_stages(seed, 0, count)
    for stage in stages:
        stage.sleep = sleep
    pipe = _make_pipe(pipeline, stages, 2)
    tries = []
    try:
        for attempt in range(attempts):
            events: list = []
            with runtime.observe(events.append):
                started = time.perf_counter()
                pipe(make_batch(seed, attempt, 2 * microbatches))
                elapsed = time.perf_counter() - started
            starts = {(e.workers, e.stage, e.call): e.time for e in events if e.kind == "start"}
            intervals = [(e.stage, starts[key] - started, e.time - started)
                         for e in events if e.kind == "finish" and (key := (e.workers, e.stage, e.call)) in starts]
            tries.append({"elapsed": elapsed, "intervals": intervals})
            if elapsed <= time_limit(count, microbatches, sleep):
                break  # fast enough: no need to measure again (the parent judges)
    finally:
        pipe.close()
    return tries


def _overlaps(intervals) -> bool:
    return any(
        a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
        for index, a in enumerate(intervals) for b in intervals[index + 1 :]
    )


def judge_concurrency(seed: int, params: dict, observation) -> None:
    count, microbatches, sleep, attempts = _concurrency_params(params)
    limit = time_limit(count, microbatches, sleep)
    if not isinstance(observation, list) or not 1 <= len(observation) <= attempts:
        raise Malformed(f"Pipe concurrency: {len(observation) if isinstance(observation, list) else 'no'} measurements "
                        f"came back; the grader makes 1 to {attempts}")
    for attempt in observation:
        # Every stage call must have slept its full time: a grader stage's sleep is not the student's to change.
        short = [end - start for _, start, end in attempt["intervals"] if end - start < 0.9 * sleep]
        if short:
            raise Fail(
                f"{len(short)} of the {len(attempt['intervals'])} calls of the grader's stages took less than the "
                f"{sleep:g} s each stage sleeps (the shortest {min(short):.3f} s): the grader's stages must run as given"
            )
        if attempt["elapsed"] <= limit and _overlaps(attempt["intervals"]):
            return
    best = min(observation, key=lambda a: a["elapsed"])
    setting = (
        f"{count} stages that each sleep {sleep:g} s per microbatch, {microbatches} microbatches: "
        f"a pipeline takes about M + K - 1 = {microbatches + count - 1} steps ({(microbatches + count - 1) * sleep:.2f} s), "
        f"one stage after another takes M * K = {microbatches * count} ({microbatches * count * sleep:.2f} s)"
    )
    if not best["intervals"]:
        raise Fail(f"{setting}; no stage call ran on a worker thread: submit every stage step to self.workers")
    if not _overlaps(best["intervals"]):
        raise Fail(
            f"{setting}; the forward took {best['elapsed']:.2f} s and no two stages ever ran at the same time. "
            "Submit the whole wave before receiving any of it"
        )
    raise Fail(f"{setting}; the forward took {best['elapsed']:.2f} s at best, over the limit of {limit:.2f} s")


# ---------------------------------------------------------------------------------------
# 2.2 transfers
# ---------------------------------------------------------------------------------------

TRANSFER_CASE = (3, 6, 2)
# Distinct devices that are all the CPU: a move guarded by `if x.device != device` (or by
# the device of the previous stage) happens here as it would between GPUs, and is seen.
TRANSFER_DEVICES = ["cpu:0", "cpu", "cpu:0"]
# Ops that move or copy data whatever their result: .to("cpu") on a CPU tensor returns the
# tensor itself, so on a CPU-only grader only the name gives a transfer away. Other ops
# count only when they make new data (x.contiguous() of a contiguous batch is x itself).
TRANSFER_OPS = {"to", "cuda", "cpu", "copy_", "clone", "pin_memory", "detach_copy", "new_tensor"}


def _storages(value, found: set) -> set:
    if isinstance(value, torch.Tensor):
        try:
            found.add(value.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            pass
    elif isinstance(value, (list, tuple)):
        for item in value:
            _storages(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _storages(item, found)
    return found


class CallingThreadOps(TorchFunctionMode):
    """Records every torch call made on the thread that entered it (torch function modes
    are thread-local, so stage threads are not seen): its name and whether its result
    is new data (not a view of an argument)."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        outputs = _storages(result, set())
        fresh = bool(outputs - _storages((args, kwargs or {}), set()))
        self.log.append(("op", getattr(func, "__name__", str(func)), fresh))
        return result


def observe_transfers(seed: int, params: dict):
    """Records which tensor operations the calling thread ran while the ``Pipe`` forwarded a batch (work belongs on stage threads)."""
    pipeline, runtime = _student_pipeline()
    count, rows, split_size = TRANSFER_CASE
    pipe = _make_pipe(pipeline, build_stages(seed, 0, count), split_size, TRANSFER_DEVICES)
    log: list = []
    caller = threading.get_ident()

    def on_event(event) -> None:
        if event.kind in ("submit", "receive") and threading.get_ident() == caller:
            log.append((event.kind, event.stage, False))

    x = make_batch(seed, 0, rows)
    try:
        with runtime.observe(on_event), CallingThreadOps(log):
            pipe(x)
    finally:
        pipe.close()
    return log


def judge_transfers(seed: int, params: dict, observation) -> None:
    kinds = [entry[0] for entry in observation]
    if "submit" not in kinds:
        raise Fail("no submit was recorded on the calling thread; every stage must run through self.workers.submit")
    first_submit = kinds.index("submit")
    last_receive = len(kinds) - 1 - kinds[::-1].index("receive") if "receive" in kinds else len(kinds)
    for position, (kind, name, fresh) in enumerate(observation[:last_receive]):
        if kind != "op" or not (name in TRANSFER_OPS or fresh):
            continue
        submits = kinds[:position].count("submit")
        when = "before the first submit" if position < first_submit else f"after {submits} submits, before the last receive"
        raise Fail(
            f"Pipe.forward ran torch `{name}` on the calling thread {when} (stages on the devices "
            f"{', '.join(TRANSFER_DEVICES)}). Only views of the input "
            "(torch.split, slicing) may be made there before the first submit, and only torch.cat after the last "
            "receive; moving a microbatch (.to(device)), copying or computing on it belongs inside the submitted "
            "callable. On GPUs a copy on the calling thread blocks it, so the next stage's work is submitted late "
            "and the stages wait for each other (no pipeline speedup)"
        )


# ---------------------------------------------------------------------------------------
# 2.4 balance_stages
# ---------------------------------------------------------------------------------------

OUTPUT_LAYER = 3.3  # the lecture's anchor: the output layer costs about 3.3 ordinary layers
BALANCE_RANDOM_CASES = 36


def balance_cases(seed: int) -> list[tuple[list, int]]:
    """(costs, num_stages) for 2.4: the lecture's shape (ordinary layers, the output layer last),
    ints with zeros, spread-out floats, one layer, one stage, a stage per layer, and one cost
    vector split on every K (repeated calls must not remember the last one)."""
    rng = random.Random(seed * 2_000_003 + 24)
    lecture = [1] * 7 + [OUTPUT_LAYER]
    cases: list[tuple[list, int]] = [(lecture, 4), ([5], 1), ([0, 0, 0, 0], 2), ([2.5, 0, 0, 7], 4)]
    shared = [round(rng.uniform(0.1, 4), 3) for _ in range(9)]
    cases += [(shared, k) for k in (3, 1, 9, 2, 5)]
    for _ in range(BALANCE_RANDOM_CASES):
        layers = rng.randint(2, 20)
        kind = rng.choice(("transformer", "ints", "floats", "heavy"))
        if kind == "transformer":
            costs = [round(rng.uniform(0.9, 1.1), 4) for _ in range(layers - 1)] + [round(rng.uniform(2.5, 4), 2)]
        elif kind == "ints":
            costs = [rng.choice((0, 1, 2, 3, 5, 8)) for _ in range(layers)]
        elif kind == "floats":
            costs = [rng.uniform(0, 10) for _ in range(layers)]
        else:
            costs = [rng.expovariate(1.0) ** 2 for _ in range(layers)]
        cases.append((costs, rng.randint(1, min(layers, 8))))
    return cases


def _balance_case_key(index: int, costs: list, num_stages: int) -> list:
    return [index, len(costs), num_stages]


def _costs_text(costs) -> str:
    text = "[" + ", ".join(f"{c:.6g}" if isinstance(c, float) else repr(c) for c in costs) + "]"
    return text if len(text) <= 240 else text[:237] + "...]"


def observe_balance(seed: int, params: dict):
    """Calls the student's ``balance_stages`` on every case of :func:`balance_cases` (every
    third as a tuple) and records what it returned, and whether the caller's list changed."""
    from minitorch.pipeline import balance_stages

    entries = []
    for index, (costs, num_stages) in enumerate(balance_cases(seed)):
        given = tuple(costs) if index % 3 == 2 else list(costs)
        entry = {"case": _balance_case_key(index, costs, num_stages), "error": None, "sizes": None,
                 "type": None, "changed": False, "aliased": False}
        try:
            result = balance_stages(given, num_stages)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - judged with its case
            entry["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        else:
            entry["type"] = type(result).__name__
            entry["aliased"] = result is given
            try:
                limited = itertools.islice(result, len(costs) + 1)  # an endless iterator is cut off
                entry["sizes"] = [int(n) if type(n) is int else repr(n)[:40] for n in limited]
            except TypeError:
                entry["sizes"] = repr(result)[:200]
        entry["changed"] = list(given) != list(costs)
        entries.append(entry)
    return entries


def exact_costs(costs: list) -> tuple[list[int], int]:
    """The costs as integers over a common denominator (exact: floats are binary fractions)."""
    fractions = [Fraction(cost) for cost in costs]
    scale = math.lcm(*(f.denominator for f in fractions))
    return [int(f * scale) for f in fractions], scale


def _least_slowest_stage(costs: list[int], num_stages: int) -> tuple[int, list[int]]:
    """The least largest stage cost over every split into ``num_stages`` non-empty consecutive
    stages, and one split that reaches it: a binary search over every sum of consecutive
    costs, each tried with a greedy cut (exact: integer costs, see :func:`exact_costs`)."""
    prefix = list(itertools.accumulate(costs, initial=0))
    sums = sorted({prefix[b] - prefix[a] for a in range(len(costs)) for b in range(a + 1, len(costs) + 1)})
    low, high = 0, len(sums) - 1
    while low < high:
        middle = (low + high) // 2
        if _greedy_split(costs, sums[middle], num_stages) is None:
            low = middle + 1
        else:
            high = middle
    return sums[low], _greedy_split(costs, sums[low], num_stages)


def _greedy_split(costs: list[int], limit: int, num_stages: int) -> list[int] | None:
    """Stages of at most ``limit``, filled left to right, each closed early only to leave one
    layer for every stage still to open: exactly ``num_stages`` stages, or None if impossible."""
    if max(costs) > limit:
        return None
    sizes, total, count = [], 0, 0
    for index, cost in enumerate(costs):
        layers_left = len(costs) - index
        if count and (total + cost > limit or layers_left <= num_stages - len(sizes) - 1):
            sizes.append(count)
            total, count = 0, 0
        total, count = total + cost, count + 1
    sizes.append(count)
    return sizes if len(sizes) == num_stages else None


def _stage_costs(costs: list[int], sizes: list[int]) -> list[int]:
    starts = list(itertools.accumulate([0, *sizes]))
    return [sum(costs[a:b]) for a, b in zip(starts, starts[1:])]


def judge_balance(seed: int, params: dict, observation) -> None:
    """Every split is K non-empty consecutive stages of all the layers whose slowest stage is the
    least possible (the judge's own search, exact arithmetic); ties may go either way."""
    cases = balance_cases(seed)
    asked = [_balance_case_key(index, costs, k) for index, (costs, k) in enumerate(cases)]
    entries = expect_cases(observation, asked, "balance_stages")
    for index, ((costs, num_stages), entry) in enumerate(zip(cases, entries)):
        call = f"balance_stages({_costs_text(costs)}, {num_stages}) (case {index})"
        if entry["error"] is not None:
            raise Fail(f"{call} raised {entry['error']}; expected a split into {num_stages} stages")
        sizes = entry["sizes"]
        if not isinstance(sizes, list) or not all(type(n) is int for n in sizes):
            raise Fail(f"{call} returned {entry['type']} {sizes}; expected a list of {num_stages} ints (layers per stage)")
        if len(sizes) != num_stages or min(sizes, default=0) < 1 or sum(sizes) != len(costs):
            raise Fail(
                f"{call} returned {sizes}; expected {num_stages} stages of at least one layer each, "
                f"{len(costs)} layers in all"
            )
        exact, scale = exact_costs(costs)
        least, example = _least_slowest_stage(exact, num_stages)
        stage_costs = _stage_costs(exact, sizes)
        slowest = max(stage_costs)
        # Rounding of the student's float sums may pick a split worse by ulps: not a mistake.
        if slowest - least > 1e-9 * (sum(exact) or scale):
            stage = stage_costs.index(slowest)
            first = sum(sizes[:stage])
            raise Fail(
                f"{call} returned {sizes}: its slowest stage, stage {stage} (layers {first}-{first + sizes[stage] - 1}), "
                f"costs {slowest / scale:.6g}; the least possible is {least / scale:.6g}, e.g. {example}"
            )


BAD_BALANCE_CALLS = [
    ([], 1), ([1, -1, 2], 2), ([1, math.nan, 2], 2), ([1, math.inf], 1), (["1", 2], 1), ([1, True, 2], 2),
    ([1, 2, 3], 0), ([1, 2, 3], 4), ([1, 2, 3], -1), ([1, 2, 3], True), ([1, 2, 3], 2.0), ([1, 2, 3], "2"),
]


def _bad_call_key(costs: list, num_stages) -> list:
    return [repr(costs), repr(num_stages)]


def observe_balance_arguments(seed: int, params: dict):
    """Calls ``balance_stages`` with each bad argument of BAD_BALANCE_CALLS and records what it raised;
    then the caller's costs and the returned object on a few good calls."""
    from minitorch.pipeline import balance_stages

    calls = []
    for costs, num_stages in BAD_BALANCE_CALLS:
        entry = {"case": _bad_call_key(costs, num_stages), "error": None, "message": ""}
        try:
            result = balance_stages(list(costs), num_stages)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the type is what is graded
            entry["error"], entry["message"] = type(error).__name__, str(error)[:300]
        else:
            entry["message"] = f"returned {result!r}"[:300]
        calls.append(entry)
    good = observe_balance(seed, params)[:9]
    return {"calls": calls, "good": good}


def judge_balance_arguments(seed: int, params: dict, observation) -> None:
    """ValueError at the call for every bad argument; on good calls a new list, the caller's costs untouched."""
    asked = [_bad_call_key(costs, k) for costs, k in BAD_BALANCE_CALLS]
    for entry in expect_cases(observation["calls"], asked, "balance_stages with bad arguments"):
        text, k = entry["case"]
        call = f"balance_stages({text}, {k})"
        if entry["error"] is None:
            raise Fail(f"{call} {entry['message']}; expected ValueError (see the contract: finite costs >= 0, 1 <= K <= len(costs))")
        if entry["error"] != "ValueError":
            raise Fail(f"{call} raised {entry['error']}: {entry['message']}; expected ValueError")
    cases = balance_cases(seed)[:9]
    asked = [_balance_case_key(index, costs, k) for index, (costs, k) in enumerate(cases)]
    for (costs, k), entry in zip(cases, expect_cases(observation["good"], asked, "balance_stages")):
        call = f"balance_stages({_costs_text(costs)}, {k})"
        if entry["changed"]:
            raise Fail(f"{call} changed the caller's costs; the contract leaves them as they were (work on a copy)")
        if entry["aliased"]:
            raise Fail(f"{call} returned the caller's own sequence; expected a new list")
        if entry["error"] is None and entry["type"] != "list":
            raise Fail(f"{call} returned a {entry['type']}; expected a list")
