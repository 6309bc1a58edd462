"""3.0-layout, child side: ranks (t = 1 in this process, and t = 2) run every op, linear
layer, module, the embedding, the loss and the model twice on the same values: once
contiguous, once in a non-contiguous layout (a transposed copy; the gradient autograd hands the
op's backward too), recording outputs and gradients of both, or what each raised."""
from __future__ import annotations

import torch

from grader.checks.problem3 import cases, ranks, recorder
from grader.checks.problem3.caller.observe import OPS
from grader.checks.problem3.cases import FFN, HEADS, IN, LAYERS, OUT, VOCAB, H
from grader.checks.problem3.scatter_gather.observe import OPS as SCATTER_GATHER
from grader.checks.problem3.scatter_gather.observe import inputs

LAYOUTS = {"contiguous": torch.clone, "non-contiguous": ranks.strided}


def run_module(module, arguments: list, grad, layout) -> dict:
    """Forward on ``arguments`` in ``layout`` (floating ones require grad), backward: output
    and every gradient."""
    arguments = [layout(a).requires_grad_() if a.is_floating_point() else layout(a) for a in arguments]
    y = module(*arguments)
    if y.requires_grad:
        y.register_hook(layout)
        ranks.backward(y, grad)
    return {"out": ranks.out(y), "grads": [ranks.out(a.grad) for a in arguments], "param_grads": ranks.grads(module)
            if isinstance(module, torch.nn.Module) else {}}


def both(run) -> dict:
    """``{layout: run(layout) or {"raised": text}}`` for the two layouts."""
    return {name: ranks.attempt(lambda: run(layout)) for name, layout in LAYOUTS.items()}


def rank_layout(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    data, m, layer, d = cases.activations(seed, t), cases.linear_master(seed), cases.layer_master(seed), cases.vocab_data(seed)
    parts: dict = {}
    for name in OPS:
        x, grad = inputs(name, data, rank, t) if name in SCATTER_GATHER else (data["x_r"][rank], data["grad_r"][rank])
        parts[name] = both(lambda layout: ranks.run_op(getattr(tp, name), x, grad, name, layout))
    linear = {"weight": m["weight"], "bias": m["bias"]}
    builds = {
        "ColumnParallelLinear": (lambda: tp.ColumnParallelLinear(IN, OUT, master=linear), [m["x"]],
                                 cases.column_block(m["grad"], rank, t)),
        "RowParallelLinear": (lambda: tp.RowParallelLinear(IN, OUT, master=linear), [cases.column_block(m["x"], rank, t)],
                              m["grad"]),
        "ParallelMLP": (lambda: tp.ParallelMLP(H, FFN, master=cases.sub(layer, "mlp")), [data["x"]], data["grad"]),
        "ParallelSelfAttention": (lambda: tp.ParallelSelfAttention(H, HEADS, master=cases.sub(layer, "attention")),
                                  [data["x"]], data["grad"]),
        "ParallelTransformerLayer": (lambda: tp.ParallelTransformerLayer(H, HEADS, FFN, master=layer), [data["x"]],
                                     data["grad"]),
        "VocabParallelEmbedding": (lambda: tp.VocabParallelEmbedding(VOCAB, H, master={"weight": d["table"]}),
                                   [d["ids"]], d["grad"]),
        "vocab_parallel_cross_entropy": (lambda: tp.vocab_parallel_cross_entropy,
                                         [cases.column_block(d["logits"], rank, t), d["ids"]], d["loss_grad"]),
        "ParallelLanguageModel": (lambda: tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN,
                                                                   master=cases.model_master(seed)),
                                  list(cases.model_batches(seed)[0]), torch.ones((), dtype=cases.DTYPE)),
    }
    for name, (build, arguments, grad) in builds.items():
        parts[name] = both(lambda layout: run_module(build(), arguments, grad, layout))
    return parts


def observe_layout(seed: int, params: dict):
    """Runs every part on contiguous and non-contiguous copies of the same values (t = 1, 2)."""
    return ranks.observe(rank_layout, seed, params, cases.CONVENTION_SIZES)
