"""The grader checking its own isolation (used by tests/test_grader_isolation.py).

``observe_isolation`` reports, from inside a criterion's child, where ``minitorch`` comes
from, what is on sys.path, who the child runs as, its process group, limits and TMPDIR;
``judge_isolation`` fails unless the child was isolated as grader/child.py promises.
"""
from __future__ import annotations

import importlib.util
import os
import resource
import sys
import tempfile

from grader.checks.judging import Fail


def observe_isolation(seed: int, params: dict):
    import minitorch
    import minitorch.pipeline

    scratch = os.path.join(tempfile.gettempdir(), "probe")
    with open(scratch, "w") as handle:
        handle.write("ok")
    return {
        "minitorch": minitorch.__file__, "pipeline": minitorch.pipeline.__file__,
        "marker": getattr(minitorch.pipeline, "SUBMITTED_MARKER", None),
        "sys_path": list(sys.path),
        "answer_key_spec": getattr(importlib.util.find_spec("minitorch.pipeline"), "origin", None),
        "uid": os.getuid(), "euid": os.geteuid(), "pid": os.getpid(), "pgid": os.getpgid(0),
        "tmpdir": tempfile.gettempdir(), "tmp_mode": os.stat(tempfile.gettempdir()).st_mode & 0o777,
        "tmp_owner": os.stat(tempfile.gettempdir()).st_uid, "cwd": os.getcwd(),
        "limits": {name: resource.getrlimit(getattr(resource, name))[0] for name in ("RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NPROC")},
    }


def judge_isolation(seed: int, params: dict, observation) -> None:
    tree = os.path.dirname(os.path.dirname(observation["minitorch"]))
    if observation["marker"] != "submitted":
        raise Fail(f"minitorch.pipeline is {observation['pipeline']}, not the submitted file")
    if not observation["pipeline"].startswith(tree + os.sep) or not observation["answer_key_spec"].startswith(tree + os.sep):
        raise Fail(f"minitorch.pipeline resolves outside the tree: {observation['answer_key_spec']}")
    if observation["sys_path"][0] != tree or "" in observation["sys_path"]:
        raise Fail(f"sys.path does not start with the tree: {observation['sys_path'][:3]}")
    if observation["pgid"] != observation["pid"]:
        raise Fail("the child is not the leader of its own process group")
    if observation["tmp_mode"] != 0o700 or observation["tmp_owner"] != observation["uid"] or observation["cwd"] != observation["tmpdir"]:
        raise Fail(f"TMPDIR {observation['tmpdir']} is not private to the child")
    if any(value == resource.RLIM_INFINITY for value in observation["limits"].values()):
        raise Fail(f"a resource limit is missing: {observation['limits']}")


def observe_pieces(seed: int, params: dict):
    """Which pieces the grader asked this run to use (``params["pieces"]``, see grading)."""
    return {"pieces": params.get("pieces")}


def judge_pieces(seed: int, params: dict, observation) -> None:
    """Fails the runs that ``params["fails_with"]`` lists ("own", "grader"), naming the pieces."""
    if observation["pieces"] in params.get("fails_with", []):
        raise Fail(f"wrong with the {observation['pieces']} pieces")
