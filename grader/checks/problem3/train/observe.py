"""3.6-train, child side: ranks build the student's ParallelLanguageModel from the grader's
master tensors (a non-default ``eps``) and train it with ``train_language_model`` in two
calls (two steps, then one), each call's batches an iterator that is not a list (each step's
collectives tagged with its step); then the held-out loss under ``torch.no_grad()``, what
``.grad`` was left behind, a model drawn from a seed without master tensors, and (t = 1) one
with sizes of one, in float32. With the student's own pieces first; in the fallback's second
run, the grader's 3.1-3.5 pieces under the student's model and training loop."""
from __future__ import annotations

import torch

# pieces_*: the grader's pieces this check's fallback binds, and only those, loaded before the
# student's code runs (a child cannot import grader modules after that).
from grader.checks.problem3 import cases, pieces, pieces_blocks, pieces_linear, pieces_norm, pieces_ops, pieces_vocab, ranks, recorder  # noqa: F401
from grader.checks.problem3.cases import FFN, HEADS, LAYERS, MODEL_LR, VOCAB, H

MODEL_EPS = 1e-3  # not the default: a layer that ignores eps shows
DRAWN_SEED = 5
TINY = (1, 1, 1, 1, 1)  # (vocab_size, hidden_size, num_heads, num_layers, ffn_hidden_size): sizes of one


def sequence_parallel_cases(t: int) -> tuple[bool, ...]:
    """Both at t = 2; at t = 1 they are the same model; at t = 4 the one that moves the sequence
    (its blocks of 2 rows: the time budget keeps one training per rank there)."""
    return {1: (False,), 2: (False, True)}.get(t, (True,))


def steps(batches: list, first: int):
    """The batches one by one, each tagging what follows with its step (not a list: a loop
    that needs ``len`` or indexing fails as it would on any other iterable)."""
    for number, batch in enumerate(batches, first):
        recorder.set_phase(f"step {number}")
        yield batch
    recorder.set_phase("setup")


def train(tp, sp: bool, seed: int) -> dict:
    batches = cases.model_batches(seed)
    model = tp.ParallelLanguageModel(VOCAB, H, HEADS, LAYERS, FFN, sequence_parallel=sp, eps=MODEL_EPS,
                                     master=cases.model_master(seed))
    losses = [tp.train_language_model(model, steps([batches[n] for n in call], call[0]), MODEL_LR)
              for call in cases.CALLS]  # two calls: the second trains on from where the first left off
    left = sorted(name for name, p in model.named_parameters() if p.grad is not None)
    with recorder.Phase("held-out"), torch.no_grad():
        held_out = model(*batches[-1])
    return {"losses": [plain_losses(value) for value in losses], "grads_left": left, "held_out": ranks.out(held_out),
            "kind": ranks.kind(held_out), "matrix_numel": ranks.matrix_numel(model)}


def plain_losses(value) -> dict:
    """What one call returned: its container's type and each loss's type and value."""
    if not isinstance(value, (list, tuple)):
        return {"type": type(value).__name__, "items": []}
    return {"type": type(value).__name__, "items": [
        {"type": "float" if isinstance(v, float) else type(v).__name__, "value": float(v) if isinstance(v, float) else None}
        for v in value]}


def rank_train(rank: int, t: int, seed: int, params: dict) -> dict:
    import minitorch.tensor_parallel as tp

    recorder.start_rank()
    result: dict = {}
    with pieces.bound(tp, params, ops=True, linear=True, norm=True, blocks=True, vocab=True):
        for sp in sequence_parallel_cases(t):
            result[f"sp={sp}"] = train(tp, sp, seed)
        ids, targets = cases.model_batches(seed)[-1]
        with recorder.Phase("drawn"), torch.no_grad():
            result["drawn"] = ranks.outcome(lambda: tp.ParallelLanguageModel(
                VOCAB, H, HEADS, LAYERS, seed=DRAWN_SEED, dtype=cases.DTYPE)(ids, targets))
        if t == 1:  # sizes of one, which only t = 1 divides: one vocabulary entry, so every loss is 0
            tiny = torch.zeros(3, 2, dtype=torch.int64)
            with torch.no_grad():
                result["tiny"] = ranks.outcome(lambda: tp.ParallelLanguageModel(
                    *TINY, seed=DRAWN_SEED, dtype=torch.float32)(tiny, tiny.clone()))
    result["log"] = recorder.taken()
    return result


def observe_train(seed: int, params: dict):
    """Launches ranks that build the student's ParallelLanguageModel and train it."""
    return ranks.observe(rank_train, seed, params, cases.ALL_SIZES)
