"""The float-sensitive tests hold with other CPU kernels, not only with this machine's.

A test that expects two computations of different shapes (or thread counts, or kernels) to
round alike passes on the CPU it was written on and fails on another (an AVX-512 machine
rounded the Pipe demo's 2-row microbatches and its 6-row batch 6e-08 apart). Here the tests that
compare numbers run again with one thread, ATen's non-vectorised kernels and MKL's SSE4.2 GEMM
instead of what this machine picks, so such an equality fails here rather than on a student's
or CI's machine.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grader.layout import REPOSITORY

OTHER_KERNELS = {
    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",  # one thread: other blockings and reduction orders
    "ATEN_CPU_CAPABILITY": "default",  # ATen's scalar kernels instead of AVX2/AVX-512 ones
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",  # MKL's older GEMM kernels
}
# The tests that compare computed numbers: the demos, the public tests on the answer key, and
# every hidden check on the answer key (a criterion must not fail the answer key on some CPU).
FLOAT_SENSITIVE = ["tests/minitorch/test_runtime.py", "tests/public", "tests/grader/checks"]
SELECTED = "demo or answer_key or public or pipe or Pipe or schedule or checkpoint or estimate or plan"


@pytest.mark.slow
def test_the_float_sensitive_tests_pass_with_other_kernels():
    environment = {**os.environ, **OTHER_KERNELS, "PYTHONDONTWRITEBYTECODE": "1"}
    environment.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
         "-m", "not slow and not multirank", "-k", SELECTED, *FLOAT_SENSITIVE],
        cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, f"with {OTHER_KERNELS}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    assert " passed" in run.stdout.splitlines()[-1]
