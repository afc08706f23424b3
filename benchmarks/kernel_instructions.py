"""Static cost of the Triton kernels: SASS instructions per output pixel, no GPU needed.

`python benchmarks/kernel_instructions.py [--arch 90]` compiles the resampling (row pass: uint8
source, 5 taps; column pass: float16, 6 taps, as a 500x375 photo resized to 224 needs) and the
warp as the pipeline launches them (tile, warps), disassembles each cubin with the ``nvdisasm``
Triton ships, and prints the instructions per output pixel (the kernel's instructions over the
pixels one thread computes). On the H200 the resampling took 66% of a call's GPU time (2026-12-04)
and was bound by instructions, not memory; this count is a proxy for its speed, not a timing.
"""

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from gpuaug import gpu_kernels as gk

_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)")


def _nvdisasm() -> str:
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    found = shutil.which("nvdisasm") or (bundled if os.path.exists(bundled) else None)
    if found is None:
        raise SystemExit("nvdisasm not found (Triton's CUDA backend ships one under triton/backends/nvidia/bin)")
    return found


def instructions(fn, signature: dict, constants: dict, warps: int, arch: int) -> Counter:
    """Opcode counts of ``fn`` compiled for ``sm_{arch}`` with these constexprs and warps."""
    sig = {**signature, **{name: "constexpr" for name in constants}}
    compiled = triton.compile(ASTSource(fn, sig, constexprs=constants), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([_nvdisasm(), "-c", cubin.name], capture_output=True, text=True, check=True).stdout
    return Counter(m.group(1) for m in map(_INSTRUCTION.match, sass.splitlines()) if m)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", type=int, default=90, help="compute capability x10 (90: H100/H200)")
    args = parser.parse_args(argv)
    axes = {"axes": "*fp32", "table": "*i64", "P": "i32", "Q": "i32", "limit": "i32", "stride_n": "i32",
            "stride_c": "i32", "stride_p": "i32", "scale": "fp32"}
    plain = dict(CHANNELS=3, RAGGED=False, ANTIALIAS=True, PAD=0, PAD_OUTPUT=False, CUBIC=False, stride_q=1)
    row_tile, column_tile = gk.resample_tiles(500)  # a 500-wide source
    kernels = [
        ("resampling, row pass (uint8, 5 taps)", gk._resample_kernel, {"src": "*u8", "out": "*fp16", **axes},
         {**plain, "TAPS": 5, "AXIS": 0, "BLOCK_P": row_tile[0], "BLOCK_Q": row_tile[1]}, gk.RESAMPLE_WARPS),
        ("resampling, column pass (float16, 6 taps)", gk._resample_kernel, {"src": "*fp16", "out": "*fp16", **axes},
         {**plain, "TAPS": 6, "AXIS": 1, "BLOCK_P": column_tile[0], "BLOCK_Q": column_tile[1]},
         gk.RESAMPLE_WARPS),
        ("warp (float16, bilinear, fill)", gk._warp_kernel,
         {"src": "*fp16", "out": "*fp16", "matrix": "*fp32", "fill": "*fp32", "H": "i32", "W": "i32",
          "stride_n": "i32", "stride_c": "i32", "stride_h": "i32", "stride_w": "i32"},
         {"CHANNELS": 3, "FILL": True, "BLEND": True, "NEAREST": False, "BLOCK": gk.GEOMETRY_BLOCK,
          "GROUP_ROWS": gk.WARP_GROUP_ROWS}, gk.WARP_WARPS),
    ]
    print(f"SASS instructions per output pixel, sm_{args.arch}, Triton {triton.__version__}")
    for label, fn, signature, constants, warps in kernels:
        counts = instructions(fn, signature, constants, warps, args.arch)
        pixels = (constants.get("BLOCK") or constants["BLOCK_P"] * constants["BLOCK_Q"]) / (32 * warps)
        channels = constants["CHANNELS"] if fn is gk._warp_kernel else 1  # the warp writes all channels
        total = sum(counts.values())
        print(f"  {label}: {total} instructions, {pixels:g} pixels x {channels} channel(s) a thread -> "
              f"{total / pixels / channels:.0f} per pixel and channel; loads {counts['LDG']}, "
              f"top: {', '.join(f'{k} {v}' for k, v in counts.most_common(5))}")


if __name__ == "__main__":
    main()
