"""``make submit`` in a fresh copy of the kit: never a stale zip, the stubs listed, a smoke run."""
import re
import subprocess
import zipfile

import pytest
from student_copy import borrow_environment, fresh_kit, student_files_from_answer_key

FILES = ("pipeline.py", "tensor_parallel.py")


@pytest.fixture
def kit(tmp_path):
    folder = fresh_kit(tmp_path / "kit")
    borrow_environment(folder)
    return folder


def make_submit(kit, *arguments):
    return subprocess.run(["make", "--no-print-directory", "submit", *arguments], cwd=kit, capture_output=True,
                          text=True, timeout=300)


def expected_names(kit):
    """The two files, and the kit's REPORT.md where it has one (the report's figures: test_report.py)."""
    return set(FILES) | ({"REPORT.md"} if (kit / "REPORT.md").is_file() else set())


def stubbed_problems(kit, files=FILES) -> str:
    """"2.1, 2.2, ..." : the problems whose stubs ``files`` of the kit hold, in order."""
    found = set()
    for name in files:
        found |= set(re.findall(r'NotImplementedError\("Problem (\d+\.\d+)', (kit / "minitorch" / name).read_text()))
    return ", ".join(sorted(found, key=lambda p: tuple(map(int, p.split(".")))))


def public_problems(kit) -> set[str]:
    """The problems the kit's public tests are marked with."""
    return {marker for path in (kit / "tests").glob("test_*.py")
            for marker in re.findall(r"pytest\.mark\.problem_(\d+_\d+)", path.read_text())}


def packed(kit):
    with zipfile.ZipFile(kit / "submission.zip") as archive:
        return {name: archive.read(name).decode() for name in archive.namelist()}


def test_a_syntax_error_stops_it_and_deletes_the_older_zip(kit):
    (kit / "submission.zip").write_bytes(b"an older submission")
    source = (kit / "minitorch" / "pipeline.py").read_text()
    (kit / "minitorch" / "pipeline.py").write_text(source + "\ndef broken(:\n")
    run = make_submit(kit, "SUBMIT_ARGS=--no-smoke")
    assert run.returncode != 0
    assert not (kit / "submission.zip").exists()
    line = source.count("\n") + 2
    assert f"minitorch/pipeline.py:{line}: SyntaxError" in run.stderr and "no submission.zip was written" in run.stderr


def test_a_missing_file_stops_it_and_deletes_the_older_zip(kit):
    (kit / "submission.zip").write_bytes(b"an older submission")
    (kit / "minitorch" / "tensor_parallel.py").unlink()
    run = make_submit(kit, "SUBMIT_ARGS=--no-smoke")
    assert run.returncode != 0 and not (kit / "submission.zip").exists()
    assert "minitorch/tensor_parallel.py is missing" in run.stderr


def test_it_lists_every_problem_that_is_still_a_stub_and_packs_anyway(kit):
    run = make_submit(kit, "SUBMIT_ARGS=--no-smoke")
    assert run.returncode == 0, run.stderr
    assert stubbed_problems(kit).startswith("2.1, 2.2, ") and "3.1" in stubbed_problems(kit)
    assert f"Problems {stubbed_problems(kit)} still raise NotImplementedError" in run.stdout
    assert set(packed(kit)) == expected_names(kit)


def test_after_solving_problem_2_and_4_only_problem_3_is_listed(kit):
    student_files_from_answer_key(kit, ("pipeline.py",))
    run = make_submit(kit, "SUBMIT_ARGS=--no-smoke")
    assert run.returncode == 0, run.stderr
    only_tensor_parallel = stubbed_problems(kit, ("tensor_parallel.py",))
    assert only_tensor_parallel.startswith("3.1, 3.2") and "2." not in only_tensor_parallel
    assert f"Problems {only_tensor_parallel} still raise NotImplementedError" in run.stdout, run.stdout
    assert "pipeline.py:" not in run.stdout  # nothing of pipeline.py is listed
    files = packed(kit)
    assert files["pipeline.py"] == (kit / "minitorch" / "pipeline.py").read_text()


@pytest.mark.slow
def test_the_smoke_run_tries_the_first_public_test_of_every_problem(kit):
    student_files_from_answer_key(kit)
    run = make_submit(kit)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no stubs left" in run.stdout
    summary = [line.strip() for line in run.stdout.splitlines() if re.match(r"\s+\d\.\d  ", line)]
    problems = len(public_problems(kit))
    assert problems >= 10 and len(summary) == problems and all(" 1/1 pass" in line for line in summary), run.stdout
    assert re.search(rf"{problems} passed, \d+ deselected", run.stdout), run.stdout
    assert set(packed(kit)) == expected_names(kit)
