"""Entry point of ``python -m grader``; the grader itself lands with the grading issue."""
import sys

sys.exit("python -m grader: not available yet (the grader lands with the next issue); run `make test`.")
