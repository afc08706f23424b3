"""Built-in sample photos (shipped in the wheel, no download): see sample_images/LICENSES.md."""

from __future__ import annotations

from importlib import resources

import torch

from .data.decode import load_rgb

NAMES = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry")


def sample_images(n: int | None = None) -> list[torch.Tensor]:
    """Decoded sample photos as uint8 ``(3, H, W)`` tensors of ragged sizes (about 500×375).

    Args:
        n: how many; the photos repeat cyclically when ``n`` exceeds the six shipped. ``None``: six.
    """
    folder = resources.files("gpuaug") / "sample_images"
    photos = [load_rgb(str(folder / f"{name}.jpg")) for name in NAMES]
    n = len(photos) if n is None else n
    if n < 0:
        raise ValueError(f"n should be >= 0, got {n}")
    return [photos[i % len(photos)] for i in range(n)]
