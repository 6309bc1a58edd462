"""The static policy scan (grader/policy.py) and its place in reports."""
from __future__ import annotations

import pytest
from grading_helpers import ANSWER_KEY, STUDENT_FILES

from course.outcomes import StudentGrade, apply_report
from grader.policy import scan, scan_source
from grader.rubric import RubricError, load_rubric, parse_rubric

FORBIDDEN = load_rubric().forbidden


def names(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.name) for f in scan_source("pipeline.py", source, FORBIDDEN)]


def test_answer_key_and_stub_have_no_findings():
    files = {name: (ANSWER_KEY / name).read_bytes() for name in STUDENT_FILES}
    assert scan(files, FORBIDDEN) == []


@pytest.mark.parametrize("source, expected", [
    ("import subprocess\n", [(1, "module subprocess"), (1, "subprocess")]),
    ("from os import _exit as leave\n", [(1, "module os"), (1, "os._exit"), (1, "private name os._exit")]),
    ("import os as o\no._exit(0)\n", [(1, "module os"), (2, "os._exit"), (2, "private attribute _exit")]),
    ("import sys\nsys.modules['grader'].x = 1\n", [(1, "module sys"), (2, "sys.modules")]),
    ("import torch.distributed.pipelining\n", [(1, "torch.distributed.pipelining")]),
    ("import importlib\nimportlib.import_module('ctypes')\n",
     [(1, "importlib"), (1, "module importlib"), (2, "ctypes"), (2, "importlib")]),
    ("x = __import__('gc')\n", [(1, "__import__"), (1, "builtin __import__"), (1, "gc")]),
    ("def f(g):\n    return g.__wrapped__\n", [(2, ".__wrapped__"), (2, "attribute __wrapped__")]),
    ("import os\nos.path.join('a', 'b')\nimport torch\ntorch.cat([])\n", [(1, "module os")]),
    ("def broken(:\n", []),  # the criteria report a syntax error; nothing to review
    ("import torch\nm = torch.sys.modules\n", [(2, ".sys")]),  # an inner attribute of an imported chain
    ("x = " + "-" * 1500 + "len(open.__name__)\n", [(1, "builtin open"), (1, "open")]),  # deeper than the recursion limit
    ("x = " + "1 + " * 5000 + "1\n", [(0, "(not scanned)")]),  # too deep for Python's own parser
])
def test_scan_finds_imports_uses_and_attributes(source, expected):
    assert names(source) == expected


def test_findings_name_file_line_and_code():
    denied, outside = scan({"tensor_parallel.py": b"\n\nimport ctypes  # why\n"}, FORBIDDEN)
    assert denied == {"file": "tensor_parallel.py", "line": 3, "name": "ctypes", "code": "import ctypes  # why"}
    assert outside == {**denied, "name": "module ctypes"}


def test_rubric_policy_is_validated():
    text = (ANSWER_KEY.parent / "grader" / "rubric.toml").read_text()
    with pytest.raises(RubricError, match=r"\[policy\] forbidden"):
        parse_rubric(text.replace('"subprocess",', '"sub process",'))
    with pytest.raises(RubricError, match=r"\[policy\] has unknown key"):
        parse_rubric(text.replace("[policy]\n", "[policy]\nallowed = []\n"))


def test_batch_flags_a_report_that_needs_review(tmp_path):
    outcome = StudentGrade("alice", tmp_path, tmp_path / "alice.json")
    report = {"criteria": [{"problem": "2.1", "earned": 8, "status": "passed"}], "max_score": 8,
              "files": {"pipeline.py": "x", "tensor_parallel.py": "y"}, "needs_review": True,
              "policy_findings": [{"file": "pipeline.py", "line": 1, "name": "ctypes", "code": "import ctypes"}]}
    apply_report(outcome, report)
    assert outcome.score == 8 and "needs_review" in outcome.flags and "policy_findings=1" in outcome.flags


def test_a_report_lists_the_first_findings_and_counts_them_all():
    from grader.grading import _new_report
    from grader.policy import FINDINGS_KEPT
    from grader.submission import Submission

    source = "".join(f"x{line} = open\n" for line in range(FINDINGS_KEPT + 50)).encode()
    report = _new_report(Submission("many", {"pipeline.py": source}), load_rubric(), 0, 1)
    assert len(report.policy_findings) == FINDINGS_KEPT and report.needs_review
    found = len(scan({"pipeline.py": source}, FORBIDDEN))  # each line: the denylist's open and the allowlist's
    assert found >= FINDINGS_KEPT + 50 and any(f"found {found} uses" in note for note in report.notes)


# --- the allowlist ---------------------------------------------------------------------------
@pytest.mark.parametrize("source, expected", [
    ("import os\nos.popen('ls')\n", [(1, "module os")]),
    ("import os\nos.posix_spawn('/bin/sh', [], {})\n", [(1, "module os")]),
    ("import io\nio.open('/etc/passwd')\n", [(1, "module io")]),
    ("import os\nos.getenv('TOKEN')\n", [(1, "module os")]),
    ("import types\nf = types.FunctionType(compile('1', 'x', 'eval'), {})\n", [(1, "module types"), (2, "builtin compile")]),
    ("import sys\nframes = sys._current_frames()\n", [(1, "module sys"), (2, "attribute _current_frames")]),
    ("def f(g):\n    return g.__closure__[0].cell_contents\n", [(2, "attribute __closure__"), (2, "attribute cell_contents")]),
    ("import time\nkept = time.perf_counter\ntime.perf_counter = lambda: 0\ntime.perf_counter = kept\n",
     [(3, "assigns time.perf_counter"), (4, "assigns time.perf_counter")]),  # replaced and put back
    ("from torch import Tensor\nTensor.to = None\n", [(2, "assigns torch.Tensor.to")]),
    ("import torch\nsetattr(torch, 'equal', None)\n", [(2, "assigns torch.equal")]),
    ("import minitorch\nminitorch.runtime = None\n", [(2, "assigns minitorch.runtime")]),
    ("from minitorch.runtime import _observers\n", [(1, "private name minitorch.runtime._observers")]),
    ("import minitorch.runtime as runtime\nruntime._observers[0] = print\n", [(2, "private attribute _observers")]),
    ("import torch\nx = torch._C\n", [(2, "private attribute _C")]),
    ("def f(x):\n    return vars(x)\n", [(2, "builtin vars")]),
    ("def f(x):\n    return x.__dict__\n", [(2, "attribute __dict__")]),
])
def test_the_allowlist_flags_what_the_homework_does_not_need(source, expected):
    assert names(source) == expected


# --- tools that rewrite execution or results, and aliases of what the grader relies on -------
@pytest.mark.parametrize("source, expected", [
    ("import threading\nthreading.settrace(lambda *a: None)\n", [(2, "rewrites execution: threading.settrace")]),
    ("import threading\nthreading.setprofile_all_threads(print)\n",
     [(2, "rewrites execution: threading.setprofile_all_threads")]),
    ("from torch.overrides import TorchFunctionMode\n", [(1, "rewrites execution: torch.overrides")]),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n", [(2, "rewrites execution: torch.library")]),
    ("import torch\nw = torch.load('w.pt')\n", [(2, "torch.load without weights_only=True (a pickle runs code)")]),
    ("import torch\nw = torch.load('w.pt', weights_only=False)\n", [(2, "torch.load without weights_only=True (a pickle runs code)")]),
    ("import torch\nw = torch.load('w.pt', weights_only=True)\n", []),
    ("import torch\n_T = torch.Tensor\n_T.equal = None\n", [(3, "assigns torch.Tensor.equal")]),
    ("import torch\nA = torch\nB = A.Tensor\nB.to = None\n", [(4, "assigns torch.Tensor.to")]),  # an alias of an alias
    ("import torch\nfor T in (torch.Tensor,):\n    T.to = None\n", [(3, "assigns torch.Tensor.to")]),
    ("import contextlib\nimport torch\nwith contextlib.nullcontext(torch.Tensor) as T:\n    T.to = None\n",
     [(4, "assigns torch.Tensor.to")]),
    ("import torch\nT = getattr(torch, 'Tensor')\nsetattr(T, 'to', None)\n", [(3, "assigns torch.Tensor.to")]),
    ("import torch\nT, U = torch.Tensor, 1\nT.to = None\n", [(3, "assigns torch.Tensor.to")]),
    ("import torch\nT = type(torch.zeros(1))\nT.to = None\n", [(3, "assigns type(...).to")]),
    ("import torch\nx = torch.zeros(3)\nx.requires_grad = True\n", []),  # a tensor it made is its own
    ("def f(g, h):\n    setattr(g, '__' + 'code' + '__', h)\n", [(2, "setattr of a name built at run time")]),
    ("def f(g, name):\n    delattr(g, name)\n", [(2, "builtin delattr"), (2, "delattr of a name built at run time")]),
    ("def f(g):\n    setattr(g, 'weight', None)\n", []),  # a name it spells out is read as such
])
def test_the_scan_flags_what_rewrites_execution_and_aliases_it_resolves(source, expected):
    assert names(source) == expected


def test_a_coding_line_other_than_utf8_is_a_finding():
    source = b"# -*- coding: utf-7 -*-\n# +AAo-import os\nx = 1\n"
    (finding,) = scan_source("pipeline.py", source, FORBIDDEN)
    assert (finding.line, finding.name) == (1, "encoding utf-7")
    assert scan_source("pipeline.py", b"# -*- coding: utf-8 -*-\nx = 1\n", FORBIDDEN) == []
    assert [f.name for f in scan_source("pipeline.py", b"x = '\xff'\n", FORBIDDEN)] == ["encoding not UTF-8"]


CORRECT_VARIANTS = [
    # a Pipe with its own threads and queues instead of the provided workers
    """from __future__ import annotations
import queue
import threading
from typing import Optional
import torch
from torch import nn


class Pipe(nn.Module):
    def __init__(self, stages: list[nn.Module], split_size: int = 1):
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.split_size = split_size
        self.errors: Optional[BaseException] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inbox: queue.Queue = queue.Queue()
        worker = threading.Thread(target=lambda: inbox.put([s(x) for s in self.stages]), daemon=True)
        worker.start()
        worker.join()
        return torch.cat(inbox.get())
""",
    # a tensor-parallel layer with collectives, functional ops and a dataclass config
    """from __future__ import annotations
import math
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate
import torch
import torch.distributed as dist
import torch.nn.functional as F
from minitorch.distributed import get_rank, get_world_size


@dataclass
class Config:
    hidden: int
    heads: int = 4
    sizes: list = field(default_factory=list)


class AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def shard(weight: torch.Tensor, dim: int) -> torch.Tensor:
    size = math.isqrt(weight.shape[dim] ** 2) // get_world_size()
    starts = list(accumulate([size] * get_world_size(), initial=0))
    gelu = partial(F.gelu, approximate="tanh")
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(weight).__name__}")
    return gelu(weight.narrow(dim, starts[get_rank()], size).contiguous())
""",
    # planning code: balance by binary search, an estimate with a named tuple and a heap
    """import heapq
import math
from collections import namedtuple
from typing import NamedTuple, Sequence


class Split(NamedTuple):
    stages: list


def balance_stages(costs: Sequence[float], num_stages: int) -> list[int]:
    if num_stages <= 0 or num_stages > len(costs):
        raise ValueError("bad number of stages")
    low, high = max(costs), sum(costs)
    while high - low > 1e-9 * max(1.0, high):
        middle = (low + high) / 2
        count, total = 1, 0.0
        for cost in costs:
            if total + cost > middle:
                count, total = count + 1, cost
            else:
                total += cost
        low, high = (middle, high) if count > num_stages else (low, middle)
    heap = [(-c, i) for i, c in enumerate(costs)]
    heapq.heapify(heap)
    return [len(costs) // num_stages] * num_stages if math.isinf(high) else [1] * num_stages
""",
]


@pytest.mark.parametrize("source", CORRECT_VARIANTS, ids=["threads-and-queues", "collectives-and-dataclasses", "planning"])
def test_correct_code_written_another_way_raises_no_finding(source):
    assert names(source) == []


def test_long_attribute_chains_are_scanned_in_time_linear_in_their_length():
    """A chain ``value.a.a...`` thousands deep is read once, not once per link (the red-team
    round's megabyte of such chains took minutes): it costs no more than as many links in short
    chains cost (CPU time, compared in one run), and a forbidden link inside a chain is found."""
    import time

    def cpu_seconds(source: str) -> float:
        started = time.process_time()
        assert scan_source("pipeline.py", source, ()) == []
        return time.process_time() - started

    deep = "".join(f"def unused_{n}(value):\n    return value{'.a' * 1800}\n" for n in range(30))
    flat = "".join(f"def unused_{n}(value):\n    return value{'.a' * 10}\n" for n in range(30 * 180))
    assert cpu_seconds(deep) < 1.5 * cpu_seconds(flat) + 0.2  # quadratic: about 5 times the flat cost
    inside = scan_source("pipeline.py", "def f(x):\n    return x" + ".a" * 600 + ".__globals__" + ".b" * 300 + "\n", ())
    assert [f.name for f in inside] == ["attribute __globals__"]


def test_a_scan_that_runs_past_its_bound_is_reported_unscanned(monkeypatch):
    from grader import policy

    monkeypatch.setattr(policy, "SCAN_SECONDS", 0.2)
    monkeypatch.setattr(policy._Scanner, "scan", lambda self, tree: time_passes())
    findings = scan_source("pipeline.py", "x = 1\n", ())
    assert [(f.name, f.code) for f in findings] == [(policy.UNSCANNABLE, "the file could not be scanned within 0.2 s")]


def time_passes() -> None:
    while True:
        pass
