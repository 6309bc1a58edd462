"""Hidden checks: one package per problem, each criterion's check split at the trust boundary.

Layout
------
A criterion in ``grader/rubric.toml`` names its check as ``"<problem>.<concept>:<name>"``, e.g.
``check = "problem2.clock_cycles:schedule"``. Its code is in the folder
``grader/checks/<problem>/<concept>/``:

``observe.py`` -- the CHILD side: ``observe_<name>(seed: int, params: dict) -> observation``.
    Runs in the isolated child process, where ``minitorch.pipeline`` and
    ``minitorch.tensor_parallel`` are the submitted files and the provided modules are the
    grader's own copies. It builds the cases, calls the student's code and records what it
    saw. The observation is plain data: ``dict``/``list``/``tuple``/``str``/``int``/
    ``float``/``bool``/``None`` and plain CPU ``torch.Tensor``. It never judges: no message,
    no expected value, no threshold. What cannot be observed as the check needs is raised as
    :class:`grader.checks.recording.Unusable` (or ``Tampered``), with the facts only.

``judge.py`` -- the PARENT side: ``judge_<name>(seed: int, params: dict, observation) -> dict | None``.
    Runs in the grader's own process. It computes the expected values itself from plain
    PyTorch (sequential stages, dense single-process layers) from the same ``seed``, checks
    that the observation holds exactly the cases it asked for, and raises
    :class:`grader.checks.judging.Fail` with a message in the student's terms on the first
    mismatch. Returning normally means passed; a returned dict is kept as the criterion's
    ``details``.

Modules a concept's two sides share (case tables, the grader's own stages and pieces) sit
beside them or at the problem's level; they hold nothing the child may not see. Parent-only
modules are named ``judge*.py`` or ``expected*.py`` (and :mod:`grader.checks.judging`); the
child side never imports them, and ``tests/grader/checks/test_layout.py`` proves it on a fresh
interpreter: the forkserver preloads the child side only, so a student's code that searches its
own process finds no judge, no expected value and no message.

A judge that reads times the child measured may take a third parameter, ``outside``
(:class:`grader.checks.judging.Outside`): the child's run as the grader timed it from its own
process. What the child reports must fit in it (:func:`grader.checks.judging.within_outside`).

``seed`` is drawn fresh for every grading run; ``params`` is the criterion's ``params`` table
from the rubric (empty dict when absent). Any other exception from ``observe_*`` (for example
the stub's ``NotImplementedError``) is reported as the criterion's failure with the student's
frames of the traceback.
"""
