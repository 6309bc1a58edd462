"""From graded students to the files a course keeps: the CSV, Canvas's import, the changelog.

``batch`` (after grading) and ``slurm merge`` (after the array tasks) both end in
:func:`finish`, so both write the same files from the same students:

- ``<csv>``: one row per student, every flag (course.outcomes ``default_rows``); with a late
  policy or adjustments the raw ``total``, the ``adjustment``, the ``final`` score and its
  ``reason`` (course.late, course.adjustments); by pseudonym with ``--anonymous``;
- ``--canvas FILE``: Canvas's gradebook import (course.canvas), the final scores; a student the
  roster does not know, or knows twice, is flagged and gets an EMPTY score there ("no change");
- ``<csv stem>-changelog.csv``: what changed, each real change once (course.changelog);
- GPU results (``<csv stem>-reports/gpu/<student>.json`` unless ``--gpu-reports`` says
  otherwise) merged into each student's JSON report, the CSV and the Canvas file, with
  flags for a GPU report without a CPU one (``gpu_without_cpu``), the reverse
  (``cpu_without_gpu``), and GPU runs that were inconclusive, blocked or smoke runs;
- reports graded under another version of the rubric re-scored, or flagged for a regrade
  (course.rescore).

Each graded student also leaves an outcome record (status, seconds, flags, changes) in
``<csv stem>-reports/outcomes/``, so a gradebook can be rebuilt from the folder alone.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from course import adjustments, anonymous, canvas, changelog, feedback, late, regrade, rescore, similarity
from course.discovery import Student, safe_file_name
from course.outcomes import StudentGrade, apply_report, default_rows, save_rows, write_csv
from grader.layout import DEFAULT_RUBRIC
from grader.protocol import read_json_report, report_text, write_atomic
from grader.report import counted

# Flags that come from a student's JSON report; recomputed when GPU results change it.
REPORT_FLAGS = ("missing:", "criterion_errors=", "policy_findings=", "blocked_points=")
GPU_SOURCE = "GPU run"
OVERRIDE = "total (override)"  # the changelog's criterion for a manual override (course.adjustments)


@dataclass
class Options:
    """What to do besides the CSV, the same for ``batch`` and ``slurm``: the command line's
    --canvas, --assignment, --roster, --name-is, --gpu-reports, --canvas-without-gpu, --html,
    and the similarity pass (``similarity_threshold`` None: no pass)."""

    canvas: Path | None = None
    assignment: str | None = None
    roster: Path | None = None
    name_is: str | None = None
    gpu_reports: Path | None = None
    html: Path | None = None
    similarity_threshold: float | None = None
    public_solutions: Path | None = None
    canvas_without_gpu: bool = False
    adjustments: Path | None = None
    feedback: Path | None = None
    rubric: Path | None = None  # None: the grader's own (grader/rubric.toml)
    late_policy: Path | None = None
    anonymous: bool = False  # pseudonyms in the CSV and the dashboard (course.anonymous)

    PATHS = ("canvas", "roster", "gpu_reports", "html", "public_solutions", "adjustments", "feedback", "rubric",
             "late_policy")

    def to_json(self) -> dict:
        return {key: str(value) if isinstance(value, Path) else value for key, value in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> Options:
        known: dict[str, Any] = {key: data[key] for key in asdict(cls()) if data.get(key) is not None}
        values: dict[str, Any] = {key: Path(value) if key in cls.PATHS else value for key, value in known.items()}
        return cls(**values)

    def absolute(self) -> Options:
        """The same options with every path absolute (for a merge that runs elsewhere)."""
        return dataclasses.replace(self, **{key: getattr(self, key).resolve() for key in self.PATHS
                                            if getattr(self, key) is not None})


def reports_folder(csv_path: Path) -> Path:
    return csv_path.parent / f"{csv_path.stem}-reports"


def submissions_folder(csv_path: Path) -> Path:
    """Where students of a Canvas download are unpacked."""
    return csv_path.parent / f"{csv_path.stem}-submissions"


def check(options: Options, students: list[Student]) -> canvas.Roster | None:
    """The roster, once the options are known to fit ``students``.

    Raises:
        canvas.OptionsError: Canvas output without an assignment header, or folders whose names
            could be anything (no --roster and no --name-is).
        canvas.RosterError: an unreadable roster.
        adjustments.AdjustmentsError: an adjustments file that cannot be used.
        late.LatePolicyError: a late policy that cannot be used.
    """
    if options.adjustments is not None:
        adjustments.read(options.adjustments)  # a bad file is said before anyone is graded
    if options.late_policy is not None:
        late.read(options.late_policy)
    if options.rubric is not None and not options.rubric.is_file():
        raise canvas.OptionsError(f"--rubric {options.rubric}: no such file")
    if options.name_is is not None and options.name_is not in canvas.NAME_IS:
        raise canvas.OptionsError(f"--name-is {options.name_is!r}: expected one of {', '.join(canvas.NAME_IS)}")
    if options.canvas is None:
        return canvas.read_roster(options.roster) if options.roster else None
    if not options.assignment:
        raise canvas.OptionsError("--canvas needs --assignment: the assignment's column header copied from a Canvas "
                         "gradebook export, e.g. \"HW5 Model Parallelism (123456)\"")
    folders = [s.name for s in students if not s.canvas_id]
    if options.roster is None and options.name_is is None and folders:
        raise canvas.OptionsError(
            "--canvas without --roster: say what the folder names are (e.g. "
            f"{folders[0]!r}) with --name-is login|sis|canvas, or give --roster (a gradebook export) to match them"
        )
    return canvas.read_roster(options.roster) if options.roster else None


def notes(options: Options, roster: canvas.Roster | None) -> list[str]:
    """Lines to print before grading: which identity the Canvas file uses, and doubts."""
    if options.canvas is None:
        return []
    warning = canvas.assignment_warning(options.assignment or "")
    lines = [warning] if warning else []
    if roster is not None:
        against = canvas.NAME_IS[options.name_is] if options.name_is else "SIS Login ID, SIS User ID or ID"
        return [*lines, f"Canvas identities from {roster.path}: folder names matched against {against}; "
                        "students of a Canvas download by their Canvas id"]
    column = canvas.NAME_IS[options.name_is] if options.name_is else "ID"
    return [*lines, f"no --roster: each folder name is written as the {column} column of the Canvas file "
                    f"(--name-is {options.name_is or '-'}); students of a Canvas download by their Canvas id"]


def save_outcome(outcome: StudentGrade, run: str, folder: Path) -> None:
    """Record how grading one student went, for a later merge (:func:`load_outcome`)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {**asdict(outcome), "path": str(outcome.path), "report_path": str(outcome.report_path), "run": run}
    write_atomic(folder / f"{safe_file_name(outcome.student)}.json", json.dumps(record, indent=1) + "\n")


def load_outcome(student: str, folder: Path, run: str | None) -> StudentGrade | None:
    """The record :func:`save_outcome` left for ``student`` (of run ``run``, unless None)."""
    try:
        record = json.loads((folder / f"{safe_file_name(student)}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("student") != student or (run is not None and record.get("run") != run):
        return None
    try:
        fields = {key: record[key] for key in asdict(StudentGrade("", Path(), Path())) if key in record}
        return StudentGrade(**{**fields, "path": Path(fields["path"]), "report_path": Path(fields["report_path"])})
    except (KeyError, TypeError):
        return None


def _refresh(outcome: StudentGrade, report: dict) -> None:
    """Scores and report flags of ``outcome`` from its (changed) report."""
    outcome.flags = [f for f in outcome.flags if not f.startswith(REPORT_FLAGS)]
    outcome.problems = {}
    apply_report(outcome, report)
    outcome.flags = list(dict.fromkeys(outcome.flags))


def _flag(outcome: StudentGrade, *flags: str) -> None:
    outcome.flags = list(dict.fromkeys([*outcome.flags, *flags, "needs_review"]))


def _table(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _gpu_problems(report: dict) -> list[str]:
    """Flags for a GPU report that must not (or not silently) replace the CPU results."""
    flags = []
    for criterion in report["criteria"]:
        details = _table(criterion.get("details"))
        timing = _table(details.get("timing"))
        if details.get("smoke") is True:
            flags.append("gpu_smoke_run")
        elif criterion.get("status") == "blocked":
            flags.append("gpu_blocked")
        elif criterion.get("status") in ("timeout", "error"):
            flags.append(f"gpu_{criterion['status']}")
        elif timing.get("conclusive") is False:
            flags.append("gpu_inconclusive")
    return list(dict.fromkeys(flags))


def merge_gpu(outcomes: list[StudentGrade], folder: Path) -> list[StudentGrade]:
    """Merge ``folder``'s GPU reports into the students' reports and outcomes; return rows
    for GPU reports of students the batch does not have."""
    by_stem = {safe_file_name(o.student): o for o in outcomes}
    extra, seen = [], set()
    for path in sorted(folder.glob("*.json")):
        outcome = by_stem.get(path.stem)
        gpu = read_json_report(path)
        if outcome is None:
            extra.append(StudentGrade(path.stem, path, path, status="error", detail="a GPU report without a CPU report",
                                 flags=["gpu_without_cpu", "needs_review"]))
            continue
        seen.add(path.stem)
        cpu = read_json_report(outcome.report_path) if outcome.score is not None else None
        if gpu is None:
            _flag(outcome, "gpu_report_unreadable")
        elif cpu is None:
            _flag(outcome, "gpu_without_cpu")
        else:
            _merge_one(outcome, cpu, gpu)
    for stem, outcome in by_stem.items():
        if stem not in seen and outcome.score is not None and any(f.startswith("blocked_points=") for f in outcome.flags):
            _flag(outcome, "cpu_without_gpu")
    return extra


def _merge_one(outcome: StudentGrade, cpu: dict, gpu: dict) -> None:
    problems = _gpu_problems(gpu)
    if problems:
        _flag(outcome, *problems)
    if any(p in problems for p in ("gpu_smoke_run", "gpu_blocked")):
        return  # nothing was measured: the CPU report's `blocked` stands
    if gpu.get("files") != cpu.get("files"):
        _flag(outcome, "gpu_files_differ")
    done = any(m.get("source") == GPU_SOURCE and m.get("seed") == gpu.get("seed") and m.get("files") == gpu.get("files")
               for m in cpu.get("merged", []) if isinstance(m, dict))
    if not done:  # merging the same GPU run twice would list it twice under `merged`
        cpu, _ = regrade.merge(cpu, gpu, GPU_SOURCE)
        write_atomic(outcome.report_path, report_text(cpu))
    _refresh(outcome, cpu)


def finish(
    outcomes: list[StudentGrade], students: list[Student], csv_path: Path, options: Options, run: str, progress=print,
) -> list[StudentGrade]:
    """What every flow does once its students are graded (``batch``, ``slurm merge`` and
    ``import-gradescope`` alike): the similarity pass, the GPU results merged, the reports brought
    up to the rubric (course.rescore), identities matched, the late policy and the adjustments
    applied, the CSV (anonymous where asked), the Canvas file, the changelog, the feedback and
    the dashboard; return every row (GPU-only students added)."""
    reports = reports_folder(csv_path)
    if options.similarity_threshold is not None:  # flags only, never a score
        similarity.flag_batch(outcomes, reports, threshold=options.similarity_threshold,
                              public_folder=options.public_solutions, progress=progress)
    roster = check(options, students)
    gpu_folder = options.gpu_reports or reports / "gpu"
    if gpu_folder.is_dir():
        outcomes = outcomes + merge_gpu(outcomes, gpu_folder)
    reconcile_rubric(outcomes, options.rubric or DEFAULT_RUBRIC, progress)
    identities = identify_all(outcomes, students, roster, options)
    adjusted = apply_adjustments(outcomes, students, options, progress)
    pseudonyms = anonymous.assign(reports, [o.student for o in outcomes]) if options.anonymous else None
    write_csv(csv_path, default_rows(outcomes, csv_path.parent, adjusted, options.late_policy is not None, pseudonyms))
    if options.canvas is not None:
        write_canvas(outcomes, identities, roster, options, progress)
    save_rows(reports, outcomes)
    log = changelog.path_of(csv_path)
    said = changelog.summary(log, *changelog.write(log, run, outcomes))
    if said:
        progress(said)
    if options.feedback is not None:
        write_feedback(outcomes, options.feedback, options.rubric, progress)
    if options.html is not None:
        from course.dashboard import write  # Jinja2: only when a dashboard is asked for

        write(reports, options.html, anonymous=options.anonymous)
        progress(f"dashboard -> {options.html}{' (anonymous)' if options.anonymous else ''}")
    return outcomes


def write_feedback(outcomes: list[StudentGrade], folder: Path, rubric: Path | None, progress=print) -> None:
    """Each student's feedback file, as the rubric in force shows it (course.feedback)."""
    shown = None
    if rubric is not None:
        from grader.rubric import load_rubric  # imports the checks (torch): only for another rubric

        shown = load_rubric(rubric)
    progress(f"feedback: {feedback.write_all(outcomes, folder, shown)} files -> {folder}")


def reconcile_rubric(outcomes: list[StudentGrade], rubric: Path, progress=print) -> None:
    """Bring every report graded under another version of ``rubric`` up to it where its stored
    results allow (course.rescore); flag and name the students whose criteria need grading again."""
    stored = {o.student: report for o in outcomes if o.score is not None
              and (report := read_json_report(o.report_path)) is not None and "rubric" in report}
    if not stored:
        return  # no report says its rubric (Gradescope's totals, reports of older graders)
    current = rescore.load(rubric)
    regrades = {}
    for outcome in outcomes:
        if outcome.student not in stored:
            continue
        done = rescore.reconcile(stored[outcome.student], current)
        if done.rewritten:
            write_atomic(outcome.report_path, json.dumps(done.report, indent=2) + "\n")
            _refresh(outcome, done.report)
        outcome.changes += done.changes
        if done.regrade:
            regrades[outcome.student] = done.regrade
            _flag(outcome, rescore.REGRADE_FLAG)
    if regrades:
        progress(rescore.regrade_advice(regrades, rubric))


def identify_all(outcomes: list[StudentGrade], students: list[Student], roster: canvas.Roster | None,
                 options: Options) -> dict[str, list[str] | None]:
    """``{student: Canvas identity columns, or None when Canvas cannot be told who it is}``;
    with a roster or a Canvas file, a student it cannot name is flagged."""
    canvas_ids = {s.name: s.canvas_id for s in students}
    identities: dict[str, list[str] | None] = {}
    for outcome in outcomes:
        identity, problem = canvas.identify(outcome.student, canvas_ids.get(outcome.student, ""), roster, options.name_is)
        if problem is not None and (roster is not None or options.canvas is not None):
            _flag(outcome, problem)
        identities[outcome.student] = identity if problem is None else None
    return identities


def apply_adjustments(outcomes: list[StudentGrade], students: list[Student], options: Options, progress=print) -> bool:
    """Set each student's course score (``final``, ``adjustment``, ``reason``) from the late policy
    and the adjustments file, the raw score kept in ``score``; flags say what applied; a new
    override goes into the changelog. False (nothing set) when the options give neither."""
    if options.adjustments is None and options.late_policy is None:
        return False
    table = adjustments.read(options.adjustments) if options.adjustments else {}
    judged = late.judge_all(late.read(options.late_policy), outcomes, students, progress) if options.late_policy else {}
    for outcome in outcomes:
        lateness = judged.get(outcome.student)
        from_policy = adjustments.Adjustment(lateness.penalty or None, None, lateness.reason()) if lateness else None
        adjustment = adjustments.combine(from_policy, table.pop(outcome.student, None))
        outcome.final = adjustment.final(outcome.score) if adjustment else outcome.score
        outcome.adjustment = adjustment.describe() if adjustment else ""
        outcome.reason = adjustment.reason if adjustment else ""
        if adjustment is None:
            continue
        outcome.flags = list(dict.fromkeys([*outcome.flags, *adjustment.flags()]))
        if adjustment.override is not None:
            outcome.changes.append({"criterion": OVERRIDE, "old_points": outcome.score,
                                    "new_points": adjustment.override, "old_status": "",
                                    "new_status": f"override: {adjustment.reason}".strip()})
    if table:
        progress(f"adjustments: no student named {', '.join(sorted(table))} in this class ({options.adjustments})")
    return True


def write_canvas(outcomes: list[StudentGrade], identities: dict[str, list[str] | None], roster: canvas.Roster | None,
                 options: Options, progress=print) -> None:
    """Canvas's import: one row per student Canvas can match (the others are named in a line);
    an empty cell ("no change") for a score that is not trustworthy or not complete (criteria
    blocked until the GPU merge, unless ``canvas_without_gpu``); a warning when the scores are
    out of a total the assignment does not have."""
    assert options.canvas is not None  # the caller writes Canvas's file only when asked
    rows, unknown, waiting, out_of = [], [], [], set()  # out_of: (max_score, blocked points)
    for outcome in outcomes:
        identity = identities.get(outcome.student)
        if identity is None:
            unknown.append(outcome.student)
            continue  # a row without an identity: Canvas cannot match it
        blocked = any(f.startswith("blocked_points=") for f in outcome.flags) and not options.canvas_without_gpu
        if blocked:
            waiting.append(outcome.student)
        rows.append((identity, None if blocked else outcome.course_score()))
        if outcome.max_score is not None:  # what its score is out of in Canvas, now or after the GPU merge
            out_of.add((outcome.max_score, blocked_points(outcome)))
    write_csv(options.canvas, canvas.import_rows(options.assignment or "", rows))
    if unknown:
        progress(f"Canvas: {counted(len(unknown), 'student')} left out of {options.canvas}, flagged in the CSV "
                 f"(not in the roster, or in it twice): {', '.join(unknown)}")
    if waiting:
        progress(f"Canvas: {counted(len(waiting), 'student')} with GPU criteria not graded yet "
                 f"{'has' if len(waiting) == 1 else 'have'} an EMPTY cell (no change): "
                 "import after the GPU merge, or pass --canvas-without-gpu for a class graded without GPUs")
    possible = roster.points_possible(options.assignment or "") if roster is not None else None
    advice = canvas.points_warning(options.assignment or "", out_of, options.canvas_without_gpu, possible,
                                   roster.path if roster else None)
    if advice:
        progress(advice)


def blocked_points(outcome: StudentGrade) -> float:
    """The points of ``outcome``'s criteria blocked for want of hardware (its ``blocked_points=`` flag)."""
    return sum(float(flag.split("=", 1)[1]) for flag in outcome.flags if flag.startswith("blocked_points="))
