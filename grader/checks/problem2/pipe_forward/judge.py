"""2.2-forward and 2.2-input-unchanged, parent side: every output against the grader's stages run
in sequence with plain PyTorch (values, shape, dtype, device, row order, the microbatches each
stage was given), and the caller's batch against the batch the grader made. Observed in
``observe.py``."""
from __future__ import annotations

import torch

from grader.checks.judging import Fail, Malformed, expect_cases, expect_tensor
from grader.checks.problem2.expected import microbatch_sizes, sequential
from grader.checks.problem2.judge_pipe import TOLERANCE, close, compare_rows, describe, differs, microbatch_mistake
from grader.checks.problem2.pipe_forward.cases import FORWARD_CASES, INPUT_CASES
from grader.checks.problem2.stages import WIDTH, case_input, case_stages


def _case_text(case: dict) -> str:
    extras = []
    shape = case.get("shape", [WIDTH])
    if shape != [WIDTH]:
        extras.append(f"a batch of shape [rows, {', '.join(map(str, shape))}]" if shape else "a 1-D batch")
    if "dtype" in case:
        extras.append(case["dtype"])
    if case.get("layout") == "transposed":
        extras.append("a batch that is not contiguous (x.transpose(0, -1).contiguous().transpose(0, -1))")
    if "kinds" in case:
        extras.append("stages " + ", ".join(f"{j}: {kind}" for j, kind in enumerate(case["kinds"]))
                      + " (buffers: no parameters)")
    if "container" in case:
        extras.append(f"the stages given as a {case['container']}")
    if case.get("requires_grad"):
        extras.append("a batch that requires grad")
    if case.get("mode"):
        extras.append(f"under torch.{case['mode']}()")
    return "; ".join(extras)


def _judge_call(where: str, case: dict, x: torch.Tensor, expected: torch.Tensor, run, later: bool) -> None:
    rows, split_size = x.shape[0], case["split"]
    if "error" in dict.keys(run):
        raise Fail(f"{where}: the forward raised {run['error']}")
    sizes = microbatch_sizes(rows, split_size)
    mistake = microbatch_mistake(run["sizes"][0], rows, split_size)
    if mistake:
        raise Fail(f"{where}: {mistake}")
    out = expect_tensor(run["output"], f"{where}: the output")
    if tuple(out.shape) != tuple(expected.shape) or out.dtype != expected.dtype:
        raise Fail(f"{where}: Pipe returned a tensor of shape {list(out.shape)} ({out.dtype}); expected "
                   f"{list(expected.shape)} ({expected.dtype}): one output row per input row, in the stages' dtype")
    for j, got in enumerate(run["sizes"]):
        if got != sizes:
            given = f"as stage 0 (the output of (i, {j - 1}) is the input of (i, {j}))" if j else "split_size rows each"
            raise Fail(f"{where}: stage {j} was given microbatches of {got} rows; expected {sizes}, {given}")
    rtol, atol = TOLERANCE[case.get("dtype", "float64")]
    if not torch.allclose(out, expected, rtol=rtol, atol=atol):
        stale = " (results left over from an earlier call?)" if later else ""
        raise Fail(f"{where}: {compare_rows(expected, out, split_size, rtol, atol)}{stale}")
    if run["device"] != "cpu":
        raise Fail(f"{where}: the output is on {run['device']}; expected the last stage's device cpu")


def _ended_early(observation) -> int:
    """How many cases came back: all of them, or fewer when the last one's last call raised (the
    child stops there)."""
    if isinstance(observation, list) and observation and isinstance(observation[-1], dict) and \
            isinstance(observation[-1].get("runs"), list) and observation[-1]["runs"] and \
            "error" in dict.keys(observation[-1]["runs"][-1]):
        return len(observation)
    return len(FORWARD_CASES)


def judge_forward(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, list(range(_ended_early(observation))), "Pipe forward")
    for index, (case, seen) in enumerate(zip(FORWARD_CASES, entries)):
        calls, extras = len(case["rows"]), _case_text(case)
        stages = case_stages(seed, index, case)
        if seen["registered"] != seen["parameters"]:
            raise Fail(f"case {index} ({extras or 'the grader stages'}): pipe.parameters() holds {seen['registered']} "
                       f"of the stages' {seen['parameters']} parameters")
        last = index == len(entries) - 1
        if len(seen["runs"]) != calls and not (last and seen["runs"] and "error" in dict.keys(seen["runs"][-1])):
            raise Malformed(f"Pipe forward, case {index}: {len(seen['runs'])} calls came back; the grader made {calls}")
        for call, (rows, run) in enumerate(zip(case["rows"], seen["runs"])):
            what = describe(case["stages"], rows, case["split"]) + (f"; {extras}" if extras else "")
            x = case_input(seed, 100 * index + call, rows, case)
            with torch.no_grad():
                expected = sequential(stages, x)
            _judge_call(f"{what}, call {call + 1} of {calls} on one Pipe", case, x, expected, run, later=call > 0)


def judge_input_unchanged(seed: int, params: dict, observation) -> None:
    entries = expect_cases(observation, list(range(len(INPUT_CASES))), "Pipe forward, the caller's input")
    for index, (case, entry) in enumerate(zip(INPUT_CASES, entries)):
        requires_grad = case.get("requires_grad", False)
        where = f"{describe(case['stages'], case['rows'], case['split'])}; {_case_text(case) or 'a plain batch'}"
        before = case_input(seed, 500 + index, case["rows"], case)
        values = expect_tensor(entry["values"], where)
        # exact: the caller's x after the call against the same draw before it (unchanged means the same bits)
        if values.shape != before.shape or values.dtype != before.dtype or not torch.equal(values, before):
            raise Fail(f"{where}: forward changed the caller's x in place (its values {differs(values, before)}); "
                       "it must leave x as it was")
        if entry["requires_grad"] != requires_grad or entry["grad_fn"]:
            now = "is part of an autograd graph" if entry["grad_fn"] else f"has requires_grad={entry['requires_grad']}"
            raise Fail(f"{where}: after the forward the caller's x {now}; the Pipe must not switch it (whether x "
                       "gets a gradient is the caller's choice)")
        if entry["grad"]:
            raise Fail(f"{where}: after a forward alone (no backward) the caller's x has a .grad; expected none")
        if case.get("layout") == "transposed":
            with torch.no_grad():
                expected = sequential(case_stages(seed, 500 + index, case), before)
            _judge_layout(where, entry["forward"], entry["contiguous"], expected, TOLERANCE[case.get("dtype", "float64")])


def _judge_layout(where: str, seen, contiguous, expected: torch.Tensor, tolerance: tuple[float, float]) -> None:
    """A batch that is not contiguous gets the stages' values where a contiguous copy of it does (the
    convention: any layout; a forward wrong on the copy too is 2.2-forward's)."""
    if "error" in dict.keys(contiguous) or not close(contiguous["output"], expected, *tolerance):
        return
    if "error" in dict.keys(seen):
        raise Fail(f"{where}: the forward raised {seen['error']}; on a contiguous copy of the same batch it worked. The "
                   "contract takes x contiguous or not (a .view() needs contiguous memory; .reshape() does not)")
    out = expect_tensor(seen["output"], where)
    if not close(out, expected, *tolerance):
        raise Fail(f"{where}: the output {differs(out, expected)} from the stages run in sequence, where a contiguous "
                   "copy of the same batch gets their values; the contract takes x contiguous or not")
