"""README.md, CHANGELOG.md and docs/: what they tell a reader to click or run works.

- every relative link resolves to a file of the repository, and every anchor (``#...``) to a
  heading of its page, slugged as GitHub slugs it;
- every ``make <target>`` names a target of the Makefile it refers to: the repository's, or
  the one a ``make -C DIR``, a ``cd DIR`` earlier in the same code block, or a link around the
  command (``[`make report`](handout/Makefile)``) names;
- every ``python -m <module> [subcommand ...]`` answers ``--help`` with exit status 0, and
  every ``--option`` written after it is in that help;
- README.md stays short and names the two commands;
- the private Slurm recipe of docs/grading/slurm.md starts a cluster, runs a job, and stops.

The pages are read with markdown-it-py, so links, headings and code are what a renderer sees.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_LIMIT_BYTES = 10_000
HELP_SECONDS = 120  # one `python -m X --help`; those that import torch take a few seconds
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...
MAKE = re.compile(r"(?:^|[\s;&|(])make((?:\s+-C\s+\S+)?)((?:\s+\S+)*)")
# `python -m module subcommand ...`: the subcommands are the bare lower-case words after the
# module, up to the first option, placeholder (PATH) or path (submissions/).
PYTHON_MODULE = re.compile(r"python[0-9.]*\s+-m\s+([A-Za-z_][\w.]*)((?:\s+[a-z][\w-]*(?=\s|$))*)")
SLURM_PAGE = REPO / "docs" / "grading" / "slurm.md"
SLURM_START = "<!-- tests/test_docs.py runs the next block, with its own folder and ports -->"
SLURM_STOP = "<!-- tests/test_docs.py runs the next block after the one above -->"


def pages() -> list[Path]:
    return [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclass
class Command:
    """A command line a page shows: where, its text, and the folder whose Makefile ``make`` uses."""

    where: str
    text: str
    make_folder: Path = REPO


@dataclass
class Page:
    path: Path
    anchors: set[str] = field(default_factory=set)
    links: list[tuple[str, str]] = field(default_factory=list)  # (where, href)
    commands: list[Command] = field(default_factory=list)


def github_slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _heading_text(inline) -> str:
    return "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))


def _makefile_folder(href: str, page: Path) -> Path | None:
    target = (page.parent / href.split("#")[0]).resolve()
    return target.parent if target.name == "Makefile" else None


def _fence_commands(where: str, text: str) -> list[Command]:
    """The shell lines of a code block (continuations joined), each with the Makefile folder
    that a ``cd DIR`` before it chose."""
    commands, folder = [], REPO
    for line in re.sub(r"\\\n\s*|\n(?=[ \t])", " ", text).splitlines():
        moved = re.search(r"(?:^|&&|;)\s*cd\s+(\S+)", line)
        if moved and (REPO / moved.group(1) / "Makefile").is_file():
            folder = REPO / moved.group(1)
        commands.append(Command(where, line, folder))
    return commands


@cache
def read_page(path: Path) -> Page:
    page = Page(path)
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8"))
    counts: dict[str, int] = {}
    for index, token in enumerate(tokens):
        where = f"{path.relative_to(REPO)}:{(token.map or [0])[0] + 1}"
        if token.type == "heading_open":
            slug = github_slug(_heading_text(tokens[index + 1]))
            page.anchors.add(slug if slug not in counts else f"{slug}-{counts[slug]}")
            counts[slug] = counts.get(slug, 0) + 1
        elif token.type == "fence":
            page.commands += _fence_commands(where, token.content)
        elif token.type == "inline":
            makefile = None
            for child in token.children or []:
                if child.type == "link_open":
                    page.links.append((where, str(child.attrs["href"])))
                    makefile = _makefile_folder(str(child.attrs["href"]), path)
                elif child.type == "link_close":
                    makefile = None
                elif child.type == "image":
                    page.links.append((where, str(child.attrs["src"])))
                elif child.type == "code_inline":
                    page.commands.append(Command(where, child.content, makefile or REPO))
    return page


def link_problems(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        for where, href in read_page(path).links:
            if EXTERNAL.match(href):
                continue
            file_part, _, anchor = href.partition("#")
            target = (path.parent / unquote(file_part)).resolve() if file_part else path
            if not target.exists():
                problems.append(f"{where}: {href}: no such file")
            elif not target.is_relative_to(REPO):
                problems.append(f"{where}: {href}: outside the repository")
            elif anchor and target.suffix == ".md" and anchor not in read_page(target).anchors:
                problems.append(f"{where}: {href}: no heading #{anchor} in {target.relative_to(REPO)}")
    return problems


@cache
def make_targets(folder: Path) -> frozenset[str]:
    """The targets of ``folder``'s Makefile (its includes too), as make's own database lists them."""
    database = subprocess.run(["make", "-C", str(folder), "-pRrq", ":"], capture_output=True, text=True, timeout=60).stdout
    targets, not_a_target = set(), False
    for line in database.splitlines():
        if line.startswith("# Not a target"):
            not_a_target = True
            continue
        match = re.match(r"^([^\s#=:%][^=:]*):(?!=)", line)
        if match and not not_a_target:
            targets.update(match.group(1).split())
        not_a_target = False
    return frozenset(targets)


def make_problems(paths: list[Path]) -> tuple[list[str], set[str]]:
    """``(problems, every target named)``."""
    problems, named = [], set()
    for path in paths:
        for command in read_page(path).commands:
            for match in MAKE.finditer(command.text):
                words = [w for w in match.group(2).split() if not w.startswith("-") and "=" not in w]
                if not words or not re.fullmatch(r"[a-z][\w-]*", words[0]):
                    continue  # `make` alone, or prose such as "make sure"
                folder = REPO / match.group(1).split()[1] if match.group(1) else command.make_folder
                named.add(words[0])
                if words[0] not in make_targets(folder):
                    makefile = (folder / "Makefile").relative_to(REPO)
                    problems.append(f"{command.where}: `make {words[0]}`: no such target in {makefile}")
    return problems, named


def python_commands(paths: list[Path]) -> dict[tuple[str, ...], dict[str, str]]:
    """``{(module, subcommand, ...): {--option: where it is named}}`` for every ``python -m``."""
    found: dict[tuple[str, ...], dict[str, str]] = {}
    for path in paths:
        for command in read_page(path).commands:
            for match in PYTHON_MODULE.finditer(command.text):
                argv = (match.group(1), *match.group(2).split())
                rest = re.split(r"\s#|&&|;|\s\|\s", command.text[match.end():])[0]  # up to a comment or the next command
                options = found.setdefault(argv, {})
                for token in rest.split():
                    token = token.strip("[](){}\"'")
                    if re.match(r"--[a-z]", token):
                        options.setdefault(token.split("=")[0], command.where)
    return found


def help_problem(argv: tuple[str, ...], options: dict[str, str]) -> str | None:
    shown = " ".join(argv)
    try:
        result = subprocess.run([sys.executable, "-m", *argv, "--help"], cwd=REPO, capture_output=True, text=True,
                                timeout=HELP_SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"python -m {shown} --help: no answer in {HELP_SECONDS} s"
    if result.returncode != 0:
        return f"python -m {shown} --help: exit status {result.returncode}: {(result.stderr or result.stdout)[-500:]}"
    unknown = [f"{option} (named at {where})" for option, where in options.items()
               if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", result.stdout)]
    return f"python -m {shown} --help does not list {', '.join(unknown)}" if unknown else None


def command_problems(paths: list[Path]) -> list[str]:
    commands = python_commands(paths)
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = pool.map(lambda item: help_problem(*item), commands.items())
    return [problem for problem in answers if problem is not None]


# ----------------------------------------------------------------------------- the pages


def test_readme_is_short_and_names_the_two_commands():
    size = len(README.read_bytes())
    assert size < README_LIMIT_BYTES, f"README.md is {size} bytes; keep it under {README_LIMIT_BYTES}: move detail to docs/"
    text = README.read_text()
    assert "make grade" in text and "make test" in text


def test_every_relative_link_and_anchor_resolves():
    links = sum(len(read_page(path).links) for path in pages())
    assert links > 50, f"only {links} links found: is the parser reading the pages?"
    assert link_problems(pages()) == []


def test_every_make_target_named_exists_in_its_makefile():
    problems, named = make_problems(pages())
    assert {"grade", "test", "test-fast", "handout", "gradescope", "lock", "bench", "report", "submit"} <= named
    assert problems == []


def test_every_python_module_named_answers_help_and_lists_the_options_named():
    commands = python_commands(pages())
    assert {("grader", "grade"), ("course", "batch"), ("course", "slurm", "write"), ("kit", "build")} <= set(commands)
    assert command_problems(pages()) == []


def test_the_checks_find_what_is_broken():
    """Each check fails on a page with that kind of mistake (the page sits in the repository,
    as a reader's would, for the duration of the test)."""
    folder = REPO / "build" / f"test-docs-{os.getpid()}"
    folder.mkdir(parents=True)
    try:
        page = folder / "broken.md"
        page.write_text(
            "# A page\n\n## Two words\n\n"
            "[fine](#two-words) [no file](missing.md) [no anchor](#two-word) "
            "[no heading there](../../README.md#no-such-heading) [outside](../../..)\n\n"
            "Run `make grade`, then `make gradee`, and the kit's [`make report`](../../handout/Makefile), "
            "but not `make report` here.\n\n"
            "```sh\ncd handout\nmake submit\nmake handout\n```\n\n"
            "`python -m grader grade PATH --json FILE --jsn FILE` and `python -m no_such_module_here`\n"
        )
        assert sorted(link_problems([page])) == sorted(
            f"build/{folder.name}/broken.md:5: {href}" for href in (
                "missing.md: no such file", "#two-word: no heading #two-word in " + f"build/{folder.name}/broken.md",
                "../../README.md#no-such-heading: no heading #no-such-heading in README.md",
                "../../..: outside the repository",
            ))
        problems, _ = make_problems([page])
        assert [p.split(": ", 1)[1] for p in problems] == [
            "`make gradee`: no such target in Makefile", "`make report`: no such target in Makefile",
            "`make handout`: no such target in handout/Makefile",
        ]
        found = command_problems([page])
        assert len(found) == 2, found
        assert "--jsn" in found[0] and "--json " not in found[0] and "no_such_module_here" in found[1]
    finally:
        shutil.rmtree(folder)


# ----------------------------------------------------------------------------- the Slurm recipe


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _block_after(marker: str) -> str:
    text = SLURM_PAGE.read_text()
    match = re.match(r"\s*```sh\n(.*?)```", text[text.index(marker) + len(marker):], re.S)
    assert match, f"docs/grading/slurm.md: no ```sh block right after {marker}"
    return match.group(1)


def _private(recipe: str, cluster: Path) -> str:
    """The start block with this test's folder and two free ports instead of the defaults."""
    ports = f"SLURMCTLD_PORT={_free_port()} SLURMD_PORT={_free_port()}"
    private, count = re.subn(r"(?m)^CLUSTER=\S+", f"CLUSTER={shlex.quote(str(cluster))}", recipe)
    private, count_ports = re.subn(r"(?m)^SLURMCTLD_PORT=\d+ SLURMD_PORT=\d+", ports, private)
    assert count == count_ports == 1, "the recipe no longer starts with CLUSTER=... and SLURMCTLD_PORT=... SLURMD_PORT=..."
    return private


@pytest.mark.slow
def test_private_slurm_recipe_starts_a_cluster_runs_a_job_and_stops():
    missing = [name for name in ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel")
               if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    reason = ("not root" if os.geteuid() != 0 else "") or (f"missing {', '.join(missing)}" if missing else "")
    if reason and os.environ.get("GRADER_REQUIRE_SLURM"):
        pytest.fail(f"GRADER_REQUIRE_SLURM is set, but the Slurm recipe cannot run: {reason}")
    if reason:
        pytest.skip(f"the Slurm recipe needs root and slurm-wlm + munge: {reason}")
    # munged wants every folder above its socket open to all: pytest's tmp_path (0700) is not
    cluster = Path(tempfile.mkdtemp(prefix="docs-slurm-recipe-"))
    cluster.chmod(0o711)
    environment = {**os.environ, "CLUSTER": str(cluster), "SLURM_CONF": str(cluster / "slurm.conf")}
    try:
        started = subprocess.run(["bash", "-e", "-c", _private(_block_after(SLURM_START), cluster)], env=environment,
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        assert re.search(r"(?m)^local\*\s+up\s.*\sidle\s", started.stdout), started.stdout
        done = cluster / "job.out"
        subprocess.run(["sbatch", f"--output={cluster}/job-%j.log", "--wrap", f"hostname > {done}"], env=environment, cwd=cluster,
                       check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while not (done.exists() and done.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists() and done.read_text().strip(), "the job did not run within 60 s"
    finally:
        pids = {name: cluster / f"{name}.pid" for name in ("munged", "slurmctld", "slurmd")}
        running = {name: int(path.read_text()) for name, path in pids.items() if path.exists()}
        stopped = subprocess.run(["bash", "-c", _block_after(SLURM_STOP)], env=environment, capture_output=True, text=True,
                                 timeout=60)
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in running.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [name for name, pid in running.items() if _alive(pid)]
    for name in left:  # the recipe's stop block failed: end them here, then say so
        os.kill(running[name], signal.SIGKILL)
    shutil.rmtree(cluster, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert set(running) == {"munged", "slurmctld", "slurmd"}
    assert not left, f"the stop block left {', '.join(left)} running"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.exists() and state.read_text().rsplit(")", 1)[1].split()[0] == "Z")
