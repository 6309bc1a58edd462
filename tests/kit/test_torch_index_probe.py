"""Behind a firewall the first `make venv` stops within seconds, in one line naming the index
and the fix, instead of pip retrying for minutes (hours where packets are dropped); Gradescope's
setup.sh runs the same probe and falls back to PyPI's torch (issue 23, item 9)."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.layout import REPOSITORY as REPO

PROBE_SECONDS = 3
INHERITED = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH_INDEX_URL", "PYTHON")


def probe_code(text: str, pattern: str) -> str:
    return re.search(pattern, text, re.M)[1]


def test_the_kit_and_gradescope_share_one_probe():
    makefile = (REPO / "kit" / "templates" / "venv.mk").read_text()
    setup = (REPO / "kit" / "gradescope" / "setup.sh").read_text()
    assert probe_code(makefile, r"^TORCH_INDEX_PROBE = (.+)$") == probe_code(setup, r"^TORCH_INDEX_PROBE='(.+)'$")


@pytest.fixture
def silent_index():
    """An index that accepts connections and never answers, as behind a firewall that drops
    packets after the handshake (the slowest case for pip: every try waits its timeout)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}/whl/cpu"


def refused_index() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: connections to it are refused
    return f"http://127.0.0.1:{port}/whl/cpu"


def venv_folder(folder: Path) -> Path:
    """The venv rules alone, with nothing to install."""
    folder.mkdir()
    shutil.copy(REPO / "kit" / "templates" / "venv.mk", folder / "venv.mk")
    (folder / "Makefile").write_text("REQUIREMENTS := requirements.txt\ninclude venv.mk\nvenv: $(STAMP)\n")
    (folder / "requirements.txt").write_text("")
    (folder / "constraints.txt").write_text("")
    return folder


@pytest.mark.parametrize("kind", ["silent", "refused"])
def test_make_venv_stops_in_one_line_when_the_index_cannot_be_reached(tmp_path, silent_index, kind):
    folder = venv_folder(tmp_path / "kit")
    index = silent_index if kind == "silent" else refused_index()
    environment = {k: v for k, v in os.environ.items() if k not in INHERITED}
    started = time.monotonic()
    result = subprocess.run(["make", "--no-print-directory", "-C", str(folder), "venv", f"PYTHON={sys.executable}",
                             f"TORCH_INDEX_URL={index}", f"TORCH_INDEX_PROBE_SECONDS={PROBE_SECONDS}"],
                            env=environment, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - started
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, lines
    assert f"cannot reach TORCH_INDEX_URL={index} within {PROBE_SECONDS} s" in lines[0] and "TORCH_INDEX_URL=" in lines[0]
    assert seconds < 60, seconds
    assert not (folder / ".venv").exists()  # stopped before anything was installed


def test_setup_sh_probe_falls_back_quickly(silent_index):
    """The setup.sh lines that decide, run alone: one line, then PyPI's torch."""
    setup = (REPO / "kit" / "gradescope" / "setup.sh").read_text()
    decide = setup[setup.index("TORCH_INDEX_PROBE="):].split("\napt-get", 1)[0]
    fallback = setup[setup.index('if [ -n "$TORCH_INDEX_URL" ]'):].split("\nfi\n", 1)[0] + "\nfi\n"
    script = f'TORCH_INDEX_URL={silent_index}\nTORCH_INDEX_PROBE_SECONDS={PROBE_SECONDS}\n{decide}\n{fallback}echo "index=[$TORCH_INDEX_URL]"\n'
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", script.replace("python3 ", f"{sys.executable} ")], capture_output=True,
                            text=True, timeout=60)
    assert time.monotonic() - started < 30
    assert result.stdout.splitlines()[-1] == "index=[]", result.stdout + result.stderr
    assert "cannot reach TORCH_INDEX_URL" in result.stdout and "PyPI's torch" in result.stdout


def test_a_dry_run_probes_nothing(tmp_path, silent_index):
    """`make -n venv` says what it would run, reaching no network (CI's machine has none)."""
    folder = venv_folder(tmp_path / "kit")
    environment = {k: v for k, v in os.environ.items() if k not in INHERITED}
    result = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(folder), "venv", f"PYTHON={sys.executable}",
                             f"TORCH_INDEX_URL={silent_index}", "TORCH_INDEX_PROBE_SECONDS=30"],
                            env=environment, capture_output=True, text=True, timeout=25)
    assert result.returncode == 0 and f"--extra-index-url {silent_index}" in result.stdout, result.stdout + result.stderr
