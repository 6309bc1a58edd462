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
import threading
import time

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from grader.checks import Fail
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


class GraderStage(nn.Module):
    """``[row number | tanh(linear(features))]``: column 0 passes through, so any stage can
    tell which rows (and so which microbatch) it was given.

    Every call appends a record to ``log`` (a list shared by the stages of one pipe) and
    ``(first row, rows)`` to ``given``, before anything can fail.
    ``sleep`` seconds are slept first (releasing the GIL); ``fail_on`` names a microbatch
    (by its first row // ``split_size``) on which the stage raises GraderStageError.
    """

    def __init__(self, index: int, generator: torch.Generator, log: list | None = None):
        super().__init__()
        features = WIDTH - 1
        self.index = index
        self.linear = nn.Linear(features, features, dtype=DTYPE)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(features, features, generator=generator, dtype=DTYPE) / features**0.5)
            self.linear.bias.copy_(torch.randn(features, generator=generator, dtype=DTYPE) / 4)
        self.log = log
        self.sleep = 0.0
        self.fail_on: int | None = None
        self.split_size = 1
        self.raised: BaseException | None = None
        self.given: list[tuple[int, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        first = int(x[0, 0].item()) if x.shape[0] else -1
        self.given.append((first, int(x.shape[0])))
        if self.fail_on is not None and first // self.split_size == self.fail_on:
            self.raised = GraderStageError(f"stage {self.index} refuses microbatch {self.fail_on}")
            raise self.raised
        out = torch.cat([x[:, :1], torch.tanh(self.linear(x[:, 1:]))], dim=1)
        if self.log is not None:
            self.log.append({
                "stage": self.index, "rows": int(x.shape[0]), "first": first,
                "thread": threading.current_thread().name, "grad_enabled": torch.is_grad_enabled(),
                "inference": torch.is_inference_mode_enabled(), "graph": out.grad_fn is not None,
            })
        return out


def build_stages(seed: int, tag: int, count: int, log: list | None = None) -> list[GraderStage]:
    """``count`` stages whose weights depend only on (seed, tag), not on the global RNG."""
    generator = torch.Generator().manual_seed(seed * 1009 + tag)
    return [GraderStage(j, generator, log) for j in range(count)]


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
    out = pipe(x)
    if not isinstance(out, torch.Tensor):
        raise Fail(f"{what}: Pipe returned a {type(out).__name__}; expected a tensor")
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
INVALID_CASES = [(-1, 3), (2, 0), (2, -1), (0, -2), (0, 0), (-3, -1)]
SHOWN_CASE = (3, 3)  # the docstring's example: the one a message quotes when a whole call is wrong


def _pairs(wave) -> list | None:
    """``wave`` as plain ``[(i, j), ...]`` ints, or None when it is not a sequence of pairs."""
    try:
        return [(int(i), int(j)) for i, j in wave]
    except (TypeError, ValueError):
        return None


def _observe_waves() -> dict:
    """Every (M, K) of SCHEDULE_CASES through the student's ``clock_cycles``: each wave as it
    was yielded (text and pairs), the same waves again once the iteration is over (a list
    object reused for every wave shows there), and what the call returned."""
    from minitorch.pipeline import clock_cycles

    runs = []
    for m, k in SCHEDULE_CASES:
        limit = m + k + 8  # an endless generator is cut off, not waited for
        waves, yielded, pairs, error = [], [], [], None
        try:
            for wave in itertools.islice(clock_cycles(m, k), limit):
                waves.append(wave)
                yielded.append(repr(wave)[:500])
                pairs.append(_pairs(wave))
        except NotImplementedError:
            raise
        except Exception as raised:  # noqa: BLE001 - judged with the case it belongs to (e.g. only M = 0)
            error = f"{type(raised).__name__}: {str(raised)[:300]}"
        runs.append({"M": m, "K": k, "waves": yielded, "pairs": pairs, "after": [repr(w)[:500] for w in waves],
                     "error": error})
    produced = clock_cycles(*SHOWN_CASE)
    iterator = iter(produced) is produced and hasattr(produced, "__next__")
    return {"runs": runs, "iterator": iterator, "type": type(produced).__name__}


def _runs(observation, microbatches: bool, judge_errors: bool = True):
    """The runs with M >= 1 (``microbatches``) or with M == 0, as (call, expected waves, run).
    A run that raised is a Fail when ``judge_errors`` (the criterion of those cases), else left
    out (a convention's criterion does not pay again for a wrong schedule)."""
    for run in observation["runs"]:
        m, k = run["M"], run["K"]
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
    """The right pairs in the right waves for every M >= 1 (the order inside a wave is 2.1-stage-order)."""
    for call, expected, run in _runs(observation, microbatches=True):
        got, pairs = run["waves"], run["pairs"]
        for index, (want, have, text) in enumerate(zip(expected, pairs, got)):
            if have is None:
                raise Fail(f"{call}, wave {index} is {text}; expected a list of (microbatch, stage) pairs such as {want}")
            if sorted(have) != sorted(want):
                raise Fail(
                    f"{call}, wave {index}: expected the pairs {sorted(want, key=lambda p: p[1])} (in any order), "
                    f"got {text} (wave k holds every (microbatch i, stage j) with i + j == k, i < M, j < K)"
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
    """The same calls as 2.1-schedule, and what ``clock_cycles(3, 3)`` returns."""
    return _observe_waves()


def judge_generator(seed: int, params: dict, observation) -> None:
    """A generator (an iterator, not a list) that yields each wave as a list of its own."""
    m, k = SHOWN_CASE
    if not observation["iterator"]:
        raise Fail(
            f"clock_cycles({m}, {k}) returned a {observation['type']}; expected a generator "
            "(write it with yield, one wave at a time, so a Pipe can start wave 0 before the rest is computed)"
        )
    _no_wave_at_all(observation)
    for call, _, run in _runs(observation, microbatches=True, judge_errors=False):
        for index, (then, now) in enumerate(zip(run["waves"], run["after"])):
            if then != now:
                raise Fail(
                    f"{call}: wave {index} was {then} when it was yielded and {now} once the iteration was over: "
                    "the same list object is reused for every wave, so list(clock_cycles(...)) repeats the last "
                    "one. Yield a new list for each wave"
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
        try:
            produced = clock_cycles(m, k)
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the type is what is graded
            results.append({"M": m, "K": k, "when": "call", "error": type(error).__name__, "message": str(error)[:300]})
            continue
        try:
            first = next(iter(produced))
        except NotImplementedError:
            raise
        except StopIteration:
            results.append({"M": m, "K": k, "when": "next", "error": None, "message": "yielded nothing"})
        except Exception as error:  # noqa: BLE001
            results.append({"M": m, "K": k, "when": "next", "error": type(error).__name__, "message": str(error)[:300]})
        else:
            results.append({"M": m, "K": k, "when": "next", "error": None, "message": f"yielded {first!r}"[:300]})
    return results


def judge_errors(seed: int, params: dict, observation) -> None:
    # The docstring promises ValueError at the call or, at the latest, on the first next():
    # a generator function raises on the first next, a wrapper that checks its arguments
    # first raises at the call; both are right. Any other exception type, or none, is wrong.
    for result in observation:
        call = f"clock_cycles({result['M']}, {result['K']})"
        if result["error"] is None:
            raise Fail(f"{call} must raise ValueError (num_microbatches < 0 or num_stages < 1); it {result['message']}")
        if result["error"] != "ValueError":
            raise Fail(f"{call} raised {result['error']}: {result['message']}; expected ValueError")


# ---------------------------------------------------------------------------------------
# 2.2 forward
# ---------------------------------------------------------------------------------------

# (stages, rows, split_size, calls): one stage, uneven last microbatch, split_size 1 and
# larger than the batch, repeated calls with new inputs, and batches where spreading the
# rows evenly (torch.chunk) gives other sizes than split_size rows each (9 rows at 4:
# [3, 3, 3], not [4, 4, 1]; 6 rows at 4: [3, 3], not [4, 2]).
FORWARD_CASES = [(1, 5, 2, 2), (2, 7, 3, 2), (3, 6, 1, 2), (3, 4, 10, 2), (3, 10, 4, 3), (2, 8, 8, 1), (3, 9, 4, 2), (2, 6, 4, 1)]


def observe_forward(seed: int, params: dict):
    """Runs the student's ``Pipe`` on the grader's stages for every FORWARD_CASE and records outputs and stage logs."""
    pipeline, _ = _student_pipeline()
    cases = []
    for case, (count, rows, split_size, calls) in enumerate(FORWARD_CASES):
        log: list = []
        stages = build_stages(seed, case, count, log)
        pipe = _make_pipe(pipeline, stages, split_size)
        try:
            stage_params = {id(p) for stage in stages for p in stage.parameters()}
            registered = {id(p) for p in pipe.parameters()} & stage_params
            runs = []
            for call in range(calls):
                del log[:]
                x = make_batch(seed, 100 * case + call, rows)
                out = _run_pipe(pipe, x, f"{_describe(count, rows, split_size)}, call {call + 1} of {calls}")
                runs.append({
                    "output": out.detach(), "device": str(out.device), "input_after": x,
                    "sizes": [[r["rows"] for r in log if r["stage"] == j] for j in range(count)],
                })
        finally:
            pipe.close()
        cases.append({"runs": runs, "registered": len(registered), "parameters": len(stage_params)})
    return cases


def _compare_rows(expected: torch.Tensor, got: torch.Tensor, split_size: int) -> str:
    """Say how ``got`` differs from ``expected`` row by row (reordered? which microbatch?)."""
    close = torch.isclose(got, expected, rtol=RTOL, atol=ATOL).all(dim=1)
    bad = (~close).nonzero().flatten().tolist()
    moved = []
    for row in bad:
        match = torch.isclose(expected, got[row], rtol=RTOL, atol=ATOL).all(dim=1).nonzero().flatten().tolist()
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
    for case, ((count, rows, split_size, calls), seen) in enumerate(zip(FORWARD_CASES, observation)):
        what = _describe(count, rows, split_size)
        stages = build_stages(seed, case, count)
        if seen["registered"] != seen["parameters"]:
            raise Fail(f"{what}: pipe.parameters() holds {seen['registered']} of the stages' {seen['parameters']} parameters")
        for call, run in enumerate(seen["runs"]):
            where = f"{what}, call {call + 1} of {calls}"
            x = make_batch(seed, 100 * case + call, rows)
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
            out = run["output"]
            if tuple(out.shape) != tuple(expected.shape) or out.dtype != expected.dtype:
                raise Fail(f"{where}: expected an output of shape {list(expected.shape)} ({expected.dtype}), got {list(out.shape)} ({out.dtype})")
            if not torch.allclose(out, expected, rtol=RTOL, atol=ATOL):
                stale = " (results left over from an earlier call?)" if call else ""
                raise Fail(f"{where}: {_compare_rows(expected, out, split_size)}{stale}")
            if run["device"] != "cpu":
                raise Fail(f"{where}: the output is on {run['device']}; expected the last stage's device cpu")
            if not torch.equal(run["input_after"], x):
                raise Fail(f"{where}: forward changed its input batch in place; it must leave x unchanged")


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
        cases.append(runs)
    return cases


def judge_call_order(seed: int, params: dict, observation) -> None:
    for (count, rows, split_size, _), runs in zip(CALL_ORDER_CASES, observation):
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


def observe_no_grad(seed: int, params: dict):
    """Runs the ``Pipe`` under ``torch.no_grad()`` and ``torch.inference_mode()`` and records the grad mode each stage saw."""
    pipeline, _ = _student_pipeline()
    count, rows, split_size = GRAD_CASE
    log: list = []
    pipe = _make_pipe(pipeline, build_stages(seed, 0, count, log), split_size)
    modes = {}
    try:
        for name, mode in (("torch.no_grad()", torch.no_grad), ("torch.inference_mode()", torch.inference_mode)):
            del log[:]
            try:
                with mode():
                    out = _run_pipe(pipe, make_batch(seed, len(modes), rows), f"under {name}")
            except NotImplementedError:
                raise
            except Exception as error:  # noqa: BLE001 - e.g. a graph over inference tensors
                modes[name] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
                continue
            modes[name] = {
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
    return {"modes": modes, "after": after}


def judge_no_grad(seed: int, params: dict, observation) -> None:
    count = GRAD_CASE[0]
    thread_local = (
        "Grad mode is thread-local: a stage run on another thread must get the caller's mode "
        "(StageWorkers.submit does this for you; your own threads do not)"
    )
    for name, seen in observation["modes"].items():
        if "error" in seen:
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

EXCEPTION_CASE = (3, 6, 2, 1, 1)  # stages, rows, split_size, failing stage, failing microbatch


def _new_threads(before: set, wait: float = 2.0) -> list[str]:
    deadline = time.monotonic() + wait
    while True:
        alive = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def observe_exceptions(seed: int, params: dict):
    """Makes one grader stage raise on one microbatch and records what reached the caller, and which threads were left."""
    pipeline, _ = _student_pipeline()
    count, rows, split_size, bad_stage, bad_microbatch = EXCEPTION_CASE
    before = set(threading.enumerate())
    stages = build_stages(seed, 0, count)
    stages[bad_stage].fail_on = bad_microbatch
    pipe = _make_pipe(pipeline, stages, split_size)
    try:
        try:
            pipe(make_batch(seed, 0, rows))
            caught = {"raised": False}
        except NotImplementedError:
            raise
        except BaseException as error:  # noqa: BLE001 - what reached the caller is graded
            caught = {
                "raised": True, "type": type(error).__qualname__, "message": str(error)[:500],
                "same_object": error is stages[bad_stage].raised,
            }
        stage_raised, given = stages[bad_stage].raised is not None, list(stages[bad_stage].given)
        stages[bad_stage].fail_on = None
        try:
            again = {"output": _run_pipe(pipe, make_batch(seed, 1, rows), "the next forward").detach(), "error": None}
        except Fail:
            raise
        except Exception as error:  # noqa: BLE001
            again = {"output": None, "error": f"{type(error).__name__}: {str(error)[:300]}"}
    finally:
        pipe.close()
    return {"caught": caught, "stage_raised": stage_raised, "given": given, "again": again, "alive": _new_threads(before)}


def judge_exceptions(seed: int, params: dict, observation) -> None:
    count, rows, split_size, bad_stage, bad_microbatch = EXCEPTION_CASE
    where = f"{_describe(count, rows, split_size)}, stage {bad_stage} raising GraderStageError on microbatch {bad_microbatch}"
    caught = observation["caught"]
    expected_message = f"stage {bad_stage} refuses microbatch {bad_microbatch}"
    if not observation["stage_raised"]:
        first = bad_microbatch * split_size
        given = ", ".join(f"rows {start}-{start + size - 1}" for start, size in observation["given"]) or "nothing"
        raise Fail(
            f"{where}: stage {bad_stage} was never given microbatch {bad_microbatch} (rows {first}-{first + split_size - 1}), "
            f"so it never raised; it was given {given}. The microbatches reach the wrong stages (a lambda that "
            "reads i and j when it runs instead of binding them? see 2.2-call-order)"
        )
    if not caught["raised"]:
        raise Fail(f"{where}: the Pipe returned normally; the stage's exception must reach the caller (it was swallowed)")
    if caught["type"] != GraderStageError.__qualname__:
        raise Fail(f"{where}: the caller got {caught['type']}: {caught['message']!r}; expected the stage's own GraderStageError, unchanged (do not wrap it)")
    if caught["message"] != expected_message:
        raise Fail(f"{where}: the exception's message is {caught['message']!r}; expected {expected_message!r}")
    if not caught["same_object"]:
        raise Fail(
            f"{where}: the caller got a new GraderStageError with the same message, not the one the stage raised; "
            "re-raise the stage's own exception object (raise error), so its traceback and attributes reach the caller"
        )
    again = observation["again"]
    if again["error"] is not None:
        raise Fail(f"{where}: the next forward on a good batch raised {again['error']}; the Pipe must still work after an error")
    stages = build_stages(seed, 0, count)
    with torch.no_grad():
        expected = sequential(stages, make_batch(seed, 1, rows))
    out = again["output"]
    if tuple(out.shape) != tuple(expected.shape) or not torch.allclose(out, expected, rtol=RTOL, atol=ATOL):
        detail = _compare_rows(expected, out, split_size) if out.shape == expected.shape else f"shape {list(out.shape)}"
        raise Fail(
            f"{where}: the next forward on a good batch is wrong ({detail}): either the forward itself is wrong "
            "(see 2.2-forward) or results of the failed call were left in the workers (receive the rest of the "
            "wave before raising)"
        )
    if observation["alive"]:
        raise Fail(f"threads still alive after close(): {', '.join(observation['alive'][:5])}")


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
        return _run_backward(seed, pipe, stages, list(pipe.parameters()))
    finally:
        pipe.close()


def judge_backward(seed: int, params: dict, observation) -> None:
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
    count, microbatches, sleep, _ = _concurrency_params(params)
    limit = time_limit(count, microbatches, sleep)
    for attempt in observation:
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
