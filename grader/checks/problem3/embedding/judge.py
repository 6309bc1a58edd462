"""3.4-embedding, parent side: the shard (by name: the contract names it), the output against
``F.embedding`` token by token, the weight's gradient (accumulating over two backwards), later
calls on 1-D ids and a batch of one sequence, and the communication each direction allows."""
from __future__ import annotations

import torch.nn.functional as F

from grader.checks.problem3 import cases, expected_dense
from grader.checks.problem3.cases import IDS2, VOCAB, H, N, S
from grader.checks.problem3.judge_tools import (
    SHARD,
    VOLUME,
    expect,
    expect_budget,
    expect_collectives,
    expect_kind,
    expect_outcome,
    world_sizes,
)
from grader.checks.problem3.judge_vocab import expect_per_token
from grader.checks.threads import single_threaded


@single_threaded
def judge_embedding(seed: int, params: dict, observation) -> None:
    d = cases.vocab_data(seed)
    table = d["table"].clone().requires_grad_()
    y = F.embedding(d["ids"], table)
    (y * d["grad"]).sum().backward()
    table_grad = expected_dense.grad_of(table)
    later = [(f"1-D ids of {IDS2} tokens", d["ids2"]), (f"ids of a batch of one sequence [{S}, 1]", d["ids"][:, :1])]
    for t, values in world_sizes(observation, params, "VocabParallelEmbedding", cases.ALL_SIZES).items():
        for r, o in enumerate(values):
            where = f"t={t}, rank {r}: VocabParallelEmbedding"
            expect(f"{where} weight must be rows {r * VOCAB // t}:{(r + 1) * VOCAB // t} of the master table",
                   o["weight"], cases.row_block(d["table"], r, t), SHARD)
            expect_per_token(f"{where} output", o["out"], y.detach(), d["ids"], t,
                             "every rank's output must be the embedding of every id, whichever rank's range it is in")
            expect_kind(f"{where} output (the table requires grad)", o["kind"], needs_grad=True)
            expect(f"{where} weight grad", o["weight_grad"], cases.row_block(table_grad, r, t))
            expect(f"{where} weight grad after a second forward and backward (gradients accumulate: twice the dense "
                   "one)", o["weight_grad_twice"], cases.row_block(2 * table_grad, r, t))
            for (label, ids), value, kind in zip(later, o["later"], o["later_kinds"]):
                expect(f"{where}, called again under torch.no_grad() with {label}: output", value,
                       F.embedding(ids, d["table"]))
                expect_kind(f"{where}, called under torch.no_grad(): the output", kind, needs_grad=False)
            expect_outcome(f"t={t}, rank {r}: VocabParallelEmbedding({t}, {H}) (one row per rank) from a float32 "
                           "table: output", o["one_row"], F.embedding(d["ids"] % t, d["table"][:t].float()))
            if t > 1:
                expect_budget(where, t, o["log"], "forward", VOLUME["all_reduce"](t) * N, "one all-reduce of the output")
            expect_collectives(where, o["log"], "backward", [], "each rank's rows get their own gradient")
