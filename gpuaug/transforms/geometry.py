"""Geometric ops: they draw per-sample parameters and describe how output pixels map to the source.

Crop, resize and flip ops (``map_axes``) compose into one per-sample, per-axis map
``source = scale * output + offset`` that the pipeline samples in a single antialiased pass.
Rotation and flips after it (``matrix``) compose into one ``(B, 3, 3)`` matrix that the pipeline
applies at output resolution, as torchvision rotates the already-resized image.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from ..functional.geometry import flip_matrix, rotation_matrix
from ._base import Draw, Op, Params, Sizes, check_probability, setup_size


class AxisMap:
    """One axis of the crop/resize/flip chain, per sample: ``source = scale * x + offset`` for a
    coordinate ``x`` of the current canvas; ``valid`` is the canvas range holding image content
    (outside it is padding). ``window`` is the source range the resampling filter may read: the
    crop in force at the last resize, since torchvision crops first and filters only the crop."""

    def __init__(self, size: Tensor):
        self.scale = torch.ones_like(size)
        self.offset = torch.zeros_like(size)
        self.window = self._crop = (torch.zeros_like(size), size)
        self.valid = (torch.zeros_like(size), size)

    def crop(self, start: Tensor, length) -> None:
        a, b = self.scale, self.offset
        ends = (a * start + b, a * (start + length) + b)
        lo, hi = torch.minimum(*ends), torch.maximum(*ends)
        self._crop = (torch.maximum(self._crop[0], lo), torch.minimum(self._crop[1], hi))
        self.valid = ((self.valid[0] - start).clamp(min=0), torch.clamp(self.valid[1] - start, max=length))
        self.offset = b + a * start

    def resize(self, old, new) -> None:
        self.window = self._crop
        self.scale = self.scale * (old / new)
        self.valid = (self.valid[0] * (new / old), self.valid[1] * (new / old))

    def flip(self, flag: Tensor, size) -> None:
        sign = 1 - 2 * flag.float()
        self.offset = torch.where(flag, self.offset + self.scale * size, self.offset)
        self.scale = self.scale * sign
        lo, hi = self.valid
        self.valid = (torch.where(flag, size - hi, lo), torch.where(flag, size - lo, hi))


class GeometricOp(Op):
    """A geometric op: knows its output size and how far it can shrink, host-side."""

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return sizes

    def max_scale(self, sizes: Sizes) -> tuple[float, float]:
        """Upper bound of input pixels per output pixel along (y, x)."""
        return 1.0, 1.0


class RandomResizedCrop(GeometricOp):
    """Crop a random area and aspect ratio, resize it to ``size`` (torchvision's RandomResizedCrop).

    Per sample: up to 10 tries draw an area fraction uniformly from ``scale`` and a log-uniform
    aspect ratio from ``ratio``; the first crop that fits is placed uniformly at random, and if none
    fits the largest centered crop with a ratio inside ``ratio`` is used. All tries for all
    samples are drawn at once; no host sync.

    Args:
        size: output ``(h, w)``, or an int for a square.
        scale: range of the crop's area as a fraction of the image area.
        ratio: range of the crop's width / height.
        antialias: filter when downscaling (torchvision's ``antialias=True``).

    Params: ``top``, ``left``, ``height``, ``width``: ``(B,)`` float32 holding integers.
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), antialias: bool = True):
        super().__init__()
        self.size = setup_size(size)
        if not isinstance(scale, Sequence) or len(scale) != 2:
            raise TypeError(f"Scale should be a sequence of two numbers (min, max), got {scale!r}")
        if not isinstance(ratio, Sequence) or len(ratio) != 2:
            raise TypeError(f"Ratio should be a sequence of two numbers (min, max), got {ratio!r}")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"Scale and ratio should be of kind (min, max), got scale={scale}, ratio={ratio}")
        if scale[0] <= 0 or ratio[0] <= 0:
            raise ValueError(f"scale and ratio must be positive, got scale={scale}, ratio={ratio}")
        self.scale, self.ratio, self.antialias = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1])), antialias

    def extra_repr(self) -> str:
        return f"size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}, antialias={self.antialias}"

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return Sizes(uniform=self.size)

    def max_scale(self, sizes: Sizes) -> tuple[float, float]:
        H, W = sizes.max()
        return H / self.size[0], W / self.size[1]

    def make_params(self, draw: Draw) -> Params:
        height, width = draw.sizes.tensors(draw.n, draw.device)
        area = (height * width).unsqueeze(1)
        target_area = area * draw.uniform(*self.scale, 10)
        log_ratio = draw.uniform(math.log(self.ratio[0]), math.log(self.ratio[1]), 10)
        aspect = torch.exp(log_ratio)
        w = torch.round(torch.sqrt(target_area * aspect))
        h = torch.round(torch.sqrt(target_area / aspect))
        fits = (w > 0) & (w <= width.unsqueeze(1)) & (h > 0) & (h <= height.unsqueeze(1))
        first = fits.float().argmax(1, keepdim=True)  # index of the first try that fits
        found = fits.any(1)
        w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
        u_top, u_left = draw.uniform(0, 1), draw.uniform(0, 1)
        top = torch.floor(u_top * (height - h + 1)).clamp(max=height - h)
        left = torch.floor(u_left * (width - w + 1)).clamp(max=width - w)

        # torchvision's fallback: the whole image, cut to the nearest allowed aspect ratio, centered.
        in_ratio = width / height
        lo, hi = self.ratio
        fw = torch.where(in_ratio < lo, width, torch.where(in_ratio > hi, torch.round(height * hi), width))
        fh = torch.where(in_ratio < lo, torch.round(width / lo), height)
        ftop, fleft = torch.div(height - fh, 2, rounding_mode="floor"), torch.div(width - fw, 2, rounding_mode="floor")
        return {
            "top": torch.where(found, top, ftop),
            "left": torch.where(found, left, fleft),
            "height": torch.where(found, h, fh),
            "width": torch.where(found, w, fw),
        }

    def map_axes(self, y: AxisMap, x: AxisMap, params: Params, sizes: Sizes) -> None:
        y.crop(params["top"], params["height"])
        x.crop(params["left"], params["width"])
        y.resize(params["height"], self.size[0])
        x.resize(params["width"], self.size[1])


class Resize(GeometricOp):
    """Resize to ``size``: an int sets the shorter side (aspect ratio kept, the longer side
    truncated as torchvision's ``int(size * long / short)``), ``(h, w)`` sets both.

    Antialiased bilinear, equal to torchvision's ``F.resize(..., antialias=True)``. No params.
    """

    def __init__(self, size, antialias: bool = True):
        super().__init__()
        if isinstance(size, numbers.Integral) and not isinstance(size, bool):
            if size <= 0:
                raise ValueError(f"size should be a positive integer, got {size}")
            self.size = int(size)
        else:
            self.size = setup_size(size, "size can be an int or a sequence of one or two ints")
        self.antialias = antialias

    def extra_repr(self) -> str:
        return f"size={self.size}, antialias={self.antialias}"

    def _out(self, hw: tuple[int, int]) -> tuple[int, int]:
        if isinstance(self.size, tuple):
            return self.size
        h, w = hw
        if h <= w:
            return self.size, int(self.size * w / h)
        return int(self.size * h / w), self.size

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return sizes.map(self._out)

    def max_scale(self, sizes: Sizes) -> tuple[float, float]:
        pairs = sizes.per_image or [sizes.uniform]
        outs = [self._out(hw) for hw in pairs]
        return max(h / o[0] for (h, _), o in zip(pairs, outs)), max(w / o[1] for (_, w), o in zip(pairs, outs))

    def map_axes(self, y: AxisMap, x: AxisMap, params: Params, sizes: Sizes) -> None:
        height, width = sizes.tensors(y.scale.shape[0], y.scale.device)
        out_h, out_w = self.output_sizes(sizes).tensors(y.scale.shape[0], y.scale.device)
        y.resize(height, out_h)
        x.resize(width, out_w)


class CenterCrop(GeometricOp):
    """Crop the center ``size`` (torchvision's CenterCrop: a crop larger than the image pads with 0).

    No params.
    """

    def __init__(self, size):
        super().__init__()
        self.size = setup_size(size)

    def extra_repr(self) -> str:
        return f"size={self.size}"

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return Sizes(uniform=self.size)

    def map_axes(self, y: AxisMap, x: AxisMap, params: Params, sizes: Sizes) -> None:
        height, width = sizes.tensors(y.scale.shape[0], y.scale.device)
        for axis, full, crop in ((y, height, self.size[0]), (x, width, self.size[1])):
            # torchvision: round((full - crop) / 2) inside, or pad (crop - full) // 2 before.
            start = torch.where(full >= crop, torch.round((full - crop) / 2), -torch.div(crop - full, 2, rounding_mode="floor"))
            axis.crop(start, crop)


class _RandomFlip(GeometricOp):
    axis = ""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = check_probability(p)

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def make_params(self, draw: Draw) -> Params:
        return {"flip": draw.bernoulli(self.p)}

    def map_axes(self, y: AxisMap, x: AxisMap, params: Params, sizes: Sizes) -> None:
        height, width = sizes.tensors(y.scale.shape[0], y.scale.device)
        if self.axis == "x":
            x.flip(params["flip"], width)
        else:
            y.flip(params["flip"], height)

    def matrix(self, params: Params, size: tuple[int, int]) -> Tensor:
        flag = params["flip"]
        return flip_matrix(flag if self.axis == "x" else None, flag if self.axis == "y" else None, flag.shape[0], flag.device)


class RandomHorizontalFlip(_RandomFlip):
    """Mirror left-right with probability ``p``, per sample. Params: ``flip`` ``(B,)`` bool."""

    axis = "x"


class RandomVerticalFlip(_RandomFlip):
    """Mirror top-bottom with probability ``p``, per sample. Params: ``flip`` ``(B,)`` bool."""

    axis = "y"


class RandomRotation(GeometricOp):
    """Rotate about the center by an angle drawn uniformly from ``degrees``, per sample.

    Positive angles turn counter-clockwise (torchvision's convention); the output keeps the input
    size (``expand=False``); uncovered corners get ``fill``. Sampling is bilinear (torchvision's
    default is nearest). Applied at output resolution, after the crop and resize ops before it.

    Args:
        degrees: a number ``d`` for ``[-d, d]`` (``d >= 0``), or ``(min, max)``.
        fill: a number, or one number per channel, in the [0, 1] range of the images.

    Params: ``angle``: ``(B,)`` float32 degrees.
    """

    def __init__(self, degrees, fill=0):
        super().__init__()
        if isinstance(degrees, numbers.Number):
            if degrees < 0:
                raise ValueError("If degrees is a single number, it must be positive.")
            degrees = (-degrees, degrees)
        elif not isinstance(degrees, Sequence):
            raise TypeError("degrees should be a sequence of length 2.")
        elif len(degrees) != 2:
            raise ValueError("degrees should be a sequence of length 2.")
        self.degrees = (float(degrees[0]), float(degrees[1]))
        if isinstance(fill, numbers.Number):
            fill = [float(fill)]
        elif not isinstance(fill, Sequence) or not all(isinstance(f, numbers.Number) for f in fill):
            raise TypeError(f"fill should be a number or a sequence of numbers, got {fill!r}")
        self.fill = tuple(float(f) for f in fill)

    def extra_repr(self) -> str:
        return f"degrees={self.degrees}, fill={self.fill}"

    def make_params(self, draw: Draw) -> Params:
        return {"angle": draw.uniform(*self.degrees)}

    def matrix(self, params: Params, size: tuple[int, int]) -> Tensor:
        return rotation_matrix(params["angle"], *size)
