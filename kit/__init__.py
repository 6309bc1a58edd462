"""Build-time tools: the student kit (``handout/``) and the Gradescope bundle.

``python -m kit build | check | bundle``. These tools execute the answer key (the write-up's
figures) and are never shipped to Gradescope nor imported by ``grader/``: building the
assignment is separate from grading it (otter's ``assign`` vs ``run``, nbgrader's
``GenerateAssignment`` vs ``Autograde``).
"""
