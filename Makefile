# Two commands on a fresh machine: `make test` and `make grade`.
# The virtual environment is created on first use; a stamp file makes later runs install nothing.
# Only the dependencies are installed, never this project itself: the answer key must not be
# importable from site-packages, where a graded child process could reach it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
SUBMISSION ?= minitorch
PYTEST_ARGS ?=

.PHONY: help venv test grade bench handout handout-check gradescope clean

help:
	@echo "make test                       install (first run only) and run this project's tests"
	@echo "make grade [SUBMISSION=path]    grade the answer key, or a submission folder / .zip"
	@echo "make bench                      CPU speedup benchmarks (tables, JSON and a plot in benchmarks/results/)"
	@echo "make handout                    regenerate the student kit handout/ (commit the result)"
	@echo "make handout-check              fail if handout/ differs from a fresh generation"
	@echo "make gradescope                 build dist/autograder.zip for Gradescope"

$(STAMP): requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

# The drift check runs first: it is fast and says exactly what to do (`make handout`).
test: $(STAMP) handout-check
	$(PY) -m pytest $(PYTEST_ARGS)

$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.pipeline_speedup

grade: $(STAMP)
	$(PY) -m grader $(SUBMISSION)

handout: $(STAMP)
	$(PY) -m grader.handout build --out handout

handout-check: $(STAMP)
	$(PY) -m grader.handout check --out handout

gradescope: $(STAMP)
	$(PY) -m grader.bundle --out dist/autograder.zip

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
