"""The harness: a disposable tree and one isolated, time-limited child process per criterion.

Children are forked by multiprocessing's forkserver, started once per grader process with
torch and the check modules preloaded, so a child costs milliseconds instead of a fresh
interpreter plus ``import torch`` (seconds). What a child does to isolate itself is in
:mod:`grader.child`; here the parent builds the tree, starts the child, kills its whole
process group when the time is up, and turns what came back into an :class:`Outcome`.
"""
from __future__ import annotations

import io
import multiprocessing
import os
import pwd
import shutil
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from multiprocessing import spawn

import grader
from grader import child
from grader.rubric import Criterion, Settings
from grader.submission import STUDENT_FILES, Submission

REPO = Path(grader.__file__).resolve().parent.parent
PROVIDED = REPO / "minitorch"
OUTPUT_TAIL_BYTES = 64 * 1024
STARTUP_TIMEOUT = 180.0
PROCESS_PREFIX = "grader-"


class HarnessError(RuntimeError):
    """The grader could not set up or run a child (the grader broke, not the student)."""


@dataclass
class Outcome:
    """What one child produced.

    ``kind``: ``observation`` / ``fail`` / ``exception`` / ``garbage`` (the child reported),
    ``timeout``, ``flood`` (printed past the output limit), ``exited`` (ended without a
    result: ``exitcode`` says how) or ``grader-error``. ``envelope`` is the child's report.
    """

    kind: str
    envelope: dict
    seconds: float
    exitcode: int | None
    output: str
    output_bytes: int


def format_bytes(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MB"
    if count >= 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count} bytes"


def _unprivileged_user(settings: Settings) -> tuple[int, int] | None:
    """``(uid, gid)`` children switch to, or None when the grader is not root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(settings.user)
    except KeyError:
        raise HarnessError(
            f"running as root but there is no user {settings.user!r} for the children; "
            "create it or set [grader] user in the rubric"
        ) from None
    if entry.pw_uid == 0:
        raise HarnessError(f"[grader] user {settings.user!r} is root; children must run unprivileged")
    return entry.pw_uid, entry.pw_gid


def _tasks_of(uid: int) -> int:
    """Processes plus threads that ``uid`` runs now: RLIMIT_NPROC counts them all."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1").strip())
    return count


def _world_traversable(folder: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [folder, *folder.parents])


def _python_folders() -> list[Path]:
    """Folders the children's Python reads from: sys.path and the interpreter's own."""
    entries = [*sys.path, os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    return sorted({Path(os.path.realpath(e)) for e in entries if e and os.path.isdir(e)})


def exposure_plan() -> tuple | None:
    """How to let an unprivileged user reach Python's files (see child.expose_python).

    ``()`` when every folder is already open to others; ``((closed, (needed, ...)), ...)``
    when a folder above them is closed (``/root``, 0700); None when that cannot be fixed by
    covering one closed folder per path (a closed folder deeper down, an unreadable entry).
    """
    plan: dict[str, set[str]] = {}
    for folder in _python_folders():
        chain = [*reversed(folder.parents), folder]
        closed = [p for p in chain[:-1] if not os.stat(p).st_mode & stat.S_IXOTH]
        if not os.stat(folder).st_mode & stat.S_IROTH or not os.stat(folder).st_mode & stat.S_IXOTH:
            return None
        if not closed:
            continue
        top = closed[0]
        if len(closed) > 1 or top == Path("/"):
            return None
        plan.setdefault(str(top), set()).add(str(chain[chain.index(top) + 1]))
    return tuple((closed, tuple(sorted(needed))) for closed, needed in sorted(plan.items()))


def _scratch_root(unprivileged: bool) -> str | None:
    """A temp folder the unprivileged user can traverse into (None: the default)."""
    if not unprivileged:
        return None
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(candidate) and _world_traversable(Path(candidate)):
            return candidate
    raise HarnessError("no temp folder that an unprivileged user can reach (/tmp is not world-traversable)")


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

    prepared.grader_patched = True
    return prepared


def forkserver_context(check_modules: list[str]):
    """multiprocessing's forkserver context with torch and the check modules preloaded.

    The server starts on first use and is shared by every grading run in this process.
    """
    if str(REPO) not in sys.path:  # the server imports grader.* from the repository
        sys.path.insert(0, str(REPO))
    if not getattr(spawn.get_preparation_data, "grader_patched", False):
        spawn.get_preparation_data = _without_main_module(spawn.get_preparation_data)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "grader.checks", "grader.child", *check_modules])
    return context


class Harness:
    """Grades criteria of one submission in isolated children. Use as a context manager.

    Args:
        submission: the student files.
        settings: limits from the rubric's ``[grader]`` table.
        check_modules: modules to preload in the forkserver (``grader.checks.pipeline``).
        provided: the grader's own copy of the provided modules (default: ``minitorch/``
            of this repository; the student files in it are never copied).
    """

    def __init__(self, submission: Submission, settings: Settings, check_modules: list[str], provided: Path = PROVIDED):
        self.submission = submission
        self.settings = settings
        self.context = forkserver_context(check_modules)
        self.provided = Path(provided)
        self.user = _unprivileged_user(settings)
        self.base: Path | None = None
        self.count = 0
        self.expose: tuple = ()
        self.notes: list[str] = []

    def __enter__(self) -> "Harness":
        self.base = Path(tempfile.mkdtemp(prefix="grader-", dir=_scratch_root(self.user is not None)))
        os.chmod(self.base, 0o711)
        self.tree = self.base / "tree"
        self.results = self.base / "results"
        self.results.mkdir(mode=0o700)
        self._build_tree()
        self.process_base = _tasks_of(self.user[0] if self.user else os.getuid())
        return self

    def __exit__(self, *exc_info) -> None:
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)

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

    def _run_helper(self, target, *args) -> int | None:
        process = self.context.Process(target=target, args=args, name=PROCESS_PREFIX + "helper")
        process.start()
        process.join(STARTUP_TIMEOUT)
        _kill_group(process.pid, still_running=process.exitcode is None)
        return process.exitcode

    def start(self) -> float:
        """Start the forkserver (importing torch there), decide whether children can drop
        privileges here, and return one child's start-up cost in seconds."""
        code = self._run_helper(child.ping)
        if code != 0:
            raise HarnessError(f"the grader's forkserver did not start (exit status {code})")
        if self.user is not None:
            self._settle_user()
        started = time.perf_counter()
        self._run_helper(child.ping)
        return time.perf_counter() - started

    def _settle_user(self) -> None:
        """Keep the unprivileged user only if, as that user, a child can still read Python."""
        plan = exposure_plan()
        reason = "a folder holding Python's files is closed to it" if plan is None else None
        if plan is not None:
            job = self._job(None, 0, {}, expose=plan, output="probe")
            if self._run_helper(child.probe, job) != 0:
                reason = _tail(Path(job.output_path))[0].strip() or "the probe child failed"
        if reason is None:
            self.expose = plan
            return
        self.notes.append(f"children ran as root, not as {self.settings.user!r}: {reason}")
        self.user = None

    def _private_folder(self) -> Path:
        """A fresh TMPDIR/HOME/working folder that only the child's user can use."""
        folder = self.base / f"private-{self.count}"
        folder.mkdir(mode=0o700)
        if self.user is not None:
            os.chown(folder, *self.user)
        return folder

    def _job(self, criterion: Criterion | None, seed: int, params: dict, expose: tuple, output: str = "") -> child.Job:
        self.count += 1
        return child.Job(
            criterion=criterion.id if criterion else "", module=criterion.module if criterion else "",
            name=criterion.name if criterion else "", seed=seed, params=params, tree=str(self.tree),
            workdir=str(self._private_folder()), output_path=str(self.results / f"{self.count}{output}.out"),
            result_path=str(self.results / f"{self.count}.result"), student_files=self.student_paths(),
            memory_bytes=self.settings.memory_mb * 1024 * 1024,
            file_bytes=int(self.settings.output_limit_mb * 1024 * 1024),
            max_processes=self.settings.max_processes, process_base=self.process_base,
            uid=self.user[0] if self.user else None, gid=self.user[1] if self.user else None, expose=expose,
        )

    def run(self, criterion: Criterion, seed: int, timeout: float) -> Outcome:
        """Run ``criterion``'s observe function in a child; never raises for the child's sake."""
        job = self._job(criterion, seed, dict(criterion.params), self.expose)
        output_path, result_path = Path(job.output_path), Path(job.result_path)
        started = time.perf_counter()
        process = self.context.Process(target=child.main, args=(job,), name=PROCESS_PREFIX + criterion.id)
        process.start()
        try:
            process.join(timeout)
        except BaseException:  # Ctrl-C: leave nothing running behind
            _kill_group(process.pid, still_running=True)
            raise
        timed_out = process.exitcode is None
        _kill_group(process.pid, still_running=timed_out)  # also whatever it left in its group
        process.join(10)
        seconds = time.perf_counter() - started
        output, output_bytes = _tail(output_path)
        if timed_out:
            return Outcome("timeout", {}, seconds, None, output, output_bytes)
        exitcode = process.exitcode
        if exitcode == -signal.SIGXFSZ or output_bytes >= job.file_bytes:
            return Outcome("flood", {}, seconds, exitcode, output, output_bytes)
        envelope = _read_result(result_path, job.file_bytes) if exitcode == 0 else None
        if envelope is None:
            return Outcome("exited", {}, seconds, exitcode, output, output_bytes)
        if not isinstance(envelope, dict) or envelope.get("kind") not in ("observation", "fail", "exception", "garbage", "grader-error"):
            return Outcome("garbage", {"message": "the child's report is not in the grader's format"}, seconds, exitcode, output, output_bytes)
        return Outcome(envelope["kind"], envelope, seconds, exitcode, output, output_bytes)


def _is_provided(path: Path) -> bool:
    """A provided module: not a student file and free of solution markers (a file holding
    answers must never reach a child, whatever its name)."""
    return path.name not in STUDENT_FILES and "# BEGIN SOLUTION" not in path.read_text(encoding="utf-8", errors="replace")


def _kill_group(pid: int | None, still_running: bool) -> None:
    """SIGKILL the child's process group; the child itself too if it never reached setsid
    (only while it is known to be running: a reaped pid may already belong to another)."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if still_running:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


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
    cannot be read safely."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    if not data:
        return None
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # noqa: BLE001 - anything unreadable is the child's garbage
        return {"kind": "garbage", "message": f"unreadable report ({type(error).__name__})"}
