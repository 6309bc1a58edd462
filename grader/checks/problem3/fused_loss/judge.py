"""3.4-fused-loss, parent side: per-token losses against ``F.cross_entropy(reduction="none")``
token by token, the gradient of this rank's logits (accumulating over two backwards), the later
calls, and the communication budget: at most 4 collectives of a few scalars per token in the
forward, nothing with a vocabulary dimension, nothing in the backward."""
from __future__ import annotations

import torch.nn.functional as F

from grader.checks.judging import Fail
from grader.checks.problem3 import cases, expected_dense
from grader.checks.problem3.cases import TOKENS, VOCAB, B, S
from grader.checks.problem3.judge_tools import (
    describe,
    expect,
    expect_collectives,
    expect_kind,
    expect_outcome,
    phase_log,
    world_sizes,
)
from grader.checks.problem3.judge_vocab import expect_per_token
from grader.checks.threads import single_threaded

FEW_SCALARS = 4  # per token and collective: "a few scalars per token"; VOCAB / t is 12 or more
MAX_COLLECTIVES = 4


@single_threaded
def judge_fused_loss(seed: int, params: dict, observation) -> None:
    d = cases.vocab_data(seed)
    logits = d["logits"].clone().requires_grad_()
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), d["ids"].reshape(-1), reduction="none").view(S, B)
    (loss * d["loss_grad"]).sum().backward()
    later = [(label, F.cross_entropy(dense.reshape(-1, VOCAB), target.reshape(-1), reduction="none").view(target.shape),
              target.numel()) for label, dense, target in cases.later_losses(d)]
    for t, values in world_sizes(observation, params, "vocab_parallel_cross_entropy", cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            where = f"t={t}, rank {r}: vocab_parallel_cross_entropy"
            judge_traffic(where, o["log"], "forward", TOKENS)
            expect_per_token(f"{where} per-token loss (like F.cross_entropy(reduction='none'))", o["loss"],
                             loss.detach(), d["ids"], t,
                             "the loss of a token needs the logit of its target, which one rank's block holds")
            expect_kind(f"{where}: the losses (the logits require grad)", o["kind"], needs_grad=True)
            expect(f"{where} gradient of this rank's logits", o["grad"], cases.column_block(expected_dense.grad_of(logits), r, t))
            for number, ((label, expected, tokens), value, kind) in enumerate(zip(later, o["later"], o["later_kinds"])):
                expect(f"{where}, called again under torch.no_grad() with {label}: losses", value, expected)
                expect_kind(f"{where}, called under torch.no_grad(): the losses", kind, needs_grad=False)
                judge_traffic(f"{where}, called with {label}", o["log"], f"later {number}", tokens)
            one_row = d["logits"][..., :t].reshape(-1, t)
            expect_outcome(f"{where} on a vocabulary of {t} entries (one logit per rank, [{S}, {B}, 1]): losses",
                           o["one_row"], F.cross_entropy(one_row, (d["ids"] % t).reshape(-1), reduction="none").view(S, B))
            expect_collectives(where, o["log"], "backward", [],
                               "the gradient of the logits needs only values this rank computed in forward")


def judge_traffic(where: str, log: list, phase: str, tokens: int) -> None:
    forward = phase_log(log, phase)
    big = [c for c in forward if c["numel"] > FEW_SCALARS * tokens]
    if big:
        raise Fail(f"{where} must not gather the logits nor communicate anything else with a vocabulary dimension "
                   f"(at most {FEW_SCALARS} scalars per token, {FEW_SCALARS * tokens} elements, per collective): "
                   f"recorded {describe(big)}")
    if len(forward) > MAX_COLLECTIVES:
        raise Fail(f"{where}: the forward may issue at most {MAX_COLLECTIVES} collectives of a few scalars per token; "
                   f"recorded {describe(forward)}")
