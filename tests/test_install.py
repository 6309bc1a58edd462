"""The kit installs where students and TAs are: Python 3.10-3.13, Linux x86_64 and macOS arm64.

- constraints.txt resolves for every supported Python on both platforms (uv's resolver, with a
  target Python and platform: package metadata only, nothing is installed), and pins every
  package that the resolution needs there;
- on Linux the default torch comes from PyTorch's CPU-only index, with no CUDA packages;
- every module compiles, and imports only what exists, under the oldest supported Python;
- the Makefiles refuse an old Python in one line and rebuild a .venv made by another Python.
"""
from __future__ import annotations

import concurrent.futures
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"
SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
OLDEST = SUPPORTED_PYTHONS[0]
LOCK_INPUTS = ("requirements.txt", "requirements-bench.txt", "requirements-dev.txt")
# uv's name for each platform, and the environment markers pip evaluates there. torch 2.13's
# macOS wheels are for macOS 14 or newer (uv's own default target is older).
PLATFORMS = {
    "Linux x86_64": ("x86_64-manylinux_2_28", {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}),
    "macOS arm64": ("aarch64-apple-darwin", {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"}),
}
MACOS_TARGET = "14.0"
CUDA_PACKAGE = re.compile(r"^(nvidia-|cuda-|triton$)")
RESOLVE_SECONDS = 90  # one resolution; a cold cache fetches metadata for ~60 packages


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins_for(constraints: str, python: str, markers: dict[str, str]) -> dict[str, str]:
    """Package -> pinned version for one Python and platform (lines whose markers apply)."""
    environment = {**markers, "python_version": python, "python_full_version": f"{python}.0"}
    pins = {}
    for line in constraints.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(environment):
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"constraints.txt: {line!r} is not an exact pin"
            pins[normalize(requirement.name)] = specifier.version
    return pins


class ResolutionFailed(RuntimeError):
    """No set of packages fits the pins for that Python and platform; says uv's reason."""


def resolve(python: str, platform: str, constraints: Path, *extra: str) -> dict[str, str]:
    """What uv resolves LOCK_INPUTS to under ``constraints`` for one Python and platform
    (package -> version). Metadata only; uv's cache makes a repeat take about two seconds."""
    command = [str(UV), "pip", "compile", "--no-config", "--no-python-downloads", "--quiet", "--no-header", "--no-annotate",
               "--python-version", python, "--python-platform", platform, "-c", str(constraints), *extra, *LOCK_INPUTS]
    environment = {**os.environ, "MACOSX_DEPLOYMENT_TARGET": MACOS_TARGET}
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=RESOLVE_SECONDS)
    if result.returncode != 0:
        raise ResolutionFailed(f"Python {python} on {platform}: the pins do not resolve:\n{result.stderr[-3000:]}")
    resolved = {}
    for line in result.stdout.splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            resolved[normalize(name)] = version
    return resolved


def pin_problems(constraints: Path, python: str, platform_name: str, *extra: str) -> list[str]:
    """Why ``constraints`` does not pin what Python ``python`` on ``platform_name`` installs."""
    platform, markers = PLATFORMS[platform_name]
    try:
        resolved = resolve(python, platform, constraints, *extra)
    except ResolutionFailed as error:
        return [str(error)]
    pins = pins_for(constraints.read_text(), python, markers)
    where = f"Python {python} on {platform_name}"
    return [f"{where}: {name}=={version} is not pinned in {constraints.name}"
            for name, version in sorted(resolved.items()) if pins.get(name) != version.split("+")[0]]


@pytest.fixture(scope="module")
def uv() -> Path:
    assert UV.exists(), f"{UV} is missing: `make venv` installs uv from requirements-dev.txt"
    return UV


@pytest.mark.slow  # eight resolutions against the package index
def test_pins_resolve_for_every_supported_python_and_platform(uv):
    jobs = [(python, name) for python in SUPPORTED_PYTHONS for name in PLATFORMS]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        problems = pool.map(lambda job: pin_problems(REPO / "constraints.txt", *job), jobs)
    assert [p for found in problems for p in found] == []


@pytest.mark.slow  # two resolutions against the package index
def test_the_pin_check_fails_for_a_pin_python_3_10_cannot_install_or_a_missing_pin(uv, tmp_path):
    text = (REPO / "constraints.txt").read_text()
    numpy_for_all = tmp_path / "numpy-for-all.txt"  # the mistake this check was written for
    numpy_for_all.write_text(re.sub(r"(?m)^numpy==.*$", "", text) + "numpy==2.4.6\n")
    assert "do not resolve" in "".join(pin_problems(numpy_for_all, OLDEST, "Linux x86_64"))
    no_pytest = tmp_path / "no-pytest.txt"
    no_pytest.write_text(re.sub(r"(?m)^pytest==.*$", "", text))
    assert any("pytest==" in p and "is not pinned" in p for p in pin_problems(no_pytest, OLDEST, "macOS arm64"))


def local_cpu_wheels() -> list[Path]:
    """torch "+cpu" wheels in the folders pip is configured to find wheels in (CI here has one)."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    configured = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                                capture_output=True, text=True, timeout=60)
    folders += configured.stdout.split() if configured.returncode == 0 else []
    return sorted({Path(p) for folder in folders for p in glob.glob(os.path.join(folder.removeprefix("file://"), "torch-*+cpu-*.whl"))})


@pytest.mark.slow  # two resolutions against the package index
def test_linux_default_torch_index_gives_the_cpu_build_without_cuda_packages(uv, tmp_path):
    """PyPI's Linux torch pulls CUDA packages; an extra index holding the "+cpu" build (what
    TORCH_INDEX_URL adds, pip picking the best match across indexes) leaves none. PyTorch's CPU
    index cannot be reached here, so a local index holding this machine's CPU wheel stands in."""
    wheels = local_cpu_wheels()
    if not wheels:
        pytest.skip("no local torch +cpu wheel to stand in for PyTorch's CPU index (PIP_FIND_LINKS / pip config find-links)")
    wheel = wheels[-1]
    python = re.search(r"-cp3(\d+)-", wheel.name).group(1)
    python = f"3.{python}"
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    platform = PLATFORMS["Linux x86_64"][0]
    from_pypi = resolve(python, platform, REPO / "constraints.txt")
    assert [n for n in from_pypi if CUDA_PACKAGE.match(n)], "PyPI's Linux torch no longer pulls CUDA packages?"
    with_cpu_index = resolve(python, platform, REPO / "constraints.txt",
                             "--extra-index-url", (tmp_path / "index").as_uri(), "--index-strategy", "unsafe-best-match")
    assert with_cpu_index["torch"].endswith("+cpu")
    assert [n for n in with_cpu_index if CUDA_PACKAGE.match(n)] == []


def find_python(version: str) -> str | None:
    """A working ``python<version>``: on PATH, or installed by pyenv (whose shims may refuse)."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", f"{version}.*", "bin", f"python{version}")), reverse=True)
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for candidate in filter(None, candidates):
        try:
            found = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if found.returncode == 0 and found.stdout.strip() == version:
            return candidate
    return None


def import_names() -> list[str]:
    """The import names of every requirement: what its installed distribution provides
    (``markdown-it-py`` -> ``markdown_it``), else its own name (``pytest-timeout`` -> ``pytest_timeout``)."""
    provided: dict[str, list[str]] = {}
    for module, distributions in importlib.metadata.packages_distributions().items():
        for distribution in distributions:
            provided.setdefault(normalize(distribution), []).append(module)
    names = []
    for requirements in LOCK_INPUTS:
        for line in (REPO / requirements).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                name = normalize(Requirement(line).name)
                names += provided.get(name, [name.replace("-", "_")])
    return names


def test_every_module_compiles_and_imports_exist_under_the_oldest_python():
    python = find_python(OLDEST)
    if python is None:
        pytest.skip(f"no Python {OLDEST} on this machine (PATH, pyenv, /usr/bin): cannot check the oldest supported Python")
    result = subprocess.run([python, str(REPO / "tests" / "compat_scan.py"), str(REPO), *import_names()],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_scan_catches_what_python_3_10_lacks(tmp_path):
    python = find_python(OLDEST)
    if python is None:
        pytest.skip(f"no Python {OLDEST} on this machine (PATH, pyenv, /usr/bin)")
    (tmp_path / "ok.py").write_text("try:\n    import tomllib\nexcept ModuleNotFoundError:\n    import tomli as tomllib\n")
    (tmp_path / "bad.py").write_text("import tomllib\n")
    (tmp_path / "new_syntax.py").write_text("try:\n    pass\nexcept* ValueError:\n    pass\n")
    result = subprocess.run([python, str(REPO / "tests" / "compat_scan.py"), str(tmp_path), "tomli"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "bad.py:1: imports 'tomllib'" in result.stdout and "new_syntax.py" in result.stdout and "ok.py" not in result.stdout


def kit_copy(folder: Path) -> Path:
    """The student kit's Makefile with nothing to install: only the venv machinery runs."""
    folder.mkdir()
    shutil.copy(REPO / "handout" / "Makefile", folder / "Makefile")
    (folder / "requirements.txt").write_text("")
    (folder / "constraints.txt").write_text("")
    return folder


# Variables a calling make (`make test TORCH_INDEX_URL=`) hands down; each test sets its own.
INHERITED = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH_INDEX_URL", "PYTHON")


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in INHERITED}
    return subprocess.run(["make", "--no-print-directory", "-C", str(folder), *args], env=environment,
                          capture_output=True, text=True, timeout=300)


def old_python(tmp_path: Path) -> tuple[str, str]:
    """(interpreter, its version) older than 3.10: a real one when installed, else a stand-in
    that answers the Makefile's question as Python 3.9 would."""
    for version in ("3.9", "3.8"):
        found = find_python(version)
        if found:
            return found, version
    stand_in = tmp_path / "python3.9"
    stand_in.write_text("#!/bin/sh\necho '3.9 old'\n")
    stand_in.chmod(0o755)
    return str(stand_in), "3.9"


@pytest.mark.slow  # make probes every supported Python
@pytest.mark.parametrize("makefile", ["kit", "course"])
def test_an_old_python_gets_one_line_saying_what_to_do(tmp_path, makefile):
    python, version = old_python(tmp_path)
    # The course Makefile stops before touching .venv, so it is safe to run in place.
    folder = kit_copy(tmp_path / "kit") if makefile == "kit" else REPO
    result = make(folder, "venv", f"PYTHON={python}")
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, lines
    assert re.search(rf"\*\*\* this kit needs Python >= 3\.10; found {re.escape(version)}; set PYTHON=python3\.1[0-3]\.  Stop\.$", lines[0]), lines[0]
    if makefile == "kit":
        missing = make(folder, "venv", "PYTHON=no-such-python3")
        assert "this kit needs Python >= 3.10; no-such-python3 does not run; set PYTHON=python3." in missing.stderr


def venv_python_version(folder: Path) -> str:
    return subprocess.run([str(folder / ".venv" / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=30).stdout.strip()


@pytest.mark.slow  # creates a virtual environment
def test_a_venv_made_by_another_python_or_broken_is_rebuilt(tmp_path):
    pythons = [(v, p) for v in SUPPORTED_PYTHONS if (p := find_python(v))][:2]
    if len(pythons) < 2:
        pytest.skip(f"needs two of Python {', '.join(SUPPORTED_PYTHONS)}; found {[v for v, _ in pythons]}")
    (old, old_python), (new, new_python) = pythons
    kit = kit_copy(tmp_path / "kit")
    # A finished .venv of another Python, as `make venv PYTHON=...` left it (made here without
    # pip: each venv the Makefile makes costs seconds of ensurepip).
    subprocess.run([old_python, "-m", "venv", "--without-pip", str(kit / ".venv")], check=True, timeout=120)
    (kit / ".venv" / f".installed-python{old}").touch()
    assert venv_python_version(kit) == old
    result = make(kit, "venv", f"PYTHON={new_python}", "TORCH_INDEX_URL=")
    assert result.returncode == 0 and f"creating .venv with {new_python} (Python {new})" in result.stdout, result.stderr
    assert venv_python_version(kit) == new
    assert sorted(p.name for p in (kit / ".venv").glob(".installed*")) == [f".installed-python{new}"]
    assert "Nothing to be done" in make(kit, "venv", f"PYTHON={new_python}").stdout
    # Its interpreter gone (Python uninstalled or moved): the stamp no longer counts, and the
    # recipe (run above) replaces a .venv whose python does not answer.
    (kit / ".venv" / "bin" / "python").unlink()
    (kit / ".venv" / "bin" / "python").symlink_to(tmp_path / "removed-python")
    dry_run = make(kit, "-n", "venv", f"PYTHON={new_python}", "TORCH_INDEX_URL=").stdout
    assert "rm -rf .venv && " in dry_run and "Nothing to be done" not in dry_run


def test_linux_installs_torch_from_the_cpu_index_unless_told_otherwise(tmp_path):
    kit = kit_copy(tmp_path / "kit")
    cpu_index = "--extra-index-url https://download.pytorch.org/whl/cpu"
    if os.uname().sysname == "Linux":
        assert cpu_index in make(kit, "-n", "venv", f"PYTHON={sys.executable}").stdout
    assert "--extra-index-url" not in make(kit, "-n", "venv", f"PYTHON={sys.executable}", "TORCH_INDEX_URL=").stdout
    setup = (REPO / "kit" / "gradescope" / "setup.sh").read_text()
    assert 'TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"' in setup


def test_course_and_kit_makefiles_share_the_venv_rules():
    makefile = (REPO / "Makefile").read_text()
    assert "include kit/templates/venv.mk" in makefile
    assert (REPO / "kit" / "templates" / "venv.mk").read_text().strip() in (REPO / "handout" / "Makefile").read_text()

