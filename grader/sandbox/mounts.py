"""The in-house jail: Linux namespaces and mounts a child makes for itself (needs root).

Child side only: these run in the criterion's child, after it forked and before it drops
privileges (see :func:`grader.sandbox.confine.enter`). What is mounted where is decided by
the parent's plan (:mod:`grader.sandbox.plan`).
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct

from grader.sandbox import pidns

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
# Per-mount flags of /proc/self/mountinfo kept when a mount is made read-only (dropping a
# flag the mount already has would be refused, and would loosen it).
MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048,
               "relatime": 1 << 21}
# The child's writable temp folders inside its jail, besides its private working folder.
JAIL_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
# Every tmpfs is bounded in files as well as bytes: empty files cost no bytes but kernel memory.
SCRATCH_INODES = 16_384
SMALL_TMPFS = b"mode=0755,size=1m,nr_inodes=1024"
# The jail's /dev: its own tmpfs holding these devices of the machine's, a private devpts (no
# pseudo-terminal of the machine is reachable) and the GPUs' devices where there are any.
JAIL_DEVICES = ("null", "zero", "full", "random", "urandom")
GPU_DEVICE_PREFIXES = ("nvidia",)
JAIL_PSEUDO_TERMINALS = 16  # its devpts holds at most this many
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _cover(folder: str, keep: tuple[str, ...], options: bytes = SMALL_TMPFS) -> None:
    """Cover ``folder`` with an empty tmpfs and bind back the folders of ``keep`` (below it)."""
    libc = _libc()
    handles = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    _check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"tmpfs on {folder}")
    for path, handle in handles:
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{handle}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
        os.close(handle)


def isolate_files(expose: tuple, hide: tuple, private_temp: tuple = (), temp_bytes: int = 0) -> None:
    """This child's own view of the file system (a private mount namespace; needs root).

    ``expose``: let the unprivileged user reach Python's own files when a folder above them
    is closed to it (``/root`` is 0700 but Python lives in ``/root/.pyenv``): each closed
    folder is covered by an empty tmpfs and the sub-folders Python needs are bound back in.
    ``private_temp``: the shared temp folders (``/tmp``, ``/var/tmp``, ``/dev/shm``) are
    covered by empty tmpfs of ``temp_bytes`` each, writable by all (mode 1777) and seen by
    this child's processes only, keeping the child's own tree and private folder and
    Python's folders that live there: what the child writes there is gone when it is.
    ``hide``: the grader's repository (its source, the answer key, the tests) is covered the
    same way, binding back only folders Python needs that live inside it (a virtualenv).
    All three are ``((folder, (kept, ...)), ...)``.
    """
    if not expose and not hide and not private_temp:
        return
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for closed, needed in expose:
        _cover(closed, needed)
    for folder, keep in private_temp:
        _cover(folder, keep, f"mode=1777,size={max(temp_bytes, 1 << 20)},nr_inodes={SCRATCH_INODES}".encode())
    for folder, keep in hide:
        if os.path.isdir(folder):  # not already hidden under a covered closed folder
            _cover(folder, keep)


def private_network() -> None:
    """A network namespace of this child's own (needs root): a loopback only, brought up
    because gloo's ranks talk over it; nothing outside the child can be reached."""
    _check(_libc().unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(handle, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(handle, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def _mount_points() -> list[tuple[str, int]]:
    """``(mount point, per-mount flags)`` of every mount this process sees, parents first."""
    found = []
    with open("/proc/self/mountinfo", "rb") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4]).decode("utf-8", "surrogateescape")
            found.append((point, sum(MOUNT_FLAGS.get(option, 0) for option in fields[5].decode().split(","))))
    return found


def _make_path(root: str, path: str, make_last: bool = True) -> str:
    """Create ``path`` inside ``root`` as the machine has it (folders as empty folders,
    symbolic links as the same links) and return the real path it resolves to. Only what
    is missing inside ``root`` is created, so nothing is ever written through a bound folder."""
    parts, resolved, links = [p for p in path.split("/") if p], "/", 0
    while parts:
        part = parts.pop(0)
        real = os.path.join(resolved, part)
        inside = root + real
        if os.path.islink(real):
            links += 1
            if links > 40:
                raise OSError(f"too many symbolic links in {path}")
            target = os.readlink(real)
            if not os.path.lexists(inside):
                os.symlink(target, inside)
            parts = [p for p in os.path.normpath(os.path.join(resolved, target)).split("/") if p] + parts
            resolved = "/"
            continue
        if not os.path.lexists(inside) and (parts or make_last):
            os.mkdir(inside, 0o755)
        resolved = real
    return resolved


def _bind_all(root: str, paths: list[str], bound: list[str]) -> list[str]:
    """Bind each of ``paths`` (parents first, by the real paths they resolve to) at the same place inside ``root``,
    skipping those already visible through an earlier bind; returns the bound real paths."""
    libc = _libc()
    for path in sorted((p for p in paths if os.path.exists(p)), key=os.path.realpath):  # /usr before /bin -> usr/bin
        real = _make_path(root, path)
        if any(real == b or real.startswith(b + os.sep) for b in bound):
            continue
        _check(libc.mount(real.encode(), (root + real).encode(), None, MS_BIND | MS_REC, None), f"bind {real}")
        bound = [*bound, real]
    return bound


def enter_jail(confinement) -> None:
    """This child's own root (needs root): new mount and IPC namespaces (and, with
    ``confinement.pid_namespace``, a PID namespace for its next child: see
    :mod:`grader.sandbox.pidns`, whose init mounts ``/proc`` then), and in them an empty
    tmpfs with, read-only, the folders of ``confinement.jail`` (the system's programs and
    libraries, Python and torch, the disposable tree); ``/sys``; a ``/dev`` of its own (see
    :func:`_private_devices`); a ``/proc`` that shows only this user's processes; and,
    writable, tmpfs of its own bounded in bytes and files for the working folder and the
    temp folders. Then every mount of the jail but those is made read-only (the rule: nothing
    writable outside the child's scratch), and the child changes root into it. What it wrote
    is gone with it; no other submission, no class folder and no other process's command
    line or environment is visible."""
    libc, root = _libc(), confinement.jail_root
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
    if confinement.pid_namespace:
        pidns.unshare()
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, SMALL_TMPFS), "tmpfs jail")
    scratch = b"size=%d,nr_inodes=%d" % (max(confinement.scratch_bytes, 1 << 20), SCRATCH_INODES)
    visible = sorted({*confinement.jail, "/sys"})
    in_temp = [p for p in visible if any(p == t or p.startswith(t + os.sep) for t in JAIL_TEMP_FOLDERS)]
    bound = _bind_all(root, [p for p in visible if p not in in_temp], [])
    writable = _private_devices(root)
    for folder in JAIL_TEMP_FOLDERS:  # over whatever the binds brought there
        _make_path(root, folder)
        _check(libc.mount(b"tmpfs", (root + folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777," + scratch), folder)
        writable.append(root + folder)
    _bind_all(root, in_temp, bound)  # the tree (and Python, if it lives in /tmp) inside the private /tmp
    os.makedirs(root + "/proc", exist_ok=True)
    if not confinement.pid_namespace:  # else the namespace's init mounts its own
        _check(libc.mount(b"proc", (root + "/proc").encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"hidepid=2"), "proc")
    _make_path(root, confinement.workdir)
    uid = confinement.uid if confinement.uid is not None else os.getuid()
    owner = b"mode=0700,uid=%d,gid=%d," % (uid, confinement.gid if confinement.gid is not None else os.getgid())
    _check(libc.mount(b"tmpfs", (root + confinement.workdir).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, owner + scratch), "scratch")
    writable.append(root + confinement.workdir)
    for point, flags in _mount_points():
        if (point == root or point.startswith(root + os.sep)) and point not in writable:
            _check(libc.mount(None, point.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags, None), f"read-only {point}")
    os.chroot(root)
    os.chdir("/")


def _private_devices(root: str) -> list[str]:
    """The jail's ``/dev``: a small tmpfs with the harmless devices of :data:`JAIL_DEVICES`
    and the GPUs' bound in, a devpts of its own (``/dev/ptmx`` opens a pseudo-terminal of
    this jail, never one of the machine's terminals), the usual links, and this IPC
    namespace's own message queues. Returns the mount points that stay writable."""
    libc, dev = _libc(), root + "/dev"
    os.mkdir(dev, 0o755)
    _check(libc.mount(b"tmpfs", dev.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, SMALL_TMPFS), "tmpfs /dev")
    gpus = [name for name in sorted(os.listdir("/dev")) if name.startswith(GPU_DEVICE_PREFIXES)]
    for name in (*JAIL_DEVICES, *gpus):
        source, target = f"/dev/{name}", f"{dev}/{name}"
        if not os.path.exists(source):
            continue
        if os.path.isdir(source):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o666))
        _check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"bind {source}")
    os.mkdir(dev + "/pts", 0o755)
    options = b"newinstance,ptmxmode=0666,mode=0620,max=%d" % JAIL_PSEUDO_TERMINALS
    _check(libc.mount(b"devpts", (dev + "/pts").encode(), b"devpts", MS_NOSUID | MS_NOEXEC, options), "devpts")
    for name, target in (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    writable = [dev + "/pts"]
    os.mkdir(dev + "/mqueue", 0o755)
    if libc.mount(b"mqueue", (dev + "/mqueue").encode(), b"mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0:
        writable.append(dev + "/mqueue")
    return writable
