"""The provided launcher minitorch.distributed: values, errors, timeouts, no orphans, torchrun."""
import ctypes
import faulthandler
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from grader.layout import REPOSITORY as REPO
from minitorch.distributed import get_rank, get_world_size, launch

pytestmark = pytest.mark.multirank  # launches torch.distributed ranks (left out of make test-fast)


class StudentError(Exception):
    """An exception type defined outside torch and builtins."""


def _children_of_this_process() -> list[int]:
    me, children = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                children.append(int(entry))
    return children


@pytest.fixture
def no_orphans():
    before = set(_children_of_this_process())
    yield
    assert set(_children_of_this_process()) <= before, "a rank process outlived launch()"


def _sum_of_ranks(rank, world_size, scale):
    x = torch.full((3,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(x)
    return {"rank": get_rank(), "world": get_world_size(), "sum": x * scale}


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_returns_each_rank_value_in_rank_order(world_size, no_orphans):
    values = launch(_sum_of_ranks, world_size, 10.0, backend="gloo")
    total = world_size * (world_size + 1) / 2
    assert [v["rank"] for v in values] == list(range(world_size))
    assert all(v["world"] == world_size for v in values)
    for v in values:
        # exact: sums of small integers in float64 are exact in any order
        torch.testing.assert_close(v["sum"], torch.full((3,), 10.0 * total, dtype=torch.float64),
                                   rtol=0, atol=0)


def test_rank_helpers_outside_a_group_are_one_rank():
    assert not dist.is_initialized()
    assert (get_rank(), get_world_size()) == (0, 1)


def _raise_on_rank_1(rank, world_size, error_type):
    if rank == 1:
        raise error_type("Problem 3.1: copy_to_tensor_model_parallel_region")
    dist.all_reduce(torch.ones(2))  # rank 0 then fails too, with a "connection closed" echo
    return rank


@pytest.mark.parametrize("error_type", [NotImplementedError, ValueError, StudentError])
def test_exception_keeps_its_type_and_names_the_rank(error_type, no_orphans):
    with pytest.raises(error_type, match=r"^rank 1: Problem 3\.1: copy_to") as info:
        launch(_raise_on_rank_1, 2, error_type, backend="gloo", timeout=10)
    assert "_raise_on_rank_1" in "".join(info.value.__notes__)  # the rank's own traceback


def _exit_hard(rank, world_size):
    if rank == 0:
        os._exit(3)
    dist.barrier()


def test_rank_that_dies_without_reporting_is_an_error(no_orphans):
    with pytest.raises(RuntimeError, match="rank 0: process exited with code 3"):
        launch(_exit_hard, 2, backend="gloo", timeout=10)


@pytest.fixture
def fault_dumps_on():
    """Python's fault handler on, where pytest's own plugin leaves it: on a copy of fd 2, so a
    rank's abort would write its dump past the rank's captured fd 2."""
    if faulthandler.is_enabled():
        yield
        return
    with os.fdopen(os.dup(2), "w") as copy_of_stderr:
        faulthandler.enable(file=copy_of_stderr)
        try:
            yield
        finally:
            faulthandler.disable()


CPP_STACK_LINES = 60


def _abort_after_a_cpp_stack(rank, world_size):
    if rank == 1:
        print("my own line before the abort", file=sys.stderr)
        frames = "".join(f"frame #{n}: c10::fake_{n}() + 0x{n:x} (0x7f0000 in /usr/lib/libfake.so)\n"
                         for n in range(CPP_STACK_LINES - 1))
        os.write(2, ("terminate called after throwing an instance of 'c10::Error'\n"
                     "  what():  fake: rank 1 received 8 bytes where it expected 4\n"
                     "Exception raised from fake_check at fake.cpp:12 (most recent call first):\n"
                     + frames).encode())
        os.abort()
    dist.barrier()  # rank 0 then fails with a "connection closed" echo


def test_an_aborted_rank_names_its_signal_and_cause_and_its_stack_is_one_line(capfd, fault_dumps_on, no_orphans):
    with pytest.raises(RuntimeError) as info:
        launch(_abort_after_a_cpp_stack, 2, backend="gloo", timeout=10)
    assert str(info.value) == ("rank 1: died of SIGABRT without reporting a result: "
                               "fake: rank 1 received 8 bytes where it expected 4")
    err = capfd.readouterr().err
    assert ("[rank 1] my own line before the abort\n"
            "[rank 1] terminate called after throwing an instance of 'c10::Error'\n"
            "[rank 1]   what():  fake: rank 1 received 8 bytes where it expected 4\n"
            f"[rank 1] ... ({CPP_STACK_LINES} lines of C++ stack omitted)\n") in err, err
    assert "frame #" not in err, err
    # The fault handler's dump keeps the rank's own frames, not the launcher's or pytest's.
    assert "[rank 1] Fatal Python error: Aborted" in err, err
    assert re.search(r'^\[rank 1\]   File ".*test_distributed.py", line \d+ in _abort_after_a_cpp_stack$', err, re.M), err
    assert re.search(r"^\[rank 1\] \.\.\. \(\d+ lines of the launcher's stack omitted\)$", err, re.M), err
    assert "_rank_main" not in err and "_pytest" not in err, err


def _mismatched_dtypes(rank, world_size):
    dist.all_reduce(torch.ones(4, dtype=torch.float64 if rank else torch.float32))


def test_a_real_collective_mismatch_that_aborts_a_rank_says_so(capfd, no_orphans):
    with pytest.raises(RuntimeError, match=r"^rank \d: died of SIGABRT without reporting a result: gloo: .*"
                                           r"collective mismatch") as info:
        launch(_mismatched_dtypes, 2, backend="gloo", timeout=10)
    assert len(str(info.value)) < 400 and "/gloo/" not in str(info.value)
    assert "] terminate called after throwing" in capfd.readouterr().err


def _segfault(rank, world_size):
    ctypes.string_at(0)


def test_a_crashed_rank_names_its_signal_and_the_fault(capfd, fault_dumps_on, no_orphans):
    with pytest.raises(RuntimeError) as info:
        launch(_segfault, 1, backend="gloo", timeout=10)
    assert str(info.value) == "rank 0: died of SIGSEGV without reporting a result: Fatal Python error: Segmentation fault"
    assert re.search(r'^\[rank 0\]   File ".*", line \d+ in _segfault$', capfd.readouterr().err, re.M)


def _print_to_stderr(rank, world_size):
    for line in range(3):
        print(f"line {line} of rank {rank}", file=sys.stderr)
    os.write(2, f"fd 2 of rank {rank}\n".encode())
    return rank


def test_what_a_rank_prints_to_stderr_reaches_the_caller_prefixed_and_in_order(capfd, no_orphans):
    assert launch(_print_to_stderr, 2, backend="gloo") == [0, 1]
    err = capfd.readouterr().err
    for rank in range(2):
        expected = "".join(f"[rank {rank}] line {line} of rank {rank}\n" for line in range(3))
        assert expected + f"[rank {rank}] fd 2 of rank {rank}\n" in err, err


CHATTY_LINES = 100_000


def _print_megabytes_then_abort(rank, world_size):
    os.write(2, "".join(f"chatty line {n:06d} {'x' * 60}\n" for n in range(CHATTY_LINES)).encode())
    os.write(2, ("last words " + "y" * 5000 + "\n").encode())
    os.abort()


def test_a_rank_printing_megabytes_is_echoed_and_quoted_bounded(capfd, no_orphans):
    with pytest.raises(RuntimeError, match=r"^rank 0: died of SIGABRT without reporting a result: .*last words y") as info:
        launch(_print_megabytes_then_abort, 1, backend="gloo", timeout=10)
    assert len(str(info.value)) < 400
    err = capfd.readouterr().err
    assert len(err) < 300_000, f"{len(err)} characters echoed for 8 MB printed"
    assert "[rank 0] chatty line 000000 " in err and "bytes of stderr omitted" in err
    assert f"[rank 0] chatty line {CHATTY_LINES - 1:06d} " in err and "[rank 0] last words yyy" in err


def _hang_on_rank_1(rank, world_size, pid_dir):
    Path(pid_dir, str(rank)).write_text(str(os.getpid()))
    if rank == 1:
        time.sleep(600)
    dist.all_reduce(torch.ones(2))


def _spin(rank, world_size, pid_dir):
    Path(pid_dir, str(rank)).write_text(str(os.getpid()))
    while True:
        pass


@pytest.mark.parametrize("worker, hung", [(_hang_on_rank_1, r"\[1\]"), (_spin, r"\[0, 1\]")])
def test_hung_rank_becomes_timeout_error_and_is_killed(worker, hung, tmp_path, no_orphans):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=f"rank\\(s\\) {hung} did not finish within 1 s"):
        launch(worker, 2, str(tmp_path), backend="gloo", timeout=1.0)
    assert time.monotonic() - start < 30, "the timeout did not bound the launch"
    for pid_file in tmp_path.iterdir():
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


def _return_module(rank, world_size):
    return torch.nn.Linear(2, 2)


def test_return_value_must_be_plain_data(no_orphans):
    with pytest.raises(TypeError, match="rank 0: the return value is not plain data"):
        launch(_return_module, 1, backend="gloo")


def _list_dir(rank, world_size, directory):
    return sorted(os.listdir(directory))


def test_rendezvous_lives_in_a_private_temp_dir_that_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = launch(_list_dir, 2, str(tmp_path), backend="gloo")
    assert len(seen[0]) == 1 and seen[0][0].startswith("minitorch-launch-")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"world_size": 0}, "world_size must be an int >= 1, got 0"),
    ({"world_size": 2, "timeout": 0}, "timeout must be > 0"),
    ({"world_size": 2, "backend": "mpi"}, "backend must be 'gloo' or 'nccl'"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    world_size = kwargs.pop("world_size")
    with pytest.raises(ValueError, match=message):
        launch(_sum_of_ranks, world_size, 1.0, **kwargs)


def _nothing(rank, world_size):
    return rank


def test_launch_cost_is_printed(capsys):
    for world_size in (2, 4):
        start = time.perf_counter()
        for _ in range(3):
            launch(_nothing, world_size, backend="gloo")
        with capsys.disabled():
            print(f"\nlaunch of {world_size} ranks: {(time.perf_counter() - start) / 3:.3f} s")


@pytest.mark.slow
def test_same_worker_runs_under_torchrun(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        from minitorch.distributed import run_from_env, get_rank, get_world_size

        def worker(rank, world_size):
            x = torch.tensor([float(rank + 1)])
            dist.all_reduce(x)
            print(f"rank {get_rank()}/{get_world_size()} sum {x.item():g}", flush=True)

        if __name__ == "__main__":
            run_from_env(worker, backend="gloo")
    """))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script)], capture_output=True, text=True, env=env, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rank 0/2 sum 3" in result.stdout and "rank 1/2 sum 3" in result.stdout


def test_init_from_env_explains_missing_torchrun_variables(monkeypatch):
    from minitorch.distributed import init_from_env
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(RuntimeError, match="RANK, WORLD_SIZE.*torchrun"):
        init_from_env()


def test_a_failed_rendezvous_is_retried_once_with_a_fresh_one(tmp_path, monkeypatch, capfd):
    """One rank's first attempt to join fails the way gloo does under load; the launch says so
    and succeeds with fresh ranks. (The ranks are forked: they inherit the patched function.)"""
    join = dist.init_process_group
    marker = tmp_path / "failed-once"

    def flaky_join(*args, **kwargs):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return join(*args, **kwargs)
        raise RuntimeError("[gloo/transport/tcp/pair.cc] Connection closed by peer (connectFullMesh failed)")

    monkeypatch.setattr(dist, "init_process_group", flaky_join)
    values = launch(_sum_of_ranks, 2, 1.0, backend="gloo", timeout=20)
    assert [v["sum"].tolist() for v in values] == [[3.0] * 3] * 2
    err = capfd.readouterr().err
    assert "the 2 ranks could not connect to each other" in err and err.count("retrying once") == 1


def test_a_rendezvous_that_fails_twice_raises_and_an_error_in_fn_is_not_retried(monkeypatch, capfd):
    with pytest.raises(StudentError, match="rank 1: Problem 3.1"):
        launch(_raise_on_rank_1, 2, StudentError, backend="gloo", timeout=10)
    assert "retrying" not in capfd.readouterr().err

    def never_join(*args, **kwargs):
        raise RuntimeError("Connection closed by peer (connectFullMesh failed)")

    monkeypatch.setattr(dist, "init_process_group", never_join)
    with pytest.raises(RuntimeError, match="connectFullMesh failed"):
        launch(_sum_of_ranks, 2, 1.0, backend="gloo", timeout=10)
    assert capfd.readouterr().err.count("retrying once") == 1
