"""GPU results (reports/gpu/<student>.json) merged into the CSV, Canvas's import and the JSON reports.

The reports are written here in the grader's own schema (grader.grading.as_json): a CPU run
where 2.3 is ``blocked``, and GPU runs of ``--only 2.3-speedup`` as a two-GPU node writes them."""
import csv
import json

from course import gradebook
from course.discovery import Student
from course.outcomes import StudentGrade, apply_report

FILES = {"pipeline.py": "a" * 64, "tensor_parallel.py": "b" * 64}


def criterion(id_, points, earned, status, details=None):
    return {"id": id_, "problem": id_.split("-")[0], "title": "t", "points": points, "earned": earned,
            "status": status, "message": "", "seconds": 1.0, "output": "", "details": details or {}}


def as_report(criteria, files=FILES, seed=5):
    return {"schema_version": 1, "submission": "x", "files": files, "environment": {"gpus": 0}, "seed": seed,
            "score": sum(c["earned"] for c in criteria), "max_score": sum(c["points"] for c in criteria),
            "blocked_points": sum(c["points"] for c in criteria if c["status"] == "blocked"), "complete": True,
            "notes": [], "needs_review": False, "review_reasons": [], "policy_findings": [], "criteria": criteria}


CPU = as_report([criterion("2.1-schedule", 8, 8, "passed"), criterion("2.3-speedup", 10, 0, "blocked")])


def gpu(status, earned, conclusive=True, smoke=False, files=FILES):
    timing = {"median_ratio": 1.3, "ratios": [1.3, 1.31], "conclusive": conclusive, "attempts": 1}
    return as_report([criterion("2.3-speedup", 0 if smoke else 10, earned, status,
                                {"timing": timing, "smoke": smoke, "gpus": ["H100", "H100"]})], files=files, seed=9)


def test_gpu_results_reach_the_csv_canvas_and_json(tmp_path):
    csv_path = tmp_path / "grades.csv"
    reports = gradebook.reports_folder(csv_path)
    (reports / "gpu").mkdir(parents=True)
    gpu_reports = {
        "alice": gpu("passed", 10), "bob": gpu("failed", 0, conclusive=False), "dave": gpu("passed", 0, smoke=True),
        "erin": gpu("passed", 10, files={"pipeline.py": "c" * 64}), "ghost": gpu("passed", 10),
        "frank": gpu("blocked", 0),
    }
    for name, content in gpu_reports.items():
        (reports / "gpu" / f"{name}.json").write_text(json.dumps(content))
    outcomes, students = [], []
    for name in ("alice", "bob", "carol", "dave", "erin", "frank"):
        (reports / f"{name}.json").write_text(json.dumps(CPU))
        outcome = StudentGrade(name, tmp_path / name, reports / f"{name}.json")
        apply_report(outcome, CPU)
        outcomes.append(outcome)
        students.append(Student(name, tmp_path / name, [], canvas_id=str(100 + len(students))))
    options = gradebook.Options(canvas=tmp_path / "canvas.csv", assignment="HW5 (77)")
    for _ in range(2):  # a merge run twice gives the same files
        rows = gradebook.finish([StudentGrade(**vars(o)) for o in outcomes], students, csv_path, options, "run",
                                progress=lambda line: None)
        with open(csv_path, newline="") as handle:
            table = {row["student"]: row for row in csv.DictReader(handle)}
    assert len(rows) == 7
    assert (table["alice"]["2.3"], table["alice"]["total"], table["alice"]["flags"]) == ("10", "18", "")
    assert (table["bob"]["2.3"], table["bob"]["flags"]) == ("0", "gpu_inconclusive;needs_review")
    assert (table["carol"]["2.3"], table["carol"]["flags"]) == ("0", "blocked_points=10;cpu_without_gpu;needs_review")
    assert (table["dave"]["total"], table["dave"]["flags"]) == ("8", "blocked_points=10;gpu_smoke_run;needs_review")
    assert (table["erin"]["total"], table["erin"]["flags"]) == ("18", "gpu_files_differ;needs_review")
    assert (table["frank"]["total"], table["frank"]["flags"]) == ("8", "blocked_points=10;gpu_blocked;needs_review")
    assert (table["ghost"]["total"], table["ghost"]["status"], table["ghost"]["flags"]) == (
        "", "error", "gpu_without_cpu;needs_review"
    )
    alice = json.loads((reports / "alice.json").read_text())
    assert [(c["id"], c["status"], c["earned"]) for c in alice["criteria"]] == [
        ("2.1-schedule", "passed", 8), ("2.3-speedup", "passed", 10)
    ]
    assert (alice["score"], alice["blocked_points"], len(alice["merged"])) == (18, 0, 1)
    assert alice["merged"][0]["source"] == "GPU run" and alice["merged"][0]["seed"] == 9
    assert json.loads((reports / "dave.json").read_text()) == CPU  # a smoke run measured nothing
    with open(tmp_path / "canvas.csv", newline="") as handle:
        canvas_scores = {row["Student"]: row["HW5 (77)"] for row in csv.DictReader(handle)}
    # criteria blocked until a GPU run (carol, dave, frank): an empty cell, "no change" for Canvas
    assert canvas_scores == {"alice": "18", "bob": "8", "carol": "", "dave": "", "erin": "18", "frank": "", "ghost": ""}
    lines = []
    gradebook.finish([StudentGrade(**vars(o)) for o in outcomes], students, csv_path,
                     gradebook.Options(canvas=tmp_path / "canvas.csv", assignment="HW5 (77)", canvas_without_gpu=True),
                     "run", progress=lines.append)
    with open(tmp_path / "canvas.csv", newline="") as handle:
        canvas_scores = {row["Student"]: row["HW5 (77)"] for row in csv.DictReader(handle)}
    assert (canvas_scores["carol"], canvas_scores["frank"]) == ("8", "8")  # a class graded without GPUs
    assert not any("EMPTY cell" in line for line in lines)


def test_gpu_reports_elsewhere_and_none_at_all(tmp_path):
    csv_path = tmp_path / "grades.csv"
    reports = gradebook.reports_folder(csv_path)
    reports.mkdir()
    (reports / "alice.json").write_text(json.dumps(CPU))
    elsewhere = tmp_path / "reports" / "gpu"
    elsewhere.mkdir(parents=True)
    (elsewhere / "alice.json").write_text(json.dumps(gpu("passed", 10)))

    def run(options):
        outcome = StudentGrade("alice", tmp_path, reports / "alice.json")
        apply_report(outcome, json.loads((reports / "alice.json").read_text()))
        return gradebook.finish([outcome], [Student("alice", tmp_path, [])], csv_path, options, "run", lambda line: None)[0]

    assert run(gradebook.Options()).flags == ["blocked_points=10"]  # no GPU folder: nothing to say
    merged = run(gradebook.Options(gpu_reports=elsewhere))
    assert (merged.score, merged.flags, merged.problems["2.3"]) == (18, [], 10)
