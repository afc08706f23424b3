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
LUMA = (0.2989, 0.587, 0.114)


def factors(factor: float | Tensor, x: Tensor) -> Tensor:
    """A Python number or a ``(B,)`` tensor -> ``(B,)`` float32 on ``x``'s device."""
    if isinstance(factor, Tensor):
        return factor.to(device=x.device, dtype=torch.float32).reshape(-1).expand(x.shape[0])
    return torch.full((x.shape[0],), float(factor), dtype=torch.float32, device=x.device)


def scaled_identity(weight: Tensor, channels: int) -> Tensor:
    """``(..., C, C)`` color matrices ``weight * I``: each channel scaled by ``weight`` (``(...,)``)."""
    return torch.diag_embed(weight.unsqueeze(-1).expand(*weight.shape, channels))


def rgb_to_grayscale(x: Tensor) -> Tensor:
    """Luma of ``(B, 3, H, W)`` RGB images -> ``(B, 1, H, W)``; a 1-channel input is copied as is."""
    if x.shape[1] == 1:
        return x.clone()
    r, g, b = x.unbind(1)
    # torchvision's exact expression; Python scalars, so no constant tensor to copy to the device.
    return r.mul(LUMA[0]).add_(g, alpha=LUMA[1]).add_(b, alpha=LUMA[2]).unsqueeze(1)


def gray_rows(weight: Tensor, channels: int) -> Tensor:
    """``(..., C, C)`` color matrices whose rows are all ``weight * luma``: ``weight`` (``(...,)``
    float) times the gray image, in every channel. Built from Python scalars, so no constant
    tensor is copied to the device."""
    if channels == 1:
        return weight[..., None, None]
    row = torch.stack([weight * LUMA[0], weight * LUMA[1], weight * LUMA[2]], -1)
    return row.unsqueeze(-2).expand(*weight.shape, 3, 3)


def gray_mean(x: Tensor) -> Tensor:
    """``(B,)`` float32 mean of each image's gray image (the luma-weighted channel means)."""
    means = x.mean(dim=(-2, -1), dtype=torch.float32)
    if x.shape[1] == 1:
        return means[:, 0]
    return means[:, 0] * LUMA[0] + means[:, 1] * LUMA[1] + means[:, 2] * LUMA[2]


def mix_channels(x: Tensor, matrix: Tensor, offset: Tensor | None = None) -> Tensor:
    """Per-sample affine color map, clamped to [0, 1]:
    ``out[b, i] = clamp(sum_j matrix[b, i, j] * x[b, j] + offset[b, i], 0, 1)``.

    Brightness, contrast, saturation and grayscale are all this map (a blend of the image with 0,
    its mean gray or its gray image), so one pass serves any mix of them per sample.

    float16/bfloat16 go through one batched matmul. float32 is summed elementwise (``addcmul``,
    ~1.4x the matmul's time on the CPU) because a float32 matmul follows process-wide settings:
    ``torch.set_float32_matmul_precision("high")`` runs it in TF32 on CUDA (10-bit mantissa),
    ``"medium"`` in bfloat16 on CPUs with bfloat16 units. Those flags cannot be read safely instead
    (torch raises when the legacy and the new precision APIs were both used).

    Args:
        x: ``(B, C, H, W)`` float images.
        matrix: ``(B, C, C)``; offset: ``(B, C)`` or ``None``.
    """
    B, C, H, W = x.shape
    flat, m = x.reshape(B, C, H * W), matrix.to(x.dtype)
    bias = None if offset is None else offset.to(x.dtype).view(B, C, 1)
    if x.dtype != torch.float32:
        out = torch.bmm(m, flat) if bias is None else torch.baddbmm(bias, m, flat)
    else:
        out = m[:, :, :1] * flat[:, :1] if bias is None else torch.addcmul(bias, m[:, :, :1], flat[:, :1])
        for j in range(1, C):
            out.addcmul_(m[:, :, j:j + 1], flat[:, j:j + 1])
    return out.view(B, C, H, W).clamp_(0, 1)


def adjust_brightness(x: Tensor, factor: float | Tensor) -> Tensor:
    """Multiply by ``factor`` (>= 0) and clamp: 0 gives black, 1 the original."""
    return mix_channels(x, scaled_identity(factors(factor, x), x.shape[1]))


def adjust_contrast(x: Tensor, factor: float | Tensor) -> Tensor:
    """Blend with the mean gray level of each image: 0 gives flat gray, 1 the original."""
    f = factors(factor, x)
    return mix_channels(x, scaled_identity(f, x.shape[1]), ((1 - f) * gray_mean(x)).view(-1, 1).expand(-1, x.shape[1]))


def adjust_saturation(x: Tensor, factor: float | Tensor) -> Tensor:
    """Blend with the per-pixel gray image: 0 gives grayscale, 1 the original. No-op on 1 channel."""
    if x.shape[1] == 1:
        return x.clone()
    f = factors(factor, x)
    return mix_channels(x, scaled_identity(f, 3) + gray_rows(1 - f, 3))


def adjust_hue(x: Tensor, factor: float | Tensor) -> Tensor:
    """Shift the HSV hue by ``factor`` turns (in [-0.5, 0.5]); saturation and value are kept.

    Same result as torchvision's ``adjust_hue`` (RGB -> HSV, ``h = (h + factor) % 1``, HSV -> RGB) but
    without building the HSV image. With ``v = max``, ``m = min``, chroma ``c = v - m`` and the
    shifted hue ``h`` in sixths of a turn (in [0, 6)), HSV -> RGB is
    ``G = v - c * clamp(|h - 2| - 1, 0, 1)``, ``B = v - c * clamp(|h - 4| - 1, 0, 1)`` and
    ``R = m + c * clamp(|h - 3| - 1, 0, 1)``. Computed in float32 whatever the input dtype (hue is
    the one numerically delicate step), then cast back. No-op on 1 channel.

    Comparisons and ``torch.where`` are avoided on purpose: on the CPU (torch 2.14) they run 5-30x
    slower than float arithmetic, so the "which channel is the max" masks are ``1 + sign(x - max)``.
    """
    if x.shape[1] == 1:
        return x.clone()
    xf = x.float()
    r, g, b = xf.unbind(1)
    maxc = torch.maximum(r, g)
    minc = torch.minimum(r, g)
    torch.maximum(maxc, b, out=maxc)  # two elementwise passes: faster than amax(1) on the CPU
    torch.minimum(minc, b, out=minc)
    chroma = maxc - minc
    # torchvision's hue, in sixths: (g - b) / c where r is the max, else 2 + (b - r) / c where g is,
    # else 4 + (r - g) / c. Ties pick r, then g (any pick gives the same hue modulo 6).
    is_r = torch.sub(r, maxc).sign_().add_(1)
    is_g = torch.sub(g, maxc).sign_().add_(1)
    is_g.addcmul_(is_g, is_r, value=-1)
    is_b = torch.add(is_r, is_g).neg_().add_(1)
    h6 = torch.sub(g, b).mul_(is_r)
    h6.addcmul_(is_g, torch.sub(b, r).add_(chroma, alpha=2))
    h6.addcmul_(is_b, torch.sub(r, g).add_(chroma, alpha=4))
    # Where chroma is 0 every numerator above is 0 too: a tiny divisor keeps the hue finite (0).
    shift = 6.0 * factor.to(xf.device, torch.float32).view(-1, 1, 1) if isinstance(factor, Tensor) else 6.0 * factor
    h6 = torch.addcdiv(torch.as_tensor(shift, dtype=torch.float32, device=xf.device), h6, chroma.clamp(min=1e-12))
    h6.sub_(torch.floor(h6 * (1 / 6)), alpha=6)  # modulo 6, without the slower torch.remainder
    out = torch.empty_like(xf)
    top, bottom = maxc + chroma, minc - chroma
    for channel, base, center, sign in ((0, bottom, 3.0, 1), (1, top, 2.0, -1), (2, top, 4.0, -1)):
        ramp = torch.sub(h6, center).abs_().clamp_(1.0, 2.0)  # 1 + clamp(|h - center| - 1, 0, 1)
        if torch.compiler.is_compiling():  # dynamo cannot trace out= into a view: it would run all of this eagerly
            out[:, channel] = torch.addcmul(base, chroma, ramp, value=sign)
        else:
            torch.addcmul(base, chroma, ramp, value=sign, out=out[:, channel])
    return out.to(x.dtype)


def normalize(x: Tensor, mean: Tensor, std: Tensor | None = None, inv_std: Tensor | None = None) -> Tensor:
    """``(x - mean) / std`` per channel, computed as ``(x - mean) * (1 / std)``; ``mean`` and
    ``std`` have shape ``(C,)``. Pass ``inv_std`` (``1 / std``, computed in float64 then rounded)
    instead of ``std`` to skip computing it per call."""
    if inv_std is None:
        if std is None:
            raise TypeError("normalize takes one of std and inv_std")
        inv_std = 1.0 / std.double()
    elif std is not None:
        raise TypeError("normalize takes one of std and inv_std")
    mean = mean.to(dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    inv_std = inv_std.to(dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (x - mean).mul_(inv_std)
