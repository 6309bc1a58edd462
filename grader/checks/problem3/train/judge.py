"""3.6-train, parent side: losses step for step and the held-out loss after training equal the
dense model's trained the same way; what ``train_language_model`` returns (a list of floats);
no ``.grad`` left behind; at most 1/t of every weight matrix per rank; no collective that holds
the whole vocabulary's logits; a model drawn from a seed equals the dense model drawn alike."""
from __future__ import annotations

import torch

from grader.checks.judging import Fail
from grader.checks.problem3 import cases, expected_dense
from grader.checks.problem3.cases import CALLS, LAYERS, MODEL_LR, STEP_SHAPES, VOCAB, H
from grader.checks.problem3.judge_blocks import MATRICES
from grader.checks.problem3.judge_tools import TOL, describe, expect, expect_kind, expect_outcome, phase_log, world_sizes
from grader.checks.problem3.train.observe import DRAWN_SEED, MODEL_EPS, TINY, sequence_parallel_cases
from grader.checks.threads import single_threaded


def dense_training(seed: int) -> tuple[list[float], torch.Tensor]:
    model, batches = expected_dense.DenseModel(cases.model_master(seed), eps=MODEL_EPS), cases.model_batches(seed)
    losses = []
    for ids, targets in batches[:-1]:
        model.zero_grad(set_to_none=True)
        loss = model(ids, targets)
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.sub_(MODEL_LR * expected_dense.grad_of(parameter))
        losses.append(float(loss.detach()))
    with torch.no_grad():
        return losses, model(*batches[-1])


@single_threaded
def judge_train(seed: int, params: dict, observation) -> None:
    losses, held_out = dense_training(seed)
    drawn = dense_drawn_loss(seed)
    matrices = LAYERS * MATRICES["layer"] + 2 * VOCAB * H
    for t, values in world_sizes(observation, params, "ParallelLanguageModel", cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            for sp in sequence_parallel_cases(t):
                where = f"t={t}, rank {r}, sequence_parallel={sp}"
                judge_run(where, o[f"sp={sp}"], losses, held_out, matrices, t)
                if t > 1:
                    judge_logits_traffic(where, o["log"])
            expect_outcome(f"t={t}, rank {r}: ParallelLanguageModel({VOCAB}, {H}, ..., seed={DRAWN_SEED}, "
                           "dtype=torch.float64) without master (its master tensors drawn from the seed as its "
                           "docstring says): the mean loss", o["drawn"], drawn)
            if t == 1:
                expect_outcome(f"ParallelLanguageModel{TINY} (sizes of one are sizes too; with one vocabulary entry "
                               "every loss is 0), dtype=torch.float32: the mean loss", o["tiny"],
                               torch.zeros((), dtype=torch.float32))


def dense_drawn_loss(seed: int) -> torch.Tensor:
    master = {"embedding.weight": torch.randn(VOCAB, H, generator=torch.Generator().manual_seed(DRAWN_SEED),
                                              dtype=cases.DTYPE),
              "output.weight": expected_dense.drawn_linear(H, VOCAB, DRAWN_SEED + 1, cases.DTYPE, bias=False)["weight"],
              "final_ln.weight": torch.ones(H, dtype=cases.DTYPE), "final_ln.bias": torch.zeros(H, dtype=cases.DTYPE)}
    for i in range(LAYERS):
        master.update({f"layers.{i}.{k}": v for k, v in
                       expected_dense.drawn_layer_master(DRAWN_SEED + 10 * (i + 1), cases.DTYPE).items()})
    with torch.no_grad():
        return expected_dense.DenseModel(master)(*cases.model_batches(seed)[-1])


def judge_run(where: str, run, losses: list[float], held_out: torch.Tensor, matrices: int, t: int) -> None:
    if t > 1 and (not isinstance(run["matrix_numel"], int) or run["matrix_numel"] > matrices / t):
        raise Fail(f"{where}: the model holds {run['matrix_numel']} elements of weight matrices on this rank; each "
                   f"rank may hold at most 1/{t} of the dense model's {matrices} ({matrices / t:g}), the embedding and "
                   "output tables included")
    for number, (returned, steps) in enumerate(zip(run["losses"], CALLS)):
        call = (f"{where}: train_language_model's call {number + 1} (batches of shapes "
                f"{[list(STEP_SHAPES[step]) for step in steps]}, given as an iterator)")
        items = returned["items"]
        if returned["type"] != "list" or len(items) != len(steps) or any(item["type"] != "float" for item in items):
            raise Fail(f"{call} must return a list of {len(steps)} Python floats (one loss per batch); got a "
                       f"{returned['type']} of {[item['type'] for item in items]}")
        for step, item in zip(steps, items):
            value, expected = item["value"], losses[step]
            if not abs(value - expected) <= TOL * (1 + abs(expected)):
                raise Fail(f"{call}: the loss of step {step} is {value:.12g}; the dense model trained the same way "
                           f"gives {expected:.12g}" + (" (a second call trains on from where the first left the model)"
                                                       if number else ""))
    expect(f"{where}: the mean loss on a held-out batch after training (the parameters after the last step)",
           run["held_out"], held_out)
    if run["grads_left"]:
        raise Fail(f"{where}: after train_language_model the parameters {', '.join(run['grads_left'][:4])} still hold "
                   "a .grad; it must leave none behind (every .grad None)")
    expect_kind(f"{where}: the held-out loss, computed under torch.no_grad()", run["kind"], needs_grad=False)


def judge_logits_traffic(where: str, log: list) -> None:
    batches = cases.model_batches(0)
    for phase, ids in [*((f"step {n}", batches[n][0]) for n in range(len(STEP_SHAPES))), ("held-out", batches[-1][0])]:
        whole = ids.numel() * VOCAB
        big = [c for c in phase_log(log, phase) if c["numel"] >= whole]
        if big:
            raise Fail(f"{where}: {phase}: the model must never build the whole vocabulary's logits ({ids.numel()} "
                       f"tokens x {VOCAB} = {whole} elements); recorded {describe(big)}")
