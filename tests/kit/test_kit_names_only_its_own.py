"""The student kit speaks only of what it has: its pyproject, Makefile and public tests name no
command, file or folder of the course repository that the kit does not ship (issue 23)."""
import re

from kit import handout
from kit.handout import STUDENT_FILES

# Course-only things a student could go looking for.
COURSE_ONLY = ("test-fast", "grader/", "rubric.toml", "python -m course", "python -m grader", "tests/catalogue")


def test_kit_text_files_name_nothing_the_kit_lacks():
    files = handout._kit_files(list(STUDENT_FILES))
    offenders = []
    for name, content in files.items():
        if not (name == "pyproject.toml" or name == "Makefile" or name.startswith("tests/")):
            continue
        text = content if isinstance(content, str) else content.read_text() if hasattr(content, "read_text") else ""
        for thing in COURSE_ONLY:
            if thing in text and not (thing.rstrip("/") + "/" in files or any(f.startswith(thing) for f in files)):
                offenders += [f"{name}:{n}: {thing}" for n, line in enumerate(text.splitlines(), 1) if thing in line]
    assert not offenders, offenders
    assert re.search(r"^test:", files["Makefile"] if isinstance(files["Makefile"], str) else "", re.M)  # the kit's own
