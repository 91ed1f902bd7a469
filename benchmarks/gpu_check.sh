#!/usr/bin/env bash
# The GPU check: everything the course runs on a GPU, run on one GPU in one short command.
#
#   bash benchmarks/gpu_check.sh OUT [BUDGET_S]
#
# Made for a lent GPU machine that starts bare, has no network and gives a few minutes at a time
# (see docs/gpu_check.md): the launch command below is all it needs, with the wheels the machine
# lacks carried in .whl/ (`python benchmarks/gpu_check_wheels.py` fills it, here, with network:
# the notebook stack and the FastAPI service's, about 25 MiB).
#
# launch: bash benchmarks/gpu_check.sh "$OUT" 450
#
# In order, each step with its own time limit inside BUDGET_S (default 450 s), each writing into
# OUT as it goes, so a step cut off leaves what it had:
#   0. the machine: nvidia-smi, Python, CuPy, NumPy, PyTorch, nvcc          -> OUT/env.txt
#   1. the wheels in .whl/, if any, installed into a temporary folder (no network, no index)
#   2. the test suite's GPU cases on the real GPU (every test marked gpu: the cupy backend case
#      of every backend test, each hand-written kernel compiled by NVRTC against its NumPy
#      reference, the fused layers, checkpoints loaded onto the GPU, fit(precision=) on CuPy),
#      then every .cu source built with the machine's nvcc   -> OUT/tests.xml, OUT/nvcc.xml
#   2c. the FastAPI service's tests (lessons 12, 12b; not marked gpu, so step 2 leaves them
#      out), with the carried FastAPI stack                             -> OUT/service.xml
#   3. benchmarks/gpu_suite.py --sections tensor_cores,flash_memory: matmul_wmma vs cuBLAS FP16,
#      matmul_warptile vs cuBLAS FP32 at 4096^3, the FlashAttention kernel vs naive attention
#      and PyTorch's SDPA for T = 512 ... 16384 (time, peak memory, spills), causal at T = 1024
#      and 4096, and flash_attention_wmma vs SDPA FP16 (flash backend)
#                                                                -> OUT/kernels/<device>.json
#   3b. benchmarks/gpu_suite.py (its seven default sections, the last the character
#      transformer's training step against PyTorch's; --quick when BUDGET_S is short)
#                                                                     -> OUT/<device>.json, .png
#   4. the GPU lessons (05, 08a-08e, 10, 16) executed on the GPU under nbval -> OUT/notebooks.xml
# Everything printed goes to OUT/check.log too, and OUT/summary.txt says where each second went.
# DLCOURSE_GPU_CHECK_SKIP="gpu_suite notebooks" leaves those steps out (a short recheck; the
# first word of a step's name: tests, nvcc, service, gpu_suite, notebooks).
# Without a GPU it says so and exits 0 in seconds, having run nothing.
set -u
OUT=${1:-${OUT:-}}
BUDGET=${2:-450}
if [ -z "$OUT" ]; then
    echo "usage: bash benchmarks/gpu_check.sh OUT [BUDGET_S]  (OUT: the folder for the results)" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/check.log") 2>&1
START=$SECONDS

say() { echo "gpu_check [$((SECONDS - START)) s]: $*"; }
summary() { echo "$*" >> "$OUT/summary.txt"; say "$*"; }
# left CAP: the seconds a step may take, at most CAP and what the budget has left (less 15 s
# for the steps after it to write their summaries).
left() { local rest=$((BUDGET - (SECONDS - START) - 15)); echo $(( rest < $1 ? rest : $1 )); }
# run NAME CAP CMD...: CMD under a time limit (SIGINT first, so pytest still writes its report).
run() {
    local name=$1 cap; cap=$(left "$2"); shift 2
    case " ${DLCOURSE_GPU_CHECK_SKIP:-} " in *" ${name%% *} "*)
        summary "$name: left out (DLCOURSE_GPU_CHECK_SKIP)"; return;; esac
    if [ "$cap" -lt 20 ]; then summary "$name: not run (budget spent)"; return; fi
    local t0=$SECONDS rc
    say "$name: starting, at most $cap s"
    timeout --signal=INT --kill-after=15 "$cap" "$@"
    rc=$?
    local how="exit $rc"
    [ "$rc" = 124 ] && how="CUT OFF at its limit of $cap s"
    summary "$name: $how, $((SECONDS - t0)) s"
}

: > "$OUT/summary.txt"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    summary "no GPU here (nvidia-smi is missing or sees no device): nothing was run or measured."
    exit 0
fi

# 0. The machine.
{
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvidia-smi | head -4 | tail -1
    "$PY" -c 'import sys, platform; print("python", platform.python_version(), sys.executable)'
    for m in numpy cupy torch onnxruntime pytest; do
        "$PY" -c "import $m; print('$m', $m.__version__)" 2>&1 | tail -1
    done
    command -v nvcc >/dev/null && nvcc --version | tail -2
    command -v mpiexec >/dev/null && echo "mpiexec: $(command -v mpiexec), $(mpiexec --version 2>&1 | head -1)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
summary "machine: $(sed -n 3p "$OUT/env.txt"), $((SECONDS - START)) s"

# 1. The carried wheels (mnist1d, nbval and the notebook stack; FastAPI, uvicorn, httpx,
# cryptography and what they need), into a folder of their own.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
WHEELS=${DLCOURSE_WHEELS:-.whl}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    t0=$SECONDS
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/dlcourse-site "$WHEELS"/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/dlcourse-site"
    summary "wheels: exit $?, $((SECONDS - t0)) s ($(ls "$WHEELS"/*.whl | wc -l) from $WHEELS)"
fi
export MPLBACKEND=Agg DLCOURSE_CUPY_STANDIN=0 PYTHONUNBUFFERED=1
if ! "$PY" -c 'import sys, dlcourse.backend as b; sys.exit(0 if b.gpu_available() else 1)'; then
    summary "dlcourse sees no usable GPU: $("$PY" -c 'import dlcourse.backend as b; print(b.gpu_problem())' 2>&1 | tail -1)"
    exit 0
fi
XDIST=""      # pytest-xdist and pytest-timeout, where the machine has them (the lent one does)
"$PY" -c 'import xdist' 2>/dev/null && XDIST="-n 8"
PER_TEST=""
"$PY" -c 'import pytest_timeout' 2>/dev/null && PER_TEST="--timeout=90"

# 2. The GPU cases of the test suite, then nvcc over every CUDA source.
# shellcheck disable=SC2086
DLCOURSE_DEVICE=gpu run "tests (-m gpu)" 200 "$PY" -m pytest tests -m gpu $XDIST $PER_TEST -q -rfEs \
    -o addopts="-p no:cacheprovider" --junitxml="$OUT/tests.xml" --durations=15
run "nvcc builds" 60 "$PY" -m pytest tests/test_kernels.py -k "nvcc" -q -rfEs \
    -o addopts="-p no:cacheprovider" --junitxml="$OUT/nvcc.xml"

# 2c. The FastAPI service's tests (issue 43, item 5), which need the carried FastAPI stack. The
# service asks for no device (dlcourse/serve: NumPy or onnxruntime on the CPU), so
# DLCOURSE_DEVICE stays auto: what runs is the service on this machine's Python and packages.
# shellcheck disable=SC2086
run "service tests" 90 "$PY" -m pytest $XDIST $PER_TEST -q -rfEs -o addopts="-p no:cacheprovider" \
    --junitxml="$OUT/service.xml" tests/test_serve.py tests/test_serve_engines.py \
    tests/test_cli_language_model.py tests/test_signature_notices.py \
    tests/test_deploy_refusals.py tests/test_protect.py

# 3. The benchmark suite (it writes <device>.partial.json after each section): first the
# sections of the kernels closest to the hardware (issue 43; estimated 40-55 s on an H100/H200:
# CuPy's and PyTorch's start, five NVRTC builds and about 15 s of timing; see docs/gpu_check.md),
# then the rest (transformer_train, the last, estimated 10-40 s of it).
QUICK=""
[ "$BUDGET" -lt 400 ] && QUICK="--quick"
run "gpu_suite kernel sections${QUICK:+ (quick)}" 90 "$PY" benchmarks/gpu_suite.py \
    --sections tensor_cores,flash_memory --out "$OUT/kernels" $QUICK
run "gpu_suite${QUICK:+ (quick)}" 200 "$PY" benchmarks/gpu_suite.py --out "$OUT" $QUICK

# 4. The GPU lessons, on the GPU (DLCOURSE_DEVICE=auto finds it), under nbval.
# shellcheck disable=SC2086
# (--dist loadfile: nbval's items are a notebook's cells, which must run in order on one kernel.)
run "notebooks" 200 "$PY" -m pytest $XDIST --dist loadfile -q -rfE --nbval-cell-timeout=150 \
    --junitxml="$OUT/notebooks.xml" notebooks/05_*.ipynb notebooks/08a_*.ipynb \
    notebooks/08b_*.ipynb notebooks/08c_*.ipynb notebooks/08d_*.ipynb notebooks/08e_*.ipynb \
    notebooks/10_*.ipynb notebooks/16_*.ipynb

summary "total: $((SECONDS - START)) s of a budget of $BUDGET s"
exit 0
