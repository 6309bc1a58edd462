#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image (zip unpacked in /autograder/source).
# Installs the tested pins (constraints.txt: one file for Python 3.10-3.13, markers pick the versions)
# into /autograder/venv. Gradescope has no GPU: TORCH_INDEX_URL (default: PyTorch's CPU-only wheel
# index) makes pip take torch's "+cpu" build instead of the default Linux wheel and its gigabytes
# of CUDA libraries. Edit the default here, or set it to "" for PyPI's default wheel.
set -euo pipefail
cd "$(dirname "$0")"
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
apt-get update -qq
apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
python3 -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v >= (3, 10) else "this autograder needs Python >= 3.10; the image has %d.%d: choose the Ubuntu 22.04 base image or newer" % v)'
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
/autograder/venv/bin/python -m pip install --quiet -c constraints.txt -r requirements.txt \
    ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}
/autograder/venv/bin/python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
