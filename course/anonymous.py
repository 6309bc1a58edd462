"""Anonymous grading (``--anonymous``): stable pseudonyms in place of names in what a grader looks
at, while the files that go back to the LMS keep the students' ids.

Each student gets a random pseudonym (``anon-4821``) the first time a gradebook of this reports
folder is built anonymously, kept in :data:`PSEUDONYMS_FILE` beside the reports, so a student
keeps theirs through every regrade, rebuild and Slurm merge. Random, not numbered in name order,
so a pseudonym says nothing about where its student sorts in the roster.

With the flag, the gradebook CSV names each student by pseudonym (``similar_to=`` flags too) and
leaves its report column empty (a report's file is named after the student); the dashboard shows
pseudonyms everywhere (the similarity pairs included) and no report file names. Canvas's import,
the feedback files (each goes to its own student), the changelog (the audit trail) and the reports
folder keep names: they are the instructor's, and so is the pseudonyms file, which maps back.
"""
from __future__ import annotations

import csv
import io
import secrets
from pathlib import Path

from grader.protocol import write_atomic

# In the reports folder; '@' never occurs in a student's file name there (course.discovery.safe_file_name).
PSEUDONYMS_FILE = "pseudonyms@class.csv"
PREFIX = "anon-"
SIMILAR = "similar_to="


def read(reports: Path) -> dict[str, str]:
    """``{student: pseudonym}`` kept in ``reports``; empty when there is none yet."""
    try:
        with open(reports / PSEUDONYMS_FILE, newline="", encoding="utf-8") as handle:
            return {row["student"]: row["pseudonym"] for row in csv.DictReader(handle)
                    if row.get("student") and row.get("pseudonym")}
    except OSError:
        return {}


def assign(reports: Path, students: list[str]) -> dict[str, str]:
    """Every student's pseudonym: the one kept in ``reports``, or a new random one (kept from now on)."""
    known = read(reports)
    new = [s for s in dict.fromkeys(students) if s not in known]
    if not new:
        return known
    taken = set(known.values())
    digits = max(4, len(str(10 * (len(known) + len(new)))))  # at most a tenth of the numbers in use: quick to draw
    for student in new:
        while (pseudonym := f"{PREFIX}{secrets.randbelow(9 * 10 ** (digits - 1)) + 10 ** (digits - 1)}") in taken:
            pass
        known[student] = pseudonym
        taken.add(pseudonym)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(("student", "pseudonym"))
    writer.writerows(sorted(known.items()))
    reports.mkdir(parents=True, exist_ok=True)
    write_atomic(reports / PSEUDONYMS_FILE, text.getvalue())
    return known


def flags(flags: list[str], pseudonyms: dict[str, str]) -> list[str]:
    """``flags`` with each ``similar_to=<student>`` naming the pseudonym instead."""
    return [SIMILAR + pseudonyms.get(f[len(SIMILAR):], f[len(SIMILAR):]) if f.startswith(SIMILAR) else f for f in flags]
