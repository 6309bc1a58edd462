"""The harness: a disposable tree and one isolated, time-limited child process per criterion.

Children are forked by multiprocessing's forkserver, started once per grader process with
torch and the check modules preloaded, so a child costs milliseconds instead of a fresh
interpreter plus ``import torch`` (seconds). Everything that confines a child (the jail,
the leased uid, the limits, the reaper) is :mod:`grader.sandbox`; here the parent builds
the tree, has the sandbox start and wait for the child, and turns what came back into an
:class:`Outcome`. A child killed by a signal the grader did not send runs once more
(:meth:`Harness.run`).
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing import forkserver, spawn
from pathlib import Path

from grader import child
from grader.layout import PROVIDED_FOLDER, REPOSITORY, SOLUTION_MARKER, STUDENT_FILES
from grader.protocol import Kind, check_envelope
from grader.result_file import Malformed, TooLarge, decode
from grader.rubric import Criterion, Settings
from grader.sandbox import Ended, Sandbox, SandboxError, child_environment
from grader.submission import Submission

OUTPUT_TAIL_BYTES = 64 * 1024
PROCESS_PREFIX = "grader-"
HarnessError = SandboxError  # the grader could not set up or run a child (the grader broke, not the student)


@dataclass
class Outcome:
    """What one child produced.

    ``kind``: one of :class:`grader.protocol.Kind` (``exited``: ended without a result,
    ``exitcode`` says how). ``envelope`` is the child's report.
    """

    kind: Kind
    envelope: dict
    seconds: float
    exitcode: int | None
    output: str
    output_bytes: int
    orphans: int = 0
    first_signal: str | None = None  # the run was repeated: its first child was killed by this signal
    out_of_memory: bool = False  # the kernel's out-of-memory killer ran while the child did
    memory_bytes: int | None = None  # stopped: its processes together held this much, past the bound


def foreign_signal(outcome: Outcome) -> str | None:
    """The name of the signal that ended ``outcome``'s child when the grader did not send it
    (not a timeout, not the file-size limit), else None."""
    code = outcome.exitcode
    if outcome.kind != Kind.EXITED or code is None or code >= 0 or code == -signal.SIGXFSZ:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"

def format_bytes(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MB"
    if count >= 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count} bytes"

@contextlib.contextmanager
def _only_environment(environment: dict[str, str]):
    """Run the block with exactly ``environment`` (processes started in it inherit only that).

    Both layers are replaced and restored: ``os.environ`` and the C library's ``environ``,
    which processes inherit and which can hold variables ``os.environ`` never saw (readline
    sets ``COLUMNS`` and ``LINES`` there)."""
    libc = ctypes.CDLL(None)
    saved, saved_c = dict(os.environ), _c_environment(libc)
    libc.clearenv()
    os.environ.clear()
    os.environ.update(environment)
    try:
        yield
    finally:
        libc.clearenv()
        os.environ.clear()
        for entry in saved_c:
            name, _, value = entry.partition(b"=")
            os.putenv(name, value)
        os.environ.update(saved)

def _c_environment(libc) -> list[bytes]:
    """The ``NAME=value`` entries of the C library's ``environ``."""
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    entries: list[bytes] = []
    while environ[len(entries)] is not None:
        entries.append(environ[len(entries)])
    return entries

def start_forkserver() -> None:
    """Start the forkserver (once per grader process) with :func:`child_environment` and this
    repository on its path: its children's memory and ``/proc/self/environ`` hold none of
    the grader's other variables; and with /dev/null as its standard streams: no process it
    forks holds the TA's terminal, even through ``/proc/<forkserver>/fd``."""
    with _only_environment(child_environment({"PYTHONPATH": str(REPOSITORY), "PYTHONDONTWRITEBYTECODE": "1"})):
        with _standard_streams_from_devnull():
            forkserver.ensure_running()


@contextlib.contextmanager
def _standard_streams_from_devnull():
    """Run the block with descriptors 0, 1 and 2 on /dev/null (processes started in it inherit that)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in zip((0, 1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


def _without_main_module(get_preparation_data):
    """multiprocessing makes every child re-import the parent's ``__main__`` script (so a
    script that grades without an ``if __name__ == "__main__"`` guard would run again in
    every child). The grader's children need nothing from it: drop it for them."""

    def prepared(name):
        data = get_preparation_data(name)
        if str(name).startswith(PROCESS_PREFIX):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    prepared.grader_patched = True  # type: ignore[attr-defined]  # marks the patch as applied once
    return prepared

def forkserver_context(check_modules: list[str]):
    """multiprocessing's forkserver context with torch, the child's code and what the check
    modules ask for (their ``FORKSERVER_PRELOAD``) preloaded, never the check modules
    themselves: each child imports its own criterion's child side (milliseconds), so a child
    never holds another criterion's cases or the grader's pieces another criterion needs
    (the grader's ``one_f_one_b`` is 4.1's answer; it is loaded only where 4.2 and 4.4 need it).

    The server starts on first use and is shared by every grading run in this process.
    """
    if str(REPOSITORY) not in sys.path:  # the server imports grader.* from the repository
        sys.path.insert(0, str(REPOSITORY))
    if not getattr(spawn.get_preparation_data, "grader_patched", False):
        spawn.get_preparation_data = _without_main_module(spawn.get_preparation_data)
    context = multiprocessing.get_context("forkserver")
    # A check module's FORKSERVER_PRELOAD: what its children would each import on first use,
    # paid once in the server instead (and never in this process unless a judge needs it).
    extra = [name for module in check_modules for name in getattr(sys.modules.get(module), "FORKSERVER_PRELOAD", ())]
    context.set_forkserver_preload(["torch", "grader.child", *dict.fromkeys(extra)])
    return context


class Harness:
    """Grades criteria of one submission in isolated children. Use as a context manager.

    Args:
        submission: the student files.
        settings: limits from the rubric's ``[grader]`` table.
        check_modules: the checks' child sides, preloaded in the forkserver
            (``grader.checks.problem2.clock_cycles.observe``).
        provided: the grader's own copy of the provided modules (default: ``minitorch/``
            of this repository; the student files in it are never copied).
        backend: the sandbox's backend, forced (default: chosen for this machine).
    """

    def __init__(self, submission: Submission, settings: Settings, check_modules: list[str],
                 provided: Path = PROVIDED_FOLDER, backend: str | None = None):
        self.submission = submission
        self.settings = settings
        self.context = forkserver_context(check_modules)
        self.provided = Path(provided)
        self.sandbox = Sandbox(settings, self.context, backend)

    def __enter__(self) -> "Harness":
        self.sandbox.__enter__()
        try:
            self.tree = self.sandbox.tree
            self._build_tree()
        except BaseException:
            self.sandbox.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.sandbox.__exit__(*exc_info)

    @property
    def user(self) -> tuple[int, int] | None:
        """``(uid, gid)`` the children run as; None: the grader's own."""
        return self.sandbox.user

    @property
    def notes(self) -> list[str]:
        return self.sandbox.notes

    @property
    def defences(self) -> dict[str, str]:
        return self.sandbox.defences

    def _build_tree(self) -> None:
        """The provided modules from the grader's copy plus only the submitted student files."""
        package = self.tree / "minitorch"
        package.mkdir(parents=True)
        for source in sorted(self.provided.iterdir()):
            if source.is_file() and source.suffix == ".py" and _is_provided(source):
                shutil.copyfile(source, package / source.name)
        if not (package / "__init__.py").exists():
            raise HarnessError(f"{self.provided} has no __init__.py: not the provided minitorch package")
        for name, data in self.submission.files.items():
            (package / name).write_bytes(data)
        for folder in (self.tree, package):
            os.chmod(folder, 0o755)
        for path in package.iterdir():
            os.chmod(path, 0o644)

    def student_paths(self) -> tuple[str, ...]:
        return tuple(str(self.tree / "minitorch" / name) for name in STUDENT_FILES)

    def start(self) -> float:
        """Start the forkserver (importing torch there), settle the sandbox on this machine,
        and return one child's start-up cost in seconds."""
        start_forkserver()
        code = self.sandbox.run_helper(child.ping)
        if code != 0:
            raise HarnessError(f"the grader's forkserver did not start (exit status {code})")
        self.sandbox.settle(getattr(forkserver._forkserver, "_forkserver_pid", None))
        started = time.perf_counter()
        self.sandbox.run_helper(child.ping)
        return time.perf_counter() - started

    def run(self, criterion: Criterion, seed: int, timeout: float) -> Outcome:
        """Run ``criterion``'s observe function in a child; never raises for the child's sake.

        A child killed by a signal the grader did not send (its own kills are the timeout's;
        its file-size limit is a flood) may have been killed by something outside it: the
        kernel's out-of-memory killer under another program's pressure, an administrator, a
        program that kills by uid. Such a criterion runs once more; the outcome says both."""
        outcome = self._run_once(criterion, seed, timeout)
        if foreign_signal(outcome) is None:
            return outcome
        first = outcome
        outcome = self._run_once(criterion, seed, timeout)
        outcome.first_signal = foreign_signal(first)
        outcome.out_of_memory = outcome.out_of_memory or first.out_of_memory
        return outcome

    def _run_once(self, criterion: Criterion, seed: int, timeout: float) -> Outcome:
        confinement = self.sandbox.confinement()
        job = child.Job(criterion=criterion.id, module=criterion.observe_module, name=criterion.name, seed=seed,
                        params=dict(criterion.params), tree=str(self.tree), student_files=self.student_paths(),
                        confinement=confinement)
        started = time.perf_counter()
        process = self.sandbox.start(child.main, job, confinement, PROCESS_PREFIX + criterion.id)
        ended = self.sandbox.run(process, timeout, confinement.status_path)
        outcome = self._outcome(ended, confinement, time.perf_counter() - started)
        outcome.orphans, outcome.out_of_memory = ended.orphans, ended.out_of_memory
        return outcome

    def _outcome(self, ended: Ended, confinement, seconds: float) -> Outcome:
        output, output_bytes = _tail(Path(confinement.output_path))
        if ended.memory_bytes is not None:
            return Outcome(Kind.MEMORY, {}, seconds, None, output, output_bytes, memory_bytes=ended.memory_bytes)
        if ended.timed_out:
            return Outcome(Kind.TIMEOUT, {}, seconds, None, output, output_bytes)
        exitcode = ended.exitcode
        if exitcode == -signal.SIGXFSZ or output_bytes >= confinement.file_bytes:
            return Outcome(Kind.FLOOD, {}, seconds, exitcode, output, output_bytes)
        raw = _read_result(Path(confinement.result_path), confinement.file_bytes) if exitcode == 0 else None
        if raw is None:
            return Outcome(Kind.EXITED, {}, seconds, exitcode, output, output_bytes)
        try:
            envelope = check_envelope(raw)
        except ValueError as why:
            garbage = {"kind": Kind.GARBAGE.value, "message": f"its report is not in the grader's format ({why})"}
            return Outcome(Kind.GARBAGE, garbage, seconds, exitcode, output, output_bytes)
        if envelope["kind"] == Kind.GRADER_ERROR and _nonempty(confinement.started_path):
            forged = {"kind": Kind.GARBAGE.value, "forged": True, "message": (
                "its report claims that the grader's own set-up failed, but your code had already started running")}
            return Outcome(Kind.GARBAGE, forged, seconds, exitcode, output, output_bytes)
        return Outcome(Kind(envelope["kind"]), envelope, seconds, exitcode, output, output_bytes)


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False

def _is_provided(path: Path) -> bool:
    """A provided module: not a student file and free of solution markers (a file holding
    answers must never reach a child, whatever its name)."""
    return path.name not in STUDENT_FILES and SOLUTION_MARKER not in path.read_text(encoding="utf-8", errors="replace")

def _tail(path: Path) -> tuple[str, int]:
    """The last 64 KB of the captured output and its total size."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - OUTPUT_TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace"), size
    except OSError:
        return "", 0

def _read_result(path: Path, limit: int):
    """The child's envelope, or None when there is none; a dict saying ``garbage`` when it
    cannot be read safely: more than ``limit`` bytes, not a report of the grader's format
    (:mod:`grader.result_file`), or past one of its reader's bounds."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    if not data:
        return None
    try:
        if len(data) > limit:
            raise TooLarge(f"it is larger than {format_bytes(limit)}")
        return decode(data)
    except TooLarge as error:
        return {"kind": Kind.GARBAGE.value, "message": f"its report is too large to read ({error})"}
    except Malformed as error:
        return {"kind": Kind.GARBAGE.value, "message": f"its report is not in the grader's format ({error})"}
