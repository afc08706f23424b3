"""Color kernels: pure, batch-first, one factor per sample.

Every kernel takes images ``x`` of shape ``(B, C, H, W)`` (C in {1, 3}), float in [0, 1], and a
factor that is either a Python number (same for every sample) or a tensor of shape ``(B,)``.
They return a new tensor of the same shape and dtype; the input is never modified. The formulas
are torchvision's (``torchvision.transforms.v2.functional``), so a sample given factor ``f`` here
equals torchvision's kernel called on that sample with ``f``.
"""

from __future__ import annotations

import torch
from torch import Tensor

# ITU-R 601-2 luma weights, as torchvision's rgb_to_grayscale.
_LUMA = (0.2989, 0.587, 0.114)


def per_sample(factor: float | Tensor, x: Tensor) -> float | Tensor:
    """Shape a scalar or ``(B,)`` factor so it broadcasts over ``(B, C, H, W)``."""
    if isinstance(factor, Tensor):
        return factor.to(dtype=x.dtype, device=x.device).view(-1, 1, 1, 1)
    return factor


def rgb_to_grayscale(x: Tensor) -> Tensor:
    """Luma of ``(B, 3, H, W)`` RGB images -> ``(B, 1, H, W)``; a 1-channel input is returned as is."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.unbind(1)
    # torchvision's exact expression; Python scalars, so no constant tensor to copy to the device.
    return r.mul(_LUMA[0]).add_(g, alpha=_LUMA[1]).add_(b, alpha=_LUMA[2]).unsqueeze(1)


def blend(x: Tensor, reference: Tensor | float, factor: float | Tensor) -> Tensor:
    """``factor * x + (1 - factor) * reference``, clamped to [0, 1] (torchvision's ``_blend``)."""
    f = per_sample(factor, x)
    if not isinstance(reference, Tensor):
        return (x * f).clamp_(0, 1) if reference == 0 else (x * f + reference * (1 - f)).clamp_(0, 1)
    return torch.lerp(reference.expand_as(x), x, f).clamp_(0, 1)


def adjust_brightness(x: Tensor, factor: float | Tensor) -> Tensor:
    """Multiply by ``factor`` (>= 0) and clamp: 0 gives black, 1 the original."""
    return blend(x, 0.0, factor)


def adjust_contrast(x: Tensor, factor: float | Tensor) -> Tensor:
    """Blend with the mean gray level of each image: 0 gives flat gray, 1 the original."""
    mean = rgb_to_grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)
    return blend(x, mean, factor)


def adjust_saturation(x: Tensor, factor: float | Tensor) -> Tensor:
    """Blend with the per-pixel gray image: 0 gives grayscale, 1 the original. No-op on 1 channel."""
    if x.shape[1] == 1:
        return x.clone()
    return blend(x, rgb_to_grayscale(x), factor)


def adjust_hue(x: Tensor, factor: float | Tensor) -> Tensor:
    """Shift the HSV hue by ``factor`` turns (in [-0.5, 0.5]); saturation and value are kept.

    Same result as torchvision's ``adjust_hue`` (RGB -> HSV, ``h = (h + factor) % 1``, HSV -> RGB) but
    without building the HSV image: with ``v = max``, chroma ``c = max - min`` and the shifted hue
    ``h6`` in sixths of a turn, each channel is ``v - c * clamp(min(k, 4 - k), 0, 1)`` with
    ``k = (h6 + n) % 6``, n = 5, 3, 1 for R, G, B. Computed in float32 whatever the input dtype
    (hue is the one numerically delicate step), then cast back. No-op on 1 channel.
    """
    if x.shape[1] == 1:
        return x.clone()
    xf = x.float()
    r, g, b = xf.unbind(1)
    maxc, minc = xf.amax(1), xf.amin(1)
    chroma = maxc - minc
    # Where chroma is 0 every numerator below is 0 too: a tiny divisor keeps the hue finite (0).
    h6 = torch.where(maxc == r, g - b, torch.where(maxc == g, (b - r).add_(chroma, alpha=2), (r - g).add_(chroma, alpha=4)))
    h6 = h6.div_(chroma.clamp(min=1e-12))
    shift = 6.0 * factor.to(xf.device, torch.float32).view(-1, 1, 1) if isinstance(factor, Tensor) else 6.0 * factor
    h6 = h6.add_(shift)
    out = torch.empty_like(xf)
    for i, n in enumerate((5.0, 3.0, 1.0)):
        k = torch.remainder(h6 + n, 6.0)
        torch.addcmul(maxc, chroma, torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0), value=-1, out=out[:, i])
    return out.to(x.dtype)


def normalize(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """``(x - mean) / std`` per channel; ``mean`` and ``std`` have shape ``(C,)``."""
    mean = mean.to(dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    inv_std = (1.0 / std.double()).to(dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (x - mean).mul_(inv_std)
