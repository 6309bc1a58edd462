#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image (zip unpacked in /autograder/source).
# Installs the tested pins (constraints.txt: one file for Python 3.10-3.13, markers pick the versions)
# into /autograder/venv. Gradescope has no GPU: TORCH_INDEX_URL (default: PyTorch's CPU-only wheel
# index) makes pip take torch's "+cpu" build instead of the default Linux wheel and its gigabytes
# of CUDA libraries. Edit the default here, or set it to "" for PyPI's default wheel.
set -euo pipefail
cd "$(dirname "$0")"
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
TORCH_INDEX_PROBE_SECONDS="${TORCH_INDEX_PROBE_SECONDS-10}"
# The same probe as the student kit's Makefile (kit/templates/venv.mk): one try, briefly, so a
# firewall costs seconds, not pip's retries; here the build falls back to PyPI's torch.
TORCH_INDEX_PROBE='import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=float(sys.argv[2])).close()'
apt-get update -qq
apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
python3 -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v >= (3, 10) else "this autograder needs Python >= 3.10; the image has %d.%d: choose the Ubuntu 22.04 base image or newer" % v)'
if [ -n "$TORCH_INDEX_URL" ] && ! python3 -c "$TORCH_INDEX_PROBE" "$TORCH_INDEX_URL" "$TORCH_INDEX_PROBE_SECONDS" >/dev/null 2>&1; then
  echo "cannot reach TORCH_INDEX_URL=$TORCH_INDEX_URL within $TORCH_INDEX_PROBE_SECONDS s: installing PyPI's torch instead (its CUDA build, about 3 GB with its libraries; set TORCH_INDEX_URL in setup.sh to a reachable mirror to avoid it)"
  TORCH_INDEX_URL=""
fi
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
/autograder/venv/bin/python -m pip install --quiet -c constraints.txt -r requirements.txt \
    ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}
/autograder/venv/bin/python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
