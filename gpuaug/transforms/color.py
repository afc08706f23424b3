"""Color ops: per-sample factors, applied at output resolution after the geometry."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..functional.color import adjust_hue, gray_rows, mix_channels, normalize, scaled_identity
from ..cpu import own_path
from ..native import OP_BRIGHTNESS, OP_CONTRAST, OP_HUE, OP_NONE, OP_SATURATION
from ._base import (TEXT_TYPES, Draw, Op, Params, Sizes, check_probability, is_sequence, refuse_params, setup_range,
                    to_device)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_BRIGHTNESS, _CONTRAST, _SATURATION, _HUE = range(4)
# The kernels' op codes follow the same order, so a step's code is its id + OP_BRIGHTNESS.
assert (OP_CONTRAST, OP_SATURATION, OP_HUE) == (OP_BRIGHTNESS + 1, OP_BRIGHTNESS + 2, OP_BRIGHTNESS + 3)


class ColorOp(Op):
    """An op that changes values, not positions: ``apply_transform(x, params)`` on ``(B, C, h, w)`` float."""

    def apply_transform(self, x: Tensor, params: Params) -> Tensor:
        raise NotImplementedError

    def group_key(self, params: Params) -> Tensor | None:
        """``(B,)`` ints, equal for samples that take the same passes; ``None`` if all do."""
        return None

    def contrast_steps(self) -> int:
        """The most contrast steps this op's program gives a sample (their means need a pass of
        their own)."""
        return 0

    def program(self, params: Params) -> tuple[Tensor, Tensor] | None:
        """This op as per-sample steps of the fused color kernels (:mod:`gpuaug.native` on the
        CPU, :mod:`gpuaug.gpu_kernels` on CUDA): ``(B, S)`` int32 op codes and ``(B, S)`` float32
        factors, run left to right; ``None`` if the op cannot be written so (the pipeline then
        uses :meth:`apply_transform`)."""
        return None


def color_programs(color: list[tuple[ColorOp, Params]], n: int,
                   device) -> tuple[Tensor, Tensor, Normalize | None] | None:
    """The pipeline's color ops, ``(op, params)`` pairs in order, as one program per sample for the
    fused kernels: ``(ops, factors, normalize)``, ``ops``/``factors`` ``(n, S)`` int32/float32 (S
    may be 0) and the final ``Normalize`` (or None), which the kernels run last; ``None`` if an op
    has no program."""
    normalize = color[-1][0] if color and isinstance(color[-1][0], Normalize) else None
    drawn = [op.program(params) for op, params in (color[:-1] if normalize is not None else color)]
    programs = [p for p in drawn if p is not None]
    if len(programs) < len(drawn):
        return None
    if not programs:
        empty = torch.zeros(n, 0, dtype=torch.float32, device=device)
        return empty.to(torch.int32), empty, normalize
    if len(programs) == 1:
        return (*programs[0], normalize)
    return torch.cat([p[0] for p in programs], 1), torch.cat([p[1] for p in programs], 1), normalize


def _blend_matrices(which: Tensor, factor: Tensor, channels: int, dtype: torch.dtype):
    """Color matrices for blend passes, all at once: per sample and pass, brightness (``which``
    0), contrast (1), saturation (2) or nothing (else) by ``factor``. All three are
    ``f * x + (1 - f) * reference`` with a reference of 0, the image's mean gray or its gray image.

    Args:
        which, factor: ``(B, S)``, one column per pass.

    Returns:
        ``matrix`` ``(B, S, C, C)`` in ``dtype`` (:func:`mix_channels`'s matrix for each pass) and
        ``mean_weight`` ``(B, S, C)`` float32: a pass's offset is ``mean_weight`` times the channel
        means of its input, summed (``(1 - f)`` times the mean gray for contrast, else 0).
    """
    blends = (which >= _BRIGHTNESS) & (which <= _SATURATION)
    if channels == 1:  # saturation does nothing to one channel, as in torchvision
        blends &= which != _SATURATION
    f = torch.where(blends, factor.to(torch.float32), 1.0)
    keep = 1 - f
    matrix = scaled_identity(f, channels) + gray_rows((which == _SATURATION) * keep, channels)
    mean_weight = gray_rows((which == _CONTRAST) * keep, channels)[..., 0, :]
    return matrix.to(dtype), mean_weight


def _blend(x: Tensor, matrix: Tensor, mean_weight: Tensor | None) -> Tensor:
    """One blend pass with a column of :func:`_blend_matrices` (``mean_weight`` None: no sample
    takes contrast in it)."""
    offset = None
    if mean_weight is not None:
        means = x.mean(dim=(-2, -1), dtype=torch.float32)
        offset = (mean_weight * means).sum(1, keepdim=True).expand(-1, x.shape[1])
    return mix_channels(x, matrix, offset)


class ColorJitter(ColorOp):
    """Randomly change brightness, contrast, saturation and hue (torchvision's ColorJitter).

    Each factor is drawn per sample, uniformly from its range: a number ``v`` means
    ``[max(0, 1 - v), 1 + v]`` for brightness, contrast and saturation and ``[-v, v]`` for hue
    (``0 <= v <= 0.5``); a pair ``(min, max)`` is used as is. The four adjustments run in a random
    order drawn **per sample**, as torchvision draws one per image. Hue is the HSV shift of
    torchvision's ``adjust_hue``.

    Params: ``brightness``, ``contrast``, ``saturation``, ``hue``: ``(B,)`` float32 (identity
    value where the adjustment is off); ``order``: ``(B, 4)`` int64, a permutation of
    0=brightness, 1=contrast, 2=saturation, 3=hue.
    """

    def __init__(self, brightness: float | Sequence[float] | None = 0, contrast: float | Sequence[float] | None = 0,
                 saturation: float | Sequence[float] | None = 0, hue: float | Sequence[float] | None = 0):
        super().__init__()
        self.brightness = setup_range(brightness, "brightness")
        self.contrast = setup_range(contrast, "contrast")
        self.saturation = setup_range(saturation, "saturation")
        self.hue = setup_range(hue, "hue", center=0, bound=(-0.5, 0.5), clip_first_on_zero=False)

    def extra_repr(self) -> str:
        return f"brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}, hue={self.hue}"

    def make_params(self, draw: Draw) -> Params:
        # One kernel draws the four factors and the order's sort keys; an adjustment that is off
        # gets its identity value (low = identity, width 0).
        u = draw.rand(8)
        ranges = [getattr(self, name) or (identity, identity) for name, identity in self._IDENTITY]
        low, width = to_device((tuple(lo for lo, _ in ranges), tuple(hi - lo for lo, hi in ranges)), draw.device)
        params = dict(zip((name for name, _ in self._IDENTITY), torch.addcmul(low, width, u[:, :4]).unbind(1)))
        params["order"] = u[:, 4:].argsort(1)
        return params

    _IDENTITY = (("brightness", 1.0), ("contrast", 1.0), ("saturation", 1.0), ("hue", 0.0))

    def check_params(self, params: dict[str, np.ndarray], sizes: Sizes) -> None:
        # What torchvision's adjust_* kernels refuse (a negative factor, hue past 0.5), and NaN.
        factors, hue = np.stack([params[k] for k in ("brightness", "contrast", "saturation")], 1), params["hue"]
        ok = (np.isfinite(factors) & (factors >= 0)).all(1) & (np.abs(hue) <= 0.5)
        refuse_params(self, ok, params, "brightness, contrast and saturation >= 0 and hue in [-0.5, 0.5] were expected")
        order_ok = (np.sort(params["order"], 1) == np.arange(4)).all(1)
        refuse_params(self, order_ok, params, "an order that is a permutation of 0, 1, 2, 3 was expected")

    def _steps(self, params: Params) -> tuple[Tensor, Tensor]:
        """Each sample's enabled adjustments in its drawn order -> ``(B, n_enabled)`` ids and
        factors. Disabled adjustments sort last and are cut, so no pass is spent on them."""
        factors = torch.stack([params["brightness"], params["contrast"], params["saturation"], params["hue"]], 1)
        enabled = [r is not None for r in (self.brightness, self.contrast, self.saturation, self.hue)]
        keys = params["order"].argsort(1)  # slot of each adjustment
        for j, on in enumerate(enabled):
            if not on:
                keys[:, j] += 4
        steps = keys.argsort(1)[:, : sum(enabled)]
        return steps, factors.gather(1, steps)

    def contrast_steps(self) -> int:
        return int(self.contrast is not None)

    def program(self, params: Params) -> tuple[Tensor, Tensor]:
        steps, step_factor = self._steps(params)
        return (steps + OP_BRIGHTNESS).to(torch.int32), step_factor.to(torch.float32)

    def group_key(self, params: Params) -> Tensor | None:
        """``(B,)`` how many blends each sample runs before hue (``None`` without hue): samples with
        the same key run the same passes, which lets the CPU path skip the others."""
        if self.hue is None:
            return None
        return _hue_step(self._steps(params)[0])

    def apply_transform(self, x: Tensor, params: Params) -> Tensor:
        steps, factor = self._steps(params)
        n = steps.shape[1]
        if self.hue is None:
            which, hue_at = steps, None
        else:
            # Hue is the costly step: run it once for everyone, the blends drawn before it first
            # and those drawn after it last, so each sample keeps its own order: passes 0..n-2
            # hold each sample's blends before its hue, passes n-1..2n-3 those after (-1: none).
            hue_at = _hue_step(steps).view(-1, 1)
            k = torch.arange(n, device=steps.device)
            which = torch.cat([torch.where(hue_at > k[:-1], steps[:, :-1], -1),
                               torch.where(hue_at < k[1:], steps[:, 1:], -1)], 1)
            factor = torch.cat([factor[:, :-1], factor[:, 1:]], 1)
        # Every pass's color matrix at once: a handful of small ops for the batch, not per pass.
        matrix, mean_weight = _blend_matrices(which, factor, x.shape[1], x.dtype)
        contrast = self.contrast is not None
        hue_pass = n - 1 if hue_at is not None else None  # hue runs before this blend pass
        for j in range(which.shape[1] + 1):
            if j == hue_pass:
                x = adjust_hue(x, params["hue"])
            if j < which.shape[1] and not _cpu_nothing_to_do(which[:, j]):
                x = _blend(x, matrix[:, j], mean_weight[:, j] if contrast else None)
        return x


def _hue_step(steps: Tensor) -> Tensor:
    """``(B,)`` where hue falls in each sample's ``(B, n)`` steps: the number of blends before it."""
    return (steps == _HUE).float().argmax(1)


def _cpu_nothing_to_do(which: Tensor) -> bool:
    """True when ``which`` is on the CPU and asks no sample for a blend. Reading CPU values syncs
    with nothing, and a skipped pass is ~1/8 of ColorJitter's CPU time (torch kernels); on other
    devices this is always False, so the per-batch path never waits on the device."""
    return own_path(which.device) and bool((which < 0).all())


class RandomGrayscale(ColorOp):
    """Convert to grayscale (kept at C channels) with probability ``p``, per sample.

    Params: ``gray``: ``(B,)`` bool.
    """

    def __init__(self, p: float = 0.1):
        super().__init__()
        self.p = check_probability(p)

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def make_params(self, draw: Draw) -> Params:
        return {"gray": draw.bernoulli(self.p)}

    def program(self, params: Params) -> tuple[Tensor, Tensor]:
        # Grayscale is saturation 0: clamp(0 * x + 1 * gray) is the gray image exactly.
        gray = params["gray"].view(-1, 1) != 0
        codes = torch.where(gray, OP_SATURATION, OP_NONE).to(torch.int32)
        return codes, torch.zeros(gray.shape, dtype=torch.float32, device=gray.device)

    def apply_transform(self, x: Tensor, params: Params) -> Tensor:
        if x.shape[1] == 1:
            return x
        # A gray sample's color matrix has the luma weights in every row; others get the identity.
        gray = params["gray"].to(torch.float32)
        matrix = scaled_identity(1 - gray, 3) + gray_rows(gray, 3)
        return mix_channels(x, matrix)


def _per_channel_values(name: str, value) -> Tensor:
    """``value`` (a number, a sequence of numbers, an array or a tensor) as a ``(n,)`` float32 CPU
    tensor, n >= 1; a TypeError or ValueError naming ``name`` for anything else."""
    expected = f"{name} should be a number or a sequence of numbers (one per channel), got"
    if isinstance(value, (*TEXT_TYPES, bool)) or (is_sequence(value) and any(isinstance(v, bool) for v in value)):
        raise TypeError(f"{expected} {value!r}")  # (torch would take True as 1.0)
    try:
        raw = torch.as_tensor(value, device="cpu")
        if raw.dtype == torch.bool or raw.is_complex():
            raise TypeError(f"{raw.dtype} values")
        values = raw.to(torch.float32).flatten()
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{expected} {type(value).__name__} {value!r:.60} ({error})") from None
    if values.numel() == 0:
        raise ValueError(f"{name} should have one value per channel (or one for all), got none: {value!r}")
    return values


class Normalize(ColorOp):
    """``(x - mean) / std`` per channel, on images in [0, 1]. Must be the last op.

    Args:
        mean, std: one number per channel, or one for all; mean in [0, 1], std in (0, 1] (values
            for 0-255 pixels, as DALI or mmcv take them, are refused: divide them by 255).
    """

    mean: Tensor  # buffers, (C,) or (1,) float32
    std: Tensor

    def __init__(self, mean: float | Sequence[float] | Tensor, std: float | Sequence[float] | Tensor,
                 inplace: bool = False):
        super().__init__()  # inplace: torchvision's, for ported code; no effect (the output is always new)
        mean_t, std_t = (_per_channel_values(name, v) for name, v in (("mean", mean), ("std", std)))
        if mean_t.numel() != std_t.numel() and 1 not in (mean_t.numel(), std_t.numel()):
            raise ValueError(f"mean and std need one value per channel (or one for all) each, got {mean_t.numel()} "
                             f"and {std_t.numel()}")
        if not ((std_t > 0) & torch.isfinite(std_t)).all():  # written so that NaN fails too
            raise ValueError(f"std should be positive and finite, got {std_t.tolist()} (zero divides by zero; "
                             f"NaN or inf would make every output NaN or 0)")
        # Values for 0-255 pixels (mean [123.675, 116.28, 103.53], std [58.395, 57.12, 57.375]), or a
        # std left so beside a mean already divided by 255.
        if not (((mean_t >= 0) & (mean_t <= 1)).all() and (std_t <= 1).all()):
            raise ValueError(f"Normalize works on images in [0, 1]: mean should be in [0, 1] and std at most 1, got "
                             f"mean={mean_t.tolist()}, std={std_t.tolist()} (means and stds for 0-255 pixel values, as "
                             f"DALI or mmcv take them: divide by 255)")
        self.register_buffer("mean", mean_t)
        self.register_buffer("std", std_t)
        self._given = (mean_t.tolist(), std_t.tolist())  # for buffers made real from meta (see _apply)
        self._inv_std: tuple | None = None

    def extra_repr(self) -> str:
        return f"mean={[round(v, 4) for v in self.mean.tolist()]}, std={[round(v, 4) for v in self.std.tolist()]}"

    def _apply(self, fn, recurse: bool = True):
        # mean and std are constants of the math, not weights: whatever an enclosing module does to
        # its tensors, they keep their values, float32, on the device it gives. A cast
        # (model.half()) would round them; to_empty (meta-device init, as FSDP2 and torchtitan
        # do it) would leave uninitialised memory, every output then inf or noise. A meta buffer
        # has no values to keep: made real, it takes the constructor's (a state dict loaded after
        # replaces them as usual).
        before = {"mean": self.mean, "std": self.std}
        super()._apply(fn, recurse)
        given = self.__dict__.get("_given") or (None, None)
        for (name, old), values in zip(before.items(), given):
            new = getattr(self, name)
            if new is old:
                continue
            if old.device.type != "meta":
                self._buffers[name] = old.to(new.device)
            elif new.device.type != "meta" and values is not None:
                self._buffers[name] = torch.tensor(values, dtype=torch.float32, device=new.device)
        return self

    def values(self, channels: int) -> tuple[Tensor, Tensor]:
        """``mean`` and ``1 / std`` for images of ``channels`` channels, ``(channels,)`` float32
        each: one value is used for every channel, as torchvision broadcasts it."""
        n = max(self.mean.numel(), self.std.numel())
        if n not in (1, channels):
            raise ValueError(f"Normalize has {n} channels of mean/std, images have {channels}")
        mean, inv_std = (t if t.numel() == channels else t.expand(channels).contiguous() for t in (self.mean, self.inv_std))
        return mean, inv_std

    def apply_transform(self, x: Tensor, params: Params) -> Tensor:
        mean, inv_std = self.values(x.shape[1])
        return normalize(x, mean, inv_std=inv_std)

    @property
    def inv_std(self) -> Tensor:
        """``1 / std`` (float64 division, float32 result) on ``std``'s device, computed once and
        again only when ``std`` changes (moved, loaded from a state dict, edited in place)."""
        std = self.std
        if torch.compiler.is_compiling():  # traced: computed in the graph (reading _version would break it)
            return (1.0 / std.double()).float()
        cached = self._inv_std
        if cached is None or cached[0] is not std or cached[1] != std._version:
            cached = self._inv_std = (std, std._version, (1.0 / std.double()).float())
        return cached[2]
