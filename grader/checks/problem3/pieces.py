"""The grader's own tensor-parallel pieces (child side), written here from plain
``torch.distributed`` (never the answer key), so that a criterion judges only the code of its
own sub-problem.

A criterion that needs a piece from another sub-problem (3.2's layers need 3.1's f and g, the
3.6 model needs 3.3's layers and 3.4's loss, ...) first runs the student's own pieces
everywhere (``params["pieces"] == "own"``, the default); only when that fails does the grader
run it again with these pieces bound in the student's module in place of the other
sub-problems' (``"grader"``, see ``fallback`` in grader/grading.py, and :func:`bound`): a
mistake in 3.1 then costs 3.1's criteria, not 3.2's as well, and a student's own helpers
never cost points. The pieces keep the student file's public names and signatures (the
contracts of ``tensor_parallel.py``), and name their parameters like the dense modules'
``state_dict`` (``qkv``/``out``, ``fc1``/``fc2``, ``ln1``/``ln2``) so that judges can read
gradients by name. Their collectives go through ``torch.distributed``'s module attributes, so
the recorder sees them like the student's.
"""
from __future__ import annotations

import contextlib
import sys

from grader.checks import recording


def _loaded(name: str):
    """A piece's module, which the check's child side imported before the student's code ran
    (a child cannot import grader modules after that, and keeps them out of ``sys.modules``:
    :func:`grader.child._watched_modules`): only the pieces a check binds are held."""
    full = f"{__package__}.{name}"
    module = sys.modules.get(full) or recording._WATCHED.get(full)
    if module is None:
        raise RuntimeError(f"grader error: {__package__}.{name} was not imported by the check's child side")
    return module


def substitute(student, *, ops=False, linear=False, norm=False, parts=False, blocks=False, vocab=False) -> None:
    """Bind the grader's pieces in ``student`` (the imported ``tensor_parallel`` module): the
    3.1 ops, the 3.2 linear layers, the LayerNorm (its 3.5 part), the 3.3 MLP and attention
    (``parts``) or all three 3.3 modules (``blocks``; built on whatever linear layers and
    LayerNorm ``student`` then holds) and the 3.4 embedding and loss."""
    names: dict = {}
    if ops:
        pieces_ops = _loaded("pieces_ops")
        names.update(pieces_ops.OPS)
    if linear:
        pieces_linear = _loaded("pieces_linear")
        names.update(ColumnParallelLinear=pieces_linear.ColumnParallelLinear,
                     RowParallelLinear=pieces_linear.RowParallelLinear)
    if norm:
        pieces_norm = _loaded("pieces_norm")
        names.update(ReplicatedLayerNorm=pieces_norm.ReplicatedLayerNorm)
    if vocab:
        pieces_vocab = _loaded("pieces_vocab")
        names.update(VocabParallelEmbedding=pieces_vocab.VocabParallelEmbedding,
                     vocab_parallel_cross_entropy=pieces_vocab._CrossEntropy.apply,
                     _VocabParallelCrossEntropy=pieces_vocab._CrossEntropy)
    for name, value in names.items():
        setattr(student, name, value)
    if blocks or parts:
        pieces_blocks = _loaded("pieces_blocks")
        for name, value in pieces_blocks.layer_classes(student).items():
            if blocks or name != "ParallelTransformerLayer":
                setattr(student, name, value)


def uses_grader_pieces(params: dict) -> bool:
    """Whether this run binds the grader's pieces (the fallback's second run)."""
    return params.get("pieces", "own") == "grader"


@contextlib.contextmanager
def bound(student, params: dict, **pieces):
    """``with bound(tp, params, ops=True, ...)``: for the fallback's second run, the grader's
    pieces bound in the student's module for the block (:func:`substitute`), restored
    afterwards (t = 1 runs in the observing process); the student's own pieces otherwise."""
    if not uses_grader_pieces(params):
        yield
        return
    saved = dict(vars(student))
    substitute(student, **pieces)
    try:
        yield
    finally:
        for name in set(vars(student)) - set(saved):
            delattr(student, name)
        for name, value in saved.items():
            if vars(student).get(name) is not value:
                setattr(student, name, value)
