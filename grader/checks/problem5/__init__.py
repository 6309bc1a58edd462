"""Hidden checks for Problem 5: the 3D-parallel estimate (5.1) and the search for a plan (5.2).

Criterion -> its check (``observe.py`` runs in the child, ``judge.py`` in the parent):

================== ===================================== ===========================================
criterion          check (grader/rubric.toml)            folder
================== ===================================== ===========================================
5.1-memory         ``problem5.estimate:memory``          ``estimate/`` (cases: ``estimate/cases.py``)
5.1-compute-bubble ``problem5.estimate:compute_bubble``  ``estimate/``
5.1-communication  ``problem5.estimate:communication``   ``estimate/``
5.1-kinds          ``problem5.estimate:kinds``           ``estimate/``
5.1-arguments      ``problem5.arguments:estimate``       ``arguments/``
5.2-best-plan      ``problem5.best_plan:best_plan``      ``best_plan/`` (``cases.py``, ``stand_in.py``)
5.2-arguments      ``problem5.arguments:best_plan``      ``arguments/``
================== ===================================== ===========================================

Shared by both sides: :mod:`.plans` (the data types' fields, the contract's validity rule, how
the child reads an Estimate). Parent only: :mod:`.expected` (the grader's own cost model, from
the lecture's definitions, never from the answer key) and :mod:`.judge_common` (how a call
reads in a message, the tolerance).

Every rule of the contracts has deterministic cases on both sides, every run (each concept's
``cases.py`` lists them; ``tests/grader/checks/test_problem5_*.py`` proves what each tries);
seeded random cases come on top. 5.1's four criteria observe the same calls; each judges its
own fields, the three of understanding by value, 5.1-kinds (a convention) by type and by
freshness (a new Estimate at each call). Each function's Raises clause is its own convention
criterion (5.1-arguments, 5.2-arguments). 5.2-best-plan has ``fallback = "estimate"``: its
first run uses the student's own ``estimate`` on real searches judged by the grader's cost
model; only if that fails, a second run binds the grader's stand-in ``estimate`` (made-up,
designed tables) in the student's module, so a mistake in 5.1 does not cost 5.2 too.
"""
