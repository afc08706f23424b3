"""What a pipeline is given, checked once per call without touching the data: images (a batch,
a list, clips, a :class:`gpuaug.PackedImages`) and the pipeline's own arguments."""

from __future__ import annotations

import math
from numbers import Integral

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

from .packed import PackedImages, PackedTensors
from .transforms._base import Sizes

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def inspect_images(images) -> tuple[list[Tensor] | Tensor | PackedImages, Sizes, int, bool]:
    """Validate the input without touching its data: -> the images as a list of ``(C, H, W)``
    or an ``(N, C, H, W)`` tensor (clips flattened) or a :class:`PackedImages`, their sizes,
    frames per clip, is-clip."""
    if isinstance(images, PackedTensors) and not isinstance(images, PackedImages):
        raise TypeError(f"expected images, got {type(images).__name__} (encoded bytes): decode it first "
                        f"(gpuaug.DeviceLoader does)")
    if isinstance(images, PackedImages):
        if len(images) == 0:
            raise ValueError("expected a non-empty batch of images, got an empty PackedImages")
        if images.clips:  # clips of different sizes: their frames, read in place
            frames = _frame_count([s[0] for s in images.shapes])
            items, sizes, _, _ = inspect_images(images.frames())
            return items, sizes, frames, True
        check_image_tensor(images[0][None], "images", tuple(images[0].shape), _ITEM_FIX)
        shapes = set(images.shapes)
        channel_counts = {c for c, _, _ in shapes}
        if len(channel_counts) != 1 or any(h == 0 or w == 0 for _, h, w in shapes):
            raise ValueError(f"expected images of one channel count and non-zero height and width, got "
                             f"shapes {sorted(shapes)}" + (_GRAY_HINT if len(channel_counts) > 1 else ""))
        if len(shapes) == 1:  # one size: already a batch
            return images.flat.view(len(images), *images.shapes[0]), Sizes(uniform=images.shapes[0][1:]), 1, False
        return images, Sizes(per_image=[(s[1], s[2]) for s in images.shapes]), 1, False
    if isinstance(images, (list, tuple)):
        if len(images) == 0:
            raise ValueError("expected a non-empty batch of images, got an empty list")
        if all(isinstance(t, Tensor) and t.dim() == 4 for t in images):  # clips of different sizes
            frames = _frame_count([t.shape[0] for t in images])
            items, sizes, _, _ = inspect_images([f for clip in images for f in clip.unbind(0)])
            return items, sizes, frames, True
        item_shapes = [t.shape for t in images] if all(isinstance(t, Tensor) for t in images) else None
        if item_shapes is not None and all(len(s) == 3 for s in item_shapes):
            c, dtype = item_shapes[0][0], images[0].dtype
            if all(s[0] == c and s[1] and s[2] for s in item_shapes) and all(t.dtype == dtype for t in images):
                check_image_tensor(images[0][None], "images", tuple(images[0].shape), _ITEM_FIX)
                return list(images), Sizes(per_image=[(s[1], s[2]) for s in item_shapes]), 1, False
        _check_list(images)  # raises, naming the first bad item
        raise AssertionError("unreachable: the list was refused above")
    if not isinstance(images, Tensor):
        raise TypeError(f"expected a uint8/float tensor or a list of tensors, got {type(images).__name__}"
                        f"{_convert_hint(images, '0, 3, 1, 2')}")
    if images.dim() == 5:
        if images.shape[1] == 0:
            raise ValueError(f"expected clips with at least one frame, got shape {tuple(images.shape)}")
        check_image_tensor(images.flatten(0, 1), "clips", tuple(images.shape), _CLIP_FIX)
        return images.flatten(0, 1), Sizes(uniform=tuple(images.shape[-2:])), images.shape[1], True
    if images.dim() != 4:
        raise ValueError(
            f"expected images of shape (B, C, H, W), clips (B, T, C, H, W) or a list of (C, H, W) tensors, "
            f"got a tensor of shape {tuple(images.shape)}"
            + (" (one image? x[None] makes a batch of one)" if images.dim() == 3 and images.shape[0] in (1, 3) else ""))
    check_image_tensor(images, "images")
    return images, Sizes(uniform=tuple(images.shape[-2:])), 1, False


# Grayscale JPEGs decode to 1 channel unless asked for RGB; gpuaug's datasets always give RGB.
_GRAY_HINT = (" (grayscale files among color ones? decode with torchvision.io.ImageReadMode.RGB, as gpuaug's "
              "datasets do)")


def _check_list(images: list | tuple) -> None:
    """The error for the first item of a list of images that is not a ``(C, H, W)`` tensor of the
    first item's dtype and channel count, with a non-zero height and width."""
    for i, t in enumerate(images):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected a list of (C, H, W) tensors, item {i} is {type(t).__name__}"
                            f"{_convert_hint(t, '2, 0, 1')}")
        if t.dim() != 3:
            raise ValueError(f"expected a list of (C, H, W) tensors, item {i} has shape {tuple(t.shape)}")
        if i == 0:
            check_image_tensor(t[None], "images", tuple(t.shape), _ITEM_FIX)
        elif t.dtype != images[0].dtype or t.shape[0] != images[0].shape[0]:
            raise ValueError(
                f"all images in a list need one dtype and channel count: item 0 is {images[0].dtype} "
                f"{tuple(images[0].shape)}, item {i} is {t.dtype} {tuple(t.shape)}"
                + (_GRAY_HINT if t.shape[0] != images[0].shape[0] else ""))
        elif 0 in t.shape:
            raise ValueError(f"expected images with non-zero height and width, item {i} has shape "
                             f"{tuple(t.shape)}")


def _frame_count(counts: list[int]) -> int:
    """The one frame count of a batch of clips of different sizes."""
    if len(set(counts)) != 1 or counts[0] == 0:
        raise ValueError(f"clips need one (non-zero) frame count, got {counts}")
    return counts[0]


def checked_dtype(dtype) -> torch.dtype | None:
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype should be None or one of {[str(d) for d in FLOAT_DTYPES]}, got {dtype}")
    return dtype


def checked_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, Integral)):
        raise TypeError(f"seed should be an int (or None), got {type(seed).__name__}: {seed!r}")
    if not -(2**63) <= int(seed) < 2**64:  # torch.Generator.manual_seed's range: else it fails at the first draw
        raise ValueError(f"seed should be in [-2**63, 2**64 - 1], torch.Generator's range, got {seed}")
    return int(seed)


def _convert_hint(value, dims: str) -> str:
    """How to make a tensor of what came, for the two usual cases (a numpy array, a PIL image);
    ``dims``: the permutation that puts last channels first (``"0, 3, 1, 2"`` for a batch)."""
    kind = type(value).__module__.split(".")[0]
    if kind == "numpy":
        return f" (a numpy array: torch.from_numpy(a), then .permute({dims}) if channels are last)"
    if kind == "PIL":
        return (" (PIL images: torchvision.transforms.v2.functional.pil_to_tensor, or read the files with "
                "gpuaug.data.ImageFolder, which decodes to tensors)")
    return ""


_BATCH_FIX = ".permute(0, 3, 1, 2) makes (B, C, H, W)"
_ITEM_FIX = "each image's .permute(2, 0, 1) makes (C, H, W)"
_CLIP_FIX = ".permute(0, 1, 4, 2, 3) makes (B, T, C, H, W)"


def check_image_tensor(x: Tensor, what: str, given: tuple | None = None, fix: str = _BATCH_FIX) -> None:
    """``x``, images ``(N, C, H, W)``: uint8 or float, N > 0, C in {1, 3}, H and W > 0; else a
    TypeError/ValueError naming ``what`` and the shape as ``given`` (default ``x``'s), with ``fix``,
    how that form is made channels-first, where the last dim looks like channels."""
    shape = tuple(x.shape) if given is None else tuple(given)
    if x.device.type == "meta":
        raise ValueError(f"expected {what} with data, got a tensor on the meta device (shape {shape})")
    if x.dtype != torch.uint8 and not x.is_floating_point():
        hint = (" (16-bit images: torchvision's v2.functional.to_dtype(x, torch.uint8, scale=True), or "
                "to_dtype(x, torch.float32, scale=True) to keep their precision)") if x.dtype == torch.uint16 else ""
        raise TypeError(f"expected uint8 or float {what}, got {x.dtype}{hint}")
    if x.shape[0] == 0:
        raise ValueError(f"expected a non-empty batch of {what}, got shape {shape}")
    if x.shape[1] not in (1, 3):
        hint = (f" (channels last? {fix})" if x.shape[-1] in (1, 3) else
                " (RGBA? keep the color channels, [..., :3, :, :], or decode with ImageReadMode.RGB)"
                if x.shape[1] == 4 else "")
        raise ValueError(f"expected {what} with 1 or 3 channels in dim -3, got {x.shape[1]} (shape {shape})" + hint)
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError(f"expected {what} with non-zero height and width, got shape {shape}")


# Float input is read as [0, 1]; the mistakes this catches are far outside it (0-255 floats,
# already-normalized images, NaN), while resampled [0, 1] images may overshoot a little.
FLOAT_RANGE = (-0.5, 1.5)


# Every image but the first is checked on a grid of about this many pixels a channel (16 x 16): a
# 0-255 or normalized image is far outside [0, 1] nearly everywhere. Cost: benchmarks/RESULTS.md
# ("The float-range check reads every image"): 0.45 ms for 64 375x500 images, ~0.3% of the pipeline.
FLOAT_RANGE_SAMPLES = 256


def check_float_range(images, frames: int = 1) -> None:
    """Float images on the CPU must hold values near [0, 1]: ``images`` is an ``(N, C, H, W)``
    tensor or a sequence of ``(C, H, W)`` tensors (a list, :class:`PackedImages`; clips flattened,
    ``frames`` a clip: the error names the clip and frame). Image 0 is read
    whole (NaN anywhere in it is caught), every other image on a strided grid of about
    ``FLOAT_RANGE_SAMPLES`` pixels a channel (a 0-255 or normalized image among [0, 1] ones is
    caught; one NaN pixel off the grid is caught after the run, where a crop read it:
    :func:`check_finite_output`). On a GPU nothing is read, as that would wait for the device, nor
    while traced (torch.compile, fake tensors), where values are unknown."""
    first = images[0].detach()
    if not first.is_floating_point() or first.device.type != "cpu" or torch.compiler.is_compiling():
        return
    low_high = torch.aminmax(first.float())
    if isinstance(low_high.min, FakeTensor):  # traced (fake mode): no values to check
        return
    _refuse_out_of_range(_which(0, frames), float(low_high.min), float(low_high.max), first)
    if len(images) == 1:
        return
    if isinstance(images, Tensor):
        low, high = _grid(images[1:]).flatten(1).float().aminmax(dim=1)
    else:  # images of different sizes: one grid each (measured no slower than one padded or cat'ed read)
        low, high = torch.stack([torch.stack(torch.aminmax(_grid(image).float())) for image in images[1:]]).unbind(1)
    ok = (low >= FLOAT_RANGE[0]) & (high <= FLOAT_RANGE[1])  # False for NaN
    if not bool(ok.all()):
        i = int((~ok).nonzero()[0])
        _refuse_out_of_range(_which(i + 1, frames), float(low[i]), float(high[i]))


def check_finite_output(out: Tensor, images, frames: int = 1) -> None:
    """The other half of :func:`check_float_range`: a CPU pipeline's output ``(N, C, h, w)`` for
    float ``images`` must be finite; a NaN or infinite pixel the grid missed, where a crop read it,
    is a ValueError naming the image (one ``aminmax`` over the output, NaN propagating: ~1.5 ms for
    64 224x224 images, one thread, ~1% of the call). Nothing is read on a GPU or while traced, as
    there."""
    first = images[0]
    if not first.is_floating_point() or out.device.type != "cpu" or torch.compiler.is_compiling():
        return
    low_high = torch.aminmax(out)
    if isinstance(low_high.min, FakeTensor) or bool(torch.stack(low_high).isfinite().all()):
        return
    low, high = out.flatten(1).aminmax(dim=1)
    for i in (~(low.isfinite() & high.isfinite())).nonzero().flatten().tolist():
        if not bool(images[i].isfinite().all()):  # else the ops overflowed (float16, a tiny std): as torchvision's
            break
    else:
        return
    raise ValueError(f"expected float images in [0, 1], got NaN or infinite values ({_which(i, frames)}, in the "
                     f"part the pipeline read: before it runs only image 0 is read whole): the decode or the "
                     f"preprocessing before the pipeline produced them")


def _grid(images: Tensor) -> Tensor:
    """A view of images ``(..., H, W)`` on a strided grid of about :data:`FLOAT_RANGE_SAMPLES` pixels."""
    step = max(1, math.isqrt(images.shape[-2] * images.shape[-1] // FLOAT_RANGE_SAMPLES))
    return images.detach()[..., ::step, ::step]


def _which(index: int, frames: int) -> str:
    """Item ``index`` of a flattened batch, as a user names it: ``image 5``, ``clip 2, frame 1``."""
    return f"image {index}" if frames == 1 else f"clip {index // frames}, frame {index % frames}"


def _refuse_out_of_range(which: str, low: float, high: float, image: Tensor | None = None) -> None:
    """The ValueError for the image ``which`` of a float batch, whose values (read whole where
    ``image`` is given, its NaNs then counted) span [low, high]; nothing where that is near [0, 1]."""
    if math.isnan(low) or math.isnan(high):
        counted = f", {int(image.isnan().sum())} of {image.numel()}" if image is not None else ""
        raise ValueError(f"expected float images in [0, 1], got NaN values ({which}{counted}): the decode "
                         f"or the preprocessing before the pipeline produced them")
    if not (FLOAT_RANGE[0] <= low and high <= FLOAT_RANGE[1]):
        raise ValueError(
            f"expected float images in [0, 1], got values in [{low:.4g}, {high:.4g}] ({which}): 0-255 floats? "
            f"divide by 255 or pass the uint8 tensor; already normalized? pass the image before Normalize, "
            f"the pipeline normalizes")
