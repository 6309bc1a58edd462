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
ARGS ?=

.PHONY: help venv test test-fast lint grade bench handout handout-check gradescope clean

help:
	@echo "make test                       install (first run only), lint, and run all of this project's tests"
	@echo "make test-fast                  the edit loop: tests without the catalogue or multi-rank launches (< 60 s)"
	@echo "make lint                       ruff and mypy"
	@echo "make grade [SUBMISSION=path]    grade the answer key, or a submission folder / .zip"
	@echo "make bench                      CPU speedup benchmarks (tables, JSON and a plot in benchmarks/results/)"
	@echo "make handout                    regenerate the student kit handout/ (commit the result)"
	@echo "make handout-check              fail if handout/ differs from a fresh generation"
	@echo "make gradescope                 build dist/autograder.zip for Gradescope"
	@echo "make clean                      remove .venv and build leftovers (the next command reinstalls)"

$(STAMP): requirements.txt requirements-dev.txt requirements-grader.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements.txt -r requirements-dev.txt -r requirements-grader.txt
	touch $(STAMP)

venv: $(STAMP)

# The drift check and lint run first: they are fast and say exactly what to fix.
test: $(STAMP) handout-check lint
	$(PY) -m pytest $(PYTEST_ARGS)

# No catalogue, no multi-rank launches, no slow tests: for the edit loop. `make test` is the gate.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not multirank" --ignore=tests/catalogue $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.pipeline_speedup

grade: $(STAMP)
	$(PY) -m grader grade $(SUBMISSION) $(ARGS)

handout: $(STAMP)
	$(PY) -m kit build --out handout

handout-check: $(STAMP)
	$(PY) -m kit check --out handout

gradescope: $(STAMP)
	$(PY) -m kit bundle --out dist/autograder.zip

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
