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

.PHONY: help venv test grade bench clean

help:
	@echo "make test                       install (first run only) and run this project's tests"
	@echo "make grade [SUBMISSION=path]    grade the answer key, or a submission folder / .zip"
	@echo "make bench                      CPU speedup benchmarks (tables, JSON and a plot in benchmarks/results/)"

$(STAMP): requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.pipeline_speedup

grade: $(STAMP)
	$(PY) -m grader $(SUBMISSION)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
