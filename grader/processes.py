"""Processes on this machine, seen through /proc and signals (standard library only).

Shared by the harness (children and their orphans), the batch runner and the Gradescope
entry point (a grader run in its own process group), and the tests.
"""
from __future__ import annotations

import os
import signal


def processes_of(uid: int) -> list[dict[str, str]]:
    """The ``/proc/<pid>/status`` fields (plus ``Pid``) of every process ``uid`` runs now."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = {key: value.strip() for key, value in (line.split(":", 1) for line in status if ":" in line)}
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            found.append({**fields, "Pid": entry.name})
    return found


def kill_group(pid: int | None, still_running: bool = True) -> None:
    """SIGKILL the process group led by ``pid``; ``pid`` itself too if it never became a
    group leader, but only while it is known to be running (a reaped pid may already belong
    to another process)."""
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
