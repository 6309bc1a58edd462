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
