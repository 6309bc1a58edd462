"""Grade a class on a Slurm cluster: ``python -m course slurm write | merge | task``.

    python -m course slurm write FOLDER --csv grades.csv [--submit [--wait]] [--gpu | --gpu-only]
        [--per-task N] [--jobs J] [--timeout S] [--only ID ...] [--partition P] [--time MIN]
        [--mem SIZE] [--cpus-per-task C] [--max-running N] [--sbatch=--account=X ...] [--python EXE]
        [--gpu-partition P] [--gpu-cpus-per-task C] [--gpu-mem SIZE] [--gpu-python EXE]
        [--canvas FILE --assignment HEADER --roster EXPORT.csv --name-is KIND]
    python -m course slurm merge --csv grades.csv [--canvas FILE ...]   (rebuild the gradebook)
    python -m course slurm task PLAN [--task N]                         (what each array task runs)

``write`` finds the students as ``batch`` does and writes ``<csv stem>-slurm/``:

- ``cpu/plan.json`` + ``cpu/grade.sbatch``: an array job of T tasks; task t grades students
  t, t+T, t+2T, ... with ``--jobs`` at a time, each exactly as ``batch`` grades one (the same
  grade_student: its own process group, ``--timeout``, the harness's isolation), into the
  same ``<csv stem>-reports/``. Tasks that share a node never run children as the same uid:
  each grader process leases a uid of its own (grader.processes.lease_uid).
- with ``--gpu`` (or ``--gpu-only``), ``gpu/...``: the same for the criteria that need GPUs
  (Problem 2.3) on GPU nodes (``--gres=gpu:N``), into ``<csv stem>-reports/gpu/``.
- ``merge.sbatch``: ``slurm merge`` after the arrays (``--dependency=afterany``): the CSV,
  the Canvas file, the changelog and the GPU results merged, exactly as ``batch`` writes
  them (course.gradebook). A student whose task died (time limit, node failure, scancel)
  is a row flagged ``task_died`` with the task's log named, never a missing row.

``--submit`` runs sbatch for the arrays and the merge and prints the job ids; ``--wait`` also
waits for the merge to end. The repository and the submissions folder must be on a file
system every node sees (the scripts ``cd`` to this repository and run ``--python``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from course import gradebook, similarity
from course.batch import (
    StudentGrade,
    add_gradebook_arguments,
    default_grader,
    grade_all,
    gradebook_options,
    only_problem,
    usage_error,
)
from course.canvas import OptionsError, RosterError
from course.discovery import DiscoveryError, Student, discover, safe_file_name
from course.outcomes import one_line_each
from grader.layout import REPOSITORY
from grader.protocol import one_line, write_atomic

KINDS = ("cpu", "gpu")
PREVIOUS_PLAN = "plan.previous.json"
SBATCH_SECONDS = 120  # sbatch without --wait answers at once; a controller that does not is down
GPU_CHECK_SECONDS = 180  # importing torch on a busy login node
# The GPU array's interpreter: a CUDA build of torch (checked before submitting), and on the
# node, CUDA usable (checked in the job's first step).
CUDA_BUILD = "import sys, torch; sys.exit(0 if torch.version.cuda else 3)"
CUDA_USABLE = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"


@dataclass
class Plan:
    """What one array job grades and how; ``plan.json`` beside its script."""

    kind: str                    # "cpu" or "gpu"
    run: str                     # this write's id: a record of another run is not this run's
    csv: str
    reports: str                 # where this kind's reports go
    tasks: int
    jobs: int
    timeout: float
    only: list[str] | None
    grader_command: list[str]
    options: dict                # course.gradebook.Options, for the merge
    students: list[dict]         # course.discovery.Student fields, paths absolute

    def student_list(self) -> list[Student]:
        return [Student(s["name"], Path(s["path"]), list(s["flags"]), s.get("canvas_id", ""), s.get("submitted_at", ""))
                for s in self.students]

    def share(self, task: int) -> list[Student]:
        return self.student_list()[task :: self.tasks]

    def task_of(self, index: int) -> int:
        return index % self.tasks


def slurm_folder(csv_path: Path) -> Path:
    return csv_path.parent / f"{csv_path.stem}-slurm"


def load_plan(path: Path) -> Plan:
    try:
        return Plan(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as error:
        raise OptionsError(f"{path}: not a plan written by `python -m course slurm write`: {error}") from None


def gpu_python_problem(python: str, where: str) -> str:
    return (f"--gpu: {python} cannot run torch with CUDA {where} (the course .venv has the CPU build by "
            "default): give the GPU nodes' interpreter with --gpu-python PATH")


def check_gpu_python(python: str) -> None:
    """Raises OptionsError unless ``python`` imports a CUDA build of torch (this node may have no GPU)."""
    try:
        result = subprocess.run([python, "-c", CUDA_BUILD], capture_output=True, timeout=GPU_CHECK_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise OptionsError(gpu_python_problem(python, f"({type(error).__name__})")) from None
    if result.returncode != 0:
        raise OptionsError(gpu_python_problem(python, "(no CUDA build of torch)"))


def gpu_criteria(rubric: Path | None) -> tuple[list[str], int]:
    """``(ids of the active criteria of the rubric that need GPUs, the most GPUs one needs)``."""
    from grader.layout import DEFAULT_RUBRIC
    from grader.rubric import HARDWARE, load_rubric  # imports torch: only to write a GPU plan

    needing = [c for c in load_rubric(rubric or DEFAULT_RUBRIC).active() if HARDWARE[c.needs] > 0]
    if not needing:
        raise OptionsError("--gpu: no active criterion of the rubric needs a GPU")
    return [c.id for c in needing], max(HARDWARE[c.needs] for c in needing)


# ----------------------------------------------------------------------------- write


def _sbatch_path(path: Path) -> str:
    """``path`` for an ``#SBATCH`` line, which Slurm does not unquote."""
    if re.search(r"\s", str(path)):
        raise OptionsError(f"{path}: Slurm's #SBATCH lines cannot hold a path with spaces; use --csv elsewhere")
    return str(path)


def _minutes(students: int, jobs: int, timeout: float) -> int:
    """A task's time limit: its students one after another (``jobs`` at a time), plus slack."""
    return math.ceil(math.ceil(students / jobs) * timeout / 60) + 10


def array_script(plan: Plan, plan_path: Path, args: argparse.Namespace, gpus: int) -> str:
    gpu = plan.kind == "gpu"
    per_task = math.ceil(len(plan.students) / plan.tasks)
    logs = slurm_folder(Path(plan.csv)) / "logs"
    lines = [
        "#!/bin/bash",
        f"# Written by `python -m course slurm write` on {time.strftime('%Y-%m-%d %H:%M')}: {len(plan.students)} students,",
        f"# {plan.tasks} array tasks of at most {per_task}, grading "
        f"{'the GPU criteria ' + ' '.join(plan.only or []) if gpu else 'on CPUs'}.",
        f"# Submit with `sbatch {plan_path.parent / 'grade.sbatch'}`;",
        f"# afterwards `python -m course slurm merge --csv {plan.csv}`.",
        f"#SBATCH --job-name=grade-{plan.kind}-{safe_file_name(Path(plan.csv).stem)}",
        f"#SBATCH --array=0-{plan.tasks - 1}" + (f"%{args.max_running}" if args.max_running else ""),
        f"#SBATCH --cpus-per-task={args.gpu_cpus_per_task if gpu else args.cpus_per_task}",
        f"#SBATCH --mem={args.gpu_mem if gpu else args.mem}",
        f"#SBATCH --time={args.time or _minutes(per_task, plan.jobs, plan.timeout)}",
        f"#SBATCH --output={_sbatch_path(logs)}/{plan.kind}-%A_%a.out",
    ]
    partition = args.gpu_partition if gpu else args.partition
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if gpu:
        lines.append(f"#SBATCH --gres=gpu:{gpus}")
    lines += [f"#SBATCH {extra}" for extra in args.sbatch]
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(REPOSITORY))}"]
    if gpu:
        lines.append("nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || true")
        python = shlex.quote(plan.grader_command[0])
        lines.append(f"{python} -c {shlex.quote(CUDA_USABLE)} || {{ echo {shlex.quote(gpu_python_problem(plan.grader_command[0], 'on this node'))} >&2; exit 3; }}")
    lines.append(f"exec {shlex.quote(plan.grader_command[0])} -m course slurm task {shlex.quote(str(plan_path))}")
    return "\n".join(lines) + "\n"


def merge_script(csv_path: Path, args: argparse.Namespace) -> str:
    logs = slurm_folder(csv_path) / "logs"
    lines = [
        "#!/bin/bash",
        "# Written by `python -m course slurm write`: builds the gradebook once the arrays have ended.",
        f"#SBATCH --job-name=grade-merge-{safe_file_name(csv_path.stem)}",
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --mem=2G",
        "#SBATCH --time=30",
        f"#SBATCH --output={_sbatch_path(logs)}/merge-%j.out",
    ]
    if args.partition:
        lines.append(f"#SBATCH --partition={args.partition}")
    lines += [f"#SBATCH {extra}" for extra in args.sbatch]
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(REPOSITORY))}",
              f"exec {shlex.quote(args.python)} -m course slurm merge --csv {shlex.quote(str(csv_path))}"]
    return "\n".join(lines) + "\n"


def write(args: argparse.Namespace) -> list[Path]:
    """Write the plans and scripts; return the array scripts, the merge script last."""
    csv_path = args.csv.resolve()
    options = gradebook_options(args).absolute()  # the merge runs elsewhere
    students, notes = discover(args.folder.resolve(), gradebook.submissions_folder(csv_path))
    for note in [*notes, *gradebook.notes(options, gradebook.check(options, students))]:
        print(one_line(note))
    if not students:
        raise OptionsError(f"{args.folder}: no students to grade")
    folder = slurm_folder(csv_path)
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    kinds = (["cpu"] if not args.gpu_only else []) + (["gpu"] if args.gpu or args.gpu_only else [])
    scripts = []
    for kind in KINDS:
        if kind not in kinds:
            continue  # an earlier plan of this kind stays: the merge still takes its results
        only, gpus = gpu_criteria(options.rubric) if kind == "gpu" else (args.only, 0)
        reports = gradebook.reports_folder(csv_path) / ("gpu" if kind == "gpu" else "")
        python = (args.gpu_python or args.python) if kind == "gpu" else args.python
        if kind == "gpu":
            check_gpu_python(python)
        plan = Plan(
            kind=kind, run=f"slurm-{kind}-{secrets.token_hex(4)}", csv=str(csv_path), reports=str(reports.resolve()),
            tasks=max(1, math.ceil(len(students) / args.per_task)), jobs=1 if kind == "gpu" else args.jobs,
            timeout=args.timeout, only=only, grader_command=default_grader(python, options), options=options.to_json(),
            students=[{**s._asdict(), "path": str(s.path)} for s in students],
        )
        plan_path = folder / kind / "plan.json"
        plan_path.parent.mkdir(exist_ok=True)
        if plan_path.exists():  # kept until this plan is submitted: a failed submit puts it back
            os.replace(plan_path, plan_path.with_name(PREVIOUS_PLAN))
        write_atomic(plan_path, json.dumps(asdict(plan), indent=1) + "\n")
        script = plan_path.parent / "grade.sbatch"
        script.write_text(array_script(plan, plan_path, args, gpus))
        scripts.append(script)
        print(f"{kind}: {len(students)} students in {plan.tasks} array tasks -> {script}")
    merge = folder / "merge.sbatch"
    merge.write_text(merge_script(csv_path, args))
    return [*scripts, merge]


def _sbatch(arguments: list[str], wait: bool = False) -> tuple[str, int]:
    """Run sbatch: ``(job id, exit status)``; with ``wait`` the status is the job's own."""
    try:
        result = subprocess.run(
            ["sbatch", "--parsable", *arguments], capture_output=True, text=True,
            timeout=None if wait else SBATCH_SECONDS,
        )
    except FileNotFoundError:
        raise OptionsError("--submit: sbatch is not on PATH (is this a Slurm login node?)") from None
    except subprocess.TimeoutExpired:
        raise OptionsError(f"--submit: sbatch gave no answer in {SBATCH_SECONDS} s (is slurmctld up?)") from None
    job = result.stdout.strip().splitlines()[0].split(";")[0] if result.stdout.strip() else ""
    if not job.isdigit() or (result.returncode != 0 and not wait):
        raise OptionsError(f"sbatch {' '.join(arguments)} failed ({result.returncode}): {result.stderr.strip()}")
    return job, result.returncode


def submit(scripts: list[Path], csv_path: Path, wait: bool) -> int:
    """Submit the arrays, then the merge after those that went in (job ids in ``jobs.json``);
    with ``wait``, the merge job's exit status once it has ended, else 0 (1 when an array was
    refused). A refused array's plan is withdrawn (the one before it, if any, put back), so no
    later merge waits for students it never graded."""
    *arrays, merge_job = scripts
    jobs, refused = {}, []
    for script in arrays:
        try:
            jobs[script.parent.name] = _sbatch([str(script)])[0]
        except OptionsError as error:
            _withdraw(script.parent)
            refused.append(f"the {script.parent.name} array was not submitted, its plan withdrawn: {error}")
        else:
            (script.parent / PREVIOUS_PLAN).unlink(missing_ok=True)
    for line in refused:
        print(one_line(line))
    if not jobs:
        raise OptionsError("no array was submitted")
    write_atomic(slurm_folder(csv_path) / "jobs.json", json.dumps(jobs) + "\n")
    for kind, job in jobs.items():
        print(f"submitted the {kind} array: job {job}")
    dependency = "--dependency=afterany:" + ":".join(jobs.values())
    if wait:
        print("waiting for the arrays and the merge to end ...", flush=True)
    jobs["merge"], status = _sbatch([dependency, *(["--wait"] if wait else []), str(merge_job)], wait)
    write_atomic(slurm_folder(csv_path) / "jobs.json", json.dumps(jobs) + "\n")
    print(f"submitted the merge: job {jobs['merge']}, after {', '.join(v for k, v in jobs.items() if k != 'merge')}")
    if status != 0:
        print(f"the merge job failed (exit status {status}): see {slurm_folder(csv_path) / 'logs'}/merge-{jobs['merge']}.out")
    return status or (1 if refused else 0)


def _withdraw(folder: Path) -> None:
    """The plan of ``folder`` no longer counts; the one it replaced (if any) counts again."""
    previous = folder / PREVIOUS_PLAN
    if previous.exists():
        os.replace(previous, folder / "plan.json")
    else:
        (folder / "plan.json").unlink(missing_ok=True)


# ----------------------------------------------------------------------------- task


def run_task(plan_path: Path, task: int, progress=print) -> int:
    """Grade task ``task``'s share of the plan; 0 once every one of them has a record."""
    progress = one_line_each(progress)
    plan = load_plan(plan_path)
    share = plan.share(task)
    reports = Path(plan.reports)
    reports.mkdir(parents=True, exist_ok=True)
    if plan.kind == "gpu":  # a GPU run is fresh, not a regrade of an older GPU report
        for student in share:
            (reports / f"{safe_file_name(student.name)}.json").unlink(missing_ok=True)
    progress(f"task {task} of {plan.tasks} ({plan.kind}) on {socket.gethostname()}: {len(share)} students, "
             f"{plan.jobs} at a time")
    grade_all(share, reports, plan.timeout, plan.grader_command, plan.only, plan.jobs, plan.run, progress)
    return 0


# ----------------------------------------------------------------------------- merge


def _died(student: Student, plan: Plan, index: int, jobs: dict) -> StudentGrade:
    task = plan.task_of(index)
    job = jobs.get(plan.kind, "<job>")
    log = slurm_folder(Path(plan.csv)) / "logs" / f"{plan.kind}-{job}_{task}.out"
    stem = safe_file_name(student.name)
    return StudentGrade(
        student.name, student.path, Path(plan.reports) / f"{stem}.json", status="error",
        detail=f"Slurm task {task} ended before grading this student (time limit, node failure or scancel?): see {log}",
        flags=[*student.flags, "task_died", "needs_review"],
    )


def merge(csv_path: Path, overrides: gradebook.Options, progress=print) -> list[StudentGrade]:
    """Build the gradebook from the plans' records and reports (see :func:`gradebook.finish`)."""
    progress = one_line_each(progress)
    csv_path = csv_path.resolve()
    folder = slurm_folder(csv_path)
    plans = {kind: load_plan(folder / kind / "plan.json") for kind in KINDS if (folder / kind / "plan.json").exists()}
    if not plans:
        raise OptionsError(f"no plan in {folder}: run `python -m course slurm write ... --csv {csv_path}` first")
    try:
        jobs = json.loads((folder / "jobs.json").read_text())
    except (OSError, ValueError):
        jobs = {}
    base = plans.get("cpu") or plans["gpu"]
    students = base.student_list()
    stored = gradebook.Options.from_json(base.options)
    options = gradebook.Options(**{key: getattr(overrides, key) or getattr(stored, key) for key in asdict(stored)})
    cpu = plans.get("cpu")
    reports = gradebook.reports_folder(csv_path)
    outcomes = []
    for index, student in enumerate(students):
        outcome = gradebook.load_outcome(student.name, reports / "outcomes", cpu.run if cpu else None)
        if outcome is None:
            outcome = _died(student, cpu, index, jobs) if cpu else StudentGrade(
                student.name, student.path, reports / f"{safe_file_name(student.name)}.json", status="error",
                detail="no CPU grading record: grade the class with `batch` or `slurm write` too",
                flags=[*student.flags, "no_cpu_record", "needs_review"],
            )
        outcomes.append(outcome)
    gpu = plans.get("gpu")
    if gpu is not None:
        planned = {s.name: (index, s) for index, s in enumerate(gpu.student_list())}
        records = Path(gpu.reports) / "outcomes"
        for outcome in outcomes:
            if outcome.student in planned and gradebook.load_outcome(outcome.student, records, gpu.run) is None:
                died = _died(planned[outcome.student][1], gpu, planned[outcome.student][0], jobs)
                outcome.flags = list(dict.fromkeys([*outcome.flags, "gpu_task_died", "needs_review"]))
                outcome.detail = (outcome.detail + "; " if outcome.detail else "") + "GPU " + died.detail
    return gradebook.finish(outcomes, students, csv_path, options, base.run, progress)


# ----------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``slurm`` command's arguments: its own subcommands write, merge and task."""
    commands = parser.add_subparsers(dest="slurm_command", metavar="write|merge|task", required=True)
    write_parser = commands.add_parser("write", help="write (and with --submit submit) the array jobs and the merge")
    write_parser.add_argument("folder", type=Path, help="the submissions, as for `batch`")
    write_parser.add_argument("--csv", type=Path, required=True, help="the gradebook CSV the merge writes")
    write_parser.add_argument("--submit", action="store_true", help="sbatch the arrays and the merge")
    write_parser.add_argument("--wait", action="store_true", help="with --submit: return once the merge has ended")
    write_parser.add_argument("--gpu", action="store_true", help="also an array for the GPU criteria (2.3)")
    write_parser.add_argument("--gpu-only", action="store_true", help="only the GPU array (the CPU criteria graded before)")
    write_parser.add_argument("--per-task", type=int, default=4, help="students per array task (default 4)")
    write_parser.add_argument("--jobs", type=int, default=1, help="students graded at once in one task (default 1)")
    write_parser.add_argument("--timeout", type=float, default=900.0, help="seconds per student before it is killed")
    write_parser.add_argument("--only", nargs="+", action="extend", metavar="PROBLEM_OR_ID",
                              help="as for `batch`: grade or regrade only these")
    write_parser.add_argument("--partition", help="the CPU array's (and the merge's) partition")
    write_parser.add_argument("--time", type=int, metavar="MINUTES", help="each task's time limit (default: from --timeout)")
    write_parser.add_argument("--mem", default="8G", help="memory per CPU task (default 8G)")
    write_parser.add_argument("--cpus-per-task", type=int, default=2, help="CPUs per CPU task (default 2)")
    write_parser.add_argument("--max-running", type=int, help="at most this many tasks of an array at once")
    write_parser.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                              help="another #SBATCH line for every job, e.g. --sbatch=--account=cs123 (repeatable)")
    write_parser.add_argument("--python", default=sys.executable, help="the Python the jobs run (default: this one)")
    write_parser.add_argument("--gpu-partition", help="the GPU array's partition")
    write_parser.add_argument("--gpu-cpus-per-task", type=int, default=8, help="CPUs per GPU task (default 8)")
    write_parser.add_argument("--gpu-mem", default="32G", help="memory per GPU task (default 32G)")
    write_parser.add_argument("--gpu-python", help="the Python of the GPU nodes, with a CUDA torch (default: --python)")
    add_gradebook_arguments(write_parser)
    similarity.add_arguments(write_parser)
    merge_parser = commands.add_parser("merge", help="build the CSV / Canvas file / changelog from the tasks' reports")
    merge_parser.add_argument("--csv", type=Path, required=True, help="the CSV given to `slurm write`")
    add_gradebook_arguments(merge_parser)
    task_parser = commands.add_parser("task", help="grade one array task's share (run by the array job)")
    task_parser.add_argument("plan", type=Path)
    task_parser.add_argument("--task", type=int, help="the task number (default: $SLURM_ARRAY_TASK_ID)")


def run(args: argparse.Namespace) -> int:
    """``python -m course slurm write|merge|task``."""
    command = f"slurm {args.slurm_command}"
    try:
        if args.slurm_command == "task":
            task = args.task if args.task is not None else os.environ.get("SLURM_ARRAY_TASK_ID")
            if task is None or not str(task).isdigit():
                return usage_error(command, "give --task N, or run it as a Slurm array task")
            return run_task(args.plan, int(task))
        if args.slurm_command == "merge":
            start = time.monotonic()
            outcomes = merge(args.csv, gradebook_options(args))
            _summary(outcomes, args.csv, time.monotonic() - start)
            return 0
        return _write_and_submit(args)
    except (OptionsError, RosterError, DiscoveryError) as error:
        return usage_error(command, str(error))


def _write_and_submit(args: argparse.Namespace) -> int:
    problem = (
        "--per-task and --jobs must be >= 1 and --timeout > 0" if args.per_task < 1 or args.jobs < 1 or args.timeout <= 0
        else "--wait needs --submit" if args.wait and not args.submit
        else only_problem(args.only, args.rubric) if args.only
        else similarity.argument_problem(args)
    )
    if problem is not None:
        return usage_error("slurm write", problem)
    scripts = write(args)
    if not args.submit:
        print("submit with: " + " ; ".join(f"sbatch {s}" for s in scripts[:-1]) +
              f" ; then, once they have ended: python -m course slurm merge --csv {args.csv}")
        return 0
    status = submit(scripts, args.csv.resolve(), args.wait)
    if args.wait and status == 0:
        print(f"merged -> {args.csv}")
    return 0 if status == 0 else 1


def _summary(outcomes: list[StudentGrade], csv_path: Path, seconds: float) -> None:
    review = [o.student for o in outcomes if "needs_review" in o.flags]
    print(f"merged {len(outcomes)} students in {seconds:.1f} s -> {csv_path}")
    if review:
        print(one_line(f"needs review ({len(review)}): {', '.join(review)}"))
