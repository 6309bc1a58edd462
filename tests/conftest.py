"""Shared by every test of the course repository (the student kit ships tests/public/ only).

With pytest-xdist (`make test` runs two workers), each test module stays on one worker, so a
module's fixtures (a kit built once, a private Slurm cluster, a graded class) are made once;
only the catalogue's entries, each a grading run of its own, are spread over the workers.
"""
from __future__ import annotations

from pathlib import PurePosixPath

SPREAD = {"test_catalogue.py"}  # modules whose tests share nothing but the answer key

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # plain pytest (no xdist): nothing to schedule
    pass
else:
    class ModuleScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with one scope per module, and one per test in SPREAD.

        A scheduler of our own, not ``xdist_group`` marks: those work by renaming each test's
        node id, which pytest 9 no longer lets a plugin do (every module then ran on both
        workers and made its module fixtures twice). Scopes with more tests go first; the
        catalogue's single-test scopes fill the end."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if PurePosixPath(module).name in SPREAD else module

    def pytest_xdist_make_scheduler(config, log):
        return ModuleScheduling(config, log)
