"""3.4-embedding, child side: ranks run the student's vocab-parallel embedding on ids that hold
the first and last id of every rank's range, backward twice (gradients accumulate), then again
on 1-D ids and on a batch of one sequence under ``torch.no_grad()``, and on a float32 vocabulary
of one row per rank (``vocab_size == t``); with the student's own 3.1 ops first, the grader's
in the fallback's second run."""
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
from grader.checks.problem3.cases import VOCAB, H


def rank_embedding(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    d = cases.vocab_data(seed)
    with pieces.bound(tp, params, ops=True):
        embedding = tp.VocabParallelEmbedding(VOCAB, H, master={"weight": d["table"]})
        with recorder.Phase("forward"):
            y = embedding(d["ids"].clone())
        result = {"out": ranks.out(y), "kind": ranks.kind(y), "weight": ranks.out(embedding.weight)}
        with recorder.Phase("backward"):
            ranks.backward(y, d["grad"])
        result["weight_grad"] = ranks.out(embedding.weight.grad)
        with recorder.Phase("again"):
            ranks.backward(embedding(d["ids"].clone()), d["grad"])
        result["weight_grad_twice"] = ranks.out(embedding.weight.grad)
        with recorder.Phase("second"), torch.no_grad():
            later = [embedding(ids.clone()) for ids in (d["ids2"], d["ids"][:, :1])]
        with recorder.Phase("one row"), torch.no_grad():  # vocab_size == t: one row per rank, in float32
            result["one_row"] = ranks.outcome(
                lambda: tp.VocabParallelEmbedding(t, H, master={"weight": d["table"][:t].float()})(d["ids"] % t))
    result.update(later=[ranks.out(v) for v in later], later_kinds=[ranks.kind(v) for v in later],
                  log=recorder.taken())
    return result


def observe_embedding(seed: int, params: dict):
    """Launches ranks that run the vocab-parallel embedding on token ids spanning every rank's range."""
    return ranks.observe(rank_embedding, seed, params, cases.ALL_SIZES)
