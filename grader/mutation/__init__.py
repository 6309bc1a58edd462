"""``make mutation``: the project's own adequacy measure of the hidden checks.

Mutants of the ANSWER KEY's solution regions (one small change each, see
:mod:`grader.mutation.generate`) are graded with the hidden checks of their problem
(:mod:`grader.mutation.driver`); a mutant that passes every criterion survived. Survivors are
ledgered (``ledger.toml``: equivalent, with the reason, or open, with the check that would kill
them) and the score per problem and family is ``killed / (generated - equivalent)``.

A development tool: it is never shipped in the Gradescope bundle (nothing that grades imports
it), and it is the one part of ``grader/`` that uses the kit builder (:func:`kit.handout.find_regions`
finds the regions it mutates). README.md says how to run it and read it.
"""
