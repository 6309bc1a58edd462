"""Running a class: discovery, batch, gradebook, Canvas, regrade, similarity, dashboard, Slurm.

Uses the grader (``grader/``) to grade each student in a process of its own; the grader never
imports this package. Command line: ``python -m course`` (see :mod:`course.cli`).
"""
