"""Grading a class on Slurm (``python -m course slurm``): plans and scripts, a task that dies,
node-wide uid slot leases, and a real single-node Slurm (tests/slurm_cluster.py) grading a
small class through sbatch into the same CSV as ``batch``."""
import csv
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from grading_helpers import answer_key_source, stub_files, write_submission
from slurm_cluster import LocalSlurm, missing_binaries

from course import cli, cluster, gradebook
from grader.grading import select
from grader.layout import REPOSITORY as REPO
from grader.rubric import load_rubric

# Writes a report as the grader would: full marks for everyone but "zero".
FAKE_GRADER = textwrap.dedent('''\
    import json, sys
    from pathlib import Path
    path, report = Path(sys.argv[1]), Path(sys.argv[3])
    earned = 0 if path.name == "zero" else 8
    criteria = [{"id": "2.1-schedule", "problem": "2.1", "title": "t", "points": 8, "earned": earned,
                 "status": "passed" if earned else "failed", "message": "", "seconds": 0.1}]
    report.write_text(json.dumps({"schema_version": 1, "submission": str(path), "files": {"pipeline.py": "0" * 64,
        "tensor_parallel.py": "1" * 64}, "environment": {}, "score": earned, "max_score": 8, "criteria": criteria}))
    ''')


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def points(*only: str) -> str:
    """Full marks on the criteria ``--only`` names, by the rubric, as the CSV writes them."""
    return f"{sum(c.points for c in select(load_rubric().active(), list(only))):g}"


def make_class(folder: Path) -> Path:
    """The answer key, the stubs, and a Pipe that detaches between stages (loses 2.2-backward)."""
    key = {name: answer_key_source(name) for name in ("pipeline.py", "tensor_parallel.py")}
    write_submission(folder / "key", key)
    write_submission(folder / "stub", stub_files())
    wrong = key["pipeline.py"].replace("batch=microbatches[i], device", "batch=microbatches[i].detach(), device")
    assert wrong != key["pipeline.py"]
    write_submission(folder / "wrong", {**key, "pipeline.py": wrong})
    return folder


def cuda_python(folder: Path) -> Path:
    """An interpreter that passes both CUDA checks, at write and in the job (and otherwise is this one)."""
    path = folder / "cuda-python"
    path.write_text(f'#!/bin/bash\n[ "$1" = -c ] && [[ "$2" == *torch.version.cuda* || "$2" == *torch.cuda.is_available* ]] && exit 0\n'
                    f'exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


def test_write_makes_plans_and_scripts(tmp_path):
    make_class(tmp_path / "class")
    (tmp_path / "class" / "__MACOSX").mkdir()
    csv_path = tmp_path / "out" / "grades.csv"
    code = cli.main(["slurm", "write", str(tmp_path / "class"), "--csv", str(csv_path), "--per-task", "2", "--only", "2.1",
                         "--gpu", "--partition", "short", "--gpu-partition", "gpu", "--sbatch=--account=cs101",
                         "--timeout", "120", "--jobs", "2", "--gpu-python", str(cuda_python(tmp_path))])
    assert code == 0
    folder = cluster.slurm_folder(csv_path)
    cpu = json.loads((folder / "cpu" / "plan.json").read_text())
    assert (cpu["tasks"], cpu["jobs"], cpu["only"]) == (2, 2, ["2.1"])
    assert [s["name"] for s in cpu["students"]] == ["key", "stub", "wrong"]
    assert cpu["reports"] == str(gradebook.reports_folder(csv_path.resolve()))
    gpu = json.loads((folder / "gpu" / "plan.json").read_text())
    assert (gpu["only"], gpu["jobs"], gpu["reports"]) == (["2.3-speedup"], 1, cpu["reports"] + "/gpu")
    script = (folder / "cpu" / "grade.sbatch").read_text()
    for line in ("#SBATCH --array=0-1", "#SBATCH --partition=short", "#SBATCH --account=cs101", "#SBATCH --cpus-per-task=2",
                 "#SBATCH --time=12", f"#SBATCH --output={folder}/logs/cpu-%A_%a.out",
                 f"exec {sys.executable} -m course slurm task {folder}/cpu/plan.json"):
        assert line in script.splitlines(), line
    gpu_script = (folder / "gpu" / "grade.sbatch").read_text()
    assert "#SBATCH --gres=gpu:2" in gpu_script and "#SBATCH --partition=gpu" in gpu_script and "nvidia-smi" in gpu_script
    check = next(line for line in gpu_script.splitlines() if "torch.cuda.is_available()" in line)  # the job's first step
    assert check.startswith(str(cuda_python(tmp_path))) and "--gpu-python" in check and check.endswith("exit 3; }")
    merge = (folder / "merge.sbatch").read_text()
    assert f"-m course slurm merge --csv {csv_path.resolve()}" in merge
    for path in (folder / "cpu" / "grade.sbatch", folder / "gpu" / "grade.sbatch", folder / "merge.sbatch"):
        subprocess.run(["bash", "-n", str(path)], check=True)


def test_bad_slurm_usage_is_refused(tmp_path, capsys):
    (tmp_path / "class" / "a").mkdir(parents=True)
    write = ["slurm", "write", str(tmp_path / "class"), "--csv", str(tmp_path / "g.csv")]
    for argv, message in (
        ([*write, "--wait"], "--wait needs --submit"),
        ([*write, "--per-task", "0"], "--per-task"),
        ([*write, "--only", "9.9"], "--only 9.9: no criterion or problem of that name"),
        ([*write, "--canvas", "c.csv"], "--assignment"),
        (["slurm", "write", str(tmp_path / "nothing"), "--csv", str(tmp_path / "g.csv")], "expected a folder of submissions"),
        (["slurm", "merge", "--csv", str(tmp_path / "g.csv")], "run `python -m course slurm write"),
        (["slurm", "task", str(tmp_path / "plan.json")], "give --task N"),
    ):
        assert cli.main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not cluster.slurm_folder(tmp_path / "g.csv").exists()


@pytest.mark.timeout(400)  # imports torch for the check on a busy machine
def test_gpu_write_refuses_a_python_without_cuda(tmp_path, capsys):
    """The course .venv's torch is the CPU build: `--gpu` with it stops before anything is
    written, in one line naming --gpu-python (issue 23, item 7)."""
    (tmp_path / "class" / "a").mkdir(parents=True)
    csv_path = tmp_path / "g.csv"
    assert cli.main(["slurm", "write", str(tmp_path / "class"), "--csv", str(csv_path), "--gpu-only",
                     "--gpu-python", str(tmp_path / "no-such-python")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "--gpu-python" in error and "no-such-python" in error
    assert not (cluster.slurm_folder(csv_path) / "gpu" / "plan.json").exists()
    import torch  # this interpreter: the CPU build here, so it must be refused too (else this check is moot)

    if torch.version.cuda is None:
        assert cli.main(["slurm", "write", str(tmp_path / "class"), "--csv", str(csv_path), "--gpu-only"]) == 2
        assert "--gpu-python" in capsys.readouterr().err


FAKE_SBATCH = textwrap.dedent("""\
    #!/bin/bash
    # Accepts the CPU array and the merge; refuses the GPU array, as a wrong --gpu-partition does.
    for argument in "$@"; do
      case "$argument" in */gpu/grade.sbatch) echo "sbatch: error: invalid partition specified: gpux" >&2; exit 1;; esac
    done
    echo $(( RANDOM + 100 ))
    """)


def test_a_refused_gpu_array_does_not_break_later_merges(tmp_path, monkeypatch, capsys):
    """The GPU array's sbatch fails: its plan is withdrawn, the merge still goes in after the
    CPU array, and merging later flags nobody's GPU task as died (issue 23, item 6)."""
    for name in ("ada", "zero"):
        (tmp_path / "class" / name).mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sbatch").write_text(FAKE_SBATCH)
    (tmp_path / "bin" / "sbatch").chmod(0o755)
    (tmp_path / "fake_grader.py").write_text(FAKE_GRADER)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("GRADER_SLOT_LOCKS", str(tmp_path / "locks"))
    csv_path = tmp_path / "grades.csv"
    assert cli.main(["slurm", "write", str(tmp_path / "class"), "--csv", str(csv_path), "--gpu", "--submit",
                     "--gpu-python", str(cuda_python(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert "the gpu array was not submitted, its plan withdrawn: " in out and "invalid partition" in out
    assert "submitted the cpu array" in out and "submitted the merge" in out
    folder = cluster.slurm_folder(csv_path)
    assert not (folder / "gpu" / "plan.json").exists() and set(json.loads((folder / "jobs.json").read_text())) == {"cpu", "merge"}
    plan_path = folder / "cpu" / "plan.json"
    plan_path.write_text(json.dumps({**json.loads(plan_path.read_text()), "grader_command": [sys.executable, str(tmp_path / "fake_grader.py")]}))
    assert cluster.run_task(plan_path, 0, lambda line: None) == 0
    for _ in range(2):  # a later merge too
        cluster.merge(csv_path, gradebook.Options(), progress=lambda line: None)
        rows = read_csv(csv_path)
        assert (rows["ada"]["flags"], rows["zero"]["flags"]) == ("", ""), rows


def test_a_task_that_died_is_a_flagged_row(tmp_path, monkeypatch):
    for name in ("ada", "bob", "zero"):
        (tmp_path / "class" / name).mkdir(parents=True)
    (tmp_path / "fake_grader.py").write_text(FAKE_GRADER)
    monkeypatch.setenv("GRADER_SLOT_LOCKS", str(tmp_path / "locks"))
    csv_path = tmp_path / "grades.csv"
    assert cli.main(["slurm", "write", str(tmp_path / "class"), "--csv", str(csv_path), "--per-task", "1"]) == 0
    plan_path = cluster.slurm_folder(csv_path) / "cpu" / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["grader_command"] = [sys.executable, str(tmp_path / "fake_grader.py")]
    plan_path.write_text(json.dumps(plan))
    (cluster.slurm_folder(csv_path) / "jobs.json").write_text('{"cpu": "77"}')
    lines = []
    assert cluster.run_task(plan_path, 0, lines.append) == 0 and cluster.run_task(plan_path, 2, lines.append) == 0
    assert lines[0].startswith("task 0 of 3 (cpu) on ") and "1 students, 1 at a time" in lines[0]
    stale = json.loads((gradebook.reports_folder(csv_path) / "outcomes" / "ada.json").read_text())
    (gradebook.reports_folder(csv_path) / "outcomes" / "bob.json").write_text(
        json.dumps({**stale, "student": "bob", "run": "an older run"}))  # bob's record of an earlier run
    outcomes = cluster.merge(csv_path, gradebook.Options(), progress=lambda line: None)
    rows = read_csv(csv_path)
    assert sorted(rows) == ["ada", "bob", "zero"] and len(outcomes) == 3
    assert (rows["ada"]["total"], rows["ada"]["status"], rows["zero"]["total"]) == ("8", "graded", "0")
    assert (rows["bob"]["total"], rows["bob"]["status"], rows["bob"]["flags"]) == ("", "error", "task_died;needs_review")
    bob = next(o for o in outcomes if o.student == "bob")
    assert f"{cluster.slurm_folder(csv_path.resolve())}/logs/cpu-77_1.out" in bob.detail


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = missing_binaries()
    reason = (f"no local Slurm: {', '.join(missing)} not installed (apt-get install slurm-wlm munge; .ci/run does)"
              if missing else "a local Slurm cluster needs root (slurmd starts each job as its user)" if os.geteuid() else "")
    if reason:
        if os.environ.get("GRADER_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)
    local = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        print(f"\nlocal Slurm cluster up in {local.start():.1f} s")
        yield local
    finally:
        local.stop()


def grade(*argv: str, env=None, timeout: float = 240) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "course", *argv], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def comparable(rows: dict[str, dict]) -> dict[str, dict]:
    """The rows with each report path cut to its name (the two CSVs live in different folders)."""
    return {name: {**row, "report": Path(row["report"]).name} for name, row in rows.items()}


@pytest.mark.slow  # whole grader runs, through Slurm
@pytest.mark.timeout(300)  # 56-115 s measured on a 2-core machine shared at load average 5-9
def test_slurm_array_grades_like_batch(slurm, tmp_path):
    """Three students through a real sbatch array (three tasks, two at a time on the node's
    two CPUs, each with its own uid slot) and the merge job: the same CSV as `batch`."""
    make_class(tmp_path / "class")
    only = ["--only", "2.1", "2.2-backward"]
    started = time.monotonic()
    # one code path: the same similarity pass and dashboard after the Slurm merge as after batch
    grade("batch", str(tmp_path / "class"), "--csv", str(tmp_path / "batch" / "grades.csv"), "--jobs", "2",
          "--html", str(tmp_path / "batch.html"), *only)
    batch_seconds = time.monotonic() - started
    started = time.monotonic()
    result = grade("slurm", "write", str(tmp_path / "class"), "--csv", str(tmp_path / "slurm" / "grades.csv"), *only,
                   "--per-task", "1", "--cpus-per-task", "1", "--mem", "1G", "--timeout", "120", "--submit", "--wait",
                   "--html", str(tmp_path / "slurm.html"), env=slurm.env)
    print(f"batch --jobs 2: {batch_seconds:.1f} s; slurm array of 3 tasks + merge: {time.monotonic() - started:.1f} s")
    assert "submitted the cpu array: job" in result.stdout and "merged ->" in result.stdout, result.stdout
    by_batch, by_slurm = read_csv(tmp_path / "batch" / "grades.csv"), read_csv(tmp_path / "slurm" / "grades.csv")
    assert comparable(by_slurm) == comparable(by_batch)
    pairs = {kind: (gradebook.reports_folder(tmp_path / kind / "grades.csv") / "similarity@class.json").read_text()
             for kind in ("batch", "slurm")}
    assert json.loads(pairs["slurm"])["pairs"] == json.loads(pairs["batch"])["pairs"]
    for page in ("batch.html", "slurm.html"):
        assert 'data-count="students">3<' in (tmp_path / page).read_text(), page
    # wrong differs from the key in one line: the similarity pass (in both flows) pairs them
    assert (by_slurm["key"]["2.1"], by_slurm["key"]["2.2"], by_slurm["key"]["flags"]) == (
        points("2.1"), points("2.2-backward"), "similar_to=wrong;needs_review")
    assert (by_slurm["stub"]["total"], by_slurm["wrong"]["total"], by_slurm["wrong"]["2.2"]) == ("0", points("2.1"), "0")
    logs = sorted((cluster.slurm_folder(tmp_path / "slurm" / "grades.csv") / "logs").glob("cpu-*.out"))
    assert len(logs) == 3, [log.read_text() for log in logs]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cpu_and_gpu_arrays_in_one_submission(slurm, tmp_path):
    """`--gpu` adds an array on GPU nodes (here: two fake GPUs, so the grader in it finds no
    CUDA device and reports 2.3 blocked); the one merge waits for both arrays."""
    write_submission(tmp_path / "class" / "key", {"pipeline.py": answer_key_source("pipeline.py")})
    csv_path = tmp_path / "grades.csv"
    started = time.monotonic()
    result = grade("slurm", "write", str(tmp_path / "class"), "--csv", str(csv_path), "--only", "2.1", "--gpu",
                   "--gpu-python", str(cuda_python(tmp_path)),
                   "--cpus-per-task", "1", "--mem", "1G", "--gpu-cpus-per-task", "1", "--gpu-mem", "1G",
                   "--timeout", "120", "--submit", "--wait", env=slurm.env)
    print(f"CPU and GPU arrays of one student + merge: {time.monotonic() - started:.1f} s")
    assert "submitted the gpu array" in result.stdout, result.stdout
    row = read_csv(csv_path)["key"]
    assert (row["2.1"], row["total"], row["flags"]) == (points("2.1"), points("2.1"), "missing:tensor_parallel.py;gpu_blocked;needs_review")
    gpu_report = json.loads((gradebook.reports_folder(csv_path) / "gpu" / "key.json").read_text())
    assert [(c["id"], c["status"]) for c in gpu_report["criteria"]] == [("2.3-speedup", "blocked")]
    gpu_log = next((cluster.slurm_folder(csv_path) / "logs").glob("gpu-*.out")).read_text()
    assert "task 0 of 1 (gpu)" in gpu_log and "key" in gpu_log
