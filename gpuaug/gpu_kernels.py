"""gpuaug's CUDA kernels, in Triton: the resampling, the rotation's warp, all color ops in one pass.

On CUDA each torch op is a kernel launch and a pass over the batch in memory: the torch color
path takes ~110 launches per batch for a ColorJitter with hue, and reads and writes the images
~30 times; the torch warp (``grid_sample`` plus torchvision's fill rule) ~25 launches with a
float32 copy of the images and a float32 sampling grid in memory.

* :func:`color_program` runs each sample's color program (the same programs as the fused CPU
  kernel, :mod:`gpuaug.native`: ColorJitter's steps in each sample's order, RandomGrayscale as
  saturation 0, then Normalize) on a tile of pixels held in registers, in float32, and writes the
  result once, in the output dtype. A contrast step needs the mean gray of the image as it stands
  before that step, so each step first gets one launch that sums that gray image per tile (the
  programs of samples whose step is not contrast return at once); the mean is the sum of those
  sums in a fixed order, so results are deterministic. Formulas (torchvision's, as in
  native/color.c): brightness ``clamp(f x)``, contrast ``clamp(f x + (1 - f) mean(gray))``,
  saturation ``clamp(f x + (1 - f) gray)``, hue the HSV shift of
  :func:`gpuaug.functional.color.adjust_hue`, normalize ``(x - mean) * inv_std``.
* :func:`resample_axes` is :func:`gpuaug.functional.geometry.axis_taps` and ``resample_separable``
  in two launches (rows, then columns), the filter taps computed where they are used, reading
  uint8 images as they are: no float copy of the full-size batch, no transposed copy, no taps in
  memory. A ragged list is read in place too, once :func:`pack_images` has concatenated it.
* :func:`warp_affine` is :func:`gpuaug.functional.geometry.warp_affine` in one launch: each output
  pixel computes its source coordinates from its sample's matrix, reads its four taps (in any
  memory layout) and applies the fill rule, in float32, and is written in the images' dtype.

No host sync in any. Triton comes with torch's CUDA wheels on Linux. Where it is missing (or
``GPUAUG_TRITON=0``) :func:`usable` is False and the pipeline runs its torch kernels, which give
the same results; :func:`guarded` falls back to them, with one warning, if a launch fails.
Tests run these kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``) and
compile them to cubins for sm_80 and sm_90.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .functional.geometry import PAD_MODES
from .native import OP_BRIGHTNESS, OP_CONTRAST, OP_HUE, OP_SATURATION, normalize_stats
from .packed import PackedImages
from .transforms._base import int_table, to_device
from .user_warnings import warn

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - torch's Linux CUDA wheels ship triton
    triton = None

# Pixels per program (4 warps x 32 threads x 8) of the color kernels and of the warp; the warp's
# warps per program and the rows of each warp's 32-pixel group (1: a tile is in row order; 2 or 4:
# 2x16 or 4x8 groups in tiles 32 wide, which read fewer cache lines a load once rotated: at 15
# degrees ~6 against ~9, at 0 degrees 2-4 against 1.25; not yet timed). benchmarks/tune_kernels.py
# times the settings on a GPU.
BLOCK = 1024
GEOMETRY_BLOCK = 1024
WARP_WARPS = 4
WARP_GROUP_ROWS = 1
# The resampling's tiles. A pass's taps and weights depend on the output row (row pass) or column
# (column pass) alone, and each thread computes them once for the row (column) it holds, not once
# per pixel: the row pass takes whole rows (up to 1024 columns, a power of two; narrow images
# several rows, RESAMPLE_ROW_PIXELS in all), each thread 8 or 16 pixels of one row; the column pass
# tiles of RESAMPLE_COLUMN_TILE (rows, columns), each thread 16 rows of one column. Per output pixel
# that is ~70-80 instructions instead of ~210 (sm_90 SASS, 5-6 taps). Two warps a program.
RESAMPLE_ROW_PIXELS = 512
RESAMPLE_COLUMN_TILE = (32, 32)
RESAMPLE_WARPS = 2
# Which axis the resampling's first pass resamples: 0, rows, then columns; 1, columns, then rows.
# The first pass computes only the lines the second reads (the crop's), but a program runs its
# whole tile: for a 375x500 photo cut and resized to 224x224 the first pass computes 224 rows x
# the whole width in row order (a tile is a whole row: narrower row tiles cost more per pixel),
# ~the crop's rows x 224 in column order, whose tiles of rows outside the crop return at once.
# benchmarks/kernel_instructions.py counts ~14% fewer instructions in column order; not yet timed
# (benchmarks/tune_kernels.py times both on a GPU).
RESAMPLE_FIRST_AXIS = 0
# How the column pass holds its tile. Triton 3.8 gives a (rows, columns) tile one column a thread
# (the taps once per column: 76 instructions a pixel, 32x32, sm_90); Triton 3.6 (torch 2.11's,
# the GPU image's) one row a thread (205: the taps per pixel) unless the tile is held as
# (columns, rows), which 3.6 gives one column a thread (77) and 3.8 one row (206). Versions in
# between are not counted: they get 3.6's choice. benchmarks/kernel_instructions.py counts it.
RESAMPLE_COLUMNS_ACROSS = triton is not None and tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 8)
# The resampling's taps unrolled at most (a 375x500 photo cut and resized to 224 needs 5-6). A
# pass needs the taps of its batch's largest downscale (a ragged batch of photos: its largest
# image), and each count was a kernel of its own, compiled on first use (0.3-2.3 s each here, for
# sm_90), every one running every sample through that many taps. Past this count the kernel
# unrolls these and loops over the rest as far as each sample's own scale needs: one kernel for
# every count above it, and a sample is not slowed by a larger image in its batch.
RESAMPLE_UNROLLED_TAPS = 8
# Taps a loop iteration takes past them (a sample's last may be one past its count, of weight 0):
# sm_90 SASS per tap and output pixel, row pass / column pass, 16 / 10.5 one at a time, 13 / 9 in
# twos, 11.5 / 8.8 in fours, against ~10.5 / 9.5 unrolled (benchmarks/kernel_instructions.py).
RESAMPLE_LOOP_TAPS = 2
# CUDA's limit on a grid's second dimension, where these kernels put the samples (or sample x
# channel planes): a bigger batch (a CIFAR-sized dataset augmented at once: 50000 x 3 planes) is
# launched in parts of whole samples.
MAX_GRID_Y = 65535
_state: dict = {}


def _parts(samples: int, programs_per_sample: int = 1) -> list[tuple]:
    """Consecutive runs of samples whose launches fit :data:`MAX_GRID_Y` along the grid's y, as
    ``(rows, count)``: ``rows(t)`` is the run's rows of a per-sample tensor, ``t`` itself where
    the whole batch fits (the usual case makes no views: each costs ~2 us of host time)."""
    step = max(1, MAX_GRID_Y // programs_per_sample)
    if samples <= step:
        return [(lambda t: t, samples)]
    return [((lambda t, run=slice(start, start + step): t[run]), min(step, samples - start))
            for start in range(0, samples, step)]


def usable(device) -> bool:
    """Whether the pipeline should run its geometry and color ops through these kernels on
    ``device``: CUDA, Triton importable, not disabled by ``GPUAUG_TRITON=0``, no launch failed."""
    if triton is None or torch.device(device).type != "cuda" or _state.get("broken"):
        return False
    return os.environ.get("GPUAUG_TRITON", "1").strip().lower() not in ("0", "false", "no", "off")


if triton is not None:
    # Kernels may read module globals only as constexpr.
    _BRIGHTNESS, _CONTRAST = tl.constexpr(OP_BRIGHTNESS), tl.constexpr(OP_CONTRAST)
    _SATURATION, _HUE = tl.constexpr(OP_SATURATION), tl.constexpr(OP_HUE)

    # Only Triton builtins and these helpers in the kernels (not tl.zeros or tl.sum, which are
    # themselves jit functions): then a copy of this module loaded with TRITON_INTERPRET=1 runs
    # entirely in Triton's interpreter, which is how the tests run it without a GPU.

    @triton.jit
    def _clamp01(v):
        return tl.minimum(tl.maximum(v, 0.0), 1.0)

    @triton.jit
    def _add(a, b):
        return a + b

    @triton.jit
    def _contrast_mean(partials, tiles, pixels, TILES: tl.constexpr):
        """The mean gray from one contrast step's per-tile sums (``tiles`` of them, ``TILES`` >= tiles,
        a power of two), summed in a fixed order: deterministic."""
        i = tl.arange(0, TILES)
        return tl.reduce(tl.load(partials + i, mask=i < tiles, other=0.0), 0, _add) / pixels

    @triton.jit
    def _run_steps(r, g, b, ops, factors, partials, tiles, pixels, stop, STEPS: tl.constexpr, CHANNELS: tl.constexpr,
                   TILES: tl.constexpr):
        """Steps ``[0, stop)`` of one sample's ``STEPS``-step program on a tile (r, g, b float32
        blocks); ``partials`` are the sample's ``(S, tiles)`` per-tile gray sums for its contrast
        steps. (The loop runs to the constexpr ``STEPS``, later steps doing nothing: Triton 3.6's
        interpreter cannot loop to a run-time bound.)"""
        for s in range(0, STEPS):
            op = tl.where(s < stop, tl.load(ops + s), 0)
            f = tl.load(factors + s)
            if op == _BRIGHTNESS:
                r, g, b = _clamp01(f * r), _clamp01(f * g), _clamp01(f * b)
            elif op == _CONTRAST:
                offset = (1.0 - f) * _contrast_mean(partials + s * tiles, tiles, pixels, TILES)
                r, g, b = _clamp01(f * r + offset), _clamp01(f * g + offset), _clamp01(f * b + offset)
            elif op == _SATURATION:
                if CHANNELS == 3:
                    gray = (1.0 - f) * (r * 0.2989 + g * 0.587 + b * 0.114)
                    r, g, b = _clamp01(f * r + gray), _clamp01(f * g + gray), _clamp01(f * b + gray)
            elif op == _HUE:
                if CHANNELS == 3:
                    v = tl.maximum(tl.maximum(r, g), b)
                    m = tl.minimum(tl.minimum(r, g), b)
                    c = v - m
                    # Hue in sixths of a turn from the max channel; ties pick r, then g (torchvision).
                    num = tl.where(r == v, g - b, tl.where(g == v, b - r + 2.0 * c, r - g + 4.0 * c))
                    h = 6.0 * f + num / tl.maximum(c, 1e-12)
                    h = h - 6.0 * tl.floor(h * (1.0 / 6.0))
                    r = m + c * _clamp01(tl.abs(h - 3.0) - 1.0)
                    g = v - c * _clamp01(tl.abs(h - 2.0) - 1.0)
                    b = v - c * _clamp01(tl.abs(h - 4.0) - 1.0)
        return r, g, b

    @triton.jit
    def _load_tile(image, offs, mask, pixels, CHANNELS: tl.constexpr):
        r = tl.load(image + offs, mask=mask, other=0.0).to(tl.float32)
        if CHANNELS == 3:
            g = tl.load(image + pixels + offs, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(image + 2 * pixels + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            g, b = r, r
        return r, g, b

    @triton.jit
    def _contrast_sum_kernel(src, ops, factors, partials, pixels, tiles, occurrence,
                             STEPS: tl.constexpr, CHANNELS: tl.constexpr, TILES: tl.constexpr, BLOCK: tl.constexpr):
        """Grid ``(tiles, B)``: at sample n's contrast step number ``occurrence`` (0: its first; a
        sample with fewer does nothing), the sum of one tile of its gray image after the steps
        before it -> ``partials[n, step, tile]``. Those steps' own contrast means come from the
        launches for earlier occurrences."""
        tile, n = tl.program_id(0), tl.program_id(1)
        row = n.to(tl.int64) * STEPS
        step = tl.full((), -1, tl.int32)
        seen = tl.full((), 0, tl.int32)
        for s in range(0, STEPS):
            contrast = tl.load(ops + row + s) == _CONTRAST
            step = tl.where(contrast & (seen == occurrence), s, step)
            seen += contrast.to(tl.int32)
        if step >= 0:
            sums = partials + row * tiles
            offs = tile * BLOCK + tl.arange(0, BLOCK)
            mask = offs < pixels
            r, g, b = _load_tile(src + n.to(tl.int64) * CHANNELS * pixels, offs, mask, pixels, CHANNELS)
            r, g, b = _run_steps(r, g, b, ops + row, factors + row, sums, tiles, pixels, step, STEPS, CHANNELS, TILES)
            if CHANNELS == 3:
                r = r * 0.2989 + g * 0.587 + b * 0.114  # the gray image
            tl.store(sums + step * tiles + tile, tl.reduce(tl.where(mask, r, 0.0), 0, _add))

    @triton.jit
    def _color_kernel(src, out, ops, factors, partials, mean, inv_std, pixels, tiles,
                      STEPS: tl.constexpr, CHANNELS: tl.constexpr, NORMALIZE: tl.constexpr, TILES: tl.constexpr,
                      BLOCK: tl.constexpr):
        """Grid ``(tiles, B)``: every step of sample n's program on one tile, then normalize,
        written to ``out`` in its dtype."""
        tile, n = tl.program_id(0), tl.program_id(1)
        row = n.to(tl.int64) * STEPS
        base = n.to(tl.int64) * CHANNELS * pixels
        offs = tile * BLOCK + tl.arange(0, BLOCK)
        mask = offs < pixels
        r, g, b = _load_tile(src + base, offs, mask, pixels, CHANNELS)
        r, g, b = _run_steps(r, g, b, ops + row, factors + row, partials + row * tiles, tiles, pixels, STEPS, STEPS,
                             CHANNELS, TILES)
        if NORMALIZE:
            r = (r - tl.load(mean)) * tl.load(inv_std)
            if CHANNELS == 3:
                g = (g - tl.load(mean + 1)) * tl.load(inv_std + 1)
                b = (b - tl.load(mean + 2)) * tl.load(inv_std + 2)
        dtype = out.dtype.element_ty
        tl.store(out + base + offs, r.to(dtype), mask=mask)
        if CHANNELS == 3:
            tl.store(out + base + pixels + offs, g.to(dtype), mask=mask)
            tl.store(out + base + 2 * pixels + offs, b.to(dtype), mask=mask)

    @triton.jit
    def _round_half_even(v):
        """``v`` rounded to the nearest integer, ties to even (``grid_sample``'s nearest)."""
        r = tl.floor(v + 0.5)
        return tl.where((r - v == 0.5) & (r - 2.0 * tl.floor(r * 0.5) != 0.0), r - 1.0, r)

    @triton.jit
    def _warp_kernel(src, out, matrix, fill, H, W, stride_n, stride_c, stride_h, stride_w,
                     CHANNELS: tl.constexpr, FILL: tl.constexpr, BLEND: tl.constexpr, NEAREST: tl.constexpr,
                     BLOCK: tl.constexpr, GROUP_ROWS: tl.constexpr):
        """Grid ``(tiles, B)``: bilinear (``NEAREST``: nearest) samples of one tile of sample n's
        output, as ``grid_sample(align_corners=False, padding_mode="zeros")`` at the coordinates
        its matrix gives, then torchvision's fill rule; ``src`` read through its strides (any layout).

        A tile is ``BLOCK`` pixels in row order (``GROUP_ROWS`` 1), or ``BLOCK // 32`` rows of 32
        columns in groups of ``GROUP_ROWS`` rows x ``32 // GROUP_ROWS`` columns: a warp's 32
        threads hold 32 consecutive pixels of the tile (Triton's layout here), so each load the
        warp makes reads one group, whose taps, rotated, may span fewer source rows (cache lines)
        than 32 pixels of one row."""
        tile, n = tl.program_id(0), tl.program_id(1)
        if GROUP_ROWS > 1:
            lane, group = tl.arange(0, BLOCK) % 32, tl.arange(0, BLOCK) // 32
            tiles_w = (W + 31) // 32
            i = (tile // tiles_w) * (BLOCK // 32) + GROUP_ROWS * (group // GROUP_ROWS) + lane // (32 // GROUP_ROWS)
            j = (tile % tiles_w) * 32 + (32 // GROUP_ROWS) * (group % GROUP_ROWS) + lane % (32 // GROUP_ROWS)
            mask = (i < H) & (j < W)
            offs = i * W + j
        else:
            offs = tile * BLOCK + tl.arange(0, BLOCK)
            mask = offs < H * W
            i, j = offs // W, offs % W
        m = matrix + n * 9
        xs = (2 * j + 1).to(tl.float32) / W - 1.0  # pixel centers in normalized coordinates
        ys = (2 * i + 1).to(tl.float32) / H - 1.0
        gx = tl.load(m) * xs + tl.load(m + 1) * ys + tl.load(m + 2)
        gy = tl.load(m + 3) * xs + tl.load(m + 4) * ys + tl.load(m + 5)
        px = ((gx + 1.0) * W - 1.0) * 0.5  # source pixel coordinates (grid_sample's unnormalize)
        py = ((gy + 1.0) * H - 1.0) * 0.5
        image = src + n.to(tl.int64) * stride_n
        target = out + n.to(tl.int64) * CHANNELS * H * W
        if NEAREST:
            xn, yn = _round_half_even(px), _round_half_even(py)
            inside = (xn >= 0.0) & (xn <= W - 1.0) & (yn >= 0.0) & (yn <= H - 1.0)
            at = yn.to(tl.int64) * stride_h + xn.to(tl.int64) * stride_w
            for c in tl.static_range(CHANNELS):
                value = tl.load(image + c * stride_c + at, mask=mask & inside, other=0.0).to(tl.float32)
                if FILL:  # torchvision's nearest rule: the fill where the pixel read is outside
                    value = tl.where(inside, value, tl.load(fill + c))
                tl.store(target + c * H * W + offs, value.to(out.dtype.element_ty), mask=mask)
            return
        x0f, y0f = tl.floor(px), tl.floor(py)
        wx, wy = px - x0f, py - y0f
        x0, y0 = x0f.to(tl.int32), y0f.to(tl.int32)
        x1, y1 = x0 + 1, y0 + 1
        in_x0, in_x1 = (x0 >= 0) & (x0 < W), (x1 >= 0) & (x1 < W)
        in_y0, in_y1 = (y0 >= 0) & (y0 < H), (y1 >= 0) & (y1 < H)
        # The share of a ones image that lands here (torchvision warps one for its fill rule).
        cover = _clamp01(0.5 + 0.5 * W * (1.0 - tl.abs(gx))) * _clamp01(0.5 + 0.5 * H * (1.0 - tl.abs(gy)))
        row0, row1 = y0.to(tl.int64) * stride_h, y1.to(tl.int64) * stride_h
        col0, col1 = x0.to(tl.int64) * stride_w, x1.to(tl.int64) * stride_w
        for c in tl.static_range(CHANNELS):
            plane = image + c * stride_c
            v00 = tl.load(plane + row0 + col0, mask=mask & in_y0 & in_x0, other=0.0).to(tl.float32)
            v01 = tl.load(plane + row0 + col1, mask=mask & in_y0 & in_x1, other=0.0).to(tl.float32)
            v10 = tl.load(plane + row1 + col0, mask=mask & in_y1 & in_x0, other=0.0).to(tl.float32)
            v11 = tl.load(plane + row1 + col1, mask=mask & in_y1 & in_x1, other=0.0).to(tl.float32)
            value = (v00 * (1.0 - wx) + v01 * wx) * (1.0 - wy) + (v10 * (1.0 - wx) + v11 * wx) * wy
            if FILL:
                f = tl.load(fill + c)
                value = (value - f) * cover + f
            elif BLEND:
                value = value * cover
            tl.store(target + c * H * W + offs, value.to(out.dtype.element_ty), mask=mask)



    @triton.jit
    def _pad_index(at, lo, hi, PAD: tl.constexpr):
        """Pixel ``at`` (float, an integer) outside ``[lo, hi)`` -> the pixel torchvision's edge
        (``PAD`` 1), reflect (2) or symmetric (3) padding copies there
        (:func:`gpuaug.functional.geometry.pad_index`)."""
        if PAD == 1:
            at = tl.minimum(tl.maximum(at, lo), hi - 1.0)
        elif PAD == 2:
            at = tl.where(at < lo, 2.0 * lo - at, tl.where(at >= hi, 2.0 * (hi - 1.0) - at, at))
        else:
            at = tl.where(at < lo, 2.0 * lo - at - 1.0, tl.where(at >= hi, 2.0 * hi - at - 1.0, at))
        return at

    @triton.jit
    def _tap(plane, fixed, read_o, mask_fixed, at, center, support, lo, hi, content_lo, content_hi, limit_f, stride,
             PAD: tl.constexpr, PAD_OUTPUT: tl.constexpr, CUBIC: tl.constexpr, O_DIM: tl.constexpr):
        """One tap of :func:`_resample_kernel`: source pixel ``at`` (along the pass's axis, one per
        output coordinate) -> (its filter weight, the weighted pixels it reads across the tile)."""
        d = tl.abs((at + 0.5 - center) / support)
        if CUBIC:  # gpuaug.functional.geometry.cubic_filter (negative lobes)
            w = tl.where(d < 1.0, (1.5 * d - 2.5) * d * d + 1.0,
                         tl.where(d < 2.0, ((-0.5 * d + 2.5) * d - 4.0) * d + 2.0, 0.0))
        else:
            w = tl.maximum(1.0 - d, 0.0)
        w = tl.where((at >= lo) & (at < hi), w, 0.0)
        if PAD == 0 or PAD_OUTPUT:  # padding reads as 0
            read = (w != 0.0) & (at >= content_lo) & (at < content_hi)
        else:  # padding copies a pixel of the content
            read = w != 0.0
            at = _pad_index(at, content_lo, content_hi, PAD)
        shift = tl.minimum(tl.maximum(at, 0.0), limit_f - 1.0).to(tl.int64) * stride
        source = tl.load(plane + fixed + _spread(shift, O_DIM), mask=_spread(read & read_o, O_DIM) & mask_fixed,
                         other=0)
        return w, _spread(w, O_DIM) * source.to(tl.float32)

    @triton.jit
    def _spread(v, DIM: tl.constexpr):
        """A vector along dimension ``DIM`` of a tile (the pass's output coordinate), across it."""
        if DIM == 0:
            return v[:, None]
        else:
            return v[None, :]

    # `limit` (the source's largest row or column, a ragged batch's largest image) only bounds the
    # taps: specialising on its divisibility by 16 compiled a new variant whenever a ragged batch's
    # largest height or width was a multiple of 16 (~0.6 s on the H200, compile_check --ragged 8).
    @triton.jit(do_not_specialize=["limit"])
    def _resample_kernel(src, out, axes, table, P, Q, limit, stride_n, stride_c, stride_p, stride_q, scale,
                         CHANNELS: tl.constexpr, TAPS: tl.constexpr, AXIS: tl.constexpr, RAGGED: tl.constexpr,
                         ANTIALIAS: tl.constexpr, PAD: tl.constexpr, PAD_OUTPUT: tl.constexpr,
                         CUBIC: tl.constexpr, FIRST: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
                         COLUMNS_ACROSS: tl.constexpr = False, MORE_TAPS: tl.constexpr = False,
                         LOOP_TAPS: tl.constexpr = 1):
        """Grid ``(tiles of P x Q, B*C)``: one pass of the separable resampling along ``AXIS``
        (0: rows, 1: columns) -> contiguous ``out[n, c, p, q]``, times ``scale``, a
        ``BLOCK_P x BLOCK_Q`` tile a program.

        Output coordinate ``o`` (``p`` for rows, ``q`` for columns) has its center at source
        ``s * (o + 0.5) + t`` and takes the triangle-filtered source (support ``max(|s|, 1)`` when
        ``ANTIALIAS``, else 1; ``CUBIC``: the cubic filter over twice that) over the ``TAPS``
        pixels from ``floor(center - support)`` (``MORE_TAPS``: then, in a loop, as many more as
        this sample's own scale needs, as :func:`gpuaug.functional.geometry.tap_count` counts
        them), those outside the window ``[lo, hi)`` weighing 0, normalized, those outside ``[content_lo,
        content_hi)`` reading 0 (padding; ``PAD`` 1, 2, 3: the pixel torchvision's edge, reflect,
        symmetric padding copies there); outside ``[valid_lo, valid_hi)`` the output is 0, or, with
        ``PAD_OUTPUT`` (a crop that copies pixels after a resize; the content then reads 0 past
        it), the output pixel inside that ``PAD`` copies there. The taps and weights depend on
        ``o`` alone, so they are computed once per tile row (or column), for the tile's
        ``BLOCK_P`` (or ``BLOCK_Q``) outputs, not once per pixel.
        ``axes`` is ``(B, 2, 8)`` float32: per axis ``s, t, lo, hi, valid_lo, valid_hi,
        content_lo, content_hi`` (what :func:`gpuaug.functional.geometry.axis_taps` takes). ``src``
        is read through its strides (any layout, uint8 or float), taps clamped to ``[0, limit)``;
        only taps of non-zero weight inside the content are read. The ``FIRST`` of the two passes
        writes only the lines (columns of the row pass, rows of the column pass) inside the other
        axis's content, all the second pass reads, and a program whose lines all lie outside it
        returns at once. ``RAGGED`` (first pass only): ``src`` is a flat buffer of images of
        different sizes and ``table`` ``(B, 6)`` int64 gives each its offset, its channel, row and
        column strides, its height and its width (which replace ``limit``)."""
        tile, plane_id = tl.program_id(0), tl.program_id(1)
        n, c = plane_id // CHANNELS, plane_id % CHANNELS
        tiles_q = (Q + BLOCK_Q - 1) // BLOCK_Q
        p = (tile // tiles_q) * BLOCK_P + tl.arange(0, BLOCK_P)
        q = (tile % tiles_q) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        if RAGGED:
            entry = table + n * 6
            base, sc = tl.load(entry), tl.load(entry + 1)
            sp, sq = tl.load(entry + 2), tl.load(entry + 3)
            limit_f = tl.load(entry + 4 + AXIS).to(tl.float32)
        else:
            # tl.cast, not .to: Triton passes an int argument equal to 1 as a constexpr.
            base, sc = n.to(tl.int64) * stride_n, tl.cast(stride_c, tl.int64)
            sp, sq = tl.cast(stride_p, tl.int64), tl.cast(stride_q, tl.int64)
            limit_f = tl.cast(limit, tl.float32)
        plane = src + base + c * sc
        mask_p, mask_q = p < P, q < Q
        if FIRST:
            # Only the lines the second pass reads (the other axis's content, a crop's part of the
            # image): it loads only taps of non-zero weight, all inside that content. A program
            # with none of them has nothing to do (its part of the output is never read).
            other = axes + n * 16 + (1 - AXIS) * 8
            needed_lo, needed_hi = tl.load(other + 6), tl.load(other + 7)
            if AXIS == 0:
                start, size = (tile % tiles_q) * BLOCK_Q, BLOCK_Q
            else:
                start, size = (tile // tiles_q) * BLOCK_P, BLOCK_P
            if (start + size <= needed_lo) | (start >= needed_hi):
                return
            if AXIS == 0:
                mask_q = mask_q & (q.to(tl.float32) >= needed_lo) & (q.to(tl.float32) < needed_hi)
            else:
                mask_p = mask_p & (p.to(tl.float32) >= needed_lo) & (p.to(tl.float32) < needed_hi)
        if AXIS == 0:
            o = p
        else:
            o = q
        params = axes + n * 16 + AXIS * 8
        s, t = tl.load(params), tl.load(params + 1)
        lo, hi = tl.load(params + 2), tl.load(params + 3)
        valid_lo, valid_hi = tl.load(params + 4), tl.load(params + 5)
        content_lo, content_hi = tl.load(params + 6), tl.load(params + 7)
        at_o = o.to(tl.float32)
        if PAD_OUTPUT:  # a crop after a resize copies output pixels into its padding
            at_o = _pad_index(at_o, valid_lo, valid_hi, PAD)
        center = s * (at_o + 0.5) + t
        if ANTIALIAS:
            support = tl.maximum(tl.abs(s), 1.0)
        else:
            support = 1.0
        if CUBIC:
            first = tl.floor(center - 2.0 * support)
        else:
            first = tl.floor(center - support)
        # The tile's pixels along the axis the pass does not resample: their offsets, which exist.
        # COLUMNS_ACROSS (column pass): the tile is held as (columns, rows), dimension 0 the
        # output coordinate, as in the row pass: Triton 3.6 then gives each thread one column.
        if AXIS == 0:
            fixed, mask_o, mask_fixed = q.to(tl.int64)[None, :] * sq, mask_p, mask_q[None, :]
            total = tl.full([BLOCK_P, BLOCK_Q], 0.0, tl.float32)
        elif COLUMNS_ACROSS:
            fixed, mask_o, mask_fixed = p.to(tl.int64)[None, :] * sp, mask_q, mask_p[None, :]
            total = tl.full([BLOCK_Q, BLOCK_P], 0.0, tl.float32)
        else:
            fixed, mask_o, mask_fixed = p.to(tl.int64)[:, None] * sp, mask_q, mask_p[:, None]
            total = tl.full([BLOCK_P, BLOCK_Q], 0.0, tl.float32)
        O_DIM: tl.constexpr = 0 if AXIS == 0 or COLUMNS_ACROSS else 1  # the tile dimension along o
        weights = tl.full(o.shape, 0.0, tl.float32)
        stride = sp if AXIS == 0 else sq
        for k in tl.static_range(TAPS):  # along o: the tap's source pixel, its weight, what it reads
            w, part = _tap(plane, fixed, mask_o, mask_fixed, first + k, center, support, lo, hi, content_lo,
                           content_hi, limit_f, stride, PAD, PAD_OUTPUT, CUBIC, O_DIM)
            total += part
            weights += w
        if MORE_TAPS:  # the rest of this sample's taps (tap_count of its own scale)
            # (Without antialias the filter spans 4 taps, 6 bicubic: never more than are unrolled.)
            tl.static_assert(ANTIALIAS, "MORE_TAPS without ANTIALIAS: the filter never needs them")
            span = 4.0 * support if CUBIC else 2.0 * support
            needed, k = tl.floor(span).to(tl.int32) + 2, TAPS
            while k < needed:  # (a while: Triton 3.6's interpreter cannot range() to a loaded value)
                for j in tl.static_range(LOOP_TAPS):
                    w, part = _tap(plane, fixed, mask_o, mask_fixed, first + (k + j), center, support, lo, hi,
                                   content_lo, content_hi, limit_f, stride, PAD, PAD_OUTPUT, CUBIC, O_DIM)
                    total += part
                    weights += w
                k += LOOP_TAPS
        value = total / _spread(tl.maximum(weights, 1e-12), O_DIM) * scale
        if not PAD_OUTPUT:  # padding of a later crop
            value = tl.where(_spread((at_o >= valid_lo) & (at_o < valid_hi), O_DIM), value, 0.0)
        if AXIS == 1 and COLUMNS_ACROSS:
            target = out + plane_id.to(tl.int64) * P * Q + p[None, :] * Q + q[:, None]
            tl.store(target, value.to(out.dtype.element_ty), mask=mask_p[None, :] & mask_q[:, None])
        else:
            target = out + plane_id.to(tl.int64) * P * Q + p[:, None] * Q + q[None, :]
            tl.store(target, value.to(out.dtype.element_ty), mask=mask_p[:, None] & mask_q[None, :])


def _on_device(device: torch.device):
    """A context in which ``device`` is torch's current CUDA device (nothing elsewhere: the
    interpreter's CPU tensors). Triton launches on the current device and its current stream,
    not on its tensors': a pipeline on cuda:1 called where cuda:0 is current (``select_device``'s
    ``LOCAL_RANK`` or pid rule picks a device without making it current) would run its kernels on
    cuda:0's stream, reading cuda:1's memory unordered with the cuda:1 work that wrote it."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _require_triton() -> None:
    if triton is None:
        raise RuntimeError("gpuaug.gpu_kernels needs triton (it ships with torch's Linux CUDA wheels)")


def color_program(x: Tensor, out: Tensor, ops: Tensor, factors: Tensor, mean: Tensor | None = None,
                  inv_std: Tensor | None = None, contrast_steps: int | None = None) -> Tensor:
    """Run each sample's color program on ``x`` into ``out``.

    Args:
        x: ``(B, C, H, W)`` float16, bfloat16 or float32 images in [0, 1], contiguous, C in {1, 3}.
        out: a contiguous float tensor of ``x``'s shape (any float dtype), on its device.
        ops: ``(B, S)`` int32 op codes (``gpuaug.native.OP_*``), run left to right.
        factors: ``(B, S)`` float32, each step's factor.
        mean, inv_std: ``(C,)`` float32 for a final normalize, or both None.
        contrast_steps: at least the number of contrast steps in any sample's program (one per
            ColorJitter with contrast, the pipeline knows it), or None for ``S``: one launch per
            contrast step computes their means, before the launch that runs the programs.

    Returns:
        ``out``. Raises ``ValueError``/``TypeError`` on arguments the kernel does not take.
    """
    _require_triton()
    if x.dim() != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"expected images (B, C, H, W) with C in {{1, 3}}, got shape {tuple(x.shape)}")
    if not x.is_floating_point() or not out.is_floating_point():
        raise TypeError(f"expected float images and output, got {x.dtype} and {out.dtype}")
    if out.shape != x.shape or out.device != x.device or not (x.is_contiguous() and out.is_contiguous()):
        raise ValueError(f"out should be contiguous with x's shape {tuple(x.shape)} on {x.device}, got "
                         f"{tuple(out.shape)} on {out.device}")
    B, C, H, W = x.shape
    if ops.shape != factors.shape or ops.dim() != 2 or ops.shape[0] != B:
        raise ValueError(f"ops and factors should both be (B={B}, S), got {tuple(ops.shape)} and {tuple(factors.shape)}")
    if ops.dtype != torch.int32 or factors.dtype != torch.float32:
        raise TypeError(f"ops should be int32 and factors float32, got {ops.dtype} and {factors.dtype}")
    stats = normalize_stats(mean, inv_std, C, x.device)
    steps, pixels = ops.shape[1], H * W
    if contrast_steps is None:
        contrast_steps = steps
    elif not isinstance(contrast_steps, int) or isinstance(contrast_steps, bool) or contrast_steps < 0:
        raise ValueError(f"contrast_steps should be an int >= 0 or None, got {contrast_steps!r}")
    tiles = triton.cdiv(pixels, BLOCK)
    ops, factors = ops.contiguous(), factors.contiguous()
    # Per-tile gray sums of each contrast step, written by its launch below and read only for
    # that step (of that sample) after it: no fill needed.
    partials = torch.empty(B, max(steps, 1), tiles, device=x.device, dtype=torch.float32)
    shape = dict(STEPS=steps, CHANNELS=C, TILES=triton.next_power_of_2(tiles), BLOCK=BLOCK)
    mean, inv_std = stats if stats else (factors, factors)  # unread without NORMALIZE
    with _on_device(x.device):
        for rows, n in _parts(B):
            for occurrence in range(min(contrast_steps, steps)):
                _contrast_sum_kernel[(tiles, n)](rows(x), rows(ops), rows(factors), rows(partials), pixels, tiles,
                                                 occurrence, **shape)
            _color_kernel[(tiles, n)](rows(x), rows(out), rows(ops), rows(factors), rows(partials), mean, inv_std,
                                      pixels, tiles, NORMALIZE=stats is not None, **shape)
    return out


def warp_affine(x: Tensor, matrix: Tensor, fill: Tensor | None = None, blend: bool = True,
                nearest: bool = False) -> Tensor:
    """:func:`gpuaug.functional.geometry.warp_affine` as one kernel: bilinear (or ``nearest``)
    warp of ``(B, C, H, W)`` float images (any strides) by ``(B, 3, 3)`` output->input matrices in
    normalized coordinates, uncovered area -> ``fill`` (``(C,)`` or None for 0) by torchvision's
    rule (none with ``blend`` False and no fill). Coordinates and sampling in float32; returns a
    contiguous tensor of ``x``'s shape and dtype."""
    _require_triton()
    if x.dim() != 4 or x.shape[1] not in (1, 3) or not x.is_floating_point():
        raise ValueError(f"expected float images (B, C, H, W) with C in {{1, 3}}, got {x.dtype} {tuple(x.shape)}")
    B, C, H, W = x.shape
    if matrix.shape != (B, 3, 3):
        raise ValueError(f"expected (B={B}, 3, 3) matrices, got {tuple(matrix.shape)}")
    if fill is not None and fill.numel() != C:
        raise ValueError(f"fill should hold {C} values, got {fill.numel()}")
    out = torch.empty(B, C, H, W, device=x.device, dtype=x.dtype)
    matrix = matrix.to(x.device, torch.float32).contiguous()
    fill_arg = fill.to(x.device, torch.float32).contiguous() if fill is not None else matrix
    groups = WARP_GROUP_ROWS > 1
    tiles = triton.cdiv(H, GEOMETRY_BLOCK // 32) * triton.cdiv(W, 32) if groups else triton.cdiv(H * W, GEOMETRY_BLOCK)
    with _on_device(x.device):
        for rows, n in _parts(B):
            _warp_kernel[(tiles, n)](
                rows(x), rows(out), rows(matrix), fill_arg, H, W, *x.stride(), CHANNELS=C, FILL=fill is not None,
                BLEND=bool(blend), NEAREST=bool(nearest), BLOCK=GEOMETRY_BLOCK, GROUP_ROWS=WARP_GROUP_ROWS,
                num_warps=WARP_WARPS)
    return out


class Packed(NamedTuple):
    """A ragged list of ``(C, H_i, W_i)`` images in one flat device buffer, which
    :func:`resample_axes` reads in place, unpadded (:func:`pack_images` makes it)."""

    flat: Tensor  # every image's elements, each in its own memory order
    table: Tensor  # (B, 6) int64: offset in flat, channel/row/column strides, height, width
    shape: tuple[int, int, int, int]  # (B, C, max height, max width)
    images: list[Tensor] | PackedImages  # the images on the device (a fallback to torch kernels pads them)


def pack_images(images: list[Tensor] | PackedImages, device: torch.device, hw: np.ndarray | None = None) -> Packed:
    """Pack images of different sizes on ``device`` for :func:`resample_axes`, with one
    non-blocking copy of the offsets table, instead of a padded batch (a zero fill and a copy per
    image). A :class:`PackedImages` is copied as one buffer; a list is concatenated (one kernel),
    after copying each image to the device where it is elsewhere; channels-last images are read in
    their own memory order, other strided ones made contiguous first. ``hw``: the list's
    ``(n, 2)`` int64 ``[height, width]`` rows where the caller has them (one channel count
    assumed), so that the images' shapes are not read again (~0.1 ms for 256 on the CPU)."""
    if isinstance(images, PackedImages):
        images = packed = images.to(device, non_blocking=True)
        flat, shapes = packed.flat, packed.shapes
        _, h, w = int_table(list(shapes), 3).T
        rows = np.stack([np.array(packed.offsets, dtype=np.int64), h * w, w, np.ones_like(w), h, w], 1)
        shape = (len(shapes), shapes[0][0], int(h.max()), int(w.max()))
    elif all(t.device == device and t.is_contiguous() for t in images):
        # The common case (decoded by torchvision, handed over by the loader): the offsets by numpy
        # and the copy by one C++ call (a Python view per image cost ~2x more, 256 images, CPU).
        flat = torch._utils._flatten_dense_tensors(images)
        c = images[0].shape[0]
        if hw is None:
            hw = int_table([t.shape for t in images], 3)[:, 1:]
        elif hw.shape != (len(images), 2):
            raise ValueError(f"hw should be ({len(images)}, 2) rows, one per image, got shape {hw.shape}")
        h, w = hw.T
        size = c * h * w
        rows = np.stack([np.cumsum(size) - size, h * w, w, np.ones_like(w), h, w], 1)
        shape = (len(images), c, int(h.max()), int(w.max()))
    else:
        images = [t.to(device, non_blocking=True) for t in images]
        shapes = [(t.shape[0], t.shape[1], t.shape[2]) for t in images]
        views, table, offset = [], [], 0
        for t, (c, h, w) in zip(images, shapes):
            if t.is_contiguous():  # the common case, decoded by torchvision: no stride reads
                views.append(t.view(-1))
                table.append([offset, h * w, w, 1, h, w])
            else:
                dense = t.permute(sorted(range(3), key=lambda d: -t.stride()[d]))  # its memory order
                if not dense.is_contiguous():
                    t = dense = t.contiguous()
                views.append(dense.reshape(-1))
                table.append([offset, t.stride(0), t.stride(1), t.stride(2), h, w])
            offset += c * h * w
        flat, rows = torch.cat(views), np.array(table, dtype=np.int64)
        shape = (len(shapes), shapes[0][0], max(s[1] for s in shapes), max(s[2] for s in shapes))
    return Packed(flat, to_device(rows, device, "int64"), shape, images)


def resample_tiles(width: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ``(BLOCK_P, BLOCK_Q)`` tiles of :func:`resample_axes`' row pass, whose output is
    ``width`` wide (whole rows: the width rounded up to a power of two, at most 1024; narrow
    images several rows), and of its column pass."""
    row = min(triton.next_power_of_2(width), 1024)
    return (max(1, RESAMPLE_ROW_PIXELS // row), row), RESAMPLE_COLUMN_TILE


def resample_axes(x: Tensor | Packed, axes: Tensor, size: tuple[int, int], taps: tuple[int, int],
                  dtype: torch.dtype, scale: float = 1.0, antialias: bool = True, pad_mode: str = "constant",
                  pad_output: bool = False, cubic: bool = False) -> Tensor:
    """Crop, resize and flip a batch through per-sample axis maps, in two launches (rows, then
    columns): :func:`gpuaug.functional.geometry.axis_taps` and ``resample_separable`` fused, the
    taps computed where they are used. Reads ``x`` (uint8 or float, any strides, or a ragged
    :class:`Packed` list) as it is, accumulates in float32, returns a contiguous
    ``(B, C, h, w)`` tensor in ``dtype``, times ``scale``.

    Args:
        x: ``(B, C, H, W)`` images, or :func:`pack_images` of a list of ``(C, H_i, W_i)``.
        axes: ``(B, 2, 8)`` float32: for y then x, ``scale, offset, window_lo, window_hi,
            valid_lo, valid_hi, content_lo, content_hi`` as ``axis_taps`` takes them.
        size: output ``(h, w)``; taps: taps per output pixel along y and x (``tap_count``).
        scale: a factor on the result (``1 / 255`` turns uint8 into [0, 1]).
        antialias: the filter widens with the downscale factor (torchvision's ``antialias=True``).
        pad_mode: what the window outside the content reads: ``"constant"`` (0), ``"edge"``,
            ``"reflect"``, ``"symmetric"`` (the pixel torchvision's padding copies there).
        pad_output: ``pad_mode`` pads the output instead (outside each axis's ``valid`` range, a
            crop that copies pixels after a resize); the window outside the content reads 0.
        cubic: the bicubic filter (``axis_taps``' ``cubic``) instead of the triangle.
    """
    _require_triton()
    pad = PAD_MODES.index(pad_mode)
    if pad_output and not pad:
        raise ValueError("pad_output needs a pad_mode that copies pixels (edge, reflect, symmetric), got 'constant'")
    ragged = isinstance(x, Packed)
    strides: tuple[int, ...]
    if isinstance(x, Packed):
        src, (B, C, H, W), strides, ragged_table = x.flat, x.shape, (0, 0, 0, 0), x.table
    else:
        src, strides, ragged_table = x, x.stride(), None
        B, C, H, W = tuple(x.shape) if x.dim() == 4 else (0, 0, 0, 0)
    if (not ragged and src.dim() != 4) or C not in (1, 3) or not (src.dtype == torch.uint8 or src.is_floating_point()):
        raise ValueError(f"expected uint8 or float images (B, C, H, W) with C in {{1, 3}}, got {src.dtype} "
                         f"{tuple(x.shape)}")
    if axes.shape != (B, 2, 8) or axes.dtype != torch.float32:
        raise ValueError(f"axes should be float32 of shape (B={B}, 2, 8), got {axes.dtype} {tuple(axes.shape)}")
    h, w = size
    axes = axes.contiguous()
    first = RESAMPLE_FIRST_AXIS
    # The first pass resamples axis `first` of the source, the second the other axis of its result.
    middle = (B, C, h, W) if first == 0 else (B, C, H, w)
    tmp = torch.empty(middle, device=src.device, dtype=dtype)
    out = torch.empty(B, C, h, w, device=src.device, dtype=dtype)
    limits = (H, W)
    with _on_device(src.device):
        # A ragged part: the whole buffer, the part's rows of the table (absolute offsets).
        for rows, n in _parts(B, C):
            for axis, source, target, table, scale_by, source_strides, is_first in (
                    (first, src if ragged else rows(src), rows(tmp), rows(ragged_table) if ragged_table is not None else axes, 1.0, strides,
                     True),
                    (1 - first, rows(tmp), rows(out), axes, float(scale), tmp.stride(), False)):
                P, Q = target.shape[-2:]
                tile_p, tile_q = resample_tiles(Q)[axis]
                _resample_kernel[(triton.cdiv(P, tile_p) * triton.cdiv(Q, tile_q), n * C)](
                    source, target, rows(axes), table, P, Q, limits[axis], *source_strides, scale_by, CHANNELS=C,
                    TAPS=min(taps[axis], RESAMPLE_UNROLLED_TAPS), MORE_TAPS=taps[axis] > RESAMPLE_UNROLLED_TAPS,
                    LOOP_TAPS=RESAMPLE_LOOP_TAPS, AXIS=axis, RAGGED=ragged and is_first, ANTIALIAS=antialias, PAD=pad,
                    PAD_OUTPUT=bool(pad_output), CUBIC=bool(cubic), FIRST=is_first, BLOCK_P=tile_p, BLOCK_Q=tile_q,
                    COLUMNS_ACROSS=axis == 1 and RESAMPLE_COLUMNS_ACROSS, num_warps=RESAMPLE_WARPS)
    return out


@torch.compiler.disable  # torch.compile runs these as they are (each is one fused kernel already)
def guarded(launch, *args, **kwargs):
    """``launch(*args, **kwargs)`` (:func:`resample_axes`, :func:`warp_affine`,
    :func:`color_program`), except that where a launch fails (Triton cannot compile for this GPU,
    say; each new shape specialization compiles anew) it warns once and turns the kernels off for
    the process -> None, and the caller runs its torch kernels. Bad arguments
    (``TypeError``/``ValueError``) and running out of memory propagate."""
    if _state.get("broken"):
        return None
    try:
        return launch(*args, **kwargs)
    except (TypeError, ValueError, torch.OutOfMemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - any compile or launch failure: fall back, loudly
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise  # a CUDA graph being recorded: its recording fails (gpuaug.cuda_graph), not the kernels
        _state["broken"] = True
        warn(f"gpuaug: the Triton kernels failed ({type(error).__name__}: {error}); "
             "using the torch kernels from now on")
        return None
