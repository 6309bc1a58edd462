"""3.0-caller-unchanged, child side: ranks (t = 1 in this process, and t = 2) run every op,
linear layer, module, the embedding, the loss and the model on copies of the grader's tensors
and record what changed of what the caller handed over: the inputs, the targets, the master
tensors and their dicts (keys included), the gradient handed to a backward, ``requires_grad``,
parameters sharing memory with a master tensor (after a training step), and whether a second
backward through the same graph (``retain_graph=True``) gives the same gradient (a backward
that changes a tensor it saved in forward, in place, makes it fail)."""
from __future__ import annotations

import torch

from grader.checks.problem3 import cases, ranks, recorder
from grader.checks.problem3.cases import FFN, HEADS, IN, LAYERS, OUT, VOCAB, H
from grader.checks.problem3.scatter_gather.observe import OPS as SCATTER_GATHER
from grader.checks.problem3.scatter_gather.observe import inputs

OPS = ("copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region", *SCATTER_GATHER)


def storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor) and t.numel()}


def changes(master: dict, before_master: dict, tensors: list, before: list, flags: list) -> list[str]:
    """What changed of the caller's: master entries (values, or gone or added), the arguments'
    values and their requires_grad."""
    found = [f"master[{k!r}] (removed from the dict)" for k in before_master if k not in master]
    found += [f"master[{k!r}] (added to the dict)" for k in master if k not in before_master]
    # exact: the caller's tensors against their own copies taken before the call; the same backward run twice on the same graph
    found += [f"master[{k!r}]" for k, v in before_master.items() if k in master and not torch.equal(master[k], v)]
    # exact: the caller's tensors against their own copies taken before the call; the same backward run twice on the same graph
    found += [f"argument {i}" for i, (t, b) in enumerate(zip(tensors, before)) if not torch.equal(t.detach(), b)]
    return found + [f"argument {i}'s requires_grad" for i, (t, flag) in enumerate(zip(tensors, flags))
                    if t.requires_grad != flag]


def twice(output: torch.Tensor, grad, leaves: list[torch.Tensor]) -> str:
    """Backward through the same graph twice (``retain_graph``): "" when the second gave the
    leaves the same gradient as the first, else what it did instead."""
    first = torch.autograd.grad((output * grad).sum(), leaves, retain_graph=True, allow_unused=True)
    try:
        second = torch.autograd.grad((output * grad).sum(), leaves, retain_graph=True, allow_unused=True)
    except Exception as error:  # noqa: BLE001 - what the second backward raised is the finding
        return f"raised {type(error).__name__}: {str(error)[:200]}"
    # exact: the caller's tensors against their own copies taken before the call; the same backward run twice on the same graph
    same = all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
               for a, b in zip(first, second))
    return "" if same else "gave another gradient than the first"


def check_module(build, master: dict, arguments: list, grad) -> dict:
    """Build from ``master``, run forward, backward twice through the graph, one SGD step:
    what changed of the caller's, and which parameters share memory with a master tensor."""
    before_master, before = {k: v.clone() for k, v in master.items()}, [t.clone() for t in arguments]
    # the caller's tensors themselves, held: one the code drops from the dict must not be freed and
    # its memory handed to a new parameter (that would read as sharing memory with the master)
    originals = list(master.values())
    flags, master_storages = [t.requires_grad for t in arguments], storages(originals)
    module = build()
    parameters = dict(module.named_parameters()) if isinstance(module, torch.nn.Module) else {}
    aliased = sorted(name for name, p in parameters.items() if storages([p]) & master_storages)
    y = module(*arguments)
    leaves = [*parameters.values(), *(t for t in arguments if t.requires_grad)]
    second = twice(y, grad, leaves) if y.requires_grad else ""
    if not second:  # a backward that could not run twice again has said so; a third one would raise
        ranks.backward(y, grad)
        ranks.sgd_step(module, cases.LR) if parameters else None
    changed = changes(master, before_master, arguments, before, flags)
    del originals
    return {"changed": changed, "aliased": aliased, "second_backward": second}


def check_op(op, x: torch.Tensor, grad: torch.Tensor, name: str, layout) -> dict:
    result = ranks.run_op(op, x, grad, name, layout)
    leaf = layout(x).requires_grad_()
    y = op(leaf)
    result["second_backward"] = twice(y, grad, [leaf]) if y.requires_grad else ""
    return result


def attempt(run) -> dict:
    """``run()``, or the name and message of what it raised: that part's own criterion reports it."""
    try:
        return run()
    except Exception as error:  # noqa: BLE001 - the stub's NotImplementedError included
        return {"raised": type(error).__name__, "message": str(error)[:200]}


def rank_caller_unchanged(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    data, m, layer, d = cases.activations(seed, t), cases.linear_master(seed), cases.layer_master(seed), cases.vocab_data(seed)
    parts: dict = {}
    for name in OPS:
        x, grad = inputs(name, data, rank, t) if name in SCATTER_GATHER else (data["x_r"][rank], data["grad_r"][rank])
        for layout in (torch.clone, ranks.strided):
            label = f"{name} ({'contiguous' if layout is torch.clone else 'non-contiguous'})"
            parts[label] = attempt(lambda: check_op(getattr(tp, name), x, grad, name, layout))
    linear = {"weight": m["weight"].clone(), "bias": m["bias"].clone()}
    parts["ColumnParallelLinear"] = attempt(lambda: check_module(
        lambda: tp.ColumnParallelLinear(IN, OUT, master=linear), linear, [m["x"].clone()],
        cases.column_block(m["grad"], rank, t)))
    row = {"weight": m["row.weight"].clone(), "bias": m["row.bias"].clone()}
    parts["RowParallelLinear"] = attempt(lambda: check_module(
        lambda: tp.RowParallelLinear(IN, OUT, master=row), row, [cases.column_block(m["x"], rank, t).clone()],
        m["grad"]))
    for part, build, prefix in (("ParallelMLP", lambda mm: tp.ParallelMLP(H, FFN, master=mm), "mlp"),
                                ("ParallelSelfAttention", lambda mm: tp.ParallelSelfAttention(H, HEADS, master=mm),
                                 "attention"),
                                ("ParallelTransformerLayer", lambda mm: tp.ParallelTransformerLayer(H, HEADS, FFN, master=mm),
                                 "")):
        master = {k: v.clone() for k, v in (cases.sub(layer, prefix) if prefix else layer).items()}
        parts[part] = attempt(lambda: check_module(lambda: build(master), master, [data["x"].clone()], data["grad"]))
    table = {"weight": d["table"].clone()}
    parts["VocabParallelEmbedding"] = attempt(lambda: check_module(
        lambda: tp.VocabParallelEmbedding(VOCAB, H, master=table), table, [d["ids"].clone()], d["grad"]))
    logits = cases.column_block(d["logits"], rank, t).clone().requires_grad_()
    parts["vocab_parallel_cross_entropy"] = attempt(lambda: check_module(
        lambda: tp.vocab_parallel_cross_entropy, {}, [logits, d["ids"].clone()], d["loss_grad"]))
    model = {k: v.clone() for k, v in cases.model_master(seed).items()}
    parts["ParallelLanguageModel"] = attempt(lambda: check_module(
        lambda: tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, master=model), model,
        [v.clone() for v in cases.model_batches(seed)[0]], torch.ones((), dtype=cases.DTYPE)))
    return parts


def observe_caller_unchanged(seed: int, params: dict):
    """Runs every op, layer, the loss and the model, watching the caller's tensors (t = 1, 2)."""
    return ranks.observe(rank_caller_unchanged, seed, params, cases.CONVENTION_SIZES)
