#!/usr/bin/env bash
# The one device check, for a session that is lent a GPU (device tool, one call: 445 s on the H200
# on 2026-12-04, before the cuda_graph profile and the tile timing were added; the timeouts below
# add up to ~18 minutes, past the device call's 600 s: the steps run in priority order, so a cut
# loses the last ones, and each step's output is already under $OUT). In that order: CUDA tests,
# the GPU benchmark, a kernel profile of the pipeline (eager, then cuda_graph=True), the
# resampling's tiles timed (tune_kernels.py), the taps of ragged batches with large photos
# (taps_bench.py: the kernel before and after 2026-12-06), torch.compile's effect, the profile with
# GPUAUG_TRITON=0 (torch kernels), the worker-to-GPU handoff of a ragged batch and the CIFAR
# recipe, everything written under $OUT.
# Run from the repository root:  bash benchmarks/gpu_check.sh
# The device image has torch, torchvision, scikit-image, tqdm and matplotlib but no kornia and no
# network: carry kornia's wheels in wheels/ (pip download kornia kornia-rs --no-deps
# --only-binary=:all: --python-version 3.12 -d wheels) and name wheels in the call's carry.
set -u
OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Output goes through pipes (tee): unbuffered, so a step cut by its timeout keeps what it printed.
export PYTHONUNBUFFERED=1
PY=python3
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: no CUDA device here; run it on a lent GPU (device tool)" | tee "$OUT/device.txt"
  exit 1
fi

if ! $PY -c "import kornia" 2>/dev/null && ls wheels/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps wheels/*.whl > "$OUT/wheels.log" 2>&1
fi

{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  $PY -c "import kornia; print('kornia', kornia.__version__)" 2>/dev/null || echo "kornia: missing (kornia rows skipped)"
  $PY -m gpuaug --version 2>&1 | tail -n 1
} | tee "$OUT/device.txt"

# Each step's header says how long the script has run (the issue asks the tests and the benchmark,
# the first two steps, to take under 5 minutes), also kept in $OUT/steps.txt.
step() { echo "== [${SECONDS}s] $1" | tee -a "$OUT/steps.txt"; }

step "CUDA tests"
timeout 210 $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_cuda_path.py tests/test_cuda_graph.py \
  tests/test_data.py::test_device_loader_on_cuda_overlaps_and_matches_cpu \
  tests/test_data.py::test_gpu_decode_falls_back_to_cpu_without_cuda \
  tests/test_data.py::test_device_loader_on_cuda_without_pipeline_keeps_ragged_batches_packed \
  "tests/test_data.py::test_gpu_decode_matches_libjpeg_and_names_each_bad_jpeg[cuda]" \
  "tests/test_randomness.py::test_deterministic_algorithms_mode_is_accepted_and_repeats_bitwise" 2>&1 \
  | tee "$OUT/cuda_tests.txt" | tail -n 15

step "GPU benchmark (cuda rows, and cpu rows for the per-sample torchvision reference)"
timeout 240 $PY -m gpuaug bench --device cuda --device cpu --batch-sizes 64 256 --repeats 5 --no-progress \
  --json "$OUT/bench_gpu.json" --plot "$OUT/bench_gpu.png" 2>&1 | tee "$OUT/bench_gpu.txt" | tail -n 16

step "where the CUDA pipeline's time goes (batch 256)"
timeout 45 $PY benchmarks/profile_pipeline.py --device cuda --batch 256 2>&1 | tee "$OUT/profile_gpu.txt" | tail -n 28

step "the same with Pipeline(cuda_graph=True): the call recorded once, replayed (host work per call)"
timeout 45 $PY benchmarks/profile_pipeline.py --device cuda --batch 256 --rows 8 --cuda-graph 2>&1 \
  | tee "$OUT/profile_gpu_graph.txt" | tail -n 14

step "the resampling's and the warp's tiles, timed (each kernel alone, batch 256), then the call with the fastest"
timeout 150 $PY benchmarks/tune_kernels.py --device cuda --batch 256 2>&1 | tee "$OUT/tune_gpu.txt" | tail -n 16

step "ragged batches with a few large photos: the resampling's taps unrolled as before vs 8 + a per-sample loop (compiles, img/s)"
timeout 120 $PY benchmarks/taps_bench.py --device cuda 2>&1 | tee "$OUT/taps_gpu.txt" | tail -n 4

step "torch.compile on CUDA (batch 256): default, then reduce-overhead (CUDA graphs: is eager launch-bound?)"
timeout 75 $PY benchmarks/compile_check.py --device cuda --batch 256 --ragged 8 2>&1 | tee "$OUT/compile_gpu.txt" | tail -n 5
timeout 75 $PY benchmarks/compile_check.py --device cuda --batch 256 --mode reduce-overhead 2>&1 \
  | tee "$OUT/compile_gpu_graphs.txt" | tail -n 5

step "the same with the torch color kernels instead of the Triton one (GPUAUG_TRITON=0)"
GPUAUG_TRITON=0 timeout 45 $PY benchmarks/profile_pipeline.py --device cuda --batch 256 --rows 8 2>&1 \
  | tee "$OUT/profile_gpu_no_triton.txt" | tail -n 14

step "handing a ragged batch of 256 from the workers to the GPU: a list versus PackedImages"
timeout 45 $PY benchmarks/handoff_bench.py --device cuda --rounds 1 --wait 2 2>&1 | tee "$OUT/handoff_gpu.txt" | tail -n 5

step "the CIFAR recipe on CUDA (RandomCrop(32, padding=4) + flip + Normalize, batch 256 of 32x32)"
timeout 60 $PY benchmarks/cifar_bench.py --device cuda 2>&1 | tee "$OUT/cifar_gpu.txt" | tail -n 10

step "done"
