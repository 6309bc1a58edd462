#!/usr/bin/env bash
# Validate the CUDA code paths on a machine with one or more NVIDIA GPUs, in under 8 minutes:
#
#   scripts/gpu_validate.sh [--write]        (from the repository root)
#
# 1. the answer key with `--gpu-smoke` (2.3 on ONE GPU, small workload): every criterion passes;
# 2. the stubs with `--gpu-smoke`: 0 points, each criterion `failed`, none `error`;
# 3. a wrong Pipe (moves microbatches on the calling thread, tests/catalogue/
#    transfer-on-calling-thread.toml): 2.2-transfers fails; with two GPUs 2.3 must fail too;
# 4. with two GPUs: the real 2.3 (two stages on cuda:0 and cuda:1, HW5's workload) on the
#    answer key: passes (at least the rubric's 1.10x);
# 5. the CUDA benchmark with both stages on cuda:0 (the Pipe, the schedule executor and the
#    timing protocol on CUDA; the ratios show overlap on one device, not a two-GPU speedup).
#
# Prints a Markdown table (GPUs, driver, torch and CUDA versions, each result, the timings)
# for docs/VALIDATION.md; `--write` also writes it there. Exit status: 0 when every
# expectation held or there is no GPU (then nothing runs); 1 otherwise. PYTHON (default
# .venv/bin/python) must have a torch with CUDA; the work files go to GPU_VALIDATE_WORK
# (default build/gpu-validate/), one log per step.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
BUDGET=${GPU_VALIDATE_BUDGET:-460}   # seconds; each step gets at most what is left of it
WRITE=0
for argument in "$@"; do
    case "$argument" in
        --write) WRITE=1 ;;
        *) echo "usage: scripts/gpu_validate.sh [--write]" >&2; exit 2 ;;
    esac
done

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_validate: no NVIDIA GPU on this machine (no nvidia-smi): nothing was run"
    exit 0
fi
GPU_LIST=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)
if [ -z "$GPU_LIST" ]; then
    echo "gpu_validate: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing was run"
    exit 0
fi
if [ ! -x "$PYTHON" ]; then
    echo "gpu_validate: $PYTHON not found: run \`make venv\` (with a CUDA build of torch) or set PYTHON" >&2
    exit 1
fi
VERSIONS=$("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())' 2>&1)
read -r TORCH CUDA GPUS <<<"$VERSIONS"
if ! [[ "${GPUS:-}" =~ ^[0-9]+$ ]] || [ "$GPUS" -lt 1 ]; then
    echo "gpu_validate: nvidia-smi sees a GPU but torch in $PYTHON does not ($VERSIONS): install a CUDA build of torch" >&2
    exit 1
fi

WORK=${GPU_VALIDATE_WORK:-build/gpu-validate}
rm -rf "$WORK"
mkdir -p "$WORK"
START=$SECONDS
FAILED=0
ROWS=()

# run_step NAME LIMIT COMMAND...: run with the time left (at most LIMIT s); sets STEP_SECONDS, STEP_STATUS.
run_step() {
    local name=$1 limit=$2 left
    shift 2
    left=$((BUDGET - (SECONDS - START)))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 20 ]; then
        STEP_STATUS=skipped STEP_SECONDS=0
        echo "== $name: skipped (the ${BUDGET} s budget is spent)"
        return
    fi
    echo "== $name (at most ${limit} s)"
    local begin=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$WORK/$name.log" 2>&1
    STEP_STATUS=$?
    STEP_SECONDS=$((SECONDS - begin))
    tail -n 5 "$WORK/$name.log"
}

# verdict NAME EXPECTATION REPORT.json: check the report, add a table row.
verdict() {
    local name=$1 expect=$2 report=$3 line wanted
    case "$expect" in
        all-passed) wanted="every criterion passes" ;;
        all-failed-no-error) wanted="0 points, each criterion failed, none error" ;;
        benchmark) wanted="runs; parameters agree after every pair" ;;
    esac
    if [ "$STEP_STATUS" = skipped ]; then
        line="skipped (time budget)"; FAILED=1
    elif [ "$STEP_STATUS" = 124 ] || [ "$STEP_STATUS" = 137 ]; then
        line="TIMED OUT after ${STEP_SECONDS} s"; FAILED=1
    else
        line=$("$PYTHON" scripts/gpu_validate_report.py "$report" "$expect") || FAILED=1
    fi
    ROWS+=("| $name | $wanted | $line | ${STEP_SECONDS} s |")
}

KEY=$WORK/key STUBS=$WORK/stubs WRONG=$WORK/wrong-transfers
"$PYTHON" scripts/gpu_validate_report.py --make-submissions "$KEY" "$STUBS" "$WRONG" || exit 1

run_step smoke-key 150 "$PYTHON" -m grader grade "$KEY" --gpu-smoke --json "$WORK/smoke-key.json"
verdict "answer key, --gpu-smoke (1 GPU)" all-passed "$WORK/smoke-key.json"
run_step smoke-stubs 120 "$PYTHON" -m grader grade "$STUBS" --gpu-smoke --json "$WORK/smoke-stubs.json"
verdict "stubs, --gpu-smoke (1 GPU)" all-failed-no-error "$WORK/smoke-stubs.json"
if [ "$GPUS" -ge 2 ]; then
    run_step key-2.3 200 "$PYTHON" -m grader grade "$KEY" --only 2.3 --json "$WORK/key-2.3.json"
    verdict "answer key, 2.3 on 2 GPUs" all-passed "$WORK/key-2.3.json"
    run_step wrong-2.3 200 "$PYTHON" -m grader grade "$WRONG" --only 2.2-transfers 2.3 --json "$WORK/wrong.json"
    verdict "Pipe moving on the calling thread, 2.2-transfers + 2.3 on 2 GPUs" all-failed-no-error "$WORK/wrong.json"
else
    run_step wrong 120 "$PYTHON" -m grader grade "$WRONG" --only 2.2-transfers --json "$WORK/wrong.json"
    verdict "Pipe moving on the calling thread, 2.2-transfers" all-failed-no-error "$WORK/wrong.json"
    ROWS+=("| 2.3 on 2 GPUs | passes for the key, fails for the wrong Pipe | not run: this machine has $GPUS GPU | - |")
fi
run_step bench-cuda 150 "$PYTHON" -m benchmarks.pipeline_speedup --device cuda:0 --repeats 5 --no-plot --results "$WORK/bench"
verdict "CUDA benchmark, both stages on cuda:0" benchmark "$WORK/bench/pipeline_speedup.json"

TABLE=$WORK/table.md
{
    echo "## GPU validation, $(date -u +%Y-%m-%d) (scripts/gpu_validate.sh, $((SECONDS - START)) s)"
    echo
    echo "GPUs: $(echo "$GPU_LIST" | awk -F', ' '{print $1 " (" $3 ")"}' | paste -sd ';' -); driver $(echo "$GPU_LIST" | head -n1 | awk -F', ' '{print $2}'); torch $TORCH; CUDA $CUDA; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
    echo "| run | expected | result | time |"
    echo "|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
} >"$TABLE"
echo
cat "$TABLE"
if [ "$WRITE" = 1 ]; then
    mkdir -p docs
    { echo "# Validation on GPUs"; echo; echo "Written by \`scripts/gpu_validate.sh --write\`."; echo; cat "$TABLE"; } >docs/VALIDATION.md
    echo "wrote docs/VALIDATION.md"
fi
exit "$FAILED"
