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

import inspect
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

    Every call appends a record to ``log`` (a list shared by the stages of one pipe).
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        first = int(x[0, 0].item()) if x.shape[0] else -1
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


def _make_pipe(pipeline, stages: list[GraderStage], split_size: int):
    for stage in stages:
        stage.split_size = split_size
    return pipeline.Pipe(stages, devices=["cpu"] * len(stages), split_size=split_size)


def _describe(stages: int, rows: int, split_size: int) -> str:
    m = len(microbatch_sizes(rows, split_size))
    return f"{stages} stage{'s' * (stages != 1)}, a batch of {rows} rows, split_size={split_size} ({m} microbatch{'es' * (m != 1)})"


# ---------------------------------------------------------------------------------------
# 2.1 clock_cycles
# ---------------------------------------------------------------------------------------

SCHEDULE_CASES = [(m, k) for m in range(7) for k in range(1, 6)] + [(16, 4), (3, 8), (40, 3), (1, 12)]
INVALID_CASES = [(-1, 3), (2, 0), (0, 0), (-3, -1)]


def observe_schedule(seed: int, params: dict):
    """Drives the student's ``clock_cycles`` over every (M, K) of SCHEDULE_CASES and records each wave as text."""
    from minitorch.pipeline import clock_cycles

    runs = []
    for m, k in SCHEDULE_CASES:
        limit = m + k + 8  # an endless generator is cut off, not waited for
        waves = [repr(wave) for wave in itertools.islice(clock_cycles(m, k), limit)]
        runs.append({"M": m, "K": k, "waves": waves})
    produced = clock_cycles(3, 3)
    return {"runs": runs, "generator": inspect.isgenerator(produced), "type": type(produced).__name__}


def judge_schedule(seed: int, params: dict, observation) -> None:
    if not observation["generator"]:
        raise Fail(f"clock_cycles(3, 3) returned a {observation['type']}; expected a generator (use yield, one wave at a time)")
    for run in observation["runs"]:
        m, k, got = run["M"], run["K"], run["waves"]
        expected = [repr(wave) for wave in reference_clock_cycles(m, k)]
        call = f"clock_cycles({m}, {k})"
        for index, (want, have) in enumerate(zip(expected, got)):
            if want != have:
                raise Fail(
                    f"{call}, wave {index}: expected {want}, got {have} "
                    "(wave k holds every (microbatch i, stage j) with i + j == k, ordered by increasing stage j)"
                )
        if len(got) < len(expected):
            raise Fail(f"{call} yielded {len(got)} waves; expected M + K - 1 = {len(expected)} (missing wave {len(got)}: {expected[len(got)]})")
        if len(got) > len(expected):
            what = f"M + K - 1 = {len(expected)}" if m else "none (M = 0 means no microbatches)"
            more = "more than " if len(got) == m + k + 8 else ""
            raise Fail(f"{call} yielded {more}{len(got)} waves; expected {what}; wave {len(expected)} was {got[len(expected)]}")


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
    # Lazy (on first next) is what a generator function does; an eager ValueError at call
    # time is accepted too. Any other exception type, or none, is wrong.
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
# larger than the batch, repeated calls with new inputs.
FORWARD_CASES = [(1, 5, 2, 2), (2, 7, 3, 2), (3, 6, 1, 2), (3, 4, 10, 2), (3, 10, 4, 3), (2, 8, 8, 1)]


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
                out = pipe(x)
                if not isinstance(out, torch.Tensor):
                    raise Fail(f"{_describe(count, rows, split_size)}: Pipe returned a {type(out).__name__}, expected a Tensor")
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
            for j, got in enumerate(run["sizes"]):
                if got != sizes:
                    raise Fail(
                        f"{where}: stage {j} was given microbatches of {got} rows; expected {sizes} "
                        "(split_size is the number of rows per microbatch; the last may be smaller)"
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

# (stages, rows, split_size, calls)
CALL_ORDER_CASES = [(3, 6, 2, 2), (2, 9, 2, 1), (4, 2, 1, 1), (1, 3, 1, 1), (3, 5, 8, 1)]


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
                    "ran": [(r["stage"], r["first"]) for r in log],
                })
        finally:
            pipe.close()
        cases.append(runs)
    return cases


def judge_call_order(seed: int, params: dict, observation) -> None:
    for (count, rows, split_size, _), runs in zip(CALL_ORDER_CASES, observation):
        m = len(microbatch_sizes(rows, split_size))
        for call, run in enumerate(runs):
            where = f"{_describe(count, rows, split_size)}, call {call + 1}"
            got = [f"{kind}({stage})" for kind, stage in run["events"]]
            if not got:
                raise Fail(f"{where}: no submit or receive was recorded; every stage must run through self.workers.submit / receive")
            position = 0
            for wave, want in enumerate(expected_calls(m, count)):
                have = got[position : position + len(want)]
                if have != want:
                    raise Fail(f"{where}: wave {wave}: expected {' '.join(want)}; got {' '.join(have) or 'nothing'}")
                position += len(want)
            if position < len(got):
                raise Fail(f"{where}: after the last wave: expected nothing; got {' '.join(got[position:position + 8])}")
            for j in range(count):
                ran = [first // split_size for stage, first in run["ran"] if stage == j]
                if ran != list(range(m)):
                    raise Fail(
                        f"{where}: stage {j} ran microbatches {ran}; expected {list(range(m))} in order "
                        "(submit (i, j) with microbatch i's output of stage j - 1)"
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
                    out = pipe(make_batch(seed, len(modes), rows))
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
        out = pipe(make_batch(seed, 9, rows))
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
                "raised": True, "type": f"{type(error).__module__}.{type(error).__qualname__}",
                "message": str(error)[:500], "same_object": error is stages[bad_stage].raised,
            }
        stages[bad_stage].fail_on = None
        try:
            again = {"output": pipe(make_batch(seed, 1, rows)).detach(), "error": None}
        except Exception as error:  # noqa: BLE001
            again = {"output": None, "error": f"{type(error).__name__}: {str(error)[:300]}"}
    finally:
        pipe.close()
    return {"caught": caught, "again": again, "alive": _new_threads(before)}


def judge_exceptions(seed: int, params: dict, observation) -> None:
    count, rows, split_size, bad_stage, bad_microbatch = EXCEPTION_CASE
    where = f"{_describe(count, rows, split_size)}, stage {bad_stage} raising GraderStageError on microbatch {bad_microbatch}"
    caught = observation["caught"]
    expected_type = f"{GraderStageError.__module__}.GraderStageError"
    expected_message = f"stage {bad_stage} refuses microbatch {bad_microbatch}"
    if not caught["raised"]:
        raise Fail(f"{where}: the Pipe returned normally; the stage's exception must reach the caller (it was swallowed)")
    if caught["type"] != expected_type:
        raise Fail(f"{where}: the caller got {caught['type']}: {caught['message']!r}; expected the stage's own exception, unchanged (do not wrap it)")
    if caught["message"] != expected_message:
        raise Fail(f"{where}: the exception's message is {caught['message']!r}; expected {expected_message!r}")
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
    out = model(x)
    (out * _loss_weights(seed, 0, rows)).sum().backward()
    seen = {"output": out.detach(), "input_grad": None if x.grad is None else x.grad.clone(), "grads": _gradients(stages)}
    # Plain SGD written out (torch.optim's first use costs seconds of lazy imports).
    losses = []
    for step in range(1, SGD_STEPS + 1):
        for parameter in parameters:
            parameter.grad = None
        loss = (model(make_batch(seed, step, rows)) * _loss_weights(seed, step, rows)).sum()
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
# Ops that move or copy data whatever their result: .to("cpu") on a CPU tensor returns the
# tensor itself, so on a CPU-only grader only the name gives a transfer away.
TRANSFER_OPS = {"to", "cuda", "cpu", "copy_", "clone", "pin_memory", "contiguous", "detach_copy", "new_tensor"}


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
    pipe = _make_pipe(pipeline, build_stages(seed, 0, count), split_size)
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
            f"Pipe.forward ran torch `{name}` on the calling thread {when}. Only views of the input "
            "(torch.split, slicing) may be made there before the first submit, and only torch.cat after the last "
            "receive; moving a microbatch (.to(device)), copying or computing on it belongs inside the submitted "
            "callable. On GPUs a copy on the calling thread blocks it, so the next stage's work is submitted late "
            "and the stages wait for each other (no pipeline speedup)"
        )
