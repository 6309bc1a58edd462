"""scripts/gpu_validate.sh without a GPU: it says so and runs nothing; its plumbing runs to a
table when a (fake) nvidia-smi and torch claim a GPU that is not there."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from grader.layout import REPOSITORY as REPO
from grader.rubric import load_rubric

SCRIPT = REPO / "scripts" / "gpu_validate.sh"
REPORTER = REPO / "scripts" / "gpu_validate_report.py"


def fake_tool(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def run_script(tmp_path: Path, path: str, python: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path, "PYTHON": str(python), "GPU_VALIDATE_WORK": str(tmp_path / "work")}
    return subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_without_a_gpu_it_says_so_and_runs_nothing(tmp_path):
    called = tmp_path / "python-was-called"
    python = fake_tool(tmp_path / "python", "python", f"touch {called}\n")
    system = "/usr/bin:/bin"
    if any(Path(folder, "nvidia-smi").exists() for folder in system.split(":")):
        pytest.skip("this machine has nvidia-smi")
    result = run_script(tmp_path, system, python)
    assert result.returncode == 0
    assert result.stdout.strip() == "gpu_validate: no NVIDIA GPU on this machine (no nvidia-smi): nothing was run"
    none_found = fake_tool(tmp_path / "bin", "nvidia-smi", 'echo "No devices were found" >&2; exit 6\n')
    result = run_script(tmp_path, f"{none_found.parent}:{system}", python)
    assert result.returncode == 0 and "nvidia-smi lists none): nothing was run" in result.stdout
    assert not called.exists() and not (tmp_path / "work").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_gpu_that_torch_cannot_use_is_an_error(tmp_path):
    smi = fake_tool(tmp_path / "bin", "nvidia-smi", 'echo "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB"\n')
    result = run_script(tmp_path, f"{smi.parent}:/usr/bin:/bin", Path(sys.executable))
    assert result.returncode == 1 and "torch in" in result.stderr and "does not" in result.stderr, result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: run the script itself")
@pytest.mark.slow  # whole grader runs in subprocesses
@pytest.mark.timeout(300)
def test_the_steps_and_the_table_without_cuda(tmp_path):
    """A torch that claims one GPU: the smoke runs find none (2.3 blocked) and the CUDA
    benchmark cannot start, so those rows say NOT AS EXPECTED and the exit status is 1; the
    wrong Pipe fails 2.2-transfers on any machine."""
    smi = fake_tool(tmp_path / "bin", "nvidia-smi", 'echo "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB"\n')
    python = fake_tool(tmp_path / "python", "python", f"""\
        if [ "$1" = -c ] && [[ "$2" == *torch.version.cuda* ]]; then echo "2.5.1 12.4 1"; exit 0; fi
        exec {shutil.which(sys.executable) or sys.executable} "$@"
        """)
    result = run_script(tmp_path, f"{smi.parent}:/usr/bin:/bin", python, timeout=280)
    assert result.returncode == 1, result.stdout + result.stderr
    table = (tmp_path / "work" / "table.md").read_text()
    assert "GPUs: NVIDIA H100 80GB HBM3 (81559 MiB); driver 550.54.15; torch 2.5.1; CUDA 12.4" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    assert [row.split(" | ")[0] for row in rows] == [
        "| answer key, --gpu-smoke (1 GPU)", "| stubs, --gpu-smoke (1 GPU)",
        "| Pipe moving on the calling thread, 2.2-transfers", "| 2.3 on 2 GPUs", "| CUDA benchmark, both stages on cuda:0",
    ]
    assert "NOT AS EXPECTED" in rows[0] and "2.3-speedup blocked" in rows[0]
    transfers = next(c.points for c in load_rubric().criteria if c.id == "2.2-transfers")
    assert "NOT AS EXPECTED" not in rows[2] and f"0/{transfers}: 2.2-transfers failed" in rows[2]
    assert "not run: this machine has 1 GPU" in rows[3] and "no usable result" in rows[4]
    assert table in result.stdout


def test_the_reporter_judges_reports(tmp_path):
    def report(*statuses, score=0):
        criteria = [{"id": f"2.{i}-x", "status": s, "earned": 0, "details": {}} for i, s in enumerate(statuses)]
        path = tmp_path / f"{'-'.join(statuses)}.json"
        path.write_text(json.dumps({"score": score, "max_score": 10, "criteria": criteria}))
        return str(path)

    def judge(path, expect):
        return subprocess.run([sys.executable, str(REPORTER), path, expect], capture_output=True, text=True).returncode

    assert judge(report("passed", "passed"), "all-passed") == 0
    assert judge(report("passed", "blocked"), "all-passed") == 1
    assert judge(report("failed", "failed"), "all-failed-no-error") == 0
    assert judge(report("failed", "error"), "all-failed-no-error") == 1
    assert judge(str(tmp_path / "missing.json"), "all-passed") == 1
    folders = [str(tmp_path / name) for name in ("k", "s", "w")]
    subprocess.run([sys.executable, str(REPORTER), "--make-submissions", *folders], check=True)
    assert (tmp_path / "k" / "pipeline.py").read_text() == (REPO / "minitorch" / "pipeline.py").read_text()
    assert "NotImplementedError" in (tmp_path / "s" / "pipeline.py").read_text()
    assert ".to(self.devices[j]), device" in (tmp_path / "w" / "pipeline.py").read_text()
