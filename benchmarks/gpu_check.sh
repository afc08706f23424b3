#!/usr/bin/env bash
# The one device check, for a session that is lent a GPU (device tool, one call). In priority order:
# CUDA tests, the GPU benchmark, a kernel profile of the pipeline (eager, then cuda_graph=True), the
# resampling's tiles timed (tune_kernels.py), the taps of ragged batches with large photos
# (taps_bench.py: the kernel before and after 2026-12-06), torch.compile's effect, the profile with
# GPUAUG_TRITON=0 (torch kernels), the worker-to-GPU handoff of a ragged batch and the CIFAR recipe.
#
# Budget: a lent task has 15 minutes of device time in all (2026-12-07), the machine's start
# included, and one call runs 600 s at most. The script stops starting steps at GPU_CHECK_BUDGET_S
# (540 s) and cuts a step's own timeout to what is left, so it ends inside one call; the steps
# left out are named in the log. (On the H200, 2026-12-04, the script as it was then, before the
# cuda_graph profile, the tile timing and the taps bench were added, ran 445 s.)
# Issue 2's targets name the H200: call with kind "nvidia-h200" (an H100's figures do not decide it).
#
# What comes back: the device tool returns at most 8 files from $OUT, so everything printed goes
# to ONE log, $OUT/gpu_check.log (each step under a "== [Ns] name" header, written as it runs), beside
# the benchmark's $OUT/bench_gpu.json and $OUT/bench_gpu.png.
#
# The device image has torch, torchvision, Triton, scikit-image, tqdm and matplotlib but no kornia
# and no network. Here first:  bash benchmarks/gpu_wheels.sh   (kornia's wheels into wheels/), then
# one device call:  command "bash benchmarks/gpu_check.sh", carry ["wheels"], timeout_s 600.
# Run from the repository root.
set -u
OUT=${OUT:-$PWD/bench_out}
BUDGET=${GPU_CHECK_BUDGET_S:-540}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Output goes through pipes (tee): unbuffered, so a step cut by its timeout keeps what it printed.
export PYTHONUNBUFFERED=1
PY=${GPU_CHECK_PYTHON:-python3}
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: no CUDA device here; run it on a lent GPU (device tool)" | tee -a "$LOG"
  exit 1
fi

if ! $PY -c "import kornia" 2>/dev/null && ls wheels/*.whl >/dev/null 2>&1; then
  # Into a folder of its own (the image's environment may be read-only), as the device tool advises.
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpuaug_wheels wheels/*.whl \
    >> "$LOG" 2>&1
  export PYTHONPATH="$PYTHONPATH:/tmp/gpuaug_wheels"
fi

{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  $PY -c "import kornia; print('kornia', kornia.__version__)" 2>/dev/null || echo "kornia: missing (kornia rows skipped)"
  $PY -m gpuaug --version 2>&1 | tail -n 1
  git log -1 --format='commit: %h %s' 2>/dev/null
} 2>&1 | tee -a "$LOG"

# step NAME LIMIT_S TAIL_LINES COMMAND...: runs COMMAND under the smaller of LIMIT_S and what is left
# of the budget, its output appended to the log; prints the last TAIL_LINES (the tool's output_tail).
step() {
  local name=$1 limit=$2 lines=$3 left=$((BUDGET - SECONDS))
  shift 3
  if ((left < 15)); then
    echo "== [${SECONDS}s] left out (under 15 s of the ${BUDGET} s budget left): $name" | tee -a "$LOG"
    return
  fi
  ((limit > left)) && limit=$left
  echo "== [${SECONDS}s] $name (limit ${limit}s)" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG" | tail -n "$lines"
  local rc=${PIPESTATUS[0]}
  if ((rc == 124)); then echo "== [${SECONDS}s] timed out" | tee -a "$LOG"
  elif ((rc != 0)); then echo "== [${SECONDS}s] exit $rc" | tee -a "$LOG"; fi
}

step "CUDA tests" 210 15 \
  $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_cuda_path.py tests/test_cuda_graph.py \
  tests/test_data.py::test_device_loader_on_cuda_overlaps_and_matches_cpu \
  tests/test_data.py::test_gpu_decode_falls_back_to_cpu_without_cuda \
  tests/test_data.py::test_device_loader_on_cuda_without_pipeline_keeps_ragged_batches_packed \
  "tests/test_data.py::test_gpu_decode_matches_libjpeg_and_names_each_bad_jpeg[cuda]" \
  "tests/test_randomness.py::test_deterministic_algorithms_mode_is_accepted_and_repeats_bitwise"

step "GPU benchmark (cuda rows, and cpu rows for the per-sample torchvision reference)" 240 20 \
  $PY -m gpuaug bench --device cuda --device cpu --batch-sizes 64 256 --repeats 5 --no-progress \
  --json "$OUT/bench_gpu.json" --plot "$OUT/bench_gpu.png"

step "where the CUDA pipeline's time goes (batch 256)" 45 28 \
  $PY benchmarks/profile_pipeline.py --device cuda --batch 256

step "the same with Pipeline(cuda_graph=True): the call recorded once, replayed (host work per call)" 45 14 \
  $PY benchmarks/profile_pipeline.py --device cuda --batch 256 --rows 8 --cuda-graph

step "the resampling's and the warp's tiles, timed (each kernel alone, batch 256), then the call with the fastest" 150 16 \
  $PY benchmarks/tune_kernels.py --device cuda --batch 256

step "ragged batches with a few large photos: the resampling's taps unrolled as before vs 8 + a per-sample loop (compiles, img/s)" 120 4 \
  $PY benchmarks/taps_bench.py --device cuda

step "torch.compile on CUDA (batch 256, then ragged): is eager launch-bound?" 75 5 \
  $PY benchmarks/compile_check.py --device cuda --batch 256 --ragged 8
step "torch.compile on CUDA, mode reduce-overhead (CUDA graphs)" 75 5 \
  $PY benchmarks/compile_check.py --device cuda --batch 256 --mode reduce-overhead

step "the same profile with the torch kernels instead of the Triton ones (GPUAUG_TRITON=0)" 45 14 \
  env GPUAUG_TRITON=0 $PY benchmarks/profile_pipeline.py --device cuda --batch 256 --rows 8

step "handing a ragged batch of 256 from the workers to the GPU: a list versus PackedImages" 45 5 \
  $PY benchmarks/handoff_bench.py --device cuda --rounds 1 --wait 2

step "the CIFAR recipe on CUDA (RandomCrop(32, padding=4) + flip + Normalize, batch 256 of 32x32)" 60 10 \
  $PY benchmarks/cifar_bench.py --device cuda

echo "== [${SECONDS}s] done" | tee -a "$LOG"
