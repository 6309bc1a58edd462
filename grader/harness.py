"""The harness: a disposable tree and one isolated, time-limited child process per criterion.

Children are forked by multiprocessing's forkserver, started once per grader process with
torch and the check modules preloaded, so a child costs milliseconds instead of a fresh
interpreter plus ``import torch`` (seconds). What a child does to isolate itself is in
:mod:`grader.child`; here the parent builds the tree, starts the child, kills its whole
process group when the time is up, and turns what came back into an :class:`Outcome`.

As root, a harness leases a uid of its own for its children (:func:`grader.processes.lease_uid`),
so graders sharing a machine never count, signal or kill each other's processes, and after
every criterion everything that uid still runs is killed, however it escaped. Its children
are jailed (:func:`jail_plan` says what they see) where the machine allows it. A child killed
by a signal the grader did not send runs once more (:meth:`Harness.run`).
"""
from __future__ import annotations

import contextlib
import ctypes
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
from multiprocessing import forkserver, spawn
from pathlib import Path

from grader import child
from grader.layout import PROVIDED_FOLDER, REPOSITORY, SOLUTION_MARKER, STUDENT_FILES
from grader.processes import SlotError, kill_group, lease_uid, processes_of, remove_tree, return_uid
from grader.protocol import Kind, check_envelope
from grader.result_file import Malformed, TooLarge, decode
from grader.rubric import Criterion, Settings
from grader.submission import Submission

OUTPUT_TAIL_BYTES = 64 * 1024
STARTUP_TIMEOUT = 180.0
PROCESS_PREFIX = "grader-"
SHARED_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
# A jailed child's working folder and each temp folder hold at most this many times the output
# limit (a tmpfs of that size: a child that fills them fills only its own).
SCRATCH_PER_OUTPUT = 4
# Folders of the system's programs, libraries and configuration a jailed child sees (read-only).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"
# Variables of the grader's environment that children (and the forkserver they are forked
# from) keep: how to find libraries and devices and how many threads to use, never a secret.
CHILD_VARIABLES = ("LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class HarnessError(RuntimeError):
    """The grader could not set up or run a child (the grader broke, not the student)."""


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


def _oom_kills() -> int:
    """How many processes the kernel's out-of-memory killer has killed since boot."""
    try:
        with open("/proc/vmstat") as vmstat:
            for line in vmstat:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def format_bytes(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MB"
    if count >= 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count} bytes"


def _configured_user(settings: Settings) -> tuple[int, int] | None:
    """``(uid, gid)`` of the rubric's ``[grader] user``, or None when the grader is not root.
    Children run with its group, as a leased uid just below its uid (see lease_uid)."""
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


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The explicit environment of the forkserver and of every child: a fixed PATH and the
    few harmless variables of :data:`CHILD_VARIABLES` (no token or password a TA's shell
    holds reaches a child, whose output the student may see)."""
    kept = {name: os.environ[name] for name in CHILD_VARIABLES if name in os.environ}
    return {"PATH": CHILD_PATH, "LANG": "C.UTF-8", **kept, **(extra or {})}


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
    the grader's other variables."""
    with _only_environment(child_environment({"PYTHONPATH": str(REPOSITORY), "PYTHONDONTWRITEBYTECODE": "1"})):
        forkserver.ensure_running()


def _tasks_of(uid: int) -> int:
    """Processes plus threads that ``uid`` runs now: RLIMIT_NPROC counts them all."""
    return sum(int(fields.get("Threads", "1")) for fields in processes_of(uid))


def _world_traversable(folder: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [folder, *folder.parents])


def _python_folders() -> list[Path]:
    """Folders the children's Python reads from: sys.path and the interpreter's own."""
    entries = [*sys.path, os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    return sorted({Path(os.path.realpath(e)) for e in entries if e and os.path.isdir(e)})


def jail_plan() -> tuple[str, ...]:
    """What a jailed child sees besides its tree, /dev, /sys and its own /proc: the system
    folders, Python's installation (its prefixes and site-packages, wherever they live) and
    the folders of the libraries this process has loaded (torch's, CUDA's). Never the
    grader's repository beyond a virtual environment inside it, never a folder on sys.path
    that is neither (the folder a TA started the grader in, a class folder)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)}
    candidates = {*SYSTEM_FOLDERS, *prefixes, os.path.dirname(sys.executable)}
    candidates |= {e for e in sys.path if os.path.basename(e.rstrip("/")) in ("site-packages", "dist-packages")}
    candidates |= _loaded_library_folders()
    repository = os.path.realpath(REPOSITORY)

    def allowed(path: str) -> bool:
        real = os.path.realpath(path)
        inside = real == repository or real.startswith(repository + os.sep)
        return os.path.exists(path) and (not inside or any(real == e or real.startswith(e + os.sep) for e in prefixes))

    return tuple(sorted(p for p in candidates if allowed(p)))


def _loaded_library_folders() -> set[str]:
    """Folders of the shared libraries mapped into this process."""
    folders = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[5].strip() if len(line.split(maxsplit=5)) == 6 else ""
            if path.startswith("/") and ".so" in os.path.basename(path) and not path.startswith(("/dev/", "/proc/")):
                folders.add(os.path.dirname(path))
    return folders


def exposure_plan() -> tuple | None:
    """How to let an unprivileged user reach Python's files (see child.isolate_files).

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

    prepared.grader_patched = True  # type: ignore[attr-defined]  # marks the patch as applied once
    return prepared


def forkserver_context(check_modules: list[str]):
    """multiprocessing's forkserver context with torch and the check modules preloaded.

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
    context.set_forkserver_preload(["torch", "grader.checks", "grader.child", *check_modules, *extra])
    return context


class Harness:
    """Grades criteria of one submission in isolated children. Use as a context manager.

    Args:
        submission: the student files.
        settings: limits from the rubric's ``[grader]`` table.
        check_modules: modules to preload in the forkserver (``grader.checks.problem2``).
        provided: the grader's own copy of the provided modules (default: ``minitorch/``
            of this repository; the student files in it are never copied).
    """

    def __init__(self, submission: Submission, settings: Settings, check_modules: list[str], provided: Path = PROVIDED_FOLDER):
        self.submission = submission
        self.settings = settings
        self.context = forkserver_context(check_modules)
        self.provided = Path(provided)
        self.configured = _configured_user(settings)
        self.user: tuple[int, int] | None = None  # (uid, gid) the children run as; None: the grader's own
        self.leased: int | None = None  # the uid this harness leased; only its processes are ever killed by uid
        self.base: Path | None = None
        self.count = 0
        self.expose: tuple = ()
        self.hide: tuple = ()
        self.private_temp: tuple = ()
        self.private_network = False
        self.jail: tuple = ()
        self.notes: list[str] = []
        self.defences: dict[str, str] = {}
        self.swept = 0

    def __enter__(self) -> "Harness":
        if self.configured is not None:
            try:
                self.leased = lease_uid(self.configured[0])
            except (SlotError, OSError) as error:
                raise HarnessError(f"could not lease a uid for the children: {error}") from None
            self.user = (self.leased, self.configured[1])
        self.base = Path(tempfile.mkdtemp(prefix="grader-", dir=_scratch_root(self.user is not None)))
        os.chmod(self.base, 0o711)
        self.tree = self.base / "tree"
        self.results = self.base / "results"
        self.results.mkdir(mode=0o700)
        (self.base / "jail").mkdir(mode=0o700)  # each jailed child's root, in its own mount namespace
        self._build_tree()
        self.process_base = _tasks_of(self.user[0] if self.user else os.getuid())
        self.was_subreaper = _set_subreaper(True)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.leased is not None:
            try:
                self._kill_leased_uid()
                return_uid(self.leased)  # clean: this process's next harness may use it
            except HarnessError as error:  # the report is written; say it where the TA sees it
                print(f"grader: {error}", file=sys.stderr)
        if self.was_subreaper is not None:
            _set_subreaper(self.was_subreaper)
        if self.base is not None:
            remove_tree(self.base)  # iterative: a child's tree thousands of folders deep included

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
        before = _own_children()
        process = self.context.Process(target=target, args=args, name=PROCESS_PREFIX + "helper")
        process.start()
        process.join(STARTUP_TIMEOUT)
        kill_group(process.pid, still_running=process.exitcode is None)
        self.swept += len(_sweep_orphans(before))
        return process.exitcode

    def start(self) -> float:
        """Start the forkserver (importing torch there), decide whether children can drop
        privileges here, and return one child's start-up cost in seconds."""
        start_forkserver()
        code = self._run_helper(child.ping)
        if code != 0:
            raise HarnessError(f"the grader's forkserver did not start (exit status {code})")
        if self.user is not None:
            self._settle_user()
        self._describe_defences()
        started = time.perf_counter()
        self._run_helper(child.ping)
        return time.perf_counter() - started

    def _probe(self, **isolation) -> str | None:
        """Why a child isolated like this cannot run (None: it can)."""
        job = self._job(None, 0, {}, output="probe", **isolation)
        if self._run_helper(child.probe, job) != 0:
            return _tail(Path(job.output_path))[0].strip() or "the probe child failed"
        return None

    def _settle_user(self) -> None:
        """Jail the children (see child.enter_jail) where this machine allows it; else keep
        the unprivileged user only if, as that user, a child can still read Python, and hide
        the grader's files as far as mount namespaces allow. Then cut the network."""
        jail = jail_plan()
        reason = self._probe(jail=jail)
        if reason is None:
            self.jail = jail
            if self._probe(jail=jail, private_network=True) is None:
                self.private_network = True
            return
        self.notes.append(f"children are not jailed (they see the machine's files): {reason}")
        plan = exposure_plan()
        reason = "a folder holding Python's files is closed to it" if plan is None else self._probe(expose=plan)
        if reason is not None:
            self.notes.append(f"children ran as root, not as {self.settings.user!r}: {reason}")
            self.user = None
            return
        assert plan is not None  # None was a reason above
        self.expose = plan
        temp = self._private_temp_plan()
        if temp and self._probe(expose=plan, private_temp=temp) is None:
            self.private_temp = temp
        hide = hiding_plan(self.base)
        if hide and self._probe(expose=plan, private_temp=self.private_temp, hide=hide) is None:
            self.hide = hide
        if self._probe(expose=plan, private_temp=self.private_temp, hide=self.hide, private_network=True) is None:
            self.private_network = True

    def _private_temp_plan(self) -> tuple:
        """``((temp folder, (kept, ...)), ...)`` for the shared temp folders: each child gets
        empty ones of its own, keeping the harness's folder (the tree and the private
        folders) and Python's folders where they live below one (a clone in /tmp)."""
        assert self.base is not None, "the harness is used as a context manager"
        needed = [os.path.realpath(self.base), *(str(p) for p in _python_folders())]
        plan = []
        for folder in SHARED_TEMP_FOLDERS:
            if os.path.isdir(folder) and not os.path.islink(folder):
                inside = sorted({p for p in needed if p.startswith(folder + os.sep)})
                plan.append((folder, tuple(p for p in inside if not any(p.startswith(q + os.sep) for q in inside))))
        return tuple(plan)

    def _describe_defences(self) -> None:
        """What protects the grader on this run (the report's environment says it)."""
        user = (
            f"uid {self.user[0]}, leased for this grader (no account; {self.settings.user}'s group)" if self.user
            else "the grader's own user (not root)" if os.geteuid() else "root"
        )
        self.defences = {
            "children_user": user,
            "files": (
                "a jail: only the system's and Python's folders and the child's own tree, read-only" if self.jail
                else "the grader's files hidden, the rest of the machine readable" if self.hide
                else "the machine's files readable by children (a jail needs root and mount namespaces)"
            ),
            "writable": (
                "only the child's own working and temp folders, size-bounded, gone with it" if self.jail
                else "private temp folders; any other world-writable folder shared" if self.private_temp
                else "whatever the children's user may write (needs root and mount namespaces)"
            ),
            "processes_visible": "only the child's own (a /proc with hidepid)" if self.jail else "all of the machine's",
            "ipc": "a namespace of each child's own (shared memory, semaphores, message queues)" if self.jail else "shared",
            "network": "none (a private loopback only)" if self.private_network else "open (needs root and network namespaces)",
            "orphans": (
                "every process of the children's own uid killed after each criterion" if self.leased is not None and self.user
                else "killed after each criterion (the grader is their subreaper)" if self.was_subreaper is not None else "not collected"
            ),
        }

    def _private_folder(self) -> Path:
        """A fresh TMPDIR/HOME/working folder that only the child's user can use."""
        assert self.base is not None, "the harness is used as a context manager"
        folder = self.base / f"private-{self.count}"
        folder.mkdir(mode=0o700)
        if self.user is not None:
            os.chown(folder, *self.user)
        return folder

    def _job(self, criterion: Criterion | None, seed: int, params: dict, output: str = "", expose: tuple = (),
             hide: tuple = (), private_network: bool = False, private_temp: tuple = (), jail: tuple = ()) -> child.Job:
        self.count += 1
        workdir = self._private_folder()
        return child.Job(
            criterion=criterion.id if criterion else "", module=criterion.module if criterion else "",
            name=criterion.name if criterion else "", seed=seed, params=params, tree=str(self.tree),
            workdir=str(workdir), output_path=str(self.results / f"{self.count}{output}.out"),
            result_path=str(self.results / f"{self.count}.result"), started_path=str(self.results / f"{self.count}.started"),
            student_files=self.student_paths(), memory_bytes=self.settings.memory_mb * 1024 * 1024,
            file_bytes=int(self.settings.output_limit_mb * 1024 * 1024),
            max_processes=self.settings.max_processes, process_base=self.process_base,
            uid=self.user[0] if self.user else None, gid=self.user[1] if self.user else None, expose=expose,
            hide=hide, private_network=private_network, environment=child_environment(),
            private_temp=tuple((folder, tuple(kept) + _below(folder, self.tree, workdir)) for folder, kept in private_temp),
            jail=jail, jail_root=str(self.tree.parent / "jail"), scratch_bytes=int(self.settings.output_limit_mb * 1024 * 1024) * SCRATCH_PER_OUTPUT,
        )

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
        job = self._job(criterion, seed, dict(criterion.params), expose=self.expose, hide=self.hide,
                        private_network=self.private_network, private_temp=self.private_temp, jail=self.jail)
        for path in (job.output_path, job.result_path, job.started_path):  # never read what an earlier child left there
            Path(path).unlink(missing_ok=True)
        before = _own_children()
        started, oom_kills = time.perf_counter(), _oom_kills()
        process = self.context.Process(target=child.main, args=(job,), name=PROCESS_PREFIX + criterion.id)
        process.start()
        try:
            process.join(timeout)
        except BaseException:  # Ctrl-C: leave nothing running behind
            kill_group(process.pid, still_running=True)
            self._kill_leased_uid()
            _sweep_orphans(before)
            raise
        timed_out = process.exitcode is None
        kill_group(process.pid, still_running=timed_out)  # also whatever it left in its group
        process.join(10)
        escaped = self._escaped(process.pid)  # outside the child's group: setsid, double fork, clone flags
        self._kill_leased_uid()
        orphans = len(escaped | _sweep_orphans(before))
        self.swept += orphans
        seconds = time.perf_counter() - started
        outcome = self._outcome(process, job, timed_out, seconds)
        outcome.orphans = orphans
        outcome.out_of_memory = _oom_kills() > oom_kills
        return outcome

    def _on_leased_uid(self) -> tuple[set[int], set[int]]:
        """Live processes of the leased uid: ``(ours, foreign)``. Ours descend from this
        process (the forkserver is its child, orphans are re-parented to it): a process
        started by a child stays below it, wherever it hid. A foreign one means that some
        other program runs as this uid (a grader of an older version, a service that took a
        uid without an account); it is never counted or killed. Both are empty when the
        children do not run as a leased uid (not root, or children fell back to root)."""
        if self.leased is None or self.user is None:
            return set(), set()
        live = {int(p["Pid"]) for p in _live_processes(self.leased)}
        if not live:
            return set(), set()
        parents, me = _parents(), os.getpid()
        ours = {pid for pid in live if _descends_from(pid, me, parents)}
        return ours, live - ours

    def _escaped(self, group: int | None) -> set[int]:
        """This grader's live processes of the leased uid outside the process group ``group``
        (the child's, which kill_group has just killed)."""
        return {pid for pid in self._on_leased_uid()[0] if _group_of(pid) not in (group, None)}

    def _kill_leased_uid(self, deadline_s: float = 5.0) -> None:
        """Kill every process the children left on the leased uid. Normally nothing else runs
        as it (see lease_uid), and ``kill(-1)`` as that uid kills them all in one system call,
        a fork bomb included; if a foreign process shares the uid, only ours are killed, one
        by one, and the TA is told."""
        ours, foreign = self._on_leased_uid()
        if not ours:
            return
        assert self.leased is not None and self.user is not None  # ours is empty otherwise
        before = _own_children()
        if not foreign:
            self._run_helper(child.kill_uid, self.leased, self.user[1])
            _sweep_orphans(before, 0.2)
            ours = self._on_leased_uid()[0]  # normally none; never kill a pid seen before the helper ran
        else:
            print(f"grader: uid {self.leased} also runs processes this grader did not start ({sorted(foreign)[:5]}); "
                  "only its own were killed", file=sys.stderr)
        deadline = time.monotonic() + deadline_s
        while ours and time.monotonic() < deadline:
            for pid in ours:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _sweep_orphans(before, 0.2)
            ours = self._on_leased_uid()[0]
        if ours:
            raise HarnessError(f"could not kill the processes of the children's uid {self.leased}: {sorted(ours)[:5]}")

    def _outcome(self, process, job: child.Job, timed_out: bool, seconds: float) -> Outcome:
        output_path, result_path = Path(job.output_path), Path(job.result_path)
        output, output_bytes = _tail(output_path)
        if timed_out:
            return Outcome(Kind.TIMEOUT, {}, seconds, None, output, output_bytes)
        exitcode = process.exitcode
        if exitcode == -signal.SIGXFSZ or output_bytes >= job.file_bytes:
            return Outcome(Kind.FLOOD, {}, seconds, exitcode, output, output_bytes)
        raw = _read_result(result_path, job.file_bytes) if exitcode == 0 else None
        if raw is None:
            return Outcome(Kind.EXITED, {}, seconds, exitcode, output, output_bytes)
        try:
            envelope = check_envelope(raw)
        except ValueError as why:
            garbage = {"kind": Kind.GARBAGE.value, "message": f"its report is not in the grader's format ({why})"}
            return Outcome(Kind.GARBAGE, garbage, seconds, exitcode, output, output_bytes)
        if envelope["kind"] == Kind.GRADER_ERROR and _nonempty(job.started_path):
            forged = {"kind": Kind.GARBAGE.value, "forged": True, "message": (
                "its report claims that the grader's own set-up failed, but your code had already started running")}
            return Outcome(Kind.GARBAGE, forged, seconds, exitcode, output, output_bytes)
        return Outcome(Kind(envelope["kind"]), envelope, seconds, exitcode, output, output_bytes)


def hiding_plan(scratch: Path | None = None) -> tuple:
    """``((repository, (kept, ...)),)``: the grader's repository (its source, the answer key,
    the tests) covered in the children's view, keeping only the folders of the Python
    environment that live inside it (``make test``'s ``.venv``); ``()`` when the scratch
    folder is inside it."""
    repo = os.path.realpath(REPOSITORY)
    if scratch is not None and os.path.realpath(scratch).startswith(repo + os.sep):
        return ()
    environments = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)}

    def kept(folder: str) -> bool:
        inside = folder.startswith(repo + os.sep)
        return inside and any(folder == e or folder.startswith(e + os.sep) for e in environments)

    return ((repo, tuple(str(p) for p in _python_folders() if kept(str(p)))),)


PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


def _set_subreaper(on: bool) -> bool | None:
    """Make this process the subreaper of its descendants: an orphan (a grandchild that
    called setsid, a double fork) is re-parented here instead of to init, so the grader can
    find and kill it. Returns the previous setting, or None where Linux does not allow it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
            return None
        if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
        return bool(previous.value)
    except (OSError, AttributeError):
        return None


def _parents() -> dict[int, int]:
    """``{pid: parent pid}`` of every process on this machine (from /proc)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat_file:
                found[int(entry.name)] = int(stat_file.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


def _own_children() -> set[int]:
    """Pids whose parent is this process."""
    me = os.getpid()
    return {pid for pid, parent in _parents().items() if parent == me}


def _descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid > 1 and pid not in seen:
        if pid == ancestor:
            return True
        seen.add(pid)
        pid = parents.get(pid, 0)
    return False


def _sweep_orphans(before: set[int], deadline_s: float = 5.0) -> set[int]:
    """SIGKILL and reap every child of this process that was not one before the criterion
    (orphans of the criterion's child, re-parented here); their own children are re-parented
    in turn, so repeat until none is left. Returns the pids of those that were still alive."""
    killed: set[int] = set()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        orphans = _own_children() - before - _multiprocessing_servers()
        if not orphans:
            break
        for pid in orphans:
            try:
                alive = not _is_zombie(pid)  # an orphan that already exited is only reaped
                os.kill(pid, signal.SIGKILL)
                if alive:
                    killed.add(pid)
            except ProcessLookupError:
                pass
        for pid in orphans:
            _reap(pid, deadline)
    return killed


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return stat_file.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _multiprocessing_servers() -> set[int]:
    """The forkserver and resource tracker this process started (children, but not orphans)."""
    from multiprocessing import forkserver, resource_tracker

    pids = {getattr(forkserver._forkserver, "_forkserver_pid", None), getattr(resource_tracker._resource_tracker, "_pid", None)}
    return {pid for pid in pids if pid}


def _reap(pid: int, deadline: float) -> None:
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def _live_processes(uid: int) -> list[dict[str, str]]:
    return [p for p in processes_of(uid) if not p.get("State", "").startswith("Z")]


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone already
        return None


def _below(folder: str, *paths: Path) -> tuple[str, ...]:
    """The ``paths`` that lie below ``folder``."""
    return tuple(str(p) for p in paths if os.path.realpath(p).startswith(folder + os.sep))


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
