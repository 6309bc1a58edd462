"""Shared by every test of the course repository (the student kit ships tests/public/ only).

With pytest-xdist (`make test` runs two workers), each test module stays on one worker, so a
module's fixtures (a kit built once, a private Slurm cluster, a graded class) are made once;
only the catalogue's entries, each a grading run of its own, are spread over the workers.
Modules start heaviest first and the catalogue's entries come last, so they fill the end.
"""
from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

import pytest

SPREAD = {"test_catalogue.py"}  # modules whose tests share nothing but the answer key
SLOW_WEIGHT = 10  # a test marked slow counts as this many others when modules are ordered


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Heavy modules first (by their tests, slow ones weighing more), SPREAD modules' tests last;
    a module's own tests keep their order."""
    weight: Counter = Counter()
    for item in items:
        weight[item.path] += SLOW_WEIGHT if item.get_closest_marker("slow") else 1
    items.sort(key=lambda item: (item.path.name in SPREAD, -weight[item.path], str(item.path)))


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # plain pytest (no xdist): nothing to schedule
    pass
else:
    class ModuleScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with one scope per module, and one per test in SPREAD, taken
        in collection order.

        A scheduler of our own, not ``xdist_group`` marks: those work by renaming each test's
        node id, which pytest 9 no longer lets a plugin do (every module then ran on both
        workers and made its module fixtures twice)."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if PurePosixPath(module).name in SPREAD else module

    def pytest_xdist_make_scheduler(config, log):
        config.option.loadscopereorder = False  # the order pytest_collection_modifyitems chose
        return ModuleScheduling(config, log)
