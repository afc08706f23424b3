#!/usr/bin/env bash
# Run HERE (a machine with PyPI), before the one device call of benchmarks/gpu_check.sh: the device
# image has torch, torchvision, Triton, scikit-image, tqdm and matplotlib but no kornia, and no
# network. This downloads kornia and kornia-rs, the versions installed here (what CI tests the bench
# against), as wheels for the image's Python 3.12 into wheels/ (ignored by git). Then call the
# device tool with carry ["wheels"] and the command `bash benchmarks/gpu_check.sh`, which installs them.
# Run from the repository root:  bash benchmarks/gpu_wheels.sh
set -euo pipefail
version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || echo "$2"; }
kornia=$(version kornia 0.9.2)
kornia_rs=$(version kornia_rs 0.2.0)
rm -rf wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d wheels "kornia==$kornia" "kornia-rs==$kornia_rs"
ls -l wheels
