"""Hidden checks for Problem 4: 1F1B (4.1), interleaved 1F1B (4.2), recomputation (4.3),
training with your own schedule (4.4).

Where each criterion's check is (``observe.py`` runs in the child, ``judge.py`` in the parent;
see :mod:`grader.checks`):

=========================  =====================================  =========================
criterion                  check (rubric)                         folder
=========================  =====================================  =========================
4.1-makespan               problem4.one_f_one_b:makespan          one_f_one_b/
4.1-peak-in-flight         problem4.one_f_one_b:peak              one_f_one_b/
4.1-arguments              problem4.one_f_one_b:arguments         one_f_one_b/
4.2-interleaved            problem4.interleaved:schedule          interleaved/
4.2-arguments              problem4.interleaved:arguments         interleaved/
4.3-bit-identical          problem4.recompute:bit_identical       recompute/
4.3-stored-activations     problem4.recompute:stored_activations  recompute/
4.3-recompute-count        problem4.recompute:count               recompute/
4.3-arguments              problem4.recompute:arguments           recompute/
4.3-caller-unchanged       problem4.recompute:caller              recompute/
4.4-train-step             problem4.train_step:step               train_step/
=========================  =====================================  =========================

Shared by both sides: each concept's case tables (``cases.py``,
``recompute/layers.py``, ``recompute/runs.py``, ``train_step/stages.py``); child side only:
``reading.py`` (a schedule and a call as facts), ``recompute/measure.py`` (the parent measures
plain runs with it too), the fallback's pieces (``pieces.py``: the grader's 1F1B builder;
``train_step/interleaved_piece.py``: Megatron-LM's orders for 4.4's sizes only, so that no
child holds 4.2's answer); parent side only: ``judge_schedules.py``, ``expected_orders.py``
(the grader's own 1F1B and Megatron-LM orders).

Schedules are judged in the parent by simulating them with the grader's own copy of
``minitorch.schedules``, with instant transfers and with a delay on every transfer, against
closed forms and the grader's own orders (never the answer key); their kinds (a new list of
lists of ``Action`` with int fields) and freshness (the same call again after the caller
emptied the first result) are judged from the child's facts. Recomputation is judged against
plain PyTorch runs of layers the grader builds; stored activations are counted by the grader
(weak references to every tensor its layers create, plus the young tensors the garbage
collector sees) and recomputations by hooks on its layers. 4.4 runs the student's
``train_step`` on the grader's recording stages. 4.2 and 4.4 have a ``fallback``: they judge the
student's own pieces first and, only where those fail, again with the grader's schedule
builders bound in place of the student's (4.2: ``one_f_one_b``; 4.4: both), so that a mistake
in 4.1 or 4.2 costs those criteria only. Every case is fixed or drawn from the run's seed;
``--seed`` repeats the draw.
"""
