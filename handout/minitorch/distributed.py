"""Run a function on N ranks with ``torch.distributed`` (provided; nothing to implement here).

Two ways to get a process group, one worker signature ``fn(rank, world_size, *args)``:

* ``launch(fn, world_size, *args)`` runs ``fn`` on ``world_size`` local processes and
  returns the list of their return values (index = rank). Use it from tests and notebooks::

      def worker(rank, world_size):
          x = torch.full((2,), float(rank + 1), dtype=torch.float64)
          dist.all_reduce(x)
          return x

      launch(worker, 2)   # -> [tensor([3., 3.]), tensor([3., 3.])]

* ``run_from_env(fn, *args)`` runs the same ``fn`` on this process only, inside a process
  group that ``torchrun`` set up (``env://`` rendezvous from ``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``)::

      # train.py; run with: torchrun --nproc_per_node=2 train.py
      if __name__ == "__main__":
          run_from_env(worker)

Backends: ``gloo`` on CPU; ``nccl`` when every rank can have its own GPU (rank r uses
``cuda:r``). Pass ``backend="gloo"`` to stay on CPU even on a GPU machine.

How ``launch`` works, and why:

* Ranks are FORKED from the calling process, which has already imported torch: a launch
  costs about 0.1 s instead of the seconds a fresh interpreter per rank costs. (If the
  caller has already initialised CUDA, forking is unsafe and ``launch`` spawns fresh
  interpreters instead; ``fn`` must then be importable, i.e. defined at module top level.)
* Rendezvous goes through a file in a fresh private temporary directory (``tempfile``, so
  ``TMPDIR`` is respected): no port is probed or fixed, so concurrent launches never clash.
  If the ranks fail to connect to each other (on a loaded machine gloo sometimes reports
  "connectFullMesh failed ... Connection closed by peer"), ``launch`` says so on stderr and
  retries once with fresh processes, a fresh rendezvous and fresh ports, within the same
  ``timeout``.
* Every collective has a short timeout (``timeout`` seconds), the whole launch too; a rank
  that hangs becomes a ``TimeoutError`` in the caller, never a hung test. A collective that
  the ranks do not all call the same way rarely waits that long: gloo ends it with
  "Connection closed by peer" in the other ranks, or aborts the rank that received data it
  did not expect ("terminate called after throwing an instance of 'gloo::EnforceNotMet'").
* Each rank's stderr (Python's and the C++ runtime's alike) goes to a file while the rank
  runs; when the launch ends, ``launch`` copies it to the caller's ``sys.stderr``, every line
  prefixed ``[rank r]``, each C++ stack trace collapsed into one line, a Python fault dump
  (pytest turns the fault handler on) cut to the rank's own frames, at most 64 KB from each
  end. A rank that dies without reporting (an abort, a crash) becomes a
  ``RuntimeError`` naming the signal and quoting the cause it printed:
  ``rank 1: died of SIGABRT without reporting a result: gloo: ... collective mismatch ...``.
  stdout is left as it is: the runtime writes its aborts and stacks to stderr, and what the
  ranks print to stdout appears as they print it, whole lines (useful while a rank hangs).
* ``destroy_process_group`` always runs in every rank; when ``launch`` returns or raises, no
  rank process is left running (and a rank dies with its parent if the parent is killed).
* A rank's exception is re-raised in the caller with the same type where possible and the
  rank in its message (``NotImplementedError: rank 1: Problem 3.1: ...``); the rank's own
  traceback is attached as a note. When one rank fails, the others usually fail too
  ("Connection closed by peer"); ``launch`` reports the original failure, not the echoes.
* Return values travel back through ``torch.save`` and are read with
  ``torch.load(weights_only=True)``: return plain data only (tensors, numbers, strings,
  ``None``, and lists/tuples/dicts of those). Tensors should be detached CPU tensors.
"""
from __future__ import annotations

import ctypes
import datetime
import faulthandler
import io
import itertools
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT = 30.0
"""Seconds allowed for each collective and for a whole ``launch`` unless told otherwise."""

_ECHO_GRACE = 0.2  # seconds to wait for the original failure after seeing a rank's echo of it
_REPORT_GRACE = 0.5  # extra seconds for a rank whose collective timed out to say so
_STDERR_READ_BYTES = 64 * 1024  # a rank's captured stderr is read this much from each end, no more
_CAUSE_CHARS = 300  # most of a dead rank's stderr quoted in the launcher's error


# --------------------------------------------------------------------------------------
# Rank helpers: what student code calls. One process without a group behaves as rank 0 of 1,
# so every tensor-parallel op degenerates to the identity there.
# --------------------------------------------------------------------------------------
def is_initialized() -> bool:
    """True when this process is inside a ``torch.distributed`` default process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank in the default group; 0 when no group is initialised."""
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    """Number of ranks in the default group; 1 when no group is initialised."""
    return dist.get_world_size() if is_initialized() else 1


# --------------------------------------------------------------------------------------
# torchrun path
# --------------------------------------------------------------------------------------
def init_from_env(backend: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> tuple[int, int]:
    """Join the process group described by the environment (``env://``), as torchrun sets it.

    Reads ``RANK`` and ``WORLD_SIZE`` (and ``MASTER_ADDR``/``MASTER_PORT``, through torch);
    with ``nccl`` the process uses ``cuda:$LOCAL_RANK``. Returns ``(rank, world_size)``.
    Call ``torch.distributed.destroy_process_group()`` when done, or use ``run_from_env``.

    Raises:
        RuntimeError: ``RANK`` or ``WORLD_SIZE`` is not set (not started by torchrun).
    """
    missing = [name for name in ("RANK", "WORLD_SIZE") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"init_from_env needs the environment variables {', '.join(missing)}; "
            "start the script with torchrun, or use launch() for local processes"
        )
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = backend or _default_backend(int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout),
    )
    return rank, world_size


def run_from_env(fn: Callable[..., Any], *args: Any, backend: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Any:
    """Run ``fn(rank, world_size, *args)`` in this torchrun worker and return its value.

    The torchrun counterpart of ``launch``: same worker function, one rank per process.
    The process group is always destroyed afterwards.
    """
    rank, world_size = init_from_env(backend, timeout)
    try:
        return fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------
# Local launcher
# --------------------------------------------------------------------------------------
def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str | None = None,
           timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` local processes.

    Args:
        fn: the worker. It runs inside an initialised default process group; ``args`` reach
            it through fork (no pickling) unless CUDA is already initialised in the caller.
        world_size: number of ranks, >= 1.
        backend: ``"gloo"`` or ``"nccl"``; default ``nccl`` when CUDA has at least
            ``world_size`` devices, else ``gloo``.
        timeout: seconds allowed for each collective and for the whole launch (plus half a
            second for the ranks to report).

    Returns:
        ``[value of rank 0, value of rank 1, ...]``; values must be plain data (see module doc).

    Raises:
        ValueError: bad ``world_size``, ``timeout`` or ``backend``.
        TimeoutError: a rank did not finish (a collective or the whole launch timed out).
        Exception: the failing rank's exception, same type where possible, message prefixed
            with ``"rank r: "``; a rank that died without reporting gives a RuntimeError.
    """
    __tracebackhide__ = True  # pytest shows the failing rank's traceback, not the launcher's frames
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    backend = backend or _default_backend(world_size)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"nccl needs one GPU per rank: {world_size} ranks, "
                         f"{torch.cuda.device_count()} GPUs")

    deadline = time.monotonic() + timeout
    try:
        return _launch_once(fn, world_size, args, backend, timeout, deadline)
    except _RendezvousFailed as failure:
        left = deadline - time.monotonic()
        if left <= 0:
            raise failure.error from None
        print(f"minitorch.distributed.launch: the {world_size} ranks could not connect to each other "
              f"({failure.error}); retrying once with a fresh rendezvous and fresh ports", file=sys.stderr, flush=True)
    try:
        return _launch_once(fn, world_size, args, backend, timeout, deadline)
    except _RendezvousFailed as failure:
        raise failure.error from None


class _RendezvousFailed(Exception):
    """The ranks could not form the process group (``error`` says why); nothing of ``fn`` ran."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _launch_once(fn, world_size: int, args: tuple, backend: str, timeout: float, deadline: float) -> list[Any]:
    """One attempt of :func:`launch`: start the ranks, collect them, leave none running."""
    __tracebackhide__ = True
    workdir = tempfile.mkdtemp(prefix="minitorch-launch-")
    # Forking after CUDA is initialised leaves the children with a broken CUDA context.
    context: Any = multiprocessing.get_context("spawn" if torch.cuda.is_initialized() else "fork")
    ranks = [
        context.Process(
            target=_rank_main,
            args=(fn, rank, world_size, args, backend, timeout, workdir, os.getpid()),
            name=f"minitorch-rank-{rank}",
        )
        for rank in range(world_size)
    ]
    try:
        for process in ranks:
            process.start()
        return _collect(ranks, workdir, timeout, deadline)
    finally:
        _stop(ranks, workdir)
        _echo_stderr(workdir, world_size)
        shutil.rmtree(workdir, ignore_errors=True)


def _default_backend(world_size: int) -> str:
    if torch.cuda.is_available() and dist.is_nccl_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def _rank_main(fn, rank, world_size, args, backend, timeout, workdir, parent_pid):
    """Body of one rank process: join the group, run ``fn``, report, always leave the group."""
    _capture_stderr(workdir, rank)
    _die_with_parent(parent_pid)
    # One intra-op thread per rank: the ranks are the parallelism, and an OpenMP pool that the
    # parent already started cannot be used safely in a forked child (it deadlocks).
    torch.set_num_threads(1)
    joined = False
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method="file://" + os.path.join(workdir, "rendezvous"),
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        joined = True
        outcome = {"value": fn(rank, world_size, *args)}
    except BaseException as error:  # reported to the caller, who re-raises it
        outcome = _describe(error)
        outcome["rendezvous"] = not joined
    try:
        # Report BEFORE leaving the group: the other ranks' "connection closed" echoes of a
        # failure must not reach the caller before the failure itself.
        _write_outcome(workdir, rank, outcome)
    finally:
        if is_initialized():
            dist.destroy_process_group()


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this rank when the launching process dies (no orphans)."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _describe(error: BaseException) -> dict:
    message = str(error)
    is_timeout = isinstance(error, TimeoutError) or "timed out" in message.lower() \
        or type(error).__name__ == "DistTimeoutError"
    # A failure of the transport itself (peer gone, collective timed out) is usually an echo
    # of a failure in another rank rather than the cause.
    is_echo = isinstance(error, getattr(dist, "DistError", ())) or (
        type(error) is RuntimeError and any(s in message for s in ("gloo", "NCCL", "Connection closed"))
    )
    return {
        "error_module": type(error).__module__,
        "error_type": type(error).__qualname__,
        "message": message,
        # From the frame below _rank_main: the rank's own code, not the launcher.
        "traceback": "".join(traceback.format_exception(type(error), error, _below_launcher(error.__traceback__))),
        "is_echo": is_echo or is_timeout,
        "is_timeout": is_timeout,
    }


def _below_launcher(frames):
    if frames is not None and frames.tb_frame.f_code is _rank_main.__code__ and frames.tb_next is not None:
        return frames.tb_next
    return frames


def _outcome_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"outcome-{rank}.pt")


def _write_outcome(workdir: str, rank: int, outcome: dict) -> None:
    partial = _outcome_path(workdir, rank) + ".partial"
    try:
        torch.save(outcome, partial)
    except Exception as error:  # e.g. an unpicklable return value
        torch.save(_describe(TypeError(f"the return value cannot be saved: {error}")), partial)
    os.replace(partial, _outcome_path(workdir, rank))  # atomic: the caller never reads half a file


def _read_outcome(workdir: str, rank: int) -> dict | None:
    path = _outcome_path(workdir, rank)
    if not os.path.exists(path):
        return None
    try:
        return torch.load(path, weights_only=True)
    except Exception as error:
        return _describe(TypeError(
            "the return value is not plain data (use tensors, numbers, strings, None and "
            f"lists/tuples/dicts of those): {error}"))


def _collect(ranks, workdir: str, timeout: float, deadline: float) -> list[Any]:
    """Wait for every rank; return their values or raise the most telling failure
    (:class:`_RendezvousFailed` when a rank could not join the group and no rank's ``fn``
    failed on its own)."""
    __tracebackhide__ = True
    deadline += _REPORT_GRACE
    outcomes: dict[int, dict] = {}
    while len(outcomes) < len(ranks):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        waiting = [p.sentinel for r, p in enumerate(ranks) if r not in outcomes]
        multiprocessing.connection.wait(waiting, timeout=remaining)
        _gather_outcomes(ranks, workdir, outcomes)
        failed = [r for r, o in outcomes.items() if "value" not in o]
        if failed and all(outcomes[r]["is_echo"] for r in failed):
            # Give the rank that really failed a moment to report before judging.
            time.sleep(_ECHO_GRACE)
            _gather_outcomes(ranks, workdir, outcomes)
        if failed:
            break
    missing = [r for r in range(len(ranks)) if r not in outcomes]
    failures = {r: o for r, o in outcomes.items() if "value" not in o}
    causes = {r: o for r, o in failures.items() if not o["is_echo"]}
    joining = sorted(r for r, o in failures.items() if o.get("rendezvous"))
    if joining and not {r for r in causes if not failures[r].get("rendezvous")}:
        raise _RendezvousFailed(_rebuild(joining[0], failures[joining[0]]))
    if causes:
        rank = min(causes)
        raise _rebuild(rank, causes[rank])
    if missing:
        detail = "".join(f"; rank {r}: {o['message']}" for r, o in sorted(failures.items()))
        raise TimeoutError(
            f"rank(s) {missing} did not finish within {timeout:g} s (hung, or waiting in a "
            f"collective that another rank never joined){detail}")
    if failures:
        rank = min(failures)
        raise _rebuild(rank, failures[rank])
    return [outcomes[r]["value"] for r in range(len(ranks))]


def _gather_outcomes(ranks, workdir: str, outcomes: dict[int, dict]) -> None:
    for rank, process in enumerate(ranks):
        if rank in outcomes:
            continue
        outcome = _read_outcome(workdir, rank)
        if outcome is None and process.exitcode is not None:
            outcome = _read_outcome(workdir, rank)  # it may have reported just before exiting
            if outcome is None:
                outcome = _describe(RuntimeError(_died_without_reporting(workdir, rank, process.exitcode)))
                outcome["is_echo"] = False
        if outcome is not None:
            outcomes[rank] = outcome


def _died_without_reporting(workdir: str, rank: int, exitcode: int) -> str:
    """``died of SIGABRT without reporting a result: <cause>``: the signal, if one killed the
    rank, and what the rank printed about why."""
    if exitcode < 0:
        try:
            signal_name = signal.Signals(-exitcode).name
        except ValueError:
            signal_name = f"signal {-exitcode}"
        death = f"died of {signal_name} without reporting a result"
    else:
        death = f"process exited with code {exitcode} without reporting a result"
    cause = _death_cause(_read_capture(_stderr_path(workdir, rank)))
    return f"{death}: {cause}" if cause else death


def _rebuild(rank: int, outcome: dict) -> Exception:
    """The rank's exception, rebuilt in this process: same type when that is safely possible."""
    message = f"rank {rank}: {outcome['message']}"
    error_type = _find_exception_type(outcome["error_module"], outcome["error_type"])
    error: Exception
    if outcome["is_timeout"]:
        error = TimeoutError(message)
    else:
        try:
            error = error_type(message)
        except Exception:
            error = RuntimeError(f"rank {rank}: {outcome['error_type']}: {outcome['message']}")
    note = f"--- traceback in rank {rank} ---\n{outcome['traceback'].rstrip()}"
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10: the same attribute, not printed with the traceback
        error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
    return error


def _find_exception_type(module: str, qualname: str) -> type:
    """Look the type up among modules already imported here (never import anything new)."""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    return RuntimeError


# --------------------------------------------------------------------------------------
# Each rank's stderr: a file while it runs (fd 2, so the C++ runtime's output too), then
# the caller's stderr, prefixed with the rank and without C++ stack traces.
# --------------------------------------------------------------------------------------
_CPP_STACK_LINE = re.compile(
    r"^\s*(frame #\d+: |<omitting python frames>$|Exception raised from .* \(most recent call first\):$)")
_FAULT_FRAME = re.compile(r'^\s+File ".*", line \d+ in (?P<name>\S+)$')  # faulthandler's dump of a thread
# Where in gloo's sources (on PyTorch's build machine) an error was raised: noise to a student.
_GLOO_LOCATION = re.compile(r"\[(?:enforce fail at )?\S*/gloo/\S*\]\s*")


def _stderr_path(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"stderr-{rank}.txt")


def _capture_stderr(workdir: str, rank: int) -> None:
    """Point this rank's fd 2 at its file: a C++ abort's 60-line stack must not land in the
    middle of the caller's terminal (a test runner's progress line); ``launch`` echoes it."""
    fd = os.open(_stderr_path(workdir, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    # The inherited sys.stderr may write elsewhere than fd 2 (pytest's capture, a notebook).
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True,
                                  errors="backslashreplace")
    if faulthandler.is_enabled():  # pytest enables it on a copy of the terminal's fd 2
        faulthandler.enable(file=sys.stderr, all_threads=True)


def _read_capture(path: str) -> str:
    """A rank's captured stderr, at most ``_STDERR_READ_BYTES`` from each end (a rank may
    print gigabytes), with a line saying how much was left out between them."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= 2 * _STDERR_READ_BYTES:
                return handle.read(size).decode("utf-8", errors="replace")
            head = handle.read(_STDERR_READ_BYTES)
            head = head[:head.rfind(b"\n") + 1]  # whole lines only
            handle.seek(size - _STDERR_READ_BYTES)
            tail = handle.read(_STDERR_READ_BYTES)
            tail = tail[tail.find(b"\n") + 1:]
    except OSError:  # the rank never got as far as creating it
        return ""
    omitted = f"... ({size - len(head) - len(tail)} bytes of stderr omitted)\n".encode()
    return (head + omitted + tail).decode("utf-8", errors="replace")


def _collapse_stacks(lines: list[str]) -> list[str]:
    """Each run of C++ stack trace lines becomes one line saying how many were left out; a
    Python fault dump (an abort under pytest) keeps the frames above the launcher's."""
    collapsed: list[str] = []
    for kind, run in itertools.groupby(lines, key=_stack_kind):
        run_lines = list(run)
        if kind == "C++":
            run_lines = [f"... ({len(run_lines)} lines of C++ stack omitted)"]
        elif kind == "Python":
            names = [_FAULT_FRAME.match(line)["name"] for line in run_lines]  # type: ignore[index]
            if "_rank_main" in names:  # what called the rank's fn: the launcher, the caller's process
                below = names.index("_rank_main")
                run_lines = [*run_lines[:below], f"... ({len(run_lines) - below} lines of the launcher's stack omitted)"]
        collapsed += run_lines
    return collapsed


def _stack_kind(line: str) -> str:
    if _CPP_STACK_LINE.match(line):
        return "C++"
    return "Python" if _FAULT_FRAME.match(line) else "text"


def _death_cause(captured: str) -> str:
    """Why a rank died, in at most ``_CAUSE_CHARS``: the C++ exception's ``what():`` text,
    else its last lines of stderr before any fault dump; "" when it printed nothing."""
    lines = [line.strip() for line in _collapse_stacks(captured.splitlines())]
    lines = [line for line in lines if line and not line.startswith("... (")]
    fault_dumps = [number for number, line in enumerate(lines) if line.startswith("Fatal Python error: ")]
    if fault_dumps:  # the dump says where the rank was; the lines above it say why, else its title
        lines = lines[:fault_dumps[-1]] or [lines[fault_dumps[-1]]]
    explanations = [line.split("what():", 1)[1].strip() for line in lines if "what():" in line]
    cause = _GLOO_LOCATION.sub("gloo: ", explanations[-1] if explanations else " | ".join(lines[-3:]))
    if "gloo" in cause and "collective" not in cause:
        cause += " (a collective that the other ranks did not call the same way?)"
    return cause if len(cause) <= _CAUSE_CHARS else cause[:_CAUSE_CHARS - 3] + "..."


def _echo_stderr(workdir: str, world_size: int) -> None:
    """Copy each rank's captured stderr to the caller's, ``[rank r] `` before every line."""
    for rank in range(world_size):
        lines = _collapse_stacks(_read_capture(_stderr_path(workdir, rank)).splitlines())
        if not lines or sys.stderr is None:
            continue
        try:
            sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in lines))
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - a broken stream must not hide the launch's own outcome
            return


def _stop(ranks, workdir: str) -> None:
    """Leave no rank running: let the ranks that reported exit, kill the others at once."""
    deadline = time.monotonic() + 2.0
    for rank, process in enumerate(ranks):
        if process.pid is None:  # never started
            continue
        if os.path.exists(_outcome_path(workdir, rank)):
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
        process.join()
