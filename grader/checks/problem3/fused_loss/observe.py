"""3.4-fused-loss, child side: ranks run the student's vocab-parallel cross-entropy on their
block of the grader's logits (a logit too large for exp, ids at every range's edges, a tie
between ranks), backward, then on the later calls of
:func:`~grader.checks.problem3.cases.later_losses` under ``torch.no_grad()`` and on a vocabulary
of t entries (one logit per rank); with the
student's own 3.1 ops first, the grader's in the fallback's second run."""
from __future__ import annotations

import torch

# pieces_*: the grader's pieces this check's fallback binds, and only those, loaded before the
# student's code runs (a child cannot import grader modules after that).
from grader.checks.problem3 import (
    cases,
    pieces,
    pieces_ops,  # noqa: F401
    ranks,
    recorder,
)


def rank_fused_loss(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    d = cases.vocab_data(seed)
    logits = cases.column_block(d["logits"], rank, t).clone().requires_grad_()
    with pieces.bound(tp, params, ops=True):
        with recorder.Phase("forward"):
            loss = tp.vocab_parallel_cross_entropy(logits, d["ids"].clone())
        result = {"loss": ranks.out(loss), "kind": ranks.kind(loss)}
        with recorder.Phase("backward"):
            ranks.backward(loss, d["loss_grad"])
        result["grad"] = ranks.out(logits.grad)
        later = []
        for number, (_, dense, target) in enumerate(cases.later_losses(d)):
            with recorder.Phase(f"later {number}"), torch.no_grad():
                later.append(tp.vocab_parallel_cross_entropy(cases.column_block(dense, rank, t).clone(), target.clone()))
        with recorder.Phase("one row"), torch.no_grad():  # a vocabulary of t entries: one logit per rank
            result["one_row"] = ranks.outcome(lambda: tp.vocab_parallel_cross_entropy(
                d["logits"][..., rank:rank + 1].clone(), d["ids"] % t))
    result.update(later=[ranks.out(v) for v in later], later_kinds=[ranks.kind(v) for v in later],
                  log=recorder.taken())
    return result


def observe_fused_loss(seed: int, params: dict):
    """Launches ranks that run the vocab-parallel fused cross-entropy."""
    return ranks.observe(rank_fused_loss, seed, params, cases.ALL_SIZES)
