# Two commands on a fresh machine: `make test` and `make grade`.
# The virtual environment is created on first use; a stamp file makes later runs install nothing.
# Only the dependencies are installed, never this project itself: the answer key must not be
# importable from site-packages, where a graded child process could reach it.
# requirements-dev.txt: this repository's own tools (lint; uv for `make lock` and the pin checks).
REQUIREMENTS := requirements.txt requirements-dev.txt
include kit/templates/venv.mk
.DEFAULT_GOAL := help
BENCH_STAMP := $(VENV)/.installed-bench-python$(PYTHON_VERSION)
SUBMISSION ?= minitorch
PYTEST_ARGS ?=
# Two pytest workers: much of the suite waits (ranks, child processes, a cluster), not computes.
PYTEST_WORKERS ?= 2
ARGS ?=

.PHONY: help venv test test-fast lint grade mutation bench handout handout-check gradescope lock clean

help:
	@echo "make test                       install (first run only), lint, and run all of this project's tests"
	@echo "make test-fast                  the edit loop: tests without the catalogue or multi-rank launches (< 60 s)"
	@echo "make lint                       ruff and mypy"
	@echo "make grade [SUBMISSION=path]    grade the answer key, or a submission folder / .zip"
	@echo "make mutation [PROBLEM=2.1] [FAMILY=domain] [SAMPLE=N]  mutation score of the hidden checks (grader/mutation/README.md)"
	@echo "make bench                      CPU speedup benchmarks (tables, JSON and a plot in benchmarks/results/)"
	@echo "make handout                    regenerate the student kit handout/ (commit the result)"
	@echo "make handout-check              fail if handout/ differs from a fresh generation"
	@echo "make gradescope                 build dist/autograder.zip for Gradescope"
	@echo "make lock [UPGRADE=1]           re-resolve constraints.txt (keeping its versions unless UPGRADE=1)"
	@echo "make clean                      remove .venv and build leftovers (the next command reinstalls)"
	@echo "variables: PYTHON=python3.11 (3.10-3.13), TORCH_INDEX_URL= (empty: PyPI's torch, CUDA on Linux), PYTEST_WORKERS=2"

venv: $(STAMP)

# The drift check and lint run first: they are fast and say exactly what to fix.
test: $(STAMP) handout-check lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# No catalogue, no multi-rank launches, no slow tests: for the edit loop. `make test` is the gate.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not multirank" --ignore=tests/catalogue $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# The adequacy measure of the hidden checks: mutants of the answer key's solution regions, graded
# by their problem's criteria on two workers; prints the score table, writes the results JSON and
# exits 1 when a survivor is not in grader/mutation/ledger.toml.
mutation: $(STAMP)
	$(PY) -m grader.mutation run $(if $(PROBLEM),--problem $(PROBLEM)) $(if $(FAMILY),--family $(FAMILY)) \
	    $(if $(SAMPLE),--sample $(SAMPLE)) $(ARGS)

$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.pipeline_speedup

# GNU make reports any failed command as its own exit status 2; the line says the grader's own
# (1: not full marks with ARGS=--require-full; 2: bad usage or a grader error). Scripts that
# need it as an exit status run `$(PY) -m grader grade` directly.
grade: $(STAMP)
	@$(PY) -m grader grade $(SUBMISSION) $(ARGS); status=$$?; \
	case $$status in 0) ;; 1) echo "make grade: the grader exited 1: not full marks" >&2;; \
	  *) echo "make grade: the grader exited $$status: bad usage or a grader error (see above)" >&2;; esac; exit $$status

handout: $(STAMP)
	$(PY) -m kit build --out handout

handout-check: $(STAMP)
	$(PY) -m kit check --out handout

gradescope: $(STAMP)
	$(PY) -m kit bundle --out dist/autograder.zip

# One resolution for every supported Python and platform: environment markers fork it where a
# package's newest release has dropped Python 3.10, and pip applies them itself.
LOCK_INPUTS := requirements.txt requirements-bench.txt requirements-report.txt requirements-dev.txt
define LOCK_HEADER
# The tested pins, for Python 3.10-3.13 on Linux, macOS and Windows, written by the course repository's `make lock`
# (uv pip compile --universal: one resolution, forked by environment markers that pip applies).
# `make lock` keeps these versions where they still resolve; `make lock UPGRADE=1` takes the
# newest. Its `make test` checks that they resolve for each Python on Linux x86_64 and macOS arm64.
# Install: pip install -c constraints.txt -r requirements.txt (torch: see TORCH_INDEX_URL).
endef
export LOCK_HEADER
lock: $(STAMP)
	$(VENV)/bin/uv pip compile --no-config --no-python-downloads $(LOCK_INPUTS) --universal --python-version 3.10 --no-header --quiet \
	    $(if $(UPGRADE),--upgrade) -o constraints.txt
	{ printf '%s\n' "$$LOCK_HEADER"; grep -v '^#' constraints.txt; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
