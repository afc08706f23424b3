"""Pure batch-first kernels: no randomness, no state; per-sample factors as ``(B,)`` tensors."""

from .color import (
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, factors, gray_mean, gray_rows, mix_channels,
    normalize, rgb_to_grayscale, scaled_identity,
)
from .geometry import axis_taps, crop_or_pad, flip_matrix, resample_separable, rotation_matrix, tap_count, warp_affine

__all__ = [
    "adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation", "factors", "gray_mean", "gray_rows",
    "mix_channels", "normalize", "scaled_identity",
    "rgb_to_grayscale", "axis_taps", "crop_or_pad", "flip_matrix", "resample_separable", "rotation_matrix", "tap_count",
    "warp_affine",
]
