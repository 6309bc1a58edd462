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


class Malformed(Fail):
    """The observation is not shaped as the check's observe function builds it: something in
    the child (the student's code) changed what came back. A failure, not a grader error."""


def _where(path: str) -> str:
    return f"{path} (the data your code's run handed back to the grader)"


class ObservedDict(dict):
    """A dict of the observation: a missing key is :class:`Malformed`, naming where."""

    path = "observation"

    def __missing__(self, key):
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} has no {key!r}")

    def __iter__(self):  # keys iterated where the check expects a list of entries stay checked
        for key in dict.__iter__(self):
            yield observed(key, f"{self.path}, key {key!r},") if type(key) is str else key


class ObservedList(list):
    """A list of the observation: an index out of range is :class:`Malformed`, naming where."""

    path = "observation"

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            raise Malformed(
                f"the grader could not read what your code produced: {_where(self.path)} has {len(self)} "
                f"entries, no entry {index}"
            ) from None
        except TypeError:
            raise Malformed(
                f"the grader could not read what your code produced: {_where(self.path)} is a list where "
                f"the grader expected a mapping (looked up {index!r})"
            ) from None


class ObservedStr(str):
    """A string of the observation: used as a mapping, a list or a tensor, it is
    :class:`Malformed` (a string where the check's observe function puts something else)."""

    path = "observation"

    def __getitem__(self, index):
        if isinstance(index, (int, slice)):
            return str.__getitem__(self, index)
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} is a string "
                        f"({str(self)[:40]!r}) where the grader expected a mapping")

    def __getattr__(self, name):
        raise Malformed(f"the grader could not read what your code produced: {_where(self.path)} is a string "
                        f"({str(self)[:40]!r}) where the grader expected a tensor or an object with .{name}")


def observed(value, path: str = "observation"):
    """``value`` (an observation, plain data) with dicts and lists that fail as
    :class:`Malformed` instead of KeyError / IndexError, so a judge given data of the wrong
    shape fails the criterion with a reason rather than crashing as a grader error."""
    wrapped: ObservedDict | ObservedList | ObservedStr
    if type(value) is dict:
        wrapped = ObservedDict({key: observed(item, f"{path}[{key!r}]") for key, item in value.items()})
    elif type(value) is list:
        wrapped = ObservedList(observed(item, f"{path}[{index}]") for index, item in enumerate(value))
    elif type(value) is str:
        wrapped = ObservedStr(value)
    else:
        return value
    wrapped.path = path
    return wrapped


def expect_tensor(value, what: str):
    """``value`` if it is a tensor, else :class:`Malformed` saying what came back instead."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise Malformed(f"{what}: your code returned {_kind(value)} where a tensor was expected")
    return value


def _kind(value) -> str:
    if value is None:
        return "None"
    text = repr(value)
    return f"a {type(value).__name__} ({text[:60] + '...' if len(text) > 60 else text})"



def student_tensor(value, what: str):
    """A plain ``torch.Tensor`` view of ``value``, something the student's code returned, made
    without running any method of it: a Tensor subclass's overrides (``detach``, ``__eq__``,
    ``__torch_function__``) never see the grader's observation. It shares storage and autograd
    history with ``value``. Anything but a tensor is :class:`Fail`, naming ``what``."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise Fail(f"{what}: your code returned {_kind(value)} where a tensor was expected")
    if type(value) is torch.Tensor:
        return value
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(value, torch.Tensor)


def _as_plain_case(case):
    if isinstance(case, (list, tuple)):
        return tuple(_as_plain_case(item) for item in case)
    if isinstance(case, dict):
        return tuple(sorted((str(key), _as_plain_case(dict.__getitem__(case, key))) for key in dict.keys(case)))
    return str(case) if isinstance(case, str) else case


def expect_cases(entries, asked: list, what: str, key: str = "case") -> list:
    """``entries``, one per case, after checking that they are exactly the cases the parent
    asked for, in order: entry ``i`` is a mapping whose ``key`` equals ``asked[i]`` (lists and
    tuples compare alike). A judge calls this before it judges any value, so an observation
    that leaves out, adds, reorders or relabels cases is :class:`Malformed`, never judged on
    the cases it chose to send."""
    if not isinstance(entries, list):
        raise Malformed(f"{what}: the grader could not read what your code produced: "
                        f"{_where(getattr(entries, 'path', 'observation'))} is {_kind(entries)}, not a list of cases")
    if len(entries) != len(asked):
        raise Malformed(f"{what}: the grader asked for {len(asked)} cases and got {len(entries)} back "
                        f"({_where(getattr(entries, 'path', 'observation'))})")
    for index, (entry, case) in enumerate(zip(entries, asked)):
        if not isinstance(entry, dict) or key not in dict.keys(entry):
            raise Malformed(f"{what}: case {index} came back without its {key!r} "
                            f"({_where(getattr(entries, 'path', 'observation'))})")
        if _as_plain_case(dict.__getitem__(entry, key)) != _as_plain_case(case):
            raise Malformed(f"{what}: case {index} came back as {dict.__getitem__(entry, key)!r}, "
                            f"but the grader asked for {case!r}")
    return entries
