"""The bubblewrap backend: each child a fresh Python that Debian's ``bwrap`` starts in new namespaces.

bubblewrap makes, before the child's Python starts, what the in-house jail makes inside a
forked child: new user (where the grader is not root), mount, PID, IPC, network, UTS and
cgroup namespaces; a root holding only the jail plan's folders read-only
(:func:`grader.sandbox.plan.jail_plan`: the system's and Python's folders, the tree) and the
grader's own package (never the repository: no answer key); its own ``/dev`` with a private
devpts; a ``/proc`` of its PID namespace; tmpfs of its own, bounded in bytes, for the temp
folders; the private working folder bound in; a new session; death with the grader. The
child then does the rest itself (:func:`grader.sandbox.confine.enter`: limits, the leased
uid as root, the seccomp filter, the environment).

What it costs: the child is a new interpreter that imports torch and the checks, where the
in-house backend forks a preloaded server (numbers in README.md beside this file). So this
backend is the one chosen only where the in-house jail cannot run: a grader that is not root
(:func:`grader.sandbox.choose_backend`).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys

from grader.layout import REPOSITORY
from grader.sandbox import plan
from grader.sandbox.confine import Confinement

ENGINE_ROOT = "/grader-engine"  # where the grader's package is bound in the child's view
TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
BOOTSTRAP = "import pickle, sys; job = pickle.load(sys.stdin.buffer); from grader import child; child.main(job)"


def executable() -> str | None:
    return shutil.which("bwrap")


def describe() -> str:
    return f"bubblewrap ({executable()}: a fresh Python per child in new namespaces)"


def unusable(leased: bool) -> str | None:
    """Why bubblewrap cannot confine children here (None: it can): not installed, or it
    fails on a trivial command with this grader's options (no user namespaces, say)."""
    program = executable()
    if program is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    command = [program, *_namespaces(leased), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return None if run.returncode == 0 else f"bwrap failed here: {run.stderr.strip()[:300]}"


def _namespaces(leased: bool) -> list[str]:
    """Every namespace; as root (the children then drop to the leased uid themselves) no user
    namespace but the two capabilities the drop needs."""
    if os.geteuid() != 0:
        return ["--unshare-all"]  # a user namespace among them
    unshare = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return [*unshare, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if leased else unshare


def command(confinement: Confinement, tree: str) -> list[str]:
    """The bwrap command line for one child (everything but its job, which it reads from stdin)."""
    program = executable()
    assert program is not None, "unusable() was asked first"
    leased = confinement.uid is not None
    view = _View([program, *_namespaces(leased), "--die-with-parent", "--new-session"])
    wanted = sorted({p for p in (*plan.jail_plan(), tree) if os.path.lexists(p)}, key=lambda p: (p.count("/"), p))
    in_temp = [p for p in wanted if any(p.startswith(t + os.sep) for t in TEMP_FOLDERS)]
    for folder in wanted:
        if folder not in in_temp:
            view.add(folder, "--ro-bind")
    view.arguments += ["--ro-bind", str(REPOSITORY / "grader"), f"{ENGINE_ROOT}/grader", "--dev", "/dev", "--proc", "/proc"]
    for folder in TEMP_FOLDERS:
        view.arguments += ["--perms", "1777", "--size", str(max(confinement.scratch_bytes, 1 << 20)), "--tmpfs", folder]
        view.made.add(folder)
    for folder in in_temp:  # the tree (and Python, if it lives there) inside the private /tmp
        view.add(folder, "--ro-bind")
    view.add(confinement.workdir, "--bind")  # entered by the child, as its own uid
    return [*view.arguments, "--setenv", "PYTHONPATH", ENGINE_ROOT, sys.executable, "-c", BOOTSTRAP]


class _View:
    """bwrap arguments that build the child's view one folder at a time."""

    def __init__(self, arguments: list[str]):
        self.arguments, self.made = arguments, {"/"}
        self.bound: list[str] = []

    def add(self, path: str, how: str) -> None:
        """Show ``path`` (a link as the same link), below parents anyone may pass (bwrap
        makes missing parents 0700, which the child's uid could not pass)."""
        if any(path == b or path.startswith(b + os.sep) for b in self.bound):
            return
        parents = []
        folder = os.path.dirname(path)
        while folder not in self.made:
            parents.append(folder)
            folder = os.path.dirname(folder)
        for parent in reversed(parents):
            self.arguments += ["--perms", "0711", "--dir", parent]
            self.made.add(parent)
        if os.path.islink(path):
            self.arguments += ["--symlink", os.readlink(path), path]
        else:
            self.arguments += [how, path, path]
            self.bound.append(path)
        self.made.add(path)


def setup_failure(child: "Child", output_path: str) -> str | None:
    """What bwrap said when it could not make the sandbox (the grader's error, not the
    student's): it exits 1 and says ``bwrap: ...`` before the child's Python starts."""
    if child.exitcode != 1:
        return None
    try:
        with open(output_path, "rb") as output:
            text = output.read(2000).decode("utf-8", errors="replace")
    except OSError:
        return None
    return text.strip() if text.startswith("bwrap: ") else None


class Child:
    """A bwrap child, seen as multiprocessing's Process is: ``pid``, ``exitcode``, ``join``."""

    def __init__(self, popen: subprocess.Popen, output_path: str):
        self.popen, self.pid, self.output_path = popen, popen.pid, output_path

    @property
    def exitcode(self) -> int | None:
        code = self.popen.poll()
        if code is not None and code > 128:  # bwrap reports a child killed by signal N as 128 + N
            return -(code - 128)
        return code

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def start(job, confinement: Confinement, sandbox) -> Child:
    """Start ``job``'s child under bwrap. Its output, result and "started" files are opened
    here and handed down as descriptors (the child cannot reach the grader's folder)."""
    descriptors = [os.open(confinement.output_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)]
    for path in (confinement.result_path, confinement.started_path):
        descriptors.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    if confinement.uid is not None:
        for fd in descriptors:
            os.fchown(fd, confinement.uid, confinement.gid if confinement.gid is not None else -1)
    job = _with_descriptors(job, descriptors)
    try:
        popen = subprocess.Popen(
            command(confinement, job.tree), stdin=subprocess.PIPE, stdout=descriptors[0], stderr=descriptors[0],
            pass_fds=descriptors[1:], start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    finally:
        for fd in descriptors:
            os.close(fd)
    assert popen.stdin is not None
    try:
        popen.stdin.write(pickle.dumps(job))
        popen.stdin.close()
    except BrokenPipeError:  # the child died before reading its job: its exit status says why
        pass
    return Child(popen, confinement.output_path)


def _with_descriptors(job, descriptors: list[int]):
    """``job`` whose confinement names the descriptors the child inherits instead of paths."""
    inherited = dataclasses.replace(job.confinement, inherited=(1, descriptors[1], descriptors[2]))
    return dataclasses.replace(job, confinement=inherited)
