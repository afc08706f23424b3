"""How many cache lines does each of the warp kernel's loads touch? `python benchmarks/warp_cache_lines.py`.

A static model, no GPU: the warp kernel (``gpuaug.gpu_kernels._warp_kernel``) gives each warp of
32 threads 32 consecutive pixels of its tile (Triton's layout for it on sm_90: one pixel a thread
per load), and each of its loads reads one bilinear tap of those 32 pixels. Rotated, 32 pixels of
one output row read along a slanted source line that crosses more rows (128-byte lines) the
larger the angle; a group of 2x16 or 4x8 pixels (``WARP_GROUP_ROWS`` 2 or 4) reads a more compact
patch. For a 224x224 float16 image turned about its center, this prints the mean number of
distinct 128-byte lines per load at angles from 0 to ``--max-degrees`` (RandomRotation(15) draws
them uniformly). Fewer lines per load is less L1 traffic, which is what the model counts; whether
that is what bounds the kernel, only benchmarks/tune_kernels.py on a GPU tells.
"""

import argparse
import math

import numpy as np


def lines_per_load(group_rows: int, degrees: float, size: int = 224, line_bytes: int = 128) -> float:
    """Mean distinct ``line_bytes`` lines per warp-wide load (one tap of 32 pixels), float16."""
    cols = 32 // group_rows
    i, j = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    # Group every pixel by the warp-wide load that reads it: a group_rows x cols block.
    group = (i // group_rows) * (size // cols + 1) + j // cols
    a = math.radians(degrees)
    x, y = j + 0.5 - size / 2, i + 0.5 - size / 2
    sx = math.cos(a) * x - math.sin(a) * y + size / 2 - 0.5
    sy = math.sin(a) * x + math.cos(a) * y + size / 2 - 0.5
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    total = 0
    for dy in (0, 1):
        for dx in (0, 1):
            line = ((y0 + dy) * size + x0 + dx) * 2 // line_bytes
            total += len(np.unique(np.stack([group.ravel(), line.ravel()]), axis=1)[0])
    return total / (4 * len(np.unique(group)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-degrees", type=float, default=15.0)
    args = parser.parse_args(argv)
    angles = np.linspace(0, args.max_degrees, 11)
    print(f"warp_cache_lines: 128-byte lines per warp-wide load, 224x224 float16, angles 0-{args.max_degrees:g}")
    for rows in (1, 2, 4):
        values = [lines_per_load(rows, a) for a in angles]
        print(f"  groups of {rows}x{32 // rows}: at 0 degrees {values[0]:.2f}, at {args.max_degrees:g} "
              f"{values[-1]:.2f}, mean {np.mean(values):.2f}")


if __name__ == "__main__":
    main()
