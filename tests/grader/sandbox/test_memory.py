"""The whole-criterion memory bound (grader/sandbox/memory.py) counts memory no process maps:
files held open that no folder names (``memfd_create``'s, deleted ones). The catalogue entry
``hostile-memfd-outside-the-memory-bound`` checks a graded child is stopped with the student's
message; these check the meter on its own, on both sides of the rule."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader.sandbox import memory

MB = 1 << 20
SYSTEM_PYTHON = "/usr/bin/python3"  # a uid of no account can run it (the venv's may sit in /root)
HOLDS = '''
import os, sys, time
megabytes, kind = int(sys.argv[1]), sys.argv[2]
if kind == "memfd":
    fd = os.memfd_create("held")
else:  # a file a folder still names
    fd = os.open(os.path.join(sys.argv[3], "named"), os.O_RDWR | os.O_CREAT)
for _ in range(megabytes):
    os.write(fd, b"x" * (1 << 20))
print("ready", flush=True)
time.sleep(60)
'''


@pytest.fixture
def holder(tmp_path):
    """Start a process holding ``megabytes`` in a file of ``kind``; its pid once it holds them."""
    started = []

    def start(megabytes: int, kind: str) -> int:
        process = subprocess.Popen([sys.executable, "-c", HOLDS, str(megabytes), kind, str(tmp_path)],
                                   stdout=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return process.pid

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_held_files_count_once_per_inode_by_the_bytes_they_hold():
    before = memory.held_file_bytes({os.getpid()})
    fd = os.memfd_create("held")
    copy = os.dup(fd)  # the same file twice: counted once
    deleted = tempfile.TemporaryFile()
    try:
        os.write(fd, b"x" * (3 * MB))
        deleted.write(b"y" * MB)
        deleted.flush()
        assert memory.held_file_bytes({os.getpid()}) - before == 4 * MB
    finally:
        os.close(fd)
        os.close(copy)
        deleted.close()
    assert memory.held_file_bytes({os.getpid()}) == before


def test_a_process_holding_memfd_bytes_past_the_bound_is_over_it(holder):
    pid = holder(160, "memfd")
    meter = memory.Meter(bound=96 * MB, base=memory.resident_bytes(pid))
    held = meter.over({pid})
    assert held is not None and held >= 160 * MB


def test_memfd_bytes_under_the_bound_and_named_files_are_not_over_it(holder, tmp_path):
    small, named = holder(16, "memfd"), holder(160, "named")
    meter = memory.Meter(bound=96 * MB, base=memory.resident_bytes(small) + memory.resident_bytes(named))
    assert meter.over({small, named}) is None


HIDES_ITS_MEMORY = '''
import ctypes, importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("memory", sys.argv[1])
memory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memory)
reading, writing = os.pipe()
pid = os.fork()
if pid == 0:  # not dumpable: its smaps_rollup is closed to its own uid, statm is not
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    hoard = bytearray(b"x" * (96 << 20))
    os.write(writing, b"1")
    time.sleep(60)
os.read(reading, 1)
print(memory.proportional_bytes(pid))
os.kill(pid, 9)
'''


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON),
                    reason="needs root to run the meter as an unprivileged uid")
def test_a_process_not_dumpable_is_counted_by_its_resident_size():
    """Under a grader not root, a child's ``Pss`` is closed to the grader once the child makes
    itself not dumpable; the meter counts its resident size then, never nothing."""
    source = Path(memory.__file__)
    copy = Path(tempfile.mkdtemp()) / "memory.py"  # the repository may be closed to that uid
    shutil.copy(source, copy)
    os.chmod(copy.parent, 0o755)
    try:
        counted = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON,
                                  "-c", HIDES_ITS_MEMORY, str(copy)], capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(copy.parent)
    assert counted.returncode == 0, counted.stderr
    assert int(counted.stdout) >= 96 * MB
