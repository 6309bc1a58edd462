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


def unusable(user: tuple[int, int] | None) -> str | None:
    """Why bubblewrap cannot confine children here (None: it can): not installed, or it
    fails on a trivial command with this grader's options (no user namespaces, say)."""
    program = executable()
    if program is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    command = [program, *_namespaces(user), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return None if run.returncode == 0 else f"bwrap failed here: {run.stderr.strip()[:300]}"


def _namespaces(user: tuple[int, int] | None) -> list[str]:
    """Every namespace; as root (the children then drop to the leased uid themselves) no user
    namespace but the two capabilities the drop needs."""
    if os.geteuid() == 0:
        return ["--unshare-all", "--unshare-user-try", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                "--cap-add", "CAP_SETGID"] if user else ["--unshare-all"]
    return ["--unshare-all"]


def command(confinement: Confinement, tree: str) -> list[str]:
    """The bwrap command line for one child (everything but its job, which it reads from stdin)."""
    program = executable()
    assert program is not None, "unusable() was asked first"
    user = (confinement.uid, confinement.gid) if confinement.uid is not None else None
    arguments = [program, *_namespaces(user), "--die-with-parent", "--new-session"]
    bound: list[str] = []
    for folder in sorted({*plan.jail_plan(), tree}, key=len):
        if os.path.exists(folder) and not any(folder == b or folder.startswith(b + os.sep) for b in bound):
            if not any(folder == t or folder.startswith(t + os.sep) for t in TEMP_FOLDERS):
                arguments += ["--ro-bind", folder, folder]
                bound.append(folder)
    arguments += ["--ro-bind", str(REPOSITORY / "grader"), f"{ENGINE_ROOT}/grader"]
    arguments += ["--dev", "/dev", "--proc", "/proc"]
    for folder in TEMP_FOLDERS:
        arguments += ["--perms", "1777", "--size", str(max(confinement.scratch_bytes, 1 << 20)), "--tmpfs", folder]
    in_temp = [p for p in (tree, *plan.jail_plan()) if any(p.startswith(t + os.sep) for t in TEMP_FOLDERS)]
    for folder in sorted(set(in_temp), key=len):  # the tree (and Python, if it lives there) inside the private /tmp
        arguments += ["--ro-bind", folder, folder]
    arguments += ["--bind", confinement.workdir, confinement.workdir, "--chdir", confinement.workdir]
    return [*arguments, "--setenv", "PYTHONPATH", ENGINE_ROOT, sys.executable, "-c", BOOTSTRAP]


class Child:
    """A bwrap child, seen as multiprocessing's Process is: ``pid``, ``exitcode``, ``join``."""

    def __init__(self, popen: subprocess.Popen):
        self.popen, self.pid = popen, popen.pid

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
    return Child(popen)


def _with_descriptors(job, descriptors: list[int]):
    """``job`` whose confinement names the descriptors the child inherits instead of paths."""
    import dataclasses

    inherited = dataclasses.replace(job.confinement, inherited=(1, descriptors[1], descriptors[2]))
    return dataclasses.replace(job, confinement=inherited)
