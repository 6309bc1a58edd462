"""The terminal report's failure section: a stub names the part that blocks it, one missing file
is one line (not one block per criterion), and "1 point" reads as English."""
from grader.grading import _not_implemented
from grader.protocol import Report, Result, Status
from grader.report import summary
from grader.rubric import load_rubric

RUBRIC = load_rubric()


def failed(criterion, message, points=3, output=""):
    return Result(id=criterion.id, problem=criterion.problem, title=criterion.title, points=points, earned=0,
                  status=Status.FAILED, message=message, seconds=0.1, output=output)


def report_of(results):
    return Report(submission="alice", files={}, environment={}, seed=1, results=results, planned=len(results),
                  complete=True)


def test_a_stub_names_itself():
    assert _not_implemented("2.1", "Problem 2.1: clock_cycles") == (
        "not implemented yet (Problem 2.1): clock_cycles still raises NotImplementedError")


def test_a_stub_of_an_earlier_part_is_named_as_what_blocks_it():
    message = _not_implemented("3.3", "rank 1: Problem 3.2: ColumnParallelLinear.shard")
    assert message == ("not implemented yet (Problem 3.3): it builds on Problem 3.2, "
                       "whose ColumnParallelLinear.shard still raises NotImplementedError")


def test_a_students_own_not_implemented_error_is_quoted():
    assert _not_implemented("4.2", "v must divide M") == (
        "not implemented yet (Problem 4.2); your code raised NotImplementedError('v must divide M')")


def test_a_missing_file_is_one_line_for_all_its_criteria():
    pipeline = [c for c in RUBRIC.active() if c.problem.split(".")[0] in ("2", "4")]
    text = summary(report_of([failed(c, "missing pipeline.py (not in the submission)") for c in pipeline]), RUBRIC)
    section = text[text.index("What went wrong:"):].strip().splitlines()
    problems = ", ".join(dict.fromkeys(c.problem for c in pipeline))
    assert section[1:] == [f"Problems {problems} ({len(pipeline)} criteria, {3 * len(pipeline)} points): failed: "
                           "missing pipeline.py (not in the submission)"]


def test_failures_with_their_own_message_or_output_keep_their_block():
    first, second, third = RUBRIC.active()[:3]
    results = [failed(first, "wave 2: expected submit(0); got receive(0)", points=1),
               failed(second, "same message", output="printed by the student\n"),
               failed(third, "same message")]
    lines = summary(report_of(results), RUBRIC).splitlines()
    assert f"{first.id} (1 point): failed" in lines and "    wave 2: expected submit(0); got receive(0)" in lines
    assert f"{second.id} (3 points): failed" in lines and "      | printed by the student" in lines
    assert f"{third.id} (3 points): failed" in lines  # one of a kind once the one with output is apart
    assert not any("(1 points)" in line for line in lines)


def test_gradescopes_text_and_score_agree_when_criteria_are_blocked():
    """Gradescope's score leaves blocked criteria out (90 of 90 there): the text beside it must
    not say "Total 90/100" (issue 23, item 4); the terminal report keeps the whole total."""
    from grader.report import gradescope

    passed, blocked = RUBRIC.active()[:2]
    results = [Result(id=passed.id, problem=passed.problem, title=passed.title, points=8, earned=8, status=Status.PASSED,
                      message="", seconds=0.1),
               Result(id=blocked.id, problem=blocked.problem, title=blocked.title, points=10, earned=0,
                      status=Status.BLOCKED, message="needs 2 CUDA GPUs", seconds=0.0)]
    results_json = gradescope(report_of(results), RUBRIC, 1.0)
    total = next(line for line in results_json["output"].splitlines() if line.startswith("Total"))
    assert results_json["score"] == 8 and sum(t["max_score"] for t in results_json["tests"]) == 8
    assert total.split()[1] == "8/8" and "10 points graded separately on GPUs" in total
    terminal = next(line for line in summary(report_of(results), RUBRIC).splitlines() if line.startswith("Total"))
    assert terminal.split()[1] == "8/18"


# --- What a student sees on Gradescope: only what the rubric's visibility allows (issue 28, item 1) ---
SECRET = "2.2-backward"
SECRET_POINTS = next(c.points for c in RUBRIC.criteria if c.id == SECRET)
NOT_VISIBLE = ("hidden", "after_due_date", "after_published")


def rubric_with(visibility: dict[str, str]):
    from dataclasses import replace

    return replace(RUBRIC, criteria=tuple(replace(c, visibility=visibility.get(c.id, c.visibility)) for c in RUBRIC.criteria))


def result(criterion_id, earned, status, message="", output=""):
    criterion = next(c for c in RUBRIC.criteria if c.id == criterion_id)
    return Result(id=criterion.id, problem=criterion.problem, title=criterion.title, points=criterion.points,
                  earned=earned, status=status, message=message, seconds=0.1, output=output)


def class_report(secret: str):
    """2.2-forward passed, 2.1-schedule failed, and the secret criterion "passed", "failed" with
    a message and printed output, or failed with 2.1-schedule's message ("shared": one line for
    both when both are shown); a note and a review reason that name it."""
    secret = {"passed": result(SECRET, SECRET_POINTS, Status.PASSED),
              "failed": result(SECRET, 0, Status.FAILED, "SECRET-MESSAGE: gradients differ", "SECRET-PRINTED\n"),
              "shared": result(SECRET, 0, Status.FAILED, "wave 0: expected submit(0)")}[secret]
    report = report_of([result("2.1-schedule", 0, Status.FAILED, "wave 0: expected submit(0)"),
                        result("2.2-forward", 4, Status.PASSED), secret,
                        result("2.3-speedup", 0, Status.BLOCKED, "needs 2 CUDA GPUs")])
    report.note(f"{SECRET}: your code left 1 process running after the criterion ended")
    report.flag(f"{SECRET} replaced grader or torch code")
    return report


def secret_traces(text: str, criterion_id: str = SECRET) -> list[str]:
    criterion = next(c for c in RUBRIC.criteria if c.id == criterion_id)
    return [trace for trace in (criterion_id, criterion.title, "SECRET-MESSAGE", "SECRET-PRINTED") if trace in text]


def test_a_criterion_a_student_may_not_see_leaves_no_trace_in_gradescopes_top_level_output():
    from grader.report import gradescope

    for visibility in NOT_VISIBLE:
        rubric = rubric_with({SECRET: visibility})
        for secret in ("failed", "shared", "passed"):
            results_json = gradescope(class_report(secret), rubric, 1.0)
            output = results_json["output"]
            assert secret_traces(output) == [], (visibility, output)
            assert "2.2" in output and "4/4" in next(line for line in output.splitlines() if line.startswith("2.2"))
            assert next(line for line in output.splitlines() if line.startswith("Total")).split()[1] == "4/7"
            assert "2.1-schedule (3 points): failed" in output  # the visible one keeps its own line
            earned = SECRET_POINTS if secret == "passed" else 0
            (test,) = [t for t in results_json["tests"] if t["name"].startswith(SECRET)]
            assert test["visibility"] == visibility and test["score"] == earned
            assert results_json["score"] == 4 + earned  # the grade itself is whole
            assert results_json["stdout_visibility"] == "hidden" and results_json["output_format"] == "text"


def test_a_visible_criterion_is_all_there():
    from grader.report import gradescope

    output = gradescope(class_report("failed"), RUBRIC, 1.0)["output"]
    assert secret_traces(output) == [SECRET, "SECRET-MESSAGE", "SECRET-PRINTED"]  # failure lines carry no title
    shared = gradescope(class_report("shared"), RUBRIC, 1.0)["output"]
    assert f"2.1-schedule, 2.2-backward ({3 + SECRET_POINTS} points): failed: wave 0: expected submit(0)" in shared
    assert next(line for line in output.splitlines() if line.startswith("2.2")).split()[-1] == f"4/{4 + SECRET_POINTS}"


def test_a_hidden_criterion_worth_points_keeps_gradescopes_total_waiting_for_publication():
    """Gradescope shows the total unless a test waits (after_due_date, after_published); a
    hidden test's points would show through it."""
    from grader.report import TOTAL_WAITS, gradescope

    def waiting(visibility):
        tests = gradescope(class_report("failed"), rubric_with({SECRET: visibility}), 1.0)["tests"]
        return [t for t in tests if t["name"] == TOTAL_WAITS["name"]]

    assert waiting("hidden") == [TOTAL_WAITS] and TOTAL_WAITS["visibility"] == "after_published"
    assert waiting("visible") == waiting("after_due_date") == waiting("after_published") == []


def test_a_blocked_criterion_a_student_may_not_see_is_not_named_in_the_gpu_note():
    from grader.report import gradescope

    for visibility in NOT_VISIBLE:
        output = gradescope(class_report("failed"), rubric_with({"2.3-speedup": visibility}), 1.0)["output"]
        assert "2.3" not in output and "GPU" not in output, output
    shown = gradescope(class_report("failed"), RUBRIC, 1.0)["output"]
    assert "2.3-speedup (10 points, needs 2 CUDA GPUs)" in shown and "10 points graded separately on GPUs" in shown


def test_the_staffs_terminal_view_keeps_everything():
    text = summary(class_report("failed"), rubric_with({SECRET: "hidden"}))
    assert secret_traces(text) == [SECRET, "SECRET-MESSAGE", "SECRET-PRINTED"] and "replaced grader" in text
    assert "Not shown to students (Gradescope's text, feedback files): 2.2-backward (hidden)" in text.splitlines()
    assert "Not shown to students" not in summary(class_report("failed"), RUBRIC)
