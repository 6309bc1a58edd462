"""2.2-no-grad and 2.2-backward, parent side: no graph under no_grad / inference_mode; gradients
(of one backward and of two that add up), a Pipe of frozen stages, and SGD over
``pipe.parameters()`` against the same training through the stages run in sequence. Observed in
``observe.py``."""
from __future__ import annotations

from grader.checks.judging import Fail, expect_cases
from grader.checks.problem2.expected import sequential
from grader.checks.problem2.judge_pipe import GRAD_ATOL, GRAD_RTOL, close, describe, differs
from grader.checks.problem2.pipe_grad.cases import GRAD_CASE, GRAD_MODES
from grader.checks.problem2.pipe_grad.training import BACKWARD_CASE, FROZEN_CASE, SGD_STEPS, frozen_stages, through_frozen, train
from grader.checks.problem2.stages import build_stages

THREAD_LOCAL = ("Grad mode is thread-local: a stage run on another thread must get the caller's mode "
                "(StageWorkers.submit does this for you; your own threads do not)")


def judge_no_grad(seed: int, params: dict, observation) -> None:
    count = GRAD_CASE[0]
    for seen in expect_cases(observation["modes"], list(GRAD_MODES), "Pipe under no_grad / inference_mode"):
        name = f"torch.{seen['case']}()"
        if "error" in dict.keys(seen):
            raise Fail(f"under {name}, the forward raised {seen['error']}. A stage probably ran with grad mode on. {THREAD_LOCAL}")
        if not seen["stages"]:
            raise Fail(f"under {name}: no stage ran")
        graphs = sorted({stage for stage, graph in seen["stages"] if graph})
        if graphs:
            raise Fail(f"under {name}, stage {graphs[0]} built an autograd graph (its output has a grad_fn): it ran "
                       f"with grad mode on. {THREAD_LOCAL}")
        if seen["requires_grad"] or seen["grad_fn"]:
            raise Fail(f"under {name}, the Pipe's output requires grad; expected no graph at all")
        if not seen["grad_enabled_after"] or seen["inference_after"]:
            raise Fail(f"after a forward under {name}, grad mode on the calling thread was not restored")
    after = observation["after"]
    if "error" in dict.keys(after):
        raise Fail(f"after forwards under no_grad / inference_mode, a normal forward raised {after['error']}")
    if not after["requires_grad"] or sorted({s for s, graph in after["stages"] if graph}) != list(range(count)):
        raise Fail("after forwards under no_grad / inference_mode, a normal forward no longer builds a graph in every stage")


def _judge_gradients(what: str, names: list, got, want) -> None:
    for j, (stage_got, stage_want) in enumerate(zip(got, want)):
        for name, g, w in zip(names, stage_got, stage_want):
            if not close(g, w, GRAD_RTOL, GRAD_ATOL):
                raise Fail(f"{what}: the gradient of stage {j}'s {name} {differs(g, w)} (rtol {GRAD_RTOL}, atol {GRAD_ATOL})")


def judge_backward(seed: int, params: dict, observation) -> None:
    observation = expect_cases([observation], [list(BACKWARD_CASE)], "Pipe backward")[0]
    count, rows, split_size = BACKWARD_CASE
    what = describe(count, rows, split_size)
    if "shape" in dict.keys(observation):
        raise Fail(f"{what}: Pipe returned a tensor of shape {observation['shape']}; expected {[rows, 6]} "
                   "(one output row per input row: the stages keep the width)")
    stages = build_stages(seed, 0, count)
    expected = train(seed, lambda x: sequential(stages, x), stages, [p for s in stages for p in s.parameters()])
    if not close(observation["output"], expected["output"], GRAD_RTOL, GRAD_ATOL):
        raise Fail(f"{what}: the forward output differs from the stages run in sequence (see 2.2-forward)")
    names = [name for name, _ in stages[0].named_parameters()]
    starved = [j for j, grads in enumerate(observation["grads"]) if all(g is None or not bool(g.abs().sum()) for g in grads)]
    if not observation["output_requires_grad"] or (starved and starved != list(range(count))):
        cut = f"stage{'s' * (len(starved) > 1)} {', '.join(map(str, starved))} got no parameter gradient" if starved \
            else "the output does not require grad"
        raise Fail(f"{what}: {cut}: the graph is cut between stages. Do not detach() a microbatch (or run a stage "
                   "under no_grad) between stages; backward must reach every stage and the input")
    if observation["input_grad"] is None:
        raise Fail(f"{what}: x.grad is None after backward; the gradient must reach the input batch (do not detach it)")
    if not close(observation["input_grad"], expected["input_grad"], GRAD_RTOL, GRAD_ATOL):
        raise Fail(f"{what}: x.grad {differs(observation['input_grad'], expected['input_grad'])} (compared with the sequential run)")
    _judge_gradients(what, names, observation["grads"], expected["grads"])
    twice = f"{what}, a second forward and backward on the same batch (gradients add up)"
    if not close(observation["input_grad_twice"], expected["input_grad_twice"], GRAD_RTOL, GRAD_ATOL):
        raise Fail(f"{twice}: x.grad {differs(observation['input_grad_twice'], expected['input_grad_twice'])}: "
                   "the Pipe must not reset or replace gradients")
    _judge_gradients(twice, names, observation["grads_twice"], expected["grads_twice"])
    for step, (got, want) in enumerate(zip(observation["losses"], expected["losses"]), start=1):
        if abs(got - want) > GRAD_ATOL + GRAD_RTOL * abs(want):
            raise Fail(f"SGD over pipe.parameters(), step {step}: loss {got:.6g}, expected {want:.6g} from the sequential run")
    if len(observation["losses"]) != SGD_STEPS:
        raise Fail("SGD over pipe.parameters(): a later step's forward returned a tensor of another shape than the batch")
    for j, (got, want) in enumerate(zip(observation["parameters"], expected["parameters"])):
        for name, g, w in zip(names, got, want):
            if not close(g, w, GRAD_RTOL, GRAD_ATOL):
                raise Fail(f"after {SGD_STEPS} SGD steps over pipe.parameters(), stage {j}'s {name} differs from the sequential run")
    _judge_frozen(seed, observation["frozen"])


def _judge_frozen(seed: int, seen) -> None:
    stages = frozen_stages(seed)
    expected = through_frozen(seed, lambda x: sequential(stages, x))
    what = describe(*FROZEN_CASE) + ", every stage frozen"
    if seen["plain_requires_grad"] and not seen["input_switched"]:  # a switched batch is 2.2-input-unchanged's
        raise Fail(f"{what}, a batch without requires_grad: the output requires grad; the stages run in sequence "
                   "give one that does not (nothing in it needs a gradient)")
    if seen["input_grad"] is None or not close(seen["input_grad"], expected["input_grad"], GRAD_RTOL, GRAD_ATOL):
        raise Fail(f"{what}, a batch that requires grad: x.grad {differs(seen['input_grad'], expected['input_grad'])} "
                   "after backward; the gradient must reach x through frozen stages too")
