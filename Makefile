# Two commands on a fresh machine: `make test` and `make grade`.
# The virtual environment is created on first use; a stamp file makes later runs install nothing.
# Only the dependencies are installed, never this project itself: the answer key must not be
# importable from site-packages, where a graded child process could reach it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUBMISSION ?= minitorch
PYTEST_ARGS ?=

.PHONY: help venv test grade clean

help:
	@echo "make test                       install (first run only) and run this project's tests"
	@echo "make grade [SUBMISSION=path]    grade the answer key, or a submission folder / .zip"

$(STAMP): requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

grade: $(STAMP)
	$(PY) -m grader $(SUBMISSION)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
