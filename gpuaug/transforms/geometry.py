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

import numpy as np
import torch
from torch import Tensor

from torchvision.transforms import InterpolationMode  # for the annotations (typing.get_type_hints reads them)

from ..functional.geometry import PAD_MODES, flip_matrix, rotation_matrix
from ..user_warnings import warn
from ._base import (TEXT_TYPES, Draw, Op, Params, Sizes, check_interpolation, check_probability, check_range, check_resize_filter,
                    is_sequence, refuse_params, setup_size, to_device)


class AxisMap:
    """The crop/resize/flip chain of both axes, per sample: ``source = scale * x + offset`` for a
    coordinate ``x`` of the current canvas. Every field is ``(B, 2)`` float32 (or broadcasts to
    it), column 0 for y (rows), 1 for x (columns), so one op updates both axes of every sample.

    As torchvision crops (and pads) first and then filters what the crop holds, the resampling
    filter at the last resize reads ``window``, the source range of the canvas then (padding
    included: a crop may reach past the image), of which ``content`` holds image pixels (the image
    and every crop so far, intersected); the rest reads as 0, or, after a crop whose padding copies
    pixels (``pad_mode``), as the pixel copied there, ``content`` then being the canvas it padded.
    ``valid`` is the canvas range holding image content after that resize (outside it: padding of
    a later crop, 0). A crop that copies pixels after a resize copies resized pixels
    (``pad_output``): an output pixel outside ``valid`` takes the value of the output pixel
    ``pad_mode`` copies there, inside ``valid``; no resize may follow it (``Pipeline`` checks)."""

    def __init__(self, size: Tensor):
        zero = _filled(0.0, size)
        self.scale = _filled(1.0, size)
        self.offset = zero
        self.window = self._canvas = self.content = self._content = (zero, size)
        self.valid = (zero, size)
        self.pad_mode = "constant"
        self.pad_output = False
        self._resized = False

    def crop(self, start: Tensor, length: Tensor | float, pad_mode: str = "constant") -> None:
        """Crop ``length`` from ``start`` (canvas coordinates, ``(B, 2)``); what lies past the
        canvas is padding: zeros, or for another ``pad_mode`` (edge, reflect, symmetric) copies of
        the canvas's pixels (one such crop per map: ``Pipeline`` checks), which the taps read from
        the source from here on, or, after a resize, the output pixels copy (``pad_output``)."""
        first = torch.addcmul(self.offset, self.scale, start)  # source coordinates of the crop's ends
        last = torch.addcmul(first, self.scale, length) if isinstance(length, Tensor) else first + self.scale * length
        lo, hi = torch.minimum(first, last), torch.maximum(first, last)
        self._canvas = (lo, hi)
        if self.pad_mode == "constant" and pad_mode == "constant":  # zeros past the crop: it bounds the pixels
            self._content = (torch.maximum(self._content[0], lo), torch.minimum(self._content[1], hi))
        lo, hi = self.valid[0] - start, self.valid[1] - start
        copies = self.pad_output or (pad_mode != "constant" and self._resized)
        # Clamped to the crop where its padding is zeros (an end it cut off has no output pixel
        # past it to pad), not where it copies: a crop wholly in the padding copies from there.
        self.valid = (lo, hi) if copies else (lo.clamp(min=0), hi.clamp(max=length))
        self.offset = first
        if pad_mode != "constant" and self._resized:
            # The copies are of the resized canvas, whose pixels are already filtered: each output
            # pixel in the padding takes the taps of the output pixel the mode copies there
            # (axis_taps' pad_output). Later crops shift the output and flips mirror it, which
            # moves `valid` with it and leaves the copying rule as it is.
            self.pad_mode, self.pad_output = pad_mode, True
        elif pad_mode != "constant":
            # The padding copies pixels from anywhere in the canvas, inside this crop or not (and so
            # do later crops of the padded canvas): the content stays the whole canvas.
            self.window, self.content, self.pad_mode = self._canvas, self._content, pad_mode
            self.valid = (_filled(0.0, self.scale), _filled(length, self.scale))

    def resize(self, old: Tensor, new: Tensor | float) -> None:
        if self.pad_output:
            raise ValueError("a resize after a crop that copies resized pixels into its padding is not supported")
        # The filter now reads the whole canvas, zeros where it is padding: in the source, not here.
        self.window, self.content = self._canvas, self._content
        self.scale = self.scale * (old / new)
        self.valid = (_filled(0.0, self.scale), _filled(new, self.scale))
        self._resized = True

    def flip(self, flag: Tensor, axis: int, size: Tensor) -> None:
        """Mirror axis ``axis`` (0: y, 1: x) of a canvas of ``size`` ((B, 2)) where ``flag`` ((B,) bool)."""
        mask = flag.unsqueeze(1) & to_device((axis == 0, axis == 1), flag.device, "bool")  # (B, 2)
        self.offset = torch.where(mask, torch.addcmul(self.offset, self.scale, size), self.offset)
        self.scale = torch.where(mask, -self.scale, self.scale)
        lo, hi = self.valid
        self.valid = (torch.where(mask, size - hi, lo), torch.where(mask, size - lo, hi))


def _filled(value: float | Tensor, like: Tensor) -> Tensor:
    """``value`` (a number, or a ``(2,)`` tensor of one per axis) in the shape of ``like`` (``(B, 2)``
    float32): an expanded view of a value kept on the device, no kernel."""
    if isinstance(value, Tensor):
        return value.expand_as(like)
    return to_device((value, value), like.device).expand_as(like)


def _pair(values: tuple[int, int], device) -> Tensor | float:
    """``(2,)`` float32 ``[y, x]`` on ``device`` (non-blocking copy), or a float where both are equal."""
    if values[0] == values[1]:
        return float(values[0])
    return to_device(values, device)


class GeometricOp(Op):
    """A geometric op: knows its output size and how far it can shrink, host-side."""

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return sizes

    def max_scale(self, sizes: Sizes) -> tuple[float, float]:
        """Upper bound of input pixels per output pixel along (y, x)."""
        return 1.0, 1.0

    def map_axes(self, axes: AxisMap, params: Params, sizes: Sizes) -> None:
        """This op (a crop, resize or flip before any rotation) applied to the per-sample axis maps."""
        raise NotImplementedError(f"{type(self).__name__} does not map axes")


class RandomResizedCrop(GeometricOp):
    """Crop a random area and aspect ratio, resize it to ``size`` (torchvision's RandomResizedCrop).

    Per sample: up to 10 tries draw an area fraction uniformly from ``scale`` and a log-uniform
    aspect ratio from ``ratio``; the first crop that fits is placed uniformly at random, and if none
    fits the largest centered crop with a ratio inside ``ratio`` is used. All tries for all
    samples are drawn at once; no host sync.

    Args:
        size: output ``(h, w)``, or an int for a square.
        scale: range of the crop's area as a fraction of the image area (a minimum above 1 warns:
            no crop fits it, so every sample gets the fallback, as in torchvision).
        ratio: range of the crop's width / height.
        interpolation: ``InterpolationMode.BILINEAR`` or ``BICUBIC`` (torchvision's filters;
            bicubic needs ``antialias=True``; its overshoot is clamped to [0, 1], as torchvision
            clamps a uint8 image's, not a float one's).
        antialias: filter when downscaling (torchvision's ``antialias=True``).

    Params: ``top``, ``left``, ``height``, ``width``: ``(B,)`` float32 holding integers.
    """

    PIXEL_PARAMS = True

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolation: InterpolationMode | str | int = "bilinear",
                 antialias: bool | None = True):
        super().__init__()
        self.interpolation, antialias = check_resize_filter(interpolation, antialias, "RandomResizedCrop")
        self.size = setup_size(size)
        if not is_sequence(scale) or len(scale) != 2:
            raise TypeError(f"Scale should be a sequence of two numbers (min, max), got {scale!r}")
        if not is_sequence(ratio) or len(ratio) != 2:
            raise TypeError(f"Ratio should be a sequence of two numbers (min, max), got {ratio!r}")
        scale, ratio = check_range(scale, "scale"), check_range(ratio, "ratio")
        if scale[0] < 0 or ratio[0] <= 0:  # (a scale from 0 is torchvision's too: its tries of area 0 fail)
            raise ValueError(f"scale must not be negative and ratio must be positive, got scale={scale}, ratio={ratio}")
        if scale[0] > 1:  # torchvision takes it silently: every try fails, every crop is the fallback
            warn(f"RandomResizedCrop(scale={scale}): scale is the crop's fraction of the image's area, and "
                 f"no crop fits a minimum above 1: every sample gets the fallback, the same center crop "
                 f"(as in torchvision). Percentages? Divide them by 100.", UserWarning)
        self.scale, self.ratio, self.antialias = scale, ratio, antialias

    def extra_repr(self) -> str:
        cubic = ", interpolation=bicubic" if self.interpolation == "bicubic" else ""
        return (f"size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}{cubic}, "
                f"antialias={self.antialias}")

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return Sizes(uniform=self.size)

    def max_scale(self, sizes: Sizes) -> tuple[float, float]:
        H, W = sizes.max()
        return H / self.size[0], W / self.size[1]

    def make_params(self, draw: Draw) -> Params:
        # Columns are (y, x) throughout: sizes [height, width], crops [top, left, height, width].
        # One kernel draws every uniform: 10 tries of area and of log-ratio, then the crop's place;
        # the rest is ~15 ops for the batch, whatever its sizes (the host-side constants are kept
        # on the device: to_device).
        n, device = draw.n, draw.device
        size = draw.sizes.pairs(n, device)  # (n, 2)
        u = draw.rand(22)
        if draw.sizes.uniform is not None:  # the image's area times scale[0] and times the scale's width
            low, width = to_device(self._area_range(draw.sizes.uniform), device)
        else:  # computed here: a host array of them would be one more copy a call
            area = size[:, :1] * size[:, 1:]
            low, width = area * self.scale[0], area * (self.scale[1] - self.scale[0])
        target_area = torch.addcmul(low, width, u[:, :10])  # (n, 10)
        # Each try's [h, w] = round(sqrt(area / ratio)), round(sqrt(area * ratio)): log-ratios
        # [-r, r] with r uniform in [log(ratio[0]), log(ratio[1])).
        low, width = to_device(self._log_ratio_range, device)
        aspect = torch.exp(torch.addcmul(low, width, u[:, 10:20, None]))  # (n, 10, 2)
        tries = torch.round(torch.sqrt(target_area.unsqueeze(-1) * aspect))
        fits = (torch.clamp(tries, to_device((1.0, 1.0), device), size.unsqueeze(1)) == tries).all(-1)
        any_fits, first = fits.max(1)  # the first try that fits (0 if none does)
        crop = tries.gather(1, first.view(n, 1, 1).expand(n, 1, 2)).squeeze(1)
        room = size - crop
        start = draw.integers(room, u[:, 20:])
        chosen = torch.cat([start, crop], 1)
        return dict(zip(("top", "left", "height", "width"),
                        torch.where(any_fits.unsqueeze(1), chosen, self._fallback(draw)).unbind(1)))

    def _area_range(self, hw: tuple[int, int]) -> tuple[float, float]:
        area = hw[0] * hw[1]
        return area * self.scale[0], area * (self.scale[1] - self.scale[0])

    @property
    def _log_ratio_range(self) -> tuple[tuple[float, float], tuple[float, float]]:
        low, high = math.log(self.ratio[0]), math.log(self.ratio[1])
        return (-low, low), (low - high, high - low)

    def _fallback(self, draw: Draw) -> Tensor:
        """torchvision's fallback, where no try fits: the whole image cut to the nearest allowed
        aspect ratio, centered -> ``(n, 4)`` or ``(1, 4)`` ``[top, left, height, width]``. Sizes
        are host-side, so it is computed on the host (:meth:`Sizes.rows`) and copied once."""
        return to_device(draw.sizes.rows(self._center_crops, self.ratio), draw.device)

    @staticmethod
    def _center_crops(hw: np.ndarray, ratio: tuple[float, float]) -> np.ndarray:
        """The fallback crops of images of sizes ``hw`` (``(n, 2)`` int64 ``[height, width]``) ->
        ``(n, 4)`` int64: torchvision's arithmetic (float64 as its Python floats, numpy's rounding
        half to even as Python's ``round``), ~30 us for 256 sizes against ~200 us a row at a time."""
        (lo, hi), h, w = ratio, hw[:, 0], hw[:, 1]
        crops = np.empty((len(hw), 4), np.int64)
        crops[:, 2] = np.where(w / h < lo, np.round(w / lo), h)  # too narrow: cut the height
        crops[:, 3] = np.where(w / h > hi, np.round(h * hi), w)  # too wide: cut the width
        np.floor_divide(hw - crops[:, 2:], 2, out=crops[:, :2])
        return crops

    def check_params(self, params: dict[str, np.ndarray], sizes: Sizes) -> None:
        # A box past its image would need more filter taps than the plan gives (the plan's
        # bound is the image size): refused, as a box torchvision's sampling never draws.
        (top, left, height, width), hw = (params[k] for k in ("top", "left", "height", "width")), sizes.array()
        ok = _whole(top, left, height, width) & (height >= 1) & (width >= 1) & (top >= 0) & (left >= 0) \
            & (top + height <= hw[:, 0]) & (left + width <= hw[:, 1])
        refuse_params(self, ok, params, "a box of whole pixels inside its image was expected", sizes)

    def map_axes(self, axes: AxisMap, params: Params, sizes: Sizes) -> None:
        length = torch.stack([params["height"], params["width"]], 1)
        axes.crop(torch.stack([params["top"], params["left"]], 1), length)
        axes.resize(length, _pair(self.size, length.device))


class Resize(GeometricOp):
    """Resize to ``size``: an int sets the shorter side (aspect ratio kept, the longer side
    truncated as torchvision's ``int(size * long / short)``), ``(h, w)`` sets both.

    Antialiased bilinear (or bicubic), equal to torchvision's ``F.resize(..., antialias=True)``.
    No params.

    Args:
        size: an int (or ``[s]``): the shorter side; ``(h, w)``; or ``None`` with ``max_size``.
        interpolation: ``InterpolationMode.BILINEAR`` or ``BICUBIC``, as
            :class:`RandomResizedCrop` takes them.
        max_size: as torchvision's: with an int ``size``, the longer side's bound (the image is
            scaled down further, aspect kept, where the longer side would pass it; it must be
            larger than ``size``); with ``size=None``, the longer side itself.
    """

    def __init__(self, size: int | Sequence[int] | None, interpolation: InterpolationMode | str | int = "bilinear",
                 max_size: int | None = None, antialias: bool | None = True):
        super().__init__()
        self.interpolation, antialias = check_resize_filter(interpolation, antialias, "Resize")
        if max_size is not None and (not isinstance(max_size, numbers.Integral) or isinstance(max_size, bool)
                                     or max_size <= 0):
            raise ValueError(f"max_size must be a positive integer or None, got {max_size!r}")
        self.max_size = None if max_size is None else int(max_size)
        if size is None:  # torchvision's error
            if max_size is None:
                raise ValueError("max_size must be an integer when size is None, but got None instead.")
            self.size: int | tuple[int, int] | None = None
        else:
            wrapped = False
            if is_sequence(size) and len(size) == 1:
                size, wrapped = size[0], True  # [s] means the shorter side, as an int does (torchvision's TorchScript form)
            if (wrapped and is_sequence(size)) or (isinstance(size, numbers.Number)
                                                   and not isinstance(size, numbers.Integral)):
                # torchvision's error: a float is not a shorter side (setup_size would make it (s, s)),
                # nor is [[h, w]] a size (torchvision takes it, then fails when resizing)
                raise ValueError(f"size can be an integer, a sequence of one or two integers, or None, but got "
                                 f"{size} instead.")
            if isinstance(size, numbers.Integral) and not isinstance(size, bool):
                if size <= 0:
                    raise ValueError(f"size should be a positive integer, got {size}")
                self.size = int(size)
                if self.max_size is not None and self.max_size <= self.size:  # torchvision's error
                    raise ValueError(f"max_size = {max_size} must be strictly greater than the requested "
                                     f"size for the smaller edge size = {size}")
            else:
                self.size = setup_size(size, "size can be an int or a sequence of one or two ints")
                if self.max_size is not None:  # torchvision's error
                    raise ValueError("max_size should only be passed if size is None or specifies the length of "
                                     f"the smaller edge, i.e. an int; got size={size}")
        self.antialias = antialias

    def extra_repr(self) -> str:
        bound = "" if self.max_size is None else f", max_size={self.max_size}"
        cubic = ", interpolation=bicubic" if self.interpolation == "bicubic" else ""
        return f"size={self.size}{bound}{cubic}, antialias={self.antialias}"

    @staticmethod
    def _resized(hw: np.ndarray, size, max_size: int | None) -> np.ndarray:
        """torchvision's ``_compute_resized_output_size`` of each ``(n, 2)`` int64 ``[height, width]``
        row -> ``(n, 2)`` int64 (float64 division and truncation, as its Python ints and floats),
        for ``size`` an int (the shorter side) or None (``max_size`` is the longer side)."""
        short, long = hw.min(1), hw.max(1)
        if size is None:
            new_short, new_long = (max_size * short / long).astype(np.int64), np.full_like(long, max_size)
        else:
            new_short, new_long = np.full_like(short, size), (size * long / short).astype(np.int64)
            if max_size is not None:
                over = new_long > max_size
                new_short = np.where(over, (max_size * new_short / new_long).astype(np.int64), new_short)
                new_long = np.where(over, max_size, new_long)
        if (new_short < 1).any():
            h, w = hw[np.argmax(new_short < 1)].tolist()
            bound = "" if max_size is None else f", max_size={max_size}"
            raise ValueError(f"Resize(size={size}{bound}) of a {h}x{w} image gives a side of 0 pixels")
        tall = hw[:, 0] > hw[:, 1]
        return np.stack([np.where(tall, new_long, new_short), np.where(tall, new_short, new_long)], 1)

    def output_sizes(self, sizes: Sizes) -> Sizes:
        if isinstance(self.size, tuple):
            return Sizes(uniform=self.size)
        return sizes.map(self._resized, self.size, self.max_size)

    def max_scale(self, sizes: Sizes) -> tuple[float, float]:
        out = self.output_sizes(sizes)
        if sizes.uniform is not None and out.uniform is not None:  # no numpy: under torch.compile its arrays
            return sizes.uniform[0] / out.uniform[0], sizes.uniform[1] / out.uniform[1]  # were graph breaks
        y, x = (sizes.array() / out.array()).max(0).tolist()
        return y, x

    def map_axes(self, axes: AxisMap, params: Params, sizes: Sizes) -> None:
        n, device = axes.scale.shape[0], axes.scale.device
        axes.resize(sizes.pairs(n, device), self.output_sizes(sizes).pairs(n, device))


class CenterCrop(GeometricOp):
    """Crop the center ``size`` (torchvision's CenterCrop: a crop larger than the image pads with 0).

    No params.
    """

    def __init__(self, size: int | Sequence[int]):
        super().__init__()
        self.size = setup_size(size)

    def extra_repr(self) -> str:
        return f"size={self.size}"

    def output_sizes(self, sizes: Sizes) -> Sizes:
        # The starts are computed here too: the draws ask for the output sizes eagerly, so under
        # torch.compile the traced plan finds them kept (a rule's first run breaks the graph).
        sizes.rows(self._starts, self.size)
        return Sizes(uniform=self.size)

    @staticmethod
    def _starts(hw: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """``(top, left)`` of the crop in images of sizes ``hw`` (``(n, 2)`` int64) -> ``(n, 2)``
        int64 (negative: padding before): torchvision's ``round((full - crop) / 2)`` inside (half
        to even, as Python's ``round``), or ``(crop - full) // 2`` of padding."""
        crop = np.array(size, np.int64)
        return np.where(hw >= crop, np.round((hw - crop) / 2), -((crop - hw) // 2)).astype(np.int64)

    def start(self, size: tuple[int, int]) -> tuple[int, int]:
        """``(top, left)`` of the crop in an image of ``size`` (:meth:`_starts`)."""
        return Sizes(uniform=size).rows(self._starts, self.size)[0]

    def map_axes(self, axes: AxisMap, params: Params, sizes: Sizes) -> None:
        n, device = axes.scale.shape[0], axes.scale.device
        axes.crop(to_device(sizes.rows(self._starts, self.size), device).expand(n, 2), _pair(self.size, device))


class RandomCrop(GeometricOp):
    """Crop ``size`` at a random place, after optional padding (torchvision's RandomCrop, the
    CIFAR recipe ``RandomCrop(32, padding=4)``).

    Per sample the corner is uniform over the padded image, as torchvision draws it; the padding is
    never materialised: the crop's part outside the image reads as 0 in the one sampling pass (or
    as the pixel ``padding_mode`` copies there), and a nonzero ``fill`` is added after it where the
    filter read padding.

    Args:
        size: output ``(h, w)``, or an int for a square.
        padding: added to each border before cropping: an int, ``(left/right, top/bottom)`` or
            ``(left, top, right, bottom)``, non-negative; kept (and shown) in the last form.
        pad_if_needed: pad an image smaller than ``size`` (torchvision's rule: the missing length
            on both sides) instead of raising.
        fill: the value of ``padding_mode="constant"``'s padding: a number, or one number per
            channel, in the [0, 1] range of gpuaug's float images (torchvision's fill for uint8
            images is in 0-255: divide it by 255). A crop with ``fill != 0`` must be the only op
            before RandomRotation that may pad (a CenterCrop larger than the image pads with 0:
            one after an op of a fixed size no smaller cannot). A crop that never pads (no
            ``padding``, and the fixed size before it no smaller) is a plain crop: its fill and
            mode are unused, and it is not held to these rules.
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``, as torchvision
            pads. The last three copy the image's pixels into the padding (after a resize, the
            resized image's, as torchvision pads what the resize gave); such a crop must not sit
            between two resizes, nor share the ops before RandomRotation with another that may pad.

    Params: ``top``, ``left``: ``(B,)`` float32 holding integers, the crop's corner in the image
    (negative: inside the padding).
    """

    PIXEL_PARAMS = True

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None, pad_if_needed: bool = False,
                 fill: float | Sequence[float] = 0, padding_mode: str = "constant"):
        super().__init__()
        self.size = setup_size(size)
        if padding_mode not in PAD_MODES:
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        self.padding = _parse_padding(padding) if padding is not None else (0, 0, 0, 0)  # left, top, right, bottom
        self.pad_if_needed = bool(pad_if_needed)
        self.pads = any(self.padding) or self.pad_if_needed
        self.padding_mode = padding_mode if self.pads else "constant"
        # torchvision pads with zeros for fill=None; its other modes ignore fill.
        self.fill = parse_fill(0 if fill is None else fill)

    def extra_repr(self) -> str:
        mode = f", padding_mode={self.padding_mode!r}" if self.padding_mode != "constant" else ""
        fill = f", fill={self.fill}" if self.fills else ""
        return f"size={self.size}, padding={self.padding}, pad_if_needed={self.pad_if_needed}{fill}{mode}"

    @property
    def fills(self) -> bool:
        """Whether this crop's padding holds a value other than 0 (``fill``, constant mode)."""
        return self.pads and self.padding_mode == "constant" and any(self.fill)

    def output_sizes(self, sizes: Sizes) -> Sizes:
        return Sizes(uniform=self.size)

    @staticmethod
    def _bounds(hw: np.ndarray, size: tuple[int, int], padding: tuple[int, int, int, int], pad_if_needed: bool,
                padding_mode: str) -> np.ndarray:
        """``[top_min, left_min, top_range, left_range]`` for images of sizes ``hw`` (``(n, 2)``
        int64) -> ``(n, 4)`` int64: the corner is ``min + randint(range + 1)``, host-side;
        torchvision's checks and messages (naming the first image that fails them)."""
        (pad_left, pad_top, right, bottom), (ch, cw), h, w = padding, size, hw[:, 0], hw[:, 1]
        top, left = np.full_like(h, pad_top), np.full_like(w, pad_left)
        ph, pw = h + top + bottom, w + left + right
        if pad_if_needed:
            dh, dw = np.maximum(ch - ph, 0), np.maximum(cw - pw, 0)
            top, left, ph, pw = top + dh, left + dw, ph + 2 * dh, pw + 2 * dw
        small = (ph < ch) | (pw < cw)
        # reflect copies each border pixel once less than symmetric: its pads must be shorter
        shorter = {"reflect": 1, "symmetric": 0}.get(padding_mode)
        long = shorter is not None and \
            (np.maximum(top, ph - h - top) > h - shorter) | (np.maximum(left, pw - w - left) > w - shorter)
        if (bad := small | long).any():
            i = np.argmax(bad)
            if small[i]:
                raise ValueError(f"Required crop size {(ch, cw)} is larger than {'padded ' if any(padding) else ''}"
                                 f"input image size {(int(ph[i]), int(pw[i]))}.")
            pads = tuple(int(v[i]) for v in (top, ph - h - top, left, pw - w - left))
            raise ValueError(f"RandomCrop's {padding_mode} padding of {pads} (top, bottom, left, right) is longer "
                             f"than the image {(int(h[i]), int(w[i]))} allows (reflect: < its side, symmetric: "
                             f"<= its side)")
        return np.stack([-top, -left, ph - ch, pw - cw], 1)

    def _bounds_of(self, sizes: Sizes) -> list[tuple] | np.ndarray:
        return sizes.rows(self._bounds, self.size, self.padding, self.pad_if_needed, self.padding_mode)

    def make_params(self, draw: Draw) -> Params:
        bounds = to_device(self._bounds_of(draw.sizes), draw.device).expand(draw.n, 4)
        corner = bounds[:, :2] + draw.integers(bounds[:, 2:])
        return {"top": corner[:, 0], "left": corner[:, 1]}

    def check_params(self, params: dict[str, np.ndarray], sizes: Sizes) -> None:
        (top, left), bounds = (params[k] for k in ("top", "left")), np.array(self._bounds_of(sizes))
        ok = _whole(top, left) & (top >= bounds[:, 0]) & (top <= bounds[:, 0] + bounds[:, 2]) \
            & (left >= bounds[:, 1]) & (left <= bounds[:, 1] + bounds[:, 3])
        refuse_params(self, ok, params, "a corner of whole pixels that keeps the crop inside the (padded) image was "
                      "expected", sizes)

    def map_axes(self, axes: AxisMap, params: Params, sizes: Sizes, padding_mode: str | None = None) -> None:
        """``padding_mode``: in place of this crop's (the pipeline's "constant" for a crop that
        never pads where another crop's zero padding is in its reach)."""
        axes.crop(torch.stack([params["top"], params["left"]], 1), _pair(self.size, axes.scale.device),
                  padding_mode or self.padding_mode)


def _whole(*values: np.ndarray) -> np.ndarray:
    """Where all ``values`` hold finite whole numbers (pixel positions and lengths)."""
    return np.logical_and.reduce([np.isfinite(v) & (np.floor(v) == v) for v in values])


def parse_fill(fill) -> tuple[float, ...]:
    """A fill value, a number or one number per channel in the [0, 1] range of gpuaug's float
    images -> a tuple of floats; TypeError/ValueError for anything else (255, torchvision's white
    for uint8 images, included)."""
    values = [fill] if isinstance(fill, numbers.Real) else fill
    if not is_sequence(values) or not values or \
            not all(isinstance(f, numbers.Real) for f in values):
        raise TypeError(f"fill should be a number or a sequence of numbers, got {fill!r}")
    values = tuple(float(f) for f in values)
    if not all(0.0 <= f <= 1.0 for f in values):
        raise ValueError(f"fill is in the [0, 1] range of gpuaug's float images, got {fill!r} (torchvision's fill "
                         f"for a uint8 image is in 0-255: divide it by 255)")
    return values


def _parse_padding(padding) -> tuple[int, int, int, int]:
    """torchvision's padding forms -> its four-value form ``(left, top, right, bottom)``."""
    values = list(padding) if isinstance(padding, (tuple, list)) else [padding]
    # any integer (numpy's too, which torchvision refuses as "got 2"), not a bool
    if len(values) not in (1, 2, 4) or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                               for v in values):
        raise ValueError(f"Padding must be an int or a 1, 2, or 4 element of tuple or list, got {padding!r}.")
    values = [int(v) for v in values]
    if any(v < 0 for v in values):
        raise ValueError(f"RandomCrop padding must be non-negative, got {padding}")
    if len(values) == 1:
        return (values[0],) * 4
    if len(values) == 2:
        return values[0], values[1], values[0], values[1]
    return tuple(values)


class _RandomFlip(GeometricOp):
    axis = ""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = check_probability(p)

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def make_params(self, draw: Draw) -> Params:
        return {"flip": draw.bernoulli(self.p)}

    def map_axes(self, axes: AxisMap, params: Params, sizes: Sizes) -> None:
        axes.flip(params["flip"], 1 if self.axis == "x" else 0, sizes.pairs(axes.scale.shape[0], axes.scale.device))

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
    """Rotate about the center (or ``center``) by an angle drawn uniformly from ``degrees``, per sample.

    Positive angles turn counter-clockwise (torchvision's convention); the output keeps the input
    size (``expand=False``); uncovered corners get ``fill``. Applied at output resolution, after
    the crop and resize ops before it.

    Args:
        degrees: a number ``d`` for ``[-d, d]`` (``d >= 0``), or ``(min, max)``.
        interpolation: ``InterpolationMode.BILINEAR`` (the default here; torchvision's is
            NEAREST) or ``NEAREST`` (each output pixel the source pixel nearest its source
            coordinate, as torchvision's; uncovered pixels get ``fill`` whole). Every
            RandomRotation of a pipeline must use the same.
        expand: ``False`` only (every sample would get its own size).
        center: ``(x, y)`` in pixels from the top left corner of the image being rotated (what
            the ops before it give), as torchvision's; ``None``: its center.
        fill: a number, or one number per channel, in the [0, 1] range of the images; or
            ``None``, torchvision's: what bilinear sampling with zero padding reads, without the
            fill rule (which at ``fill=0`` darkens the edge pixels once more; nearest: the same as 0).

    Params: ``angle``: ``(B,)`` float32 degrees.
    """

    def __init__(self, degrees: float | Sequence[float], interpolation: InterpolationMode | str | int = "bilinear",
                 expand: bool = False, center: Sequence[float] | None = None, fill: float | Sequence[float] | None = 0):
        super().__init__()
        # torchvision's default is NEAREST; gpuaug's is bilinear (see the README's differences).
        self.interpolation = check_interpolation(interpolation, "RandomRotation", ("bilinear", "nearest"))
        if expand:
            raise ValueError("RandomRotation keeps the image size: expand=True is not supported")
        if center is not None:  # torchvision's checks
            if not is_sequence(center):
                raise TypeError(f"center should be a sequence of length 2, got {type(center).__name__}")
            if len(center) != 2 or not all(isinstance(c, numbers.Real) and not isinstance(c, bool)
                                           and math.isfinite(c) for c in center):
                raise ValueError(f"center should be a sequence of two finite numbers (x, y), got {center!r}")
            center = (float(center[0]), float(center[1]))
        self.center = center
        if isinstance(degrees, numbers.Real):
            if degrees < 0:
                raise ValueError("If degrees is a single number, it must be positive.")
            degrees = (-float(degrees), float(degrees))
        elif isinstance(degrees, TEXT_TYPES):  # torchvision: a ValueError (length or float())
            raise ValueError(f"degrees should be a number or a sequence of two numbers, got {degrees!r}")
        elif not is_sequence(degrees):
            raise TypeError(f"degrees should be a number or a sequence of length 2, got {type(degrees).__name__}")
        elif len(degrees) != 2:
            raise ValueError("degrees should be a sequence of length 2.")
        self.degrees = check_range(degrees, "degrees")
        # None: torchvision's zero padding without its fill rule (darker edge pixels than fill=0).
        self.fill = None if fill is None else parse_fill(fill)

    def extra_repr(self) -> str:
        center = "" if self.center is None else f", center={self.center}"
        nearest = ", interpolation=nearest" if self.interpolation == "nearest" else ""
        return f"degrees={self.degrees}{nearest}{center}, fill={self.fill}"

    def make_params(self, draw: Draw) -> Params:
        return {"angle": draw.uniform(*self.degrees)}

    def check_params(self, params: dict[str, np.ndarray], sizes: Sizes) -> None:
        refuse_params(self, np.isfinite(params["angle"]), params, "a finite angle was expected")

    def matrix(self, params: Params, size: tuple[int, int]) -> Tensor:
        return rotation_matrix(params["angle"], *size, self.center)
