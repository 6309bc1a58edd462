"""The autograder: isolated, criterion-by-criterion grading of a submission.

Run ``python -m grader grade PATH``; see README.md. The grader never imports a student's
code into its own process: every criterion runs in a child process built from a
disposable tree (the grader's own copy of the provided modules plus the submitted
student files).
"""
