"""No kernel keyrings for a child: a seccomp filter that answers ``EPERM`` to them.

A uid's user keyring (``@u``) and user session keyring (``@us``) belong to the uid, not to a
process: whatever one child stores there, a later child or a later grader that leases the
same uid can read, and no namespace separates them. A new session keyring per child would
still leave ``@u``, so the three system calls that reach keyrings (``add_key``,
``request_key``, ``keyctl``) are refused instead; nothing the grader or torch runs uses them.
The filter is inherited by every process the child starts and cannot be removed.
"""
from __future__ import annotations

import ctypes
import errno
import platform

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
X32_SYSCALL_BIT = 0x40000000
# audit architecture and the numbers of add_key, request_key and keyctl, per machine.
ARCHITECTURES = {
    "x86_64": (0xC000003E, (248, 249, 250)),
    "aarch64": (0xC00000B7, (217, 218, 219)),
}
DENIED = "add_key, request_key, keyctl"


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def supported() -> bool:
    """This machine's architecture is one the filter knows."""
    return platform.machine() in ARCHITECTURES


def filter_program() -> list[tuple[int, int, int, int]]:
    """The BPF program: ``(code, jump if true, jump if false, k)`` per instruction."""
    arch, numbers = ARCHITECTURES[platform.machine()]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    program = [(BPF_LD_W_ABS, 0, 0, 4), (BPF_JEQ_K, 1, 0, arch), (BPF_RET_K, 0, 0, deny),  # another ABI: refused
               (BPF_LD_W_ABS, 0, 0, 0)]
    if platform.machine() == "x86_64":  # x32's numbers (the same calls with a high bit) are refused whole
        program.append((BPF_JGE_K, len(numbers) + 1, 0, X32_SYSCALL_BIT))
    for index, number in enumerate(numbers):
        program.append((BPF_JEQ_K, len(numbers) - index, 0, number))
    return [*program, (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW), (BPF_RET_K, 0, 0, deny)]


def deny_keyrings() -> None:
    """Install the filter in this process (after ``PR_SET_NO_NEW_PRIVS``, or as root).

    Raises:
        OSError: the kernel refused it (the child then does not run: a sandbox that cannot
            say what it holds is no sandbox).
    """
    if not supported():
        return
    instructions = filter_program()
    array = (_Instruction * len(instructions))(*(_Instruction(*i) for i in instructions))
    program = _Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"seccomp filter refused: {errno.errorcode.get(error, error)}")
