"""Hidden checks of Problem 3 (tensor parallelism): one folder per concept, each with its
``observe.py`` (child side) and ``judge.py`` (parent side); see :mod:`grader.checks`.

Criterion -> folder (``check = "problem3.<folder>:<name>"`` in grader/rubric.toml):

=========================  ===================  ============================================
3.0-caller-unchanged       caller/              the caller's tensors, dicts, gradients
3.0-errors                 errors/              ValueError, before any communication
3.0-layout                 layout/              non-contiguous inputs and gradients
3.1-f-g                    fg/                  f and g, both directions
3.1-scatter-gather         scatter_gather/      scatter/gather, sequence-parallel ops
3.1-single-process         single_process/      the 3.1 ops at t = 1 (fg/ and scatter_gather/)
3.2-column-row             linear/              column- and row-parallel linear layers
3.3-mlp, -attention,       modules/             the parallel MLP, attention, layer
3.3-layer
3.4-embedding              embedding/           vocab-parallel embedding
3.4-fused-loss             fused_loss/          vocab-parallel cross-entropy
3.5-sequence-parallel      sequence_parallel/   the sequence-parallel layer and parts
3.6-train                  train/               the language model, trained
=========================  ===================  ============================================

Shared, child side: :mod:`.cases` (sizes and every tensor drawn from the seed, the edge cases
built in), :mod:`.ranks` (launching the ranks on every world size, plain data),
:mod:`.recorder` (the collectives each rank issues), :mod:`.blocks` (a parallel module's run),
:mod:`.pieces` (the grader's own pieces, for the fallback). Parent side: :mod:`.judge_tools`
(world sizes, tolerances, budgets), :mod:`.judge_blocks`, :mod:`.judge_vocab` and
:mod:`.expected_dense` (the dense PyTorch references).

Every check runs on gloo (CPU) with t = 2 and t = 4 (3.2-3.6 also t = 1, one process without a
process group; the 3.0 conventions at t = 1 and 2) in float64, with float32 and other shapes as
extra cases, on contiguous inputs (3.0-layout alone tries non-contiguous ones), against dense
single-process PyTorch built from the same master tensors. Criteria 3.2-3.6 judge the student's
own pieces everywhere first; only when that fails are they run again with the grader's pieces in
place of the other sub-problems' (rubric ``fallback``; :mod:`.pieces`), so a mistake costs one
criterion and a student's own helpers never cost points.
"""
