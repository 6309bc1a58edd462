# The virtual environment, shared by this repository's Makefile (which includes this file) and
# the student kit's (which gets it inlined by `make handout`). The includer sets REQUIREMENTS.
#
# PYTHON: the interpreter that builds .venv. Python 3.10-3.13 are tested; an older one stops
# with one line saying which to use instead of a resolver error from pip.
# TORCH_INDEX_URL: an extra package index for torch. On Linux it defaults to PyTorch's CPU-only
# wheel index: pip then prefers torch's "+cpu" build, a few hundred MB, over the default Linux
# wheel that pulls gigabytes of CUDA libraries. Set it empty for the default wheel (what a
# student with an NVIDIA GPU wants), or to another of PyTorch's indexes (e.g. .../whl/cu126).
# macOS wheels are CPU builds already, so nothing is set there.
# Before installing, the index is probed once (TORCH_INDEX_PROBE_SECONDS): behind a firewall pip
# would retry every download for minutes (hours where packets are dropped); the probe stops in
# one line naming the fix. kit/gradescope/setup.sh runs the same probe.
PYTHON ?= python3
ifeq ($(shell uname -s),Linux)
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
endif
TORCH_INDEX_PROBE_SECONDS ?= 10
TORCH_INDEX_PROBE = import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=float(sys.argv[2])).close()
VENV := .venv
PY := $(VENV)/bin/python
# "3.11 ok" or "3.9 old"; empty when $(PYTHON) does not run at all. The code runs on Python 2 too.
PYTHON_STATUS := $(shell $(PYTHON) -c 'import sys; v = sys.version_info[:2]; print("%d.%d %s" % (v + ("ok" if v >= (3, 10) else "old",)))' 2>/dev/null)
PYTHON_VERSION := $(word 1,$(PYTHON_STATUS))
# The stamp names the Python it was installed with: a .venv left by another Python is rebuilt.
STAMP := $(VENV)/.installed-python$(PYTHON_VERSION)
TESTED_PYTHONS := 3.13 3.12 3.11 3.10

# A .venv whose interpreter no longer starts (its Python was removed or moved) is rebuilt too.
ifneq ($(wildcard $(STAMP)),)
ifneq ($(shell $(PY) -c 'print("ok")' 2>/dev/null),ok)
.PHONY: $(STAMP)
endif
endif

# Expanded only when .venv is (re)built, so `make help` and `make clean` work with any Python.
working_python = $(shell for v in $(TESTED_PYTHONS); do python$$v -c '' 2>/dev/null && { echo python$$v; break; }; done)
suggestion = $(if $(working_python),set PYTHON=$(working_python),install Python 3.10-3.13 and set PYTHON to it (e.g. PYTHON=python3.11))
found = $(if $(PYTHON_VERSION),found $(PYTHON_VERSION),$(PYTHON) does not run)
index_reached = $(shell $(PYTHON) -c '$(TORCH_INDEX_PROBE)' '$(TORCH_INDEX_URL)' $(TORCH_INDEX_PROBE_SECONDS) >/dev/null 2>&1 && echo yes)
dry_run = $(findstring n,$(firstword -$(MAKEFLAGS)))
check_index = $(if $(and $(TORCH_INDEX_URL),$(if $(dry_run),,yes)),$(if $(index_reached),,$(error cannot reach TORCH_INDEX_URL=$(TORCH_INDEX_URL) within $(TORCH_INDEX_PROBE_SECONDS) s (a firewall$(comma) a proxy or no network?); run again with TORCH_INDEX_URL= for PyPI's torch (on Linux its CUDA build$(comma) about 3 GB with its libraries) or TORCH_INDEX_URL=<a mirror of that index>)))
comma := ,
check_python = $(if $(filter ok,$(word 2,$(PYTHON_STATUS))),$(if $(filter $(TESTED_PYTHONS),$(PYTHON_VERSION)),,$(info note: Python $(PYTHON_VERSION) is newer than the tested 3.10-3.13; if the install fails $(suggestion))),$(error this kit needs Python >= 3.10; $(found); $(suggestion)))

# A .venv of the same Python is updated in place (changed pins install in seconds); any other is replaced.
$(STAMP): $(REQUIREMENTS) constraints.txt
	$(check_python)
	$(check_index)
	@if [ "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$(PYTHON_VERSION)" ]; then \
	  echo "creating $(VENV) with $(PYTHON) (Python $(PYTHON_VERSION))"; rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); fi
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt $(addprefix -r ,$(REQUIREMENTS)) $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL))
	rm -f $(VENV)/.installed*
	touch $@
