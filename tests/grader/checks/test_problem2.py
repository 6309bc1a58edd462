"""The Problem 2 checks as a whole (grader/checks/problem2/): the answer key passes every check with
its own pieces and with the grader's, every check is a rubric criterion, and a wrong clock_cycles
costs 2.2 nothing (its criteria pass with the grader's schedule in place: the fallback).
Each concept's wrong variants are tested in test_problem2_<concept>.py."""
from __future__ import annotations

import importlib
import pkgutil

import pytest
from problem2_helpers import CRITERIA, fails, patcher, right_waves, run

import grader.checks.problem2 as package

CPU_CHECKS = sorted(c.name for c in CRITERIA.values() if c.needs == "cpu")


@pytest.fixture
def student(monkeypatch):
    return patcher(monkeypatch)


@pytest.mark.parametrize("pieces", ["own", "grader"])
@pytest.mark.parametrize("name", CPU_CHECKS)
def test_answer_key_passes(name, pieces, student):
    run(name, pieces)


def test_every_problem2_check_is_in_the_rubric():
    observed = set()
    for folder in pkgutil.iter_modules(package.__path__):
        if folder.ispkg:
            module = importlib.import_module(f"{package.__name__}.{folder.name}.observe")
            observed |= {f"problem2.{folder.name}:{name[len('observe_'):]}" for name in vars(module) if name.startswith("observe_")}
    assert observed == {c.check for c in CRITERIA.values()}


def test_every_criterion_is_in_the_packages_map():
    assert all(f"``{c.check}``" in (package.__doc__ or "") and c.id in (package.__doc__ or "") for c in CRITERIA.values())


def test_the_2_2_criteria_fall_back_to_the_graders_clock_cycles_and_2_3_times_with_it():
    assert {c.id for c in CRITERIA.values() if c.fallback == "clock_cycles"} == {c.id for c in CRITERIA.values()
                                                                                if c.problem == "2.2"}
    assert CRITERIA["2.3-speedup"].params["pieces"] == "grader"


def test_a_wrong_clock_cycles_fails_2_2_with_its_own_pieces_and_passes_with_the_graders(student):
    student("clock_cycles", lambda m, k: (wave[::-1] for wave in right_waves(m, k)))  # stages listed descending
    fails("call_order", r"wave 1: expected submit\(0\) submit\(1\) receive\(0\) receive\(1\); got submit\(1\) submit\(0\)")
    run("call_order", pieces="grader")
    for name in ("forward", "exceptions", "backward"):
        run(name, pieces="grader")
