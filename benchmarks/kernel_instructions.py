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


def _tool(name: str) -> str:
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    found = shutil.which(name) or (bundled if os.path.exists(bundled) else None)
    if found is None:
        raise SystemExit(f"{name} not found (Triton's CUDA backend ships one under triton/backends/nvidia/bin)")
    return found


def instructions(fn, signature: dict, constants: dict, warps: int, arch: int) -> tuple[Counter, dict]:
    """Opcode counts of ``fn`` compiled for ``sm_{arch}`` with these constexprs and warps, and
    under ``"registers"`` and ``"spilled bytes"`` its registers a thread and its stack (spills)."""
    sig = {**signature, **{name: "constexpr" for name in constants}}
    compiled = triton.compile(ASTSource(fn, sig, constexprs=constants), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([_tool("nvdisasm"), "-c", cubin.name], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", cubin.name], capture_output=True,
                               text=True, check=True).stdout
    counts = Counter(m.group(1) for m in map(_INSTRUCTION.match, sass.splitlines()) if m)
    return counts, {"registers": int(re.search(r"REG:(\d+)", usage).group(1)),
                    "spilled bytes": int(re.search(r"STACK:(\d+)", usage).group(1))}


def _resampling_passes(first_axis: int, taps: tuple[int, int], out: tuple[int, int], source: tuple[int, int]) -> list:
    """The two launches :func:`gpu_kernels.resample_axes` makes with ``RESAMPLE_FIRST_AXIS`` =
    ``first_axis``: (label, signature, constexprs, the pass's output (P, Q))."""
    axes = {"axes": "*fp32", "table": "*i64", "P": "i32", "Q": "i32", "limit": "i32", "stride_n": "i32",
            "stride_c": "i32", "stride_p": "i32", "scale": "fp32"}
    plain = dict(CHANNELS=3, RAGGED=False, ANTIALIAS=True, PAD=0, PAD_OUTPUT=False, CUBIC=False, stride_q=1)
    (h, w), (H, W) = out, source
    passes = []
    for axis, src, first in ((first_axis, "*u8", True), (1 - first_axis, "*fp16", False)):
        shape = (h, w) if not first else (h, W) if axis == 0 else (H, w)
        tile = gk.resample_tiles(shape[1])[axis]
        label = f"{'row' if axis == 0 else 'column'} pass {'first' if first else 'second'} ({src[1:]}, {taps[axis]} taps)"
        passes.append((label, {"src": src, "out": "*fp16", **axes},
                       {**plain, "TAPS": min(taps[axis], gk.RESAMPLE_UNROLLED_TAPS), "AXIS": axis, "FIRST": first,
                        "BLOCK_P": tile[0], "BLOCK_Q": tile[1], "COLUMNS_ACROSS": axis == 1 and gk.RESAMPLE_COLUMNS_ACROSS,
                        "MORE_TAPS": taps[axis] > gk.RESAMPLE_UNROLLED_TAPS, "LOOP_TAPS": gk.RESAMPLE_LOOP_TAPS},
                       shape))
    return passes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", type=int, default=90, help="compute capability x10 (90: H100/H200)")
    parser.add_argument("--column-tile", type=int, nargs=2, metavar=("P", "Q"),
                        help="the column pass's tile (gpu_kernels.RESAMPLE_COLUMN_TILE) to count with")
    parser.add_argument("--columns-across", type=int, choices=(0, 1),
                        help="hold the column pass's tile as (columns, rows) (gpu_kernels.RESAMPLE_COLUMNS_ACROSS; "
                             "default: what this Triton gets)")
    parser.add_argument("--more-taps", action="store_true",
                        help="also count the taps past gpu_kernels.RESAMPLE_UNROLLED_TAPS: every tap unrolled (a "
                             "kernel per count) against the unrolled ones plus the per-sample loop")
    args = parser.parse_args(argv)
    saved = gk.RESAMPLE_COLUMN_TILE, gk.RESAMPLE_COLUMNS_ACROSS
    if args.column_tile:
        gk.RESAMPLE_COLUMN_TILE = tuple(args.column_tile)
    if args.columns_across is not None:
        gk.RESAMPLE_COLUMNS_ACROSS = bool(args.columns_across)
    try:
        _count(args)
        if args.more_taps:
            _count_more_taps(args)
    finally:
        gk.RESAMPLE_COLUMN_TILE, gk.RESAMPLE_COLUMNS_ACROSS = saved


def _count(args) -> None:
    # The README pipeline's resampling: a 375x500 photo, RandomResizedCrop(224) (taps for its
    # largest scale, 375/224 and 500/224), and a crop of 248 x 330: the mean side of its crops
    # (the square root of an area fraction drawn from (0.08, 1), times 375 and 500).
    source, out, crop_rows, crop_cols = (375, 500), (224, 224), 248, 330
    taps = (5, 6)  # rows, columns
    print(f"SASS instructions per output pixel, sm_{args.arch}, Triton {triton.__version__}")
    per_plane = {}
    for first_axis in (0, 1):
        total_plane = 0
        print(f"  {'rows' if first_axis == 0 else 'columns'} first:")
        for label, signature, constants, (P, Q) in _resampling_passes(first_axis, taps, out, source):
            counts, usage = instructions(gk._resample_kernel, signature, constants, gk.RESAMPLE_WARPS, args.arch)
            tile = (constants["BLOCK_P"], constants["BLOCK_Q"])
            pixels = tile[0] * tile[1] / (32 * gk.RESAMPLE_WARPS)
            total = sum(counts.values())
            print(f"    resampling, {label}: {total} instructions, {pixels:g} pixels x 1 channel(s) a thread -> "
                  f"{total / pixels:.0f} per pixel and channel; {usage['registers']} registers, "
                  f"{usage['spilled bytes']} bytes spilled; loads {counts['LDG']}, "
                  f"top: {', '.join(f'{k} {v}' for k, v in counts.most_common(5))}")
            # Programs run whole tiles (masked lanes issue too); a first pass skips the tiles
            # wholly outside the crop (its lines across: rows of a column pass, columns of a row pass).
            rows, cols = -(-P // tile[0]), -(-Q // tile[1])
            if constants["FIRST"] and first_axis == 1:
                rows = min(rows, -(-crop_rows // tile[0]) + 1)
            elif constants["FIRST"]:  # (a tile is a whole row here: none is skipped)
                cols = min(cols, -(-crop_cols // tile[1]) + 1)
            total_plane += rows * cols * tile[0] * tile[1] * total / pixels
        per_plane[first_axis] = total_plane
    counts, usage = instructions(
        gk._warp_kernel, {"src": "*fp16", "out": "*fp16", "matrix": "*fp32", "fill": "*fp32", "H": "i32", "W": "i32",
                          "stride_n": "i32", "stride_c": "i32", "stride_h": "i32", "stride_w": "i32"},
        {"CHANNELS": 3, "FILL": True, "BLEND": True, "NEAREST": False, "BLOCK": gk.GEOMETRY_BLOCK,
         "GROUP_ROWS": gk.WARP_GROUP_ROWS}, gk.WARP_WARPS, args.arch)
    pixels = gk.GEOMETRY_BLOCK / (32 * gk.WARP_WARPS)
    total = sum(counts.values())
    print(f"  warp (float16, bilinear, fill): {total} instructions, {pixels:g} pixels x 3 channel(s) a thread -> "
          f"{total / pixels / 3:.0f} per pixel and channel; {usage['registers']} registers, "
          f"{usage['spilled bytes']} bytes spilled; loads {counts['LDG']}, "
          f"top: {', '.join(f'{k} {v}' for k, v in counts.most_common(5))}")
    print(f"resampling of one plane, {source[0]}x{source[1]} -> a {crop_rows}x{crop_cols} crop -> {out[0]}x{out[1]} "
          f"(whole tiles), M instructions: rows first {per_plane[0] / 1e6:.2f}, columns first "
          f"{per_plane[1] / 1e6:.2f} (RESAMPLE_FIRST_AXIS = {gk.RESAMPLE_FIRST_AXIS} now; column tile "
          f"{gk.RESAMPLE_COLUMN_TILE}, held {'across' if gk.RESAMPLE_COLUMNS_ACROSS else 'as (rows, columns)'})")


def _count_more_taps(args, needed=(9, 13, 17, 25, 33)) -> None:
    """Instructions per output pixel of each pass for a sample needing ``needed`` taps (a large
    downscale: a ragged batch's large photo), every tap unrolled (the kernel before 2026-12-06, one
    per count) against ``RESAMPLE_UNROLLED_TAPS`` unrolled plus a loop over the rest,
    ``RESAMPLE_LOOP_TAPS`` an iteration: an iteration estimated as the loop kernel's extra
    instructions over the unrolled one's (an upper bound: the loop's set-up counts in it)."""
    unrolled = gk.RESAMPLE_UNROLLED_TAPS
    print(f"taps past {unrolled} (RESAMPLE_UNROLLED_TAPS), instructions per output pixel, sm_{args.arch}:")
    for label, signature, constants, _ in _resampling_passes(0, (5, 6), (224, 224), (375, 500)):
        tile = (constants["BLOCK_P"], constants["BLOCK_Q"])
        pixels = tile[0] * tile[1] / (32 * gk.RESAMPLE_WARPS)

        def per_pixel(taps: int, more: bool) -> float:
            counts, _ = instructions(gk._resample_kernel, signature, {**constants, "TAPS": taps, "MORE_TAPS": more},
                                     gk.RESAMPLE_WARPS, args.arch)
            return sum(counts.values()) / pixels

        base, loop, step = per_pixel(unrolled, False), per_pixel(unrolled, True), gk.RESAMPLE_LOOP_TAPS
        iteration = loop - base
        rows = ", ".join(f"{n}: {per_pixel(n, False):.0f} / {base + -(-(n - unrolled) // step) * iteration:.0f}"
                         for n in needed)
        print(f"  {label.split(' (')[0]}: needed taps: all unrolled / {unrolled} + loop ({step} taps an iteration, "
              f"~{iteration:.0f}) -- {rows}")


if __name__ == "__main__":
    main()
