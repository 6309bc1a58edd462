"""The trust boundary: what a criterion's child may see, use and leave behind, in one place.

Parent side, one :class:`Sandbox` per harness (a context manager)::

    with Sandbox(settings, context) as sandbox:      # leases a uid, makes its folders
        sandbox.settle()                             # probes this machine, fixes the plan
        confinement = sandbox.confinement()          # one per child: what it must do
        ended = sandbox.run(start, timeout)          # waits, bounds memory, reaps

Child side (:mod:`grader.sandbox.confine`): ``open_channel(confinement)`` then
``enter(confinement)``, before any student code runs.

Backends (README.md beside this file says what each guarantees): ``in-house`` (children
forked from the grader's preloaded forkserver, confining themselves with Linux namespaces
as root; milliseconds per child) and ``bubblewrap`` (each child a fresh Python started by
Debian's ``bwrap``, which makes the namespaces; seconds per child, used where the in-house
jail cannot run, see :mod:`grader.sandbox.bwrap`). The modules: :mod:`.plan` (what a child
may see), :mod:`.mounts` and :mod:`.seccomp` (the in-house jail, child side), :mod:`.uids`
(the uid lease), :mod:`.memory` (one bound for the whole criterion), :mod:`.reaper`.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.processes import kill_group, remove_tree
from grader.sandbox import bwrap, memory, pidns, plan, reaper, seccomp
from grader.sandbox.confine import BWRAP, IN_HOUSE, Confinement, kill_uid, probe
from grader.sandbox.uids import SlotError, lease_uid, return_uid

__all__ = ["BWRAP", "IN_HOUSE", "Confinement", "Ended", "Sandbox", "SandboxError"]
# A jailed child's working folder and each temp folder hold at most this many times the output
# limit (a tmpfs of that size: a child that fills them fills only its own).
SCRATCH_PER_OUTPUT = 4
HELPER_TIMEOUT = 180.0


class SandboxError(RuntimeError):
    """The sandbox could not be set up or could not clean up (the grader broke, not the student)."""


@dataclass
class Ended:
    """How a child's run ended, as the sandbox saw it from outside."""

    exitcode: int | None
    timed_out: bool
    orphans: int
    out_of_memory: bool  # the kernel's out-of-memory killer ran while the child did
    memory_bytes: int | None = None  # the criterion's processes together passed the memory bound: what they held


class Sandbox:
    """One harness's sandbox. ``settings``: the rubric's ``[grader]`` table; ``context``:
    the multiprocessing context children and helpers are started from; ``backend``: force
    one (default: :func:`choose_backend`)."""

    def __init__(self, settings, context, backend: str | None = None):
        wanted = backend or getattr(settings, "sandbox", "auto")
        self.settings, self.context, self.wanted = settings, context, None if wanted == "auto" else wanted
        self.backend = IN_HOUSE
        self.configured = _configured_user(settings.user)
        self.user: tuple[int, int] | None = None  # (uid, gid) the children run as; None: the grader's own
        self.leased: int | None = None  # the uid this sandbox leased; only its processes are ever killed by uid
        self.base: Path | None = None
        self.count = 0
        self.expose: tuple = ()
        self.hide: tuple = ()
        self.private_temp: tuple = ()
        self.private_network = False
        self.jail: tuple = ()
        self.pid_namespace = False
        self.notes: list[str] = []
        self.defences: dict[str, str] = {}
        self.memory_base = 0

    def __enter__(self) -> "Sandbox":
        if self.configured is not None:
            try:
                self.leased = lease_uid(self.configured[0])
            except (SlotError, OSError) as error:
                raise SandboxError(f"could not lease a uid for the children: {error}") from None
            self.user = (self.leased, self.configured[1])
        self.base = Path(tempfile.mkdtemp(prefix="grader-", dir=plan.scratch_root(self.user is not None)))
        os.chmod(self.base, 0o711)
        self.results = self.base / "results"
        self.results.mkdir(mode=0o700)
        (self.base / "jail").mkdir(mode=0o700)  # each jailed child's root, in its own mount namespace
        self.tree = self.base / "tree"
        self.process_base = reaper.tasks_of(self.user[0] if self.user else os.getuid())
        self.was_subreaper = reaper.set_subreaper(True)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.leased is not None:
            try:
                self.kill_leased_uid()
                return_uid(self.leased)  # clean: this process's next sandbox may use it
            except SandboxError as error:  # the report is written; say it where the TA sees it
                print(f"grader: {error}", file=sys.stderr)
        if self.was_subreaper is not None:
            reaper.set_subreaper(self.was_subreaper)
        if self.base is not None:
            remove_tree(self.base)  # iterative: a child's tree thousands of folders deep included

    # --- deciding the plan, once ------------------------------------------------------------
    def settle(self, server_pid: int | None) -> None:
        """Decide how children are confined on this machine (probing it), and say so in
        :attr:`defences`. ``server_pid``: the forkserver's (its resident memory is every
        child's starting share)."""
        self.memory_base = memory.resident_bytes(server_pid) if server_pid else 0
        self.backend = self.wanted or choose_backend(self.user is not None)
        if self.backend == BWRAP:
            reason = bwrap.unusable(self.user is not None)
            if reason is not None:
                self.notes.append(f"children are not in bubblewrap: {reason}")
                self.backend = IN_HOUSE
        if self.backend == IN_HOUSE and self.user is not None:
            self._settle_in_house()
        self.defences = self._describe()

    def _probe(self, **isolation) -> str | None:
        """Why a child confined like this cannot run (None: it can)."""
        confinement = self.confinement("probe", **isolation)
        if self.run_helper(probe, confinement) != 0:
            return _tail(confinement.output_path) or "the probe child failed"
        return None

    def _settle_in_house(self) -> None:
        """Jail the children (see mounts.enter_jail), each in a PID namespace of its own where
        the kernel allows it (pidns); else keep the unprivileged user only if, as that user, a
        child can still read Python, and hide the grader's files as far as mount namespaces
        allow. Then cut the network."""
        jail = (*plan.jail_plan(), str(self.tree))
        refused = self._probe(jail=jail, pid_namespace=True)
        self.pid_namespace = refused is None
        reason = None if refused is None else self._probe(jail=jail)
        if refused is not None and reason is None:
            self.notes.append(f"children have no PID namespace of their own: {refused}")
        if reason is None:
            self.jail = jail
            if self._probe(jail=jail, private_network=True, pid_namespace=self.pid_namespace) is None:
                self.private_network = True
            return
        self.notes.append(f"children are not jailed (they see the machine's files): {reason}")
        exposure = plan.exposure_plan()
        reason = "a folder holding Python's files is closed to it" if exposure is None else self._probe(expose=exposure)
        if reason is not None:
            self.notes.append(f"children ran as root, not as {self.settings.user!r}: {reason}")
            self.user = None
            return
        assert exposure is not None  # None was a reason above
        self.expose = exposure
        temp = plan.private_temp_plan(self.base)
        if temp and self._probe(expose=exposure, private_temp=temp) is None:
            self.private_temp = temp
        hide = plan.hiding_plan(self.base)
        if hide and self._probe(expose=exposure, private_temp=self.private_temp, hide=hide) is None:
            self.hide = hide
        if self._probe(expose=exposure, private_temp=self.private_temp, hide=self.hide, private_network=True) is None:
            self.private_network = True

    def _describe(self) -> dict[str, str]:
        """What protects the grader on this run (the report's environment says it)."""
        jailed = bool(self.jail) or self.backend == BWRAP
        user = (
            f"uid {self.user[0]}, leased for this grader (no account; {self.settings.user}'s group)" if self.user
            else "the grader's own user (not root)" if os.geteuid() else "root"
        )
        return {
            "backend": bwrap.describe() if self.backend == BWRAP else "in-house (forkserver children, Linux namespaces)",
            "children_user": user,
            "files": (
                "a jail: only the system's and Python's folders and the child's own tree, read-only" if jailed
                else "the grader's files hidden, the rest of the machine readable" if self.hide
                else "the machine's files readable by children (a jail needs root and mount namespaces, or bubblewrap)"
            ),
            "writable": (
                "only the child's own working and temp folders, bounded in bytes and files, gone with it" if jailed
                else "private temp folders; any other world-writable folder shared" if self.private_temp
                else "whatever the children's user may write (needs root and mount namespaces, or bubblewrap)"
            ),
            "devices": ("a /dev of its own: null, zero, full, random, urandom, the GPUs, a private devpts" if jailed
                        else "the machine's /dev (its pseudo-terminals included)"),
            "processes_visible": ("only the child's own (a PID namespace)" if self.backend == BWRAP
                                  else "only the child's own (a PID namespace, below an init of the grader's)"
                                  if self.jail and self.pid_namespace
                                  else "only the child's own (a /proc with hidepid)" if jailed else "all of the machine's"),
            "ipc": "a namespace of each child's own (shared memory, semaphores, message queues)" if jailed else "shared",
            "network": ("none (a private loopback only)" if self.private_network or self.backend == BWRAP
                        else "open (needs root and network namespaces, or bubblewrap)"),
            "descriptors": "standard input from /dev/null; none inherited but the child's output and result files",
            "keyrings": (f"refused (a seccomp filter on {seccomp.DENIED})" if seccomp.supported()
                         else "shared by the children's uid (no seccomp filter for this architecture)"),
            "memory": (f"{self.settings.memory_mb} MB per process (RLIMIT_DATA) and for all of a criterion's processes "
                       "together (their proportional set sizes, measured by the grader while the child runs)"),
            "orphans": (
                "every process of the children's own uid killed after each criterion" if self.leased is not None and self.user
                else "killed after each criterion (the grader is their subreaper)" if self.was_subreaper is not None
                else "not collected"
            ),
        }

    # --- one child ----------------------------------------------------------------------------
    def confinement(self, label: str = "", expose: tuple = (), hide: tuple = (), private_network: bool = False,
                    private_temp: tuple = (), jail: tuple = (), pid_namespace: bool = False) -> Confinement:
        """What the next child must do to confine itself (the settled plan unless given)."""
        assert self.base is not None, "the sandbox is used as a context manager"
        if not label:
            expose, hide, private_network = self.expose, self.hide, self.private_network
            private_temp, jail, pid_namespace = self.private_temp, self.jail, self.pid_namespace
        self.count += 1
        workdir = self.base / f"private-{self.count}"
        workdir.mkdir(mode=0o700)
        if self.user is not None:
            os.chown(workdir, *self.user)
        file_bytes = int(self.settings.output_limit_mb * 1024 * 1024)
        name = f"{self.count}{label}"
        paths = {key: str(self.results / f"{name}.{key}") for key in ("out", "result", "started", "status")}
        for path in paths.values():  # never read what an earlier child left there
            Path(path).unlink(missing_ok=True)
        return Confinement(
            workdir=str(workdir), output_path=paths["out"], result_path=paths["result"], started_path=paths["started"],
            memory_bytes=self.settings.memory_mb * 1024 * 1024, file_bytes=file_bytes,
            max_processes=self.settings.max_processes, process_base=self.process_base,
            uid=self.user[0] if self.user else None, gid=self.user[1] if self.user else None, expose=expose,
            hide=hide, private_network=private_network, environment=child_environment(),
            private_temp=tuple((folder, tuple(kept) + plan.below(folder, self.tree, workdir)) for folder, kept in private_temp),
            jail=jail, jail_root=str(self.base / "jail"), scratch_bytes=file_bytes * SCRATCH_PER_OUTPUT,
            backend=self.backend if not label else IN_HOUSE, pid_namespace=pid_namespace, status_path=paths["status"],
        )

    def start(self, target, job, confinement: Confinement, name: str):
        """Start ``target(job)`` in a child of this sandbox's backend; a started process with
        ``pid``, ``exitcode`` and ``join(timeout)``."""
        if confinement.backend == BWRAP:
            return bwrap.start(job, confinement, self)
        process = self.context.Process(target=target, args=(job,), name=name)
        process.start()
        return process

    def run(self, process, timeout: float, status_path: str = "") -> Ended:
        """Wait for a started child at most ``timeout`` seconds, bounding its criterion's
        memory meanwhile; then kill whatever it left, wherever it hid, and say how it ended.
        ``status_path``: its confinement's, where a PID namespace's init says what the
        criterion left running (the namespace's processes die with that init).

        Raises:
            SandboxError: bubblewrap could not make the child's sandbox."""
        before = reaper.own_children()
        oom_kills = reaper.oom_kills()
        meter = memory.Meter(self.settings.memory_mb * 1024 * 1024, self.memory_base)
        deadline, held = time.monotonic() + timeout, None
        try:
            while process.exitcode is None and time.monotonic() < deadline and held is None:
                process.join(min(memory.POLL_SECONDS, max(0.0, deadline - time.monotonic())))
                if process.exitcode is None:
                    held = meter.over(self._criterion_pids(process.pid))
        except BaseException:  # Ctrl-C: leave nothing running behind
            kill_group(process.pid, still_running=True)
            self.kill_leased_uid()
            reaper.sweep_orphans(before)
            raise
        stopped = process.exitcode is None
        kill_group(process.pid, still_running=stopped)  # also whatever it left in its group
        process.join(10)
        init, left = pidns.read_status(status_path) if status_path else (None, 0)
        if init is not None:  # killed with the child: it ends once its namespace is empty, re-parented here
            reaper.reap(init, time.monotonic() + 10)
        escaped = self._escaped(process.pid)  # outside the child's group: setsid, double fork, clone flags
        self.kill_leased_uid()
        orphans = len(escaped | reaper.sweep_orphans(before)) + left
        failure = bwrap.setup_failure(process, process.output_path) if isinstance(process, bwrap.Child) else None
        if failure is not None:
            raise SandboxError(f"bubblewrap could not start the child: {failure}")
        return Ended(exitcode=None if stopped else process.exitcode, timed_out=stopped and held is None,
                     orphans=orphans, out_of_memory=reaper.oom_kills() > oom_kills, memory_bytes=held)

    def run_helper(self, target, *args) -> int | None:
        """Run ``target(*args)`` in a forkserver child to its end (probes, the uid killer)."""
        before = reaper.own_children()
        process = self.context.Process(target=target, args=args, name="grader-helper")
        process.start()
        process.join(HELPER_TIMEOUT)
        kill_group(process.pid, still_running=process.exitcode is None)
        reaper.sweep_orphans(before)
        return process.exitcode

    # --- the reaper, on the leased uid ------------------------------------------------------------
    def _criterion_pids(self, child: int | None) -> set[int]:
        """The processes of the running criterion: the leased uid's, else the child's session."""
        if self.leased is not None and self.user is not None:
            return memory.processes_of(self.leased)
        return memory.processes_of(os.getuid(), session=child) if child else set()

    def _on_leased_uid(self) -> tuple[set[int], set[int]]:
        """Live processes of the leased uid: ``(ours, foreign)``. Ours descend from this
        process (the forkserver is its child, orphans are re-parented to it): a process
        started by a child stays below it, wherever it hid. A foreign one means that some
        other program runs as this uid (a grader of an older version, a service that took a
        uid without an account); it is never counted or killed. Both are empty when the
        children do not run as a leased uid (not root, or children fell back to root)."""
        if self.leased is None or self.user is None:
            return set(), set()
        live = {int(p["Pid"]) for p in reaper.live_processes(self.leased)}
        if not live:
            return set(), set()
        parents, me = reaper.parents(), os.getpid()
        ours = {pid for pid in live if reaper.descends_from(pid, me, parents)}
        return ours, live - ours

    def _escaped(self, group: int | None) -> set[int]:
        """This grader's live processes of the leased uid outside the process group ``group``
        (the child's, which kill_group has just killed)."""
        return {pid for pid in self._on_leased_uid()[0] if reaper.group_of(pid) not in (group, None)}

    def kill_leased_uid(self, deadline_s: float = 5.0) -> None:
        """Kill every process the children left on the leased uid. Normally nothing else runs
        as it (see lease_uid), and ``kill(-1)`` as that uid kills them all in one system call,
        a fork bomb included; if a foreign process shares the uid, only ours are killed, one
        by one, and the TA is told."""
        ours, foreign = self._on_leased_uid()
        if not ours:
            return
        assert self.leased is not None and self.user is not None  # ours is empty otherwise
        before = reaper.own_children()
        if not foreign:
            self.run_helper(kill_uid, self.leased, self.user[1])
            reaper.sweep_orphans(before, 0.2)
            ours = self._on_leased_uid()[0]  # normally none; never kill a pid seen before the helper ran
        else:
            print(f"grader: uid {self.leased} also runs processes this grader did not start ({sorted(ours)[:5]}); "
                  "only its own were killed", file=sys.stderr)
        deadline = time.monotonic() + deadline_s
        while ours and time.monotonic() < deadline:
            for pid in ours:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            reaper.sweep_orphans(before, 0.2)
            ours = self._on_leased_uid()[0]
        if ours:
            raise SandboxError(f"could not kill the processes of the children's uid {self.leased}: {sorted(ours)[:5]}")


def choose_backend(as_leased_uid: bool) -> str:
    """``in-house`` when the grader runs as root (its jail costs milliseconds per child),
    else ``bubblewrap`` (the in-house jail needs root; bubblewrap makes one with user
    namespaces, at the price of a fresh Python per child). See README.md for the numbers."""
    return IN_HOUSE if as_leased_uid or os.geteuid() == 0 else BWRAP


def _configured_user(name: str) -> tuple[int, int] | None:
    """``(uid, gid)`` of the rubric's ``[grader] user``, or None when the grader is not root.
    Children run with its group, as a leased uid just below its uid (see lease_uid)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(
            f"running as root but there is no user {name!r} for the children; create it or set [grader] user in the rubric"
        ) from None
    if entry.pw_uid == 0:
        raise SandboxError(f"[grader] user {name!r} is root; children must run unprivileged")
    return entry.pw_uid, entry.pw_gid


# Variables of the grader's environment that children (and the forkserver they are forked
# from) keep: how to find libraries and devices and how many threads to use, never a secret.
CHILD_VARIABLES = ("LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The explicit environment of the forkserver and of every child: a fixed PATH and the
    few harmless variables of :data:`CHILD_VARIABLES` (no token or password a TA's shell
    holds reaches a child, whose output the student may see)."""
    kept = {name: os.environ[name] for name in CHILD_VARIABLES if name in os.environ}
    return {"PATH": CHILD_PATH, "LANG": "C.UTF-8", **kept, **(extra or {})}


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read()[-limit:].decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
