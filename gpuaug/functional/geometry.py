"""Geometry kernels: pure, batch-first, per-sample.

Two samplers do all of gpuaug's geometry:

* :func:`resample_separable` — crop, resize and flip, fused: each output row (column) is a
  weighted sum of a few source rows (columns), with per-sample weights from :func:`axis_taps`.
  The weights are torchvision's antialiased bilinear filter (a triangle widened by the downscale
  factor, as ``F.resize(..., antialias=True)``), so a resized crop equals torchvision's.
* :func:`warp_affine` — rotation (and any flip after it) at output resolution, bilinear, with
  torchvision's fill rule.

Coordinates are continuous pixel coordinates: pixel ``i`` covers ``[i, i + 1)``, its center is
``i + 0.5`` (the ``align_corners=False`` convention of torchvision and ``grid_sample``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..native import channels_last


def tap_count(max_scale: float, antialias: bool = True, cubic: bool = False) -> int:
    """Taps per output pixel that cover the filter at any scale up to ``max_scale`` (host int)."""
    support = (max(max_scale, 1.0) if antialias else 1.0) * (2 if cubic else 1)
    return int(math.floor(2 * support)) + 2


def cubic_filter(d: Tensor) -> Tensor:
    """Keys' cubic convolution kernel with ``a = -0.5`` at distance ``d`` (in filter units): the
    filter of torch's antialiased bicubic resize (PIL's), 0 from ``|d| = 2``; negative lobes."""
    d = d.abs()
    near = (1.5 * d - 2.5) * d * d + 1
    far = ((-0.5 * d + 2.5) * d - 4) * d + 2
    return torch.where(d < 1, near, torch.where(d < 2, far, torch.zeros_like(d)))


# How the pixels of the filter window outside the content read (torchvision's padding modes).
PAD_MODES = ("constant", "edge", "reflect", "symmetric")


def pad_index(index: Tensor, lo: Tensor, hi: Tensor, mode: str) -> Tensor:
    """Source pixel ``index`` (float, holding integers) outside the content ``[lo, hi)`` mapped to
    the pixel that padding mode ``mode`` copies there (``edge``, ``reflect``, ``symmetric`` as
    torchvision pads; one reflection, as its pads are shorter than the image)."""
    if mode == "edge":
        return torch.minimum(torch.maximum(index, lo), hi - 1)
    if mode == "reflect":  # the border pixel itself is not repeated
        before, after = 2 * lo - index, 2 * (hi - 1) - index
    else:
        before, after = 2 * lo - index - 1, 2 * hi - index - 1
    return torch.where(index < lo, before, torch.where(index >= hi, after, index))


def axis_taps(
    scale: Tensor,
    offset: Tensor,
    window: tuple[Tensor, Tensor],
    valid: tuple[Tensor, Tensor],
    out_size: int,
    src_size: int,
    taps: int,
    antialias: bool = True,
    content: tuple[Tensor, Tensor] | None = None,
    pad_mode: str = "constant",
    pad_output: bool = False,
    cubic: bool = False,
) -> tuple[Tensor, Tensor]:
    """Source indices and weights that resample one axis, per sample.

    Output pixel ``o`` has its center at source coordinate ``scale * (o + 0.5) + offset``
    (``scale < 0`` mirrors the axis). Its value is the triangle-filtered source over the source
    pixels inside ``window``, the filter being ``1 - |d| / support`` with
    ``support = max(|scale|, 1)`` when ``antialias`` (torchvision's antialiased bilinear), else 1
    (plain bilinear); the pixels of ``window`` outside ``content`` are padding and read as 0 (they
    keep their share of the filter, as torchvision's resize of a padded crop gives them), or, for
    another ``pad_mode``, as the pixel that mode copies there (:func:`pad_index`).
    Output pixels outside ``valid`` (padding) get zero weight, or with ``pad_output`` (a crop that
    copies pixels after a resize) the taps of the output pixel inside ``valid`` that ``pad_mode``
    copies there (the content then needs no padding of its own). ``cubic``: the filter is
    :func:`cubic_filter` of ``d / support`` over ``2 * support`` on each side (torch's antialiased
    bicubic, ``F.resize(..., BICUBIC, antialias=True)``) instead of the triangle.

    Args:
        scale, offset: ``(B,)`` float, source pixels per output pixel and the shift; any leading
            shape works (``(B, 2)`` does both axes of a batch at once), the other arguments alike.
        window: ``(lo, hi)``, each ``(B,)``, source pixel range the filter covers.
        content: ``(lo, hi)`` inside ``window``, the part holding image pixels (default: all of it).
        valid: ``(lo, hi)``, each ``(B,)``, output pixel range that holds image content.
        out_size, src_size: output length and (padded) source length, host ints.
        taps: taps per output pixel, from :func:`tap_count`.

    Returns:
        ``index`` int64 ``(B, out_size, taps)`` in ``[0, src_size)`` and ``weight`` float32 of the
        same shape; the weights of an output pixel sum to 1 (less next to padding, 0 in it). Taps past the filter
        have weight 0, so ``[..., :k]`` are the taps for any ``k >= tap_count`` of that axis.
    """
    if pad_output and pad_mode == "constant":
        raise ValueError("pad_output needs a pad_mode that copies pixels (edge, reflect, symmetric), got 'constant'")
    dev = scale.device
    o = torch.arange(out_size, device=dev, dtype=torch.float32)
    scale, offset = scale.float().unsqueeze(-1), offset.float().unsqueeze(-1)
    vlo, vhi = (v.float().unsqueeze(-1) for v in valid)
    if pad_output:
        o = pad_index(o, vlo, vhi, pad_mode)
        vlo, vhi = torch.full_like(vlo, -math.inf), torch.full_like(vhi, math.inf)
    o = o + 0.5  # pixel centers
    center = scale * o + offset  # (..., out)
    support = scale.abs().clamp(min=1.0) if antialias else torch.ones_like(scale)
    first = torch.floor(center - support * (2 if cubic else 1))
    index = first.unsqueeze(-1) + torch.arange(taps, device=dev, dtype=torch.float32)
    d = (index + 0.5 - center.unsqueeze(-1)) / support.unsqueeze(-1)
    weight = cubic_filter(d) if cubic else (1 - d.abs()).clamp_(min=0)
    lo, hi = (w.float()[..., None, None] for w in window)
    weight = weight * ((index >= lo) & (index < hi))
    inside = ((o >= vlo) & (o < vhi)).unsqueeze(-1)
    total = weight.sum(-1, keepdim=True).clamp(min=1e-12)
    if content is not None:
        clo, chi = (c.float()[..., None, None] for c in content)
        if pad_mode == "constant" or pad_output:
            weight = weight * ((index >= clo) & (index < chi))
        else:
            index = pad_index(index, clo, chi, pad_mode)
    weight = weight * (inside / total)
    return index.clamp_(0, src_size - 1).long(), weight


def single_taps(index: Tensor, weight: Tensor) -> tuple[Tensor, Tensor] | None:
    """Taps ``(B, n, K)`` (:func:`axis_taps`) of a map where each output pixel reads at most one
    source pixel, whole (crops, flips, padding and no resize: weights 0 or 1, at most one 1) ->
    that tap, ``(index, weight)`` each ``(B, n)``; None for any other map. Reads the weights (a
    host sync on a GPU: for the CPU)."""
    read = weight > 0
    if not bool(((weight == 1) | ~read).all()) or bool((read.sum(-1) > 1).any()):
        return None
    k = weight.argmax(-1, keepdim=True)
    return index.gather(-1, k).squeeze(-1), weight.gather(-1, k).squeeze(-1)


def resample_separable(x: Tensor, rows: tuple[Tensor, Tensor], cols: tuple[Tensor, Tensor], dtype=None) -> Tensor:
    """Resample ``(B, C, H, W)`` images to ``(B, C, h, w)`` with per-sample row and column taps.

    Rows first, then columns; each pass is one fused gather-and-sum (``embedding_bag``) for the
    whole batch that reads only the taps. The result is a transposed view of a contiguous
    ``(B, C, w, h)`` tensor (``warp_affine`` reads it as is; ``.contiguous()`` for other uses).

    Args:
        x: ``(B, C, H, W)`` uint8 or float images.
        rows: ``(index, weight)`` from :func:`axis_taps`, ``(B, h, K)``, indices into ``H``.
        cols: ``(index, weight)`` from :func:`axis_taps`, ``(B, w, K')``, indices into ``W``.
        dtype: float dtype to compute and return in (default: ``x``'s, which must then be float).
    """
    B, C, H, W = x.shape
    dtype = dtype or x.dtype
    (ri, rw), (ci, cw) = rows, cols
    h, w = ri.shape[1], ci.shape[1]
    src = x.to(dtype).contiguous()
    t = _gather_rows(src.view(B * C * H, W), ri, rw.to(dtype), B, C, H)  # (B*C*h, W)
    t = t.view(B, C, h, W).transpose(2, 3).contiguous()  # (B, C, W, h): columns become rows
    out = _gather_rows(t.view(B * C * W, h), ci, cw.to(dtype), B, C, W)  # (B*C*w, h)
    return out.view(B, C, w, h).transpose(2, 3)


def _gather_rows(table: Tensor, index: Tensor, weight: Tensor, B: int, C: int, n: int) -> Tensor:
    """Weighted sum of rows of ``table`` ((B*C*n, L)) for every (sample, channel, output, tap)."""
    K = index.shape[-1]
    base = torch.arange(B * C, device=index.device).view(B, C, 1, 1) * n
    flat = (index.unsqueeze(1) + base).reshape(-1, K)
    w = weight.unsqueeze(1).expand(B, C, -1, K).reshape(-1, K)
    return F.embedding_bag(flat, table, per_sample_weights=w, mode="sum")


def crop_boxes(
    scale: Tensor, offset: Tensor, window: tuple[Tensor, Tensor], valid: tuple[Tensor, Tensor], out_size: int,
    content: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Where an axis map (as :func:`axis_taps` takes it) is a plain crop resized to a whole number
    of pixels, of which the output is a whole-pixel part, possibly mirrored — the filter reads
    exactly the crop and no output is padding (a resized crop; ``Resize`` then ``CenterCrop``, as
    torchvision resizes the whole image and crops the result) — per sample ``(start, length,
    mirrored, resized, skip, exact)``: the crop, whether the output is mirrored, the length it is
    resized to, the first resized pixel the output keeps, and whether the sample's map is such a
    crop at all (else, where it pads or crops a fractional part, the other values mean nothing);
    ``(B,)`` int64 but ``mirrored`` and ``exact`` (bool)."""
    # Maps are composed in float32: a plain crop's ends are off its integers by ~1e-5 px.
    tol = 1e-3
    a = scale.double().abs()
    start = torch.where(scale < 0, offset.double() - a * out_size, offset.double())
    lo, hi = window[0].double(), window[1].double()
    resized, skip = (hi - lo) / a, (start - lo) / a
    exact = ((lo - lo.round()).abs() < tol) & ((hi - hi.round()).abs() < tol)
    exact &= ((resized - resized.round()).abs() < tol) & ((skip - skip.round()).abs() < tol)
    exact &= (skip.round() >= 0) & (skip.round() + out_size <= resized.round())
    exact &= (valid[0].double().abs() < tol) & ((valid[1].double() - out_size).abs() < tol)
    if content is not None:  # no padding inside the window
        exact &= ((content[0].double() - lo).abs() < tol) & ((content[1].double() - hi).abs() < tol)
    return lo.round().long(), (hi - lo).round().long(), scale < 0, resized.round().long(), skip.round().long(), exact


def resized_crops(images: Tensor | list[Tensor], top: list[int], left: list[int], height: list[int],
                  width: list[int], size: tuple[int, int], resized: list[tuple[int, int]],
                  skip: list[tuple[int, int]]) -> Tensor:
    """CPU, uint8: crop each image and resize it with torchvision's own kernel
    (``F.interpolate(..., antialias=True)`` on uint8, as ``F.resized_crop`` runs on a uint8
    tensor: the result is rounded to integers, as torchvision's), then keep ``size`` of it. One
    call per image — the uint8 channels-last kernel runs 0.05-0.12 ms per 224x224 crop on one
    core, 3-5x faster than the batched float resampling on the CPU — so this is for the CPU only.

    Args:
        images: ``(B, C, H, W)`` uint8, or a list of ``(C, H_i, W_i)`` uint8.
        top, left, height, width: the crop of each image, host ints.
        size: the output ``(h, w)``.
        resized: per image, the ``(h, w)`` its crop is resized to; the crop is copied as it is
            where that is its own size.
        skip: per image, the ``(top, left)`` of the output in the resized crop.

    Returns:
        ``(B, C, *size)`` uint8.
    """
    outs = []
    for img, t, l, h, w, (rh, rw), (sy, sx) in zip(images, top, left, height, width, resized, skip):
        crop = channels_last(img[:, t:t + h, l:l + w])
        if (rh, rw) != (h, w):
            crop = F.interpolate(crop, size=(rh, rw), mode="bilinear", antialias=True, align_corners=False)
        outs.append(crop[..., sy:sy + size[0], sx:sx + size[1]])
    return torch.cat(outs)


def rotation_matrix(angle: Tensor, height: int, width: int, center: tuple[float, float] | None = None) -> Tensor:
    """``(B, 3, 3)`` output->input maps in ``grid_sample``'s normalized coordinates for a rotation
    by ``angle`` degrees (``(B,)``) counter-clockwise as torchvision's, about ``center`` (``(x, y)``
    in pixels from the top left corner, torchvision's) or, for ``None``, the image center."""
    # In float64, as torchvision computes it (MPS has none): a quarter turn's cosine is then 6e-17,
    # not float32's 4e-8, which moved the source coordinates of a nearest rotation off the
    # midpoints between pixels where they lie exactly (odd by even sizes): torchvision's pick there.
    a = torch.deg2rad(torch.remainder(angle.to(torch.float32 if angle.device.type == "mps" else torch.float64), 360))
    cos, sin = torch.cos(a), torch.sin(a)
    zero, one = torch.zeros_like(cos), torch.ones_like(cos)
    # In pixel units (y down) the inverse map of a counter-clockwise turn is [[c, -s], [s, c]];
    # normalized coordinates scale x by 2/width and y by 2/height.
    shift_x = shift_y = zero
    if center is not None:
        # About the point c (pixels from the image center): source = M (q - c) + c.
        cx, cy = center[0] - width / 2, center[1] - height / 2
        shift_x = (cx - cos * cx + sin * cy) * (2 / width)
        shift_y = (cy - sin * cx - cos * cy) * (2 / height)
    rows = [cos, sin * (-height / width), shift_x, sin * (width / height), cos, shift_y, zero, zero, one]
    return torch.stack(rows, -1).view(-1, 3, 3).float()


def flip_matrix(flip_x: Tensor | None, flip_y: Tensor | None, n: int, device) -> Tensor:
    """``(B, 3, 3)`` normalized-coordinate maps mirroring x and/or y where the ``(B,)`` flags are set."""
    m = torch.eye(3, dtype=torch.float32, device=device).repeat(n, 1, 1)
    if flip_x is not None:
        m[:, 0, 0] = 1 - 2 * flip_x.float()
    if flip_y is not None:
        m[:, 1, 1] = 1 - 2 * flip_y.float()
    return m


def warp_affine(x: Tensor, matrix: Tensor, fill: Tensor | None = None, blend: bool = True,
                nearest: bool = False) -> Tensor:
    """Bilinear (or ``nearest``) warp of ``(B, C, H, W)`` float images by ``(B, 3, 3)``
    output->input matrices in normalized coordinates; the output is contiguous, of the input's
    shape and dtype (half precision inputs are sampled in float32).

    Area outside the source becomes ``fill`` (``(C,)``, ``None`` for 0) by torchvision's rule
    (``_apply_grid_transform``): ``out = mask * (img - fill) + fill``, ``mask`` being a ones image
    warped the same way. That mask is computed here in closed form rather than sampled: per axis,
    the bilinear weight that lands inside the image is ``clamp(0.5 + W / 2 * (1 - |g|), 0, 1)`` at
    normalized coordinate ``g``. With ``blend`` False and no ``fill`` (torchvision's ``fill=None``)
    there is no such rule: what ``grid_sample`` reads with zero padding. ``nearest``: each output
    pixel is the source pixel at its coordinates rounded half to even (``grid_sample``'s
    nearest), ``fill`` where that pixel is outside the source (torchvision's nearest rule; no
    ``blend``). A transposed input (as :func:`resample_separable` returns) is read in place by
    swapping the grid's axes.
    """
    B, C, H, W = x.shape
    out_dtype = x.dtype
    if x.dtype in (torch.float16, torch.bfloat16):
        # Coordinates are the delicate part: in float16 they are off by up to 0.05 px at 224 px,
        # which moves a sharp edge by 14/255. Sample in float32, cast back.
        x = x.float()
    m = matrix.to(x.dtype)
    xs = torch.linspace(-1 + 1 / W, 1 - 1 / W, W, device=x.device, dtype=x.dtype)  # pixel centers
    ys = torch.linspace(-1 + 1 / H, 1 - 1 / H, H, device=x.device, dtype=x.dtype)
    transposed = x.stride(-2) == 1 and x.stride(-1) != 1
    # gx, gy computed contiguous, then copied into the interleaved grid: elementwise ops on the
    # grid's strided halves ran 5-7x slower on the CPU (0.11 against 0.017 ms for an abs, 4x224x224).
    gx = torch.add(m[:, 0, 0].view(B, 1, 1) * xs, (m[:, 0, 1].view(B, 1) * ys + m[:, 0, 2].view(B, 1)).unsqueeze(-1))
    gy = torch.add(m[:, 1, 0].view(B, 1, 1) * xs, (m[:, 1, 1].view(B, 1) * ys + m[:, 1, 2].view(B, 1)).unsqueeze(-1))
    grid = torch.empty(B, H, W, 2, device=x.device, dtype=x.dtype)
    grid[..., 1 if transposed else 0].copy_(gx)
    grid[..., 0 if transposed else 1].copy_(gy)
    src = x.transpose(-1, -2) if transposed else x
    out = F.grid_sample(src, grid, mode="nearest" if nearest else "bilinear", padding_mode="zeros",
                        align_corners=False)
    if nearest or (fill is None and not blend):
        if nearest and fill is not None:  # the pixel read is outside: fill (it read 0)
            inside = _nearest_inside(gx, W) & _nearest_inside(gy, H)
            out = torch.where(inside.unsqueeze(1), out, fill.to(dtype=x.dtype, device=x.device).view(1, -1, 1, 1))
        return out.to(out_dtype)
    mask = gx.abs_().mul_(-W / 2).add_(0.5 + W / 2).clamp_(0, 1)
    mask *= gy.abs_().mul_(-H / 2).add_(0.5 + H / 2).clamp_(0, 1)
    mask = mask.unsqueeze(1)
    if fill is None:
        return out.mul_(mask).to(out_dtype)
    fill = fill.to(dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (out - fill).mul_(mask).add_(fill).to(out_dtype)


def _nearest_inside(g: Tensor, size: int) -> Tensor:
    """Whether the pixel ``grid_sample`` reads nearest to normalized coordinate ``g`` lies inside
    an axis of ``size`` pixels (its unnormalize, then round half to even)."""
    index = torch.round(((g + 1) * size - 1) / 2)
    return (index >= 0) & (index <= size - 1)


def crop_or_pad(x: Tensor, top: int, left: int, height: int, width: int) -> Tensor:
    """The ``(height, width)`` window of ``(..., H, W)`` images at ``(top, left)``; where it reaches
    past the image (negative starts included) it is 0, as torchvision's center_crop pads. A view
    when it lies inside."""
    H, W = x.shape[-2:]
    if top >= 0 and left >= 0 and top + height <= H and left + width <= W:
        return x[..., top:top + height, left:left + width]
    out = x.new_zeros(*x.shape[:-2], height, width)
    y0, y1, x0, x1 = max(top, 0), min(top + height, H), max(left, 0), min(left + width, W)
    if y0 < y1 and x0 < x1:
        out[..., y0 - top:y1 - top, x0 - left:x1 - left] = x[..., y0:y1, x0:x1]
    return out
