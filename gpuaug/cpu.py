"""The CPU's own means: what gpuaug does differently where there is no GPU.

On CUDA a batch is one pass of batched torch kernels with no host sync. On the CPU reading a value
syncs with nothing and every torch op is a pass over memory, so the pipeline

* works on chunks of a few images (:func:`chunks`), so the intermediates stay in cache;
* reads ragged lists in place (:func:`reads_in_place`) and copies only the area each image's crop
  reads (:func:`crop_to_taps`) before resampling;
* resizes plain uint8 crops with torchvision's own uint8 kernel
  (:func:`gpuaug.functional.geometry.resized_crops`; the plan finds them);
* gathers the pixels of maps that resample nothing (crops, flips and padding with no resize:
  each output pixel one source pixel, :func:`gather_pixels`; the CIFAR recipe);
* runs the color ops as one fused C kernel (:func:`fused_color_program`, :mod:`gpuaug.native`),
  or, without a C compiler, as torch kernels on chunks whose samples take the same color passes.

The results are torchvision's either way (tests check both against it). Tests set ``OWN_PATH``
to False to run the CPU exactly as CUDA runs (one pass, float resampling, torch kernels), so that
path is checked against torchvision without a GPU.

:func:`keep_freed_memory`, a process-wide allocator setting for CPU work, lives here too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch
from torch import Tensor

from . import native

OWN_PATH = True
# Chunks of 4 ran 378 img/s against 50 for one 64-image pass, one thread (2026-12-02, torch
# kernels). Re-measured with the fused kernels the same day (batch 64, fastest of 9 calls, two
# rounds): chunks of 2 1060-1339 img/s, 4 1204-1293, 8 905-1266, 16 732-835.
CHUNK = 4
# ... for ~375x500 photos cropped to 224x224. Smaller images go in proportionally larger chunks,
# up to these pixel counts per chunk (read, and written): 16x16 crops of ~30x40 images ran 11.8k
# img/s in chunks of 4, 21.5k in 16, 27.7k in 64, 30.1k in 256 (one thread, 2026-12-03).
CHUNK_SOURCE_PIXELS = CHUNK * 375 * 500
CHUNK_OUTPUT_PIXELS = CHUNK * 224 * 224
# A ragged batch whose images' pixel counts differ more than this goes in chunks of like sizes.
SIZE_SPREAD = 2

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse instead of returning it to the OS at once.

    Batched image work on the CPU allocates and frees many tensors of a few MiB per call. glibc
    serves those with fresh ``mmap`` pages, so every call pays a page fault per 4 KiB touched;
    on this project's 2-core VM that was more than half of a 64-image pipeline call, and filling a
    fresh 38.5 MB tensor (a batch of 64 float32 224x224 outputs) took 16 ms against 1 ms for reused
    memory. This makes glibc serve every allocation from its heap (no ``mmap`` per allocation; glibc
    still falls back to ``mmap`` when the heap cannot grow) and disables heap trimming (the same as
    the environment variables ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``), for the
    whole process: memory freed stays with the process for the next batch (resident memory stays at
    its peak). It changes no result. ``gpuaug bench`` calls it for every row it times.

    Returns:
        True where it was applied (Linux with glibc), False elsewhere (nothing is changed).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # Setting either threshold also freezes glibc's (otherwise dynamic) mmap threshold.
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def own_path(device) -> bool:
    """Whether work on ``device`` takes the CPU's own means (the CPU, unless tests turned them off)."""
    return OWN_PATH and torch.device(device).type == "cpu"


def chunks(color: list[tuple], n: int, frames: int, grouped: bool = True,
           pixels: tuple[int, int] = (1, 1), areas: list[int] | None = None) -> list[slice | Tensor]:
    """The chunks of the ``n`` images (``color``: the color ops with their params, ``(op, params)``
    pairs): runs of ``max(CHUNK, frames)`` images or fewer (images whose ``pixels``, ``(largest
    source, output)``, are smaller than a photo's go in proportionally larger runs; a clip may
    span two chunks: its frames' params are per frame by then), as slices in order, or as index
    tensors

    * where ``grouped`` and the color ops' group keys (``ColorOp.group_key``) differ: each chunk
      within one group, so its samples take the same torch color passes and skip those none of
      them needs;
    * where ``areas`` (each image's source pixels, for a ragged batch) differ more than
      ``SIZE_SPREAD`` times: each chunk of images within that ratio, smallest first, and as many
      as its own largest image allows. A chunk is resampled as one tensor of its largest part, so
      a 3000x4000 image in a chunk of 375x500 photos padded them to its size (63 photos and one
      such image, float32, the README pipeline, one thread: 220-223 ms in runs of 4 with the
      batch's taps, 158-165 ms so, what the two parts take alone; benchmarks/ragged_cpu_bench.py).
    """
    def step(source: int) -> int:
        fit = min(CHUNK_SOURCE_PIXELS // max(source, 1), CHUNK_OUTPUT_PIXELS // max(pixels[1], 1))
        return max(CHUNK, frames, fit)

    keys = [k for op, params in color if grouped and (k := op.group_key(params)) is not None]
    group = torch.unique(torch.stack(keys, 1), dim=0, return_inverse=True)[1] if keys else torch.zeros(n, device="cpu")
    counts = torch.bincount(group.long()).tolist()
    mixed = areas is not None and max(areas) > SIZE_SPREAD * min(areas)
    if len(counts) == 1 and not mixed:  # one group: the batch's own order
        return [slice(start, start + step(pixels[0])) for start in range(0, n, step(pixels[0]))]
    # By group, then (sizes far apart) by size; a chunk ends where the group changes, the size
    # outgrows its first image's SIZE_SPREAD times, or it holds as many as its largest allows.
    area = torch.tensor(areas if mixed else [pixels[0]] * n, dtype=torch.int64, device="cpu")
    order = torch.argsort(group.long() * (int(area.max()) + 1) + area, stable=True)
    sorted_group, sorted_area = group[order].tolist(), area[order].tolist()
    parts: list[slice | Tensor] = []
    begin = 0
    for i in range(1, n + 1):
        if i == n or sorted_group[i] != sorted_group[begin] or sorted_area[i] > SIZE_SPREAD * sorted_area[begin] \
                or i - begin >= step(sorted_area[i]):
            parts.append(order[begin:i])
            begin = i
    return parts


def fused_color_program(program: tuple | None, channels: int) -> tuple | None:
    """The color ops' per-sample programs (``(ops, factors, normalize)`` from
    :func:`gpuaug.transforms.color.color_programs`, or None) as arguments of the fused C kernel:
    ``(ops, factors, mean, inv_std)`` for :func:`gpuaug.native.color_program`; ``None`` where
    there is no program or the kernel is not built."""
    if program is None or not native.available() or program[0].shape[1] > native.MAX_STEPS:
        return None
    ops, factors, normalize = program
    mean = inv_std = None
    if normalize is not None:
        mean, inv_std = (t.cpu() for t in normalize.values(channels))
    return ops, factors, mean, inv_std


def reads_in_place(chunk: list[Tensor], plan: dict) -> bool:
    """True where the resampling (:func:`crop_to_taps`, or ``resized_crops`` for plain crops) can
    read a ragged chunk as it is, unpadded: there is a resampling stage, every image on the CPU."""
    resamples = plan["rows"] is not None or plan["boxes"] is not None
    return resamples and all(t.device.type == "cpu" for t in chunk)


def crop_to_taps(x: Tensor | list[Tensor], rows: tuple[Tensor, Tensor], cols: tuple[Tensor, Tensor],
                 dtype: torch.dtype):
    """Copy (and convert to ``dtype``) just the part of each image its taps read, into one
    ``(B, C, h', w')`` tensor (the largest such part in the batch), and shift the taps to it.
    A crop reads ~half of the image on average, and every later pass of the resampling scales
    with its width. ``x`` is a ``(B, C, H, W)`` tensor or a list of ``(C, H_i, W_i)`` images (read
    unpadded; where the part is larger than an image, the rest is zero, as padding would be).
    Reads the taps' values, which syncs with nothing on the CPU."""
    (ri, rw), (ci, cw) = _used_taps(*rows), _used_taps(*cols)
    heights = torch.tensor([t.shape[-2] for t in x] if isinstance(x, list) else [x.shape[-2]] * len(x), device="cpu")
    widths = torch.tensor([t.shape[-1] for t in x] if isinstance(x, list) else [x.shape[-1]] * len(x), device="cpu")
    # Taps past an image's own edge have zero weight: pointing them at its last pixel keeps every
    # tap inside the part copied.
    ri, ci = torch.minimum(ri, (heights - 1).view(-1, 1, 1)), torch.minimum(ci, (widths - 1).view(-1, 1, 1))
    r0, r1 = ri.amin((1, 2)), ri.amax((1, 2)) + 1
    c0, c1 = ci.amin((1, 2)), ci.amax((1, 2)) + 1
    h, w = int((r1 - r0).max()), int((c1 - c0).max())
    r0, c0 = torch.minimum(r0, (heights - h).clamp(min=0)), torch.minimum(c0, (widths - w).clamp(min=0))
    if isinstance(x, Tensor) and (h, w) == tuple(x.shape[-2:]):  # every part is the whole image: one copy
        return x.to(dtype), (ri, rw), (ci, cw)
    out = torch.empty(len(x), x[0].shape[0], h, w, dtype=dtype, device="cpu")
    for b, (top, left) in enumerate(zip(r0.tolist(), c0.tolist())):
        part = x[b][:, top:top + h, left:left + w]
        ph, pw = part.shape[-2:]
        out[b, :, :ph, :pw].copy_(part)
        if ph < h or pw < w:
            out[b, :, ph:].zero_()
            out[b, :, :ph, pw:].zero_()
    return out, (ri - r0.view(-1, 1, 1), rw), (ci - c0.view(-1, 1, 1), cw)


def _used_taps(index: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """Taps ``(B, n, K)`` of a chunk -> the first ``k`` of them, up to the last any of its samples
    weighs (a chunk's samples need fewer than the batch's largest downscale), the indices of the
    zero-weight taps left pointing at their pixel's first tap (they read nothing; so they do not
    widen the part :func:`crop_to_taps` copies)."""
    used = (weight != 0).flatten(0, -2).any(0).nonzero()
    k = int(used.max()) + 1 if len(used) else 1
    index, weight = index[..., :k], weight[..., :k]
    return torch.where(weight != 0, index, index[..., :1]), weight


def gather_pixels(x: Tensor | list[Tensor], rows: tuple[Tensor, Tensor], cols: tuple[Tensor, Tensor],
                  dtype: torch.dtype) -> Tensor:
    """The resampling of a map where every output pixel reads one source pixel (taps from
    :func:`gpuaug.functional.geometry.single_taps`): one gather of the batch (a list: two
    ``index_select`` per image), converted to ``dtype`` and times each pixel's row weight x
    column weight (0 in padding; uint8's 1/255 rides on the column weights).

    Args:
        x: ``(B, C, H, W)`` images, or a list of ``(C, H_i, W_i)``.
        rows, cols: ``(index, weight)``, each ``(B, h)`` / ``(B, w)``: the source row (column) and
            weight of each output row (column).

    Returns:
        ``(B, C, h, w)`` ``dtype``, contiguous.
    """
    (ri, rw), (ci, cw) = rows, cols
    h, w = ri.shape[1], ci.shape[1]
    if isinstance(x, Tensor):
        B, C, H, W = x.shape
        flat = (ri.clamp(max=H - 1).unsqueeze(2) * W + ci.clamp(max=W - 1).unsqueeze(1)).view(B, 1, h * w)
        out = x.reshape(B, C, H * W).gather(2, flat.expand(B, C, h * w)).view(B, C, h, w)
    else:  # taps past an image's own edge have zero weight: any pixel of it will do
        out = torch.stack([img.index_select(1, r.clamp(max=img.shape[1] - 1)).index_select(2, c.clamp(max=img.shape[2] - 1))
                           for img, r, c in zip(x, ri, ci)])
    return out.to(dtype).mul_(rw[:, None, :, None] * cw[:, None, None, :])
