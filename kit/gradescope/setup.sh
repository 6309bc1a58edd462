#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image (zip unpacked in /autograder/source).
# Installs the tested pins: torch first, then everything else. Gradescope has no GPU, and the
# default torch wheel carries gigabytes of CUDA libraries: to install the CPU build instead, set
# TORCH_INDEX_URL below to the CPU wheel index shown on PyTorch's "get started" page.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -qq
apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
TORCH_INDEX_URL="${TORCH_INDEX_URL:-}"
/autograder/venv/bin/python -m pip install --quiet -c constraints.txt torch \
    ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
/autograder/venv/bin/python -m pip install --quiet -c constraints.txt -r requirements.txt
/autograder/venv/bin/python -c "import torch; print('torch', torch.__version__)"
