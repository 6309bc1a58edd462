"""Hidden checks, one module per area (``pipeline``, ``tensor_parallel``, ``schedules``, ...).

Contract between a check module and the harness
-----------------------------------------------
A criterion in ``grader/rubric.toml`` names its check as ``"<module>:<name>"``. The module
``grader/checks/<module>.py`` then defines two functions:

``observe_<name>(seed: int, params: dict) -> observation``
    Runs in the isolated CHILD process, where ``minitorch.pipeline`` and
    ``minitorch.tensor_parallel`` are the submitted files and the provided modules are
    the grader's own copies. It drives the student's code and returns what it saw. The
    observation must be built only from ``dict``/``list``/``tuple``/``str``/``int``/
    ``float``/``bool``/``None`` and plain ``torch.Tensor`` (moved to CPU): it travels to
    the parent through ``torch.save`` and is read with ``torch.load(weights_only=True)``,
    which cannot execute code, so a hostile child cannot attack the parent through it.
    It may raise ``Fail(message)`` when a fact can only be judged in the child.

``judge_<name>(seed: int, params: dict, observation) -> dict | None``
    Runs in the PARENT. It computes the expected values itself from plain PyTorch
    (sequential stages, dense single-process layers), from the same ``seed``, and raises
    ``Fail(message)`` on the first mismatch. Returning normally means passed. A judge may
    return (or pass as ``Fail(message, details=...)``) a JSON-able dict of measurements,
    e.g. raw timings; the JSON report keeps it as the criterion's ``details``.

``seed`` is drawn fresh for every grading run; ``params`` is the criterion's
``params`` table from the rubric (empty dict when absent). Any other exception from
``observe_*`` (for example the stub's ``NotImplementedError``) is reported by the harness
as the criterion's failure with the student's frames of the traceback.

Failure messages speak to the student: what was expected and what was observed, in the
terms of the write-up (``wave 2: expected submit(0) submit(1) receive(0) ...; got ...``).
"""


class Fail(Exception):
    """A student-facing reason why a criterion failed, with optional JSON-able ``details``."""

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = details or {}
