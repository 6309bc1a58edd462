#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image (zip unpacked in /autograder/source).
# Installs the tested pins: the CPU build of torch first (Gradescope has no GPU; the default
# PyPI wheel would pull gigabytes of CUDA libraries), then everything else.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -qq
apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
/autograder/venv/bin/python -m pip install --quiet -c constraints.txt torch \
    --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/python -m pip install --quiet -c constraints.txt -r requirements.txt
/autograder/venv/bin/python -c "import torch; print('torch', torch.__version__)"
