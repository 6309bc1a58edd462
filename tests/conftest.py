"""Shared by every test of the course repository (the student kit ships tests/public/ only).

With pytest-xdist (`make test` runs two workers), each test module stays on one worker, so a
module's fixtures (a kit built once, a private Slurm cluster, a graded class) are made once;
only the catalogue's entries, each a grading run of its own, are spread over the workers.
"""
from __future__ import annotations

import pytest

SPREAD = {"test_catalogue.py"}  # modules whose tests share nothing but the answer key


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(str(item.path)))
